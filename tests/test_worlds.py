"""gridworld: colourings, determinism, obstacles, start, action semantics."""

import itertools

import numpy as np
import pytest
from scipy import stats

from hmmmerge import gridworld
from hmmmerge.worlds import GRID_ACTIONS, grid_colours

# independent statement of the action semantics: 0 left, 1 right, 2 up (row - 1), 3 down (row + 1)
MOVES = {0: (0, -1), 1: (0, 1), 2: (-1, 0), 3: (1, 0)}


def colour_map(env):
    return {node: int(env.obs[i]) for i, node in enumerate(env.nodes)}


def test_same_seed_same_map():
    a = gridworld(8, 9, n_colours=7, seed=42)
    b = gridworld(8, 9, n_colours=7, seed=42)
    assert a.nodes == b.nodes
    assert np.array_equal(a.obs, b.obs) and np.array_equal(a.next_state, b.next_state)
    c = gridworld(8, 9, n_colours=7, seed=np.random.default_rng(42))
    assert np.array_equal(a.obs, c.obs)  # an int seed and its Generator agree
    i1 = gridworld(8, 9, n_colours=7, seed=5, colouring="iid")
    i2 = gridworld(8, 9, n_colours=7, seed=5, colouring="iid")
    assert np.array_equal(i1.obs, i2.obs)


def test_different_seeds_differ():
    maps = [gridworld(10, 10, n_colours=10, seed=s).obs for s in range(6)]
    for a, b in itertools.combinations(maps, 2):
        assert not np.array_equal(a, b)


def test_defaults_are_the_paper_world():
    env = gridworld()
    assert env.n_states == 100 and env.n_actions == 4 and env.n_obs == 10
    assert np.bincount(env.obs).tolist() == [10] * 10
    assert env.start_node == (9, 0)


@pytest.mark.parametrize("rows, cols, k", [(10, 10, 10), (6, 4, 8), (5, 5, 25), (20, 30, 12), (1, 7, 7)])
def test_balanced_counts_exact_when_divisible(rows, cols, k):
    assert (rows * cols) % k == 0
    for seed in range(3):
        env = gridworld(rows, cols, n_colours=k, seed=seed)
        assert np.bincount(env.obs, minlength=k).tolist() == [rows * cols // k] * k


@pytest.mark.parametrize("rows, cols, k", [(7, 9, 10), (3, 3, 4), (10, 10, 7), (2, 3, 10), (11, 13, 30)])
def test_balanced_counts_as_even_as_possible(rows, cols, k):
    n = rows * cols
    seen_extra = set()
    for seed in range(5):
        counts = np.bincount(gridworld(rows, cols, n_colours=k, seed=seed).obs, minlength=k)
        assert counts.sum() == n
        assert counts.max() - counts.min() <= (1 if n % k else 0)
        assert sorted(counts.tolist()) == sorted([n // k + 1] * (n % k) + [n // k] * (k - n % k))
        seen_extra.add(tuple(np.flatnonzero(counts > n // k)))
    if 0 < n % k < k:
        assert len(seen_extra) > 1  # which colours get the remainder depends on the seed


def test_balanced_counts_with_obstacles():
    obstacles = [(0, 0), (1, 1), (2, 2), (3, 3)]
    env = gridworld(6, 6, n_colours=4, seed=1, obstacles=obstacles)
    assert env.n_states == 32
    assert np.bincount(env.obs, minlength=4).tolist() == [8, 8, 8, 8]


def test_iid_colouring():
    env = gridworld(100, 100, n_colours=10, seed=0, colouring="iid")
    counts = np.bincount(env.obs, minlength=10)
    assert env.obs.min() >= 0 and env.obs.max() < 10
    assert len(set(counts.tolist())) > 1  # not balanced
    assert stats.chisquare(counts).pvalue > 1e-4  # uniform marginal
    # independence of horizontal neighbours: joint table of (left colour, right colour)
    grid = env.obs.reshape(100, 100)
    table = np.zeros((10, 10))
    np.add.at(table, (grid[:, :-1].ravel(), grid[:, 1:].ravel()), 1)
    assert stats.chi2_contingency(table).pvalue > 1e-4
    # the colours equal grid_colours' i.i.d. draws (same seed, same stream)
    assert np.array_equal(env.obs, grid_colours(10_000, 10, "iid", seed=0))


def test_grid_colours_direct():
    c = grid_colours(23, 5, seed=4)
    assert c.dtype == np.int64 and len(c) == 23
    assert sorted(np.bincount(c).tolist()) == [4, 4, 5, 5, 5]
    assert np.array_equal(c, grid_colours(23, 5, seed=4))
    assert sorted(grid_colours(3, 10, seed=0).tolist()) == sorted(set(grid_colours(3, 10, seed=0).tolist()))


def test_explicit_colours():
    colours = np.arange(12).reshape(3, 4) % 5
    env = gridworld(3, 4, n_colours=5, colours=colours, obstacles=[(0, 1)])
    for i, (r, c) in enumerate(env.nodes):
        assert env.obs[i] == colours[r, c]
    assert (0, 1) not in env.index


def test_node_order_and_labels():
    env = gridworld(3, 4, n_colours=2, seed=0, obstacles=[(1, 2)])
    expected = [(r, c) for r in range(3) for c in range(4) if (r, c) != (1, 2)]
    assert env.nodes == expected


@pytest.mark.parametrize("rows, cols, obstacles", [(5, 6, ()), (4, 4, [(1, 1), (2, 1), (0, 3)]), (1, 1, ()), (1, 5, [(0, 2)])])
def test_action_semantics_walls_and_obstacles(rows, cols, obstacles):
    env = gridworld(rows, cols, n_colours=3, seed=2, obstacles=obstacles)
    blocked = set(obstacles)
    for node in blocked:
        assert node not in env.index  # obstacles are not states
    assert env.n_states == rows * cols - len(blocked)
    assert GRID_ACTIONS == MOVES
    for i, (r, c) in enumerate(env.nodes):
        for a, (dr, dc) in MOVES.items():
            tr, tc = r + dr, c + dc
            inside = 0 <= tr < rows and 0 <= tc < cols and (tr, tc) not in blocked
            expected = (tr, tc) if inside else (r, c)
            assert env.nodes[env.next_state[a, i]] == expected, ((r, c), a)


def test_every_border_cell_stays_when_pushing_outward():
    rows, cols = 6, 9
    env = gridworld(rows, cols, n_colours=5, seed=0)
    stay = 0
    for i, (r, c) in enumerate(env.nodes):
        outward = ([0] if c == 0 else []) + ([1] if c == cols - 1 else []) + \
                  ([2] if r == 0 else []) + ([3] if r == rows - 1 else [])
        for a in outward:
            assert env.next_state[a, i] == i
            stay += 1
        for a in set(range(4)) - set(outward):
            assert env.next_state[a, i] != i
    assert stay == 2 * (rows + cols)


def test_start_cells():
    assert gridworld(4, 7).start_node == (3, 0)
    env = gridworld(4, 7, start=(1, 5))
    assert env.start_node == (1, 5) and env.nodes[env.start] == (1, 5)
    assert gridworld(4, 7, start=[0, 0]).start_node == (0, 0)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(rows=0), "rows"),
        (dict(cols=-2), "cols"),
        (dict(rows=2.5), "rows"),
        (dict(n_colours=0), "n_colours"),
        (dict(n_colours=2.0), "n_colours"),
        (dict(colouring="stripes"), "colouring"),
        (dict(obstacles=[(10, 0)]), "obstacle (10, 0)"),
        (dict(obstacles=[(1, 2, 3)]), "obstacle"),
        (dict(rows=1, cols=2, obstacles=[(0, 0), (0, 1)]), "every cell is an obstacle"),
        (dict(start=(9, 9), obstacles=[(9, 9)]), "start cell (9, 9) is an obstacle"),
        (dict(start=(10, 0)), "start node (10, 0)"),
        (dict(colours=np.zeros((3, 3), int)), "colours must have shape (10, 10)"),
        (dict(colours=np.full((10, 10), 10)), "colours must lie in 0..9"),
    ],
)
def test_bad_arguments(kwargs, words):
    with pytest.raises(ValueError) as info:
        gridworld(**kwargs)
    assert words in str(info.value)


def test_bad_seed():
    with pytest.raises(TypeError, match="seed"):
        gridworld(seed=-1)
    with pytest.raises(TypeError, match="seed"):
        gridworld(seed="x")


def _graph_as_built_by_networkx(rows, cols, env):
    """The grid as a MultiDiGraph built edge by edge (the construction before the graph became lazy)."""
    import networkx as nx

    from hmmmerge import Environment

    g = nx.MultiDiGraph(name=f"gridworld {rows}x{cols}")
    for node, o in zip(env.nodes, env.obs.tolist()):
        g.add_node(node, obs=o)
    cells = set(env.nodes)
    for r, c in env.nodes:
        for action, (dr, dc) in MOVES.items():
            target = (r + dr, c + dc)
            g.add_edge((r, c), target if target in cells else (r, c), action=action)
    return Environment(g, start=env.start_node, n_obs=env.n_obs)


@pytest.mark.parametrize("kwargs", [
    {},
    {"rows": 4, "cols": 6, "n_colours": 3, "obstacles": [(1, 1), (2, 4), (0, 5)], "start": (3, 5)},
    {"rows": 1, "cols": 5, "n_colours": 2, "colouring": "iid", "seed": 3},
])
def test_graph_is_the_one_networkx_builds(kwargs):
    """gridworld builds its tables without networkx; env.graph, built on first use, is exactly the graph
    (nodes, attributes, edge keys, out- and in-edge order) that Environment(graph) holds."""
    env = gridworld(**kwargs)
    assert env._graph is None  # no graph until asked for
    ref = _graph_as_built_by_networkx(kwargs.get("rows", 10), kwargs.get("cols", 10), env)
    g, h = env.graph, ref.graph
    assert g.graph == h.graph and list(g.graph) == list(h.graph)
    assert list(g.nodes(data=True)) == list(h.nodes(data=True))
    assert list(g.edges(keys=True, data=True)) == list(h.edges(keys=True, data=True))
    assert [list(g.pred[v]) for v in g] == [list(h.pred[v]) for v in h]
    assert env.nodes == ref.nodes and env.index == ref.index and env.start == ref.start and env.n_obs == ref.n_obs
    assert np.array_equal(env.obs, ref.obs) and np.array_equal(env.next_state, ref.next_state)
    assert not env.obs.flags.writeable and not env.next_state.flags.writeable
    assert repr(env) == repr(ref)

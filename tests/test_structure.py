"""Structure: Markov radius, compact subgraphs, Markov subspaces against brute force."""

from collections import Counter, deque

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hmmmerge import Environment, compact_subgraph, gridworld, is_markov_subspace, markov_radii, markov_radius
from hmmmerge.structure import transition_adjacency

# ------------------------------------------------------------ brute-force references


def reference_radii(env: Environment) -> list[int]:
    """Per vertex: the largest n whose depth-n ball is injective under obs, ball by ball.

    Each ball is recomputed from scratch with networkx's BFS distances (cutoff n) and checked
    for injectivity as a whole.  Conventions (the module's): the depth-0 ball {v} is always
    Markov; if every ball is Markov the value is the eccentricity of v, the depth at which the
    ball stops growing.
    """
    simple = nx.DiGraph()
    simple.add_nodes_from(range(env.n_states))
    simple.add_edges_from((u, int(env.next_state[a, u])) for a in range(env.n_actions) for u in range(env.n_states))
    out = []
    for v in range(env.n_states):
        previous = None
        n = 0
        while True:
            ball = nx.single_source_shortest_path_length(simple, v, cutoff=n)
            observed = [int(env.obs[u]) for u in ball]
            if len(set(observed)) != len(observed):
                out.append(n - 1)  # ball n repeats an observation, ball n - 1 did not
                break
            if previous is not None and len(ball) == len(previous):
                out.append(n - 1)  # stopped growing: n - 1 is the eccentricity
                break
            previous, n = ball, n + 1
    return out


def reference_ball(env: Environment, v: int, n: int) -> set[int]:
    """States reachable from index v in at most n moves (plain queue BFS over next_state)."""
    seen = {v: 0}
    queue = deque([v])
    while queue:
        u = queue.popleft()
        if seen[u] == n:
            continue
        for a in range(env.n_actions):
            w = int(env.next_state[a, u])
            if w not in seen:
                seen[w] = seen[u] + 1
                queue.append(w)
    return set(seen)


# ------------------------------------------------------------ random environments


@st.composite
def environments(draw, max_states=12, max_actions=3):
    n = draw(st.integers(1, max_states))
    a = draw(st.integers(1, max_actions))
    flat = draw(st.lists(st.integers(0, n - 1), min_size=a * n, max_size=a * n))
    next_state = np.array(flat, dtype=np.int64).reshape(a, n)
    # some examples use mostly self-loops, giving sparse and disconnected graphs
    if draw(st.booleans()):
        keep = np.array(draw(st.lists(st.booleans(), min_size=a * n, max_size=a * n))).reshape(a, n)
        next_state = np.where(keep, next_state, np.arange(n)[None, :])
    k = draw(st.integers(1, n + 2))
    obs = draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n))
    start = draw(st.integers(0, n - 1))
    return Environment.from_arrays(next_state, obs, start=start, n_obs=k)


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIGHT = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(environments())
def test_markov_radii_equal_brute_force(env):
    radii = markov_radii(env)
    assert radii.dtype.kind == "i" and radii.shape == (env.n_states,)
    expected = reference_radii(env)
    assert radii.tolist() == expected
    assert markov_radius(env) == min(expected)


@LIGHT
@given(environments(), st.data())
def test_compact_subgraph_equals_brute_force(env, data):
    v = data.draw(st.integers(0, env.n_states - 1))
    n = data.draw(st.integers(0, 5))
    sub = compact_subgraph(env, env.nodes[v], n)
    ball = reference_ball(env, v, n)
    assert set(sub.nodes) == {env.nodes[u] for u in ball}
    # every transition among the ball's states, self-loops included, each once with its action
    expected = Counter(
        (env.nodes[u], env.nodes[int(env.next_state[a, u])], a)
        for u in ball
        for a in range(env.n_actions)
        if int(env.next_state[a, u]) in ball
    )
    assert Counter((u, w, d["action"]) for u, w, d in sub.edges(data=True)) == expected
    for u in sub.nodes:
        assert sub.nodes[u]["obs"] == env.obs[env.index[u]]
    # is_markov_subspace on the subgraph agrees with injectivity on the ball
    observed = [int(env.obs[u]) for u in ball]
    assert is_markov_subspace(env, sub) == (len(set(observed)) == len(observed))


@LIGHT
@given(environments(), st.data())
def test_radius_is_the_largest_markov_compact_subgraph(env, data):
    """Definition 2.7 with the library's own compact_subgraph / is_markov_subspace."""
    v = data.draw(st.integers(0, env.n_states - 1))
    r = int(markov_radii(env)[v])
    node = env.nodes[v]
    for n in range(r + 1):
        assert is_markov_subspace(env, compact_subgraph(env, node, n))
    ball_r = set(compact_subgraph(env, node, r).nodes)
    nxt = compact_subgraph(env, node, r + 1)
    # one step further the ball either repeats an observation or has stopped growing
    assert (not is_markov_subspace(env, nxt)) or set(nxt.nodes) == ball_r


@LIGHT
@given(environments(), st.data())
def test_is_markov_subspace_random_subsets(env, data):
    subset = data.draw(st.sets(st.integers(0, env.n_states - 1)))
    labels = [env.nodes[u] for u in subset]
    expected = len({int(env.obs[u]) for u in subset}) == len(subset)
    assert is_markov_subspace(env, labels) == expected


def test_single_node_and_self_loops():
    env = Environment.from_arrays([[0], [0]], [3])
    assert markov_radii(env).tolist() == [0]
    assert markov_radius(env) == 0
    assert transition_adjacency(env).nnz == 0
    assert sorted(compact_subgraph(env, 0, 4).edges(data="action")) == [(0, 0, 0), (0, 0, 1)]


def test_documented_conventions_by_hand():
    # a path 0 -> 1 -> 2 -> 2 with distinct observations: whole reachable set Markov, radius = eccentricity
    env = Environment.from_arrays([[1, 2, 2]], [0, 1, 2])
    assert markov_radii(env).tolist() == [2, 1, 0]
    # depth-1 ball of 0 repeats obs 0 -> radius 0
    env = Environment.from_arrays([[1, 0]], [0, 0])
    assert markov_radii(env).tolist() == [0, 0]
    # not strongly connected: 0 -> 1 <-> 2 ; 3 isolated; radii follow out-edges only
    env = Environment.from_arrays([[1, 2, 1, 3]], [5, 1, 2, 5])
    assert markov_radii(env).tolist() == [2, 1, 1, 0]


@pytest.mark.parametrize(
    "rows, cols, k, obstacles",
    [(10, 10, 10, ()), (10, 10, 100, ()), (7, 5, 6, [(1, 1), (3, 2)]), (1, 8, 8, ()), (12, 9, 30, [(0, 4), (5, 5)])],
)
def test_grids_against_brute_force(rows, cols, k, obstacles):
    env = gridworld(rows, cols, n_colours=k, seed=7, obstacles=obstacles)
    expected = reference_radii(env)
    assert markov_radii(env).tolist() == expected


def test_all_distinct_grid_radius_is_eccentricity():
    env = gridworld(6, 8, n_colours=48, seed=0)
    radii = markov_radii(env)
    for i, (r, c) in enumerate(env.nodes):
        assert radii[i] == max(r, 5 - r) + max(c, 7 - c)  # Manhattan eccentricity
    assert markov_radius(env) == 3 + 4


def test_large_grid_against_brute_force_and_relabelling():
    env = gridworld(30, 30, n_colours=150, seed=3, obstacles=[(10, c) for c in range(5, 25)])
    base = markov_radii(env)
    assert base.tolist() == reference_radii(env)
    # the radius is a property of the graph: renumbering the states permutes the radii
    perm = np.random.default_rng(0).permutation(env.n_states)  # new index of old state i is perm[i]
    inverse = np.argsort(perm)
    relabelled = Environment.from_arrays(perm[env.next_state][:, inverse], env.obs[inverse], n_obs=env.n_obs)
    assert np.array_equal(markov_radii(relabelled)[perm], base)


def test_transition_adjacency_drops_self_loops_and_duplicates():
    env = gridworld(3, 3, n_colours=3, seed=0)
    adj = transition_adjacency(env).toarray()
    assert adj.dtype == bool and not adj.diagonal().any()
    for i, (r, c) in enumerate(env.nodes):
        neighbours = {env.index[(r + dr, c + dc)] for dr, dc in [(0, 1), (0, -1), (1, 0), (-1, 0)]
                      if (r + dr, c + dc) in env.index}
        assert set(np.flatnonzero(adj[i])) == neighbours


def test_bad_inputs():
    env = gridworld(3, 3, n_colours=3)
    with pytest.raises(ValueError, match=r"node \(5, 5\)"):
        compact_subgraph(env, (5, 5), 1)
    with pytest.raises(ValueError, match="n must be"):
        compact_subgraph(env, (0, 0), -1)
    with pytest.raises(ValueError, match="n must be"):
        compact_subgraph(env, (0, 0), 1.5)
    with pytest.raises(ValueError, match=r"node \(7, 7\)"):
        is_markov_subspace(env, [(0, 0), (7, 7)])
    with pytest.raises(ValueError, match="twice"):
        is_markov_subspace(env, [(0, 0), (0, 0)])
    with pytest.raises(TypeError, match="Environment"):
        markov_radii(nx.MultiDiGraph())
    with pytest.raises(TypeError, match="Environment"):
        compact_subgraph(nx.MultiDiGraph(), 0, 1)
    assert is_markov_subspace(env, [])  # the empty set is trivially injective

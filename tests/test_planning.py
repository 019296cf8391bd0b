"""Planning, localisation and navigation with a map (hmmmerge.planning)."""

import itertools

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmmerge import Environment, gridworld, random_walk
from hmmmerge.gallery import cycle_world, maze
from hmmmerge.hmm import ActionHMM
from hmmmerge.planning import (
    UnreachableGoalError,
    block_passage,
    distances_to,
    estimate_correspondence,
    localise,
    navigate,
    plan,
    without_transitions,
)


def _onehot(n, i):
    b = np.zeros(n)
    b[i] = 1.0
    return b


def _simple_graph(env):
    g = nx.DiGraph()
    g.add_nodes_from(range(env.n_states))
    for a in range(env.n_actions):
        g.add_edges_from((u, int(env.next_state[a, u])) for u in range(env.n_states))
    return g


def _run(env, s, actions):
    for a in actions:
        s = int(env.next_state[a, s])
    return s


@pytest.mark.parametrize("env", [gridworld(4, 4, n_colours=4, seed=0), maze(seed=1)], ids=["grid", "maze"])
def test_oracle_plans_are_shortest_paths(env):
    oracle, g = env.to_hmm(), _simple_graph(env)
    lengths = dict(nx.all_pairs_shortest_path_length(g))
    for s in range(env.n_states):
        for c in range(env.n_obs):
            targets = np.flatnonzero(env.obs == c)
            if c == env.obs[s] or not len(targets):
                continue
            p = plan(oracle, _onehot(env.n_states, s), c, horizon=env.n_states)
            best = min(lengths[s][t] for t in targets if t in lengths[s])
            assert len(p) == best
            assert env.obs[_run(env, s, p.actions)] == c
            assert p.probability == 1.0 and p.start == s
            assert p.states.tolist()[-1] == _run(env, s, p.actions)
        t = (s * 7 + 3) % env.n_states  # a learned-state goal
        p = plan(oracle, _onehot(env.n_states, s), ("state", t), horizon=env.n_states)
        assert len(p) == nx.shortest_path_length(g, s, t) and _run(env, s, p.actions) == t


def test_distances_match_networkx():
    env = maze(seed=2)
    g = _simple_graph(env)
    for c in range(env.n_obs):
        targets = np.flatnonzero(env.obs == c)
        d = distances_to(env, targets)
        for s in range(env.n_states):
            expect = min((nx.shortest_path_length(g, s, t) for t in targets if nx.has_path(g, s, t)), default=np.inf)
            assert d[s] == expect


@pytest.mark.parametrize("start", ["random", "world"])
def test_oracle_navigation_succeeds_on_shortest_paths(start):
    env = maze(seed=0)
    r = navigate(env, env.to_hmm(), n_pairs=60, seed=3, start=start, warmup=10)
    assert r.success_rate == 1.0
    assert r.path_ratio == 1.0 and (r.steps == r.shortest).all()
    assert r.n_pairs == 60 and (r.shortest >= 1).all()


def test_oracle_localisation_with_known_start_is_perfect():
    env = gridworld(5, 5, n_colours=3, seed=4)
    oracle = env.to_hmm()
    corr = estimate_correspondence(oracle, random_walk(env, 100, 30, seed=0), env.n_states)
    visited = corr.states >= 0
    assert (corr.states[visited] == np.flatnonzero(visited)).all() and (corr.share[visited] == 1.0).all()
    loc = localise(oracle, random_walk(env, 30, 40, seed=1), corr)
    assert loc.accuracy == 1.0 and (loc.curve == 1.0).all()
    assert navigate(env, oracle, 20, seed=0, start="world", correspondence=corr).localisation_accuracy == 1.0


def test_localisation_is_ambiguous_early_on_an_aliased_start():
    """From a random start the oracle cannot know where it is at first; a first-order map never does."""
    env = gridworld(6, 6, n_colours=3, seed=0)
    r = navigate(env, env.to_hmm(), 100, seed=0)
    assert r.localisation_curve[0] < 0.5 < r.localisation_curve[-1]


def test_correspondence_of_a_first_order_map_is_the_majority_state():
    env = cycle_world(6, n_colours=3)  # 0 1 2 0 1 2
    walks = random_walk(env, 50, 20, seed=0)
    from hmmmerge import build_model

    fo = build_model("first-order", walks, env=env)
    corr = estimate_correspondence(fo, walks, env.n_states)
    counts = np.zeros((3, 6))
    np.add.at(counts, (walks.obs.ravel(), walks.states.ravel()), 1)  # first-order belief is the observation
    assert corr.states.tolist() == counts.argmax(axis=1).tolist()
    assert np.allclose(corr.counts, counts)


def test_a_blocked_passage_is_planned_around():
    env = gridworld(4, 4, n_colours=16, seed=0)  # every cell its own colour
    blocked = block_passage(env, (3, 0), (3, 1))
    a_right = 1
    model = without_transitions(env.to_hmm(), [(env.index[(3, 0)], a_right), (env.index[(3, 1)], 0)])
    s, t = env.index[(3, 0)], env.index[(3, 1)]
    p = plan(model, _onehot(16, s), ("state", t), horizon=20)
    assert len(p) == nx.shortest_path_length(_simple_graph(blocked), s, t) == 3
    assert _run(blocked, s, p.actions) == t


def test_navigation_updates_the_map_and_takes_the_detour():
    env = cycle_world(8, n_colours=8)
    blocked = block_passage(env, 0, 1)
    oracle = env.to_hmm()  # the map learned before the wall
    kept = navigate(blocked, oracle, pairs=[(0, 1)], warmup=0, update_map=False, keep_paths=True)
    updated = navigate(blocked, oracle, pairs=[(0, 1)], warmup=0, update_map=True, keep_paths=True)
    assert not kept.success[0]  # bumps into the wall until the budget is spent
    assert kept.paths[0] == [0] * 15
    assert updated.success[0] and updated.map_updates == 1
    assert updated.steps[0] == 1 + 7  # one bump, then the way round
    assert updated.paths[0] == [0, 0, 7, 6, 5, 4, 3, 2, 1]


def test_an_unreachable_goal_is_a_clear_error():
    # two rings of 2 states: 0 <-> 1 (colours 0, 1) and 2 <-> 3 (colours 2, 3)
    model = ActionHMM.from_deterministic([[1, 0, 3, 2]], [0, 1, 2, 3], n_obs=5)
    with pytest.raises(UnreachableGoalError, match="no way from state 0 to observation 2 within 50 moves"):
        plan(model, _onehot(4, 0), 2, horizon=50)
    with pytest.raises(UnreachableGoalError, match="observation 4 is emitted by no state"):
        plan(model, _onehot(4, 0), 4, horizon=5)
    with pytest.raises(ValueError, match="no way from state 0 to state 3"):
        plan(model, _onehot(4, 0), ("state", 3), horizon=10**9)  # converges: no loop over the horizon


def test_navigation_with_a_map_that_knows_no_way_ends():
    env = cycle_world(6, n_colours=6)
    model = without_transitions(env.to_hmm(), [(h, a) for h in range(6) for a in range(2)])
    r = navigate(env, model, 10, seed=0, warmup=0)
    assert r.n_pairs == 10 and (r.steps <= 2 * r.shortest).all()


@pytest.mark.parametrize("goal, horizon, belief, error, message", [
    (99, 5, None, ValueError, "goal observation 99 is not in 0..3"),
    (-1, 5, None, ValueError, "goal observation -1 is not in 0..3"),
    (("state", 4), 5, None, ValueError, "goal state 4 is not a learned state in 0..3"),
    (("room", 1), 5, None, TypeError, "goal must be an observation"),
    ("red", 5, None, TypeError, "goal must be an observation"),
    (True, 5, None, TypeError, "goal must be an observation"),
    (("obs", 1.5), 5, None, TypeError, "goal obs must be an integer"),
    (1, 0, None, ValueError, "horizon must be a positive integer, got 0"),
    (1, -3, None, ValueError, "horizon must be a positive integer, got -3"),
    (1, 2.0, None, ValueError, "horizon"),
    (1, 5, [1.0, 0.0], ValueError, r"belief must have shape \(4,\)"),
    (1, 5, [0.5, 0.0, 0.0, 0.0], ValueError, "belief sums to 0.5, not 1"),
    (1, 5, [1.5, -0.5, 0.0, 0.0], ValueError, "non-negative"),
    (1, 5, [np.nan, 1.0, 0.0, 0.0], ValueError, "finite"),
    (1, 5, ["a", "b", "c", "d"], TypeError, "belief must hold real numbers"),
])
def test_bad_goals_give_one_line_errors(goal, horizon, belief, error, message):
    model = cycle_world(4, n_colours=4).to_hmm()
    with pytest.raises(error, match=message) as info:
        plan(model, _onehot(4, 0) if belief is None else belief, goal, horizon)
    assert "\n" not in str(info.value)


def test_bad_navigation_arguments():
    env = cycle_world(4, n_colours=4)
    with pytest.raises(ValueError, match="the map has 4 observations and 2 actions, the world 5"):
        navigate(cycle_world(5, n_colours=5), env.to_hmm(), 3)
    with pytest.raises(ValueError, match="budget must be a finite number >= 1"):
        navigate(env, env.to_hmm(), 3, budget=0.5)
    with pytest.raises(ValueError, match="start must be 'random', 'world' or state indices, got 'home'"):
        navigate(env, env.to_hmm(), 3, start="home")
    with pytest.raises(ValueError, match="pair 0: goal observation 0 is seen at the start"):
        navigate(env, env.to_hmm(), pairs=[(0, 0)], warmup=0)
    with pytest.raises(TypeError, match="model must be an ActionHMM"):
        navigate(env, env, 3)
    with pytest.raises(ValueError, match="no move joins"):
        block_passage(env, 0, 2)


# --------------------------------------------------------------------------- optimality by brute force
def _reach_prob(T, g, h, actions):
    """P(a goal state is met along the open-loop ``actions`` from ``h``), exactly."""
    p = np.zeros(len(g))
    p[h] = 1.0
    reached = p @ g
    p = p * (1 - g)
    for a in actions:
        p = p @ T[a]
        reached += p @ g
        p = p * (1 - g)
    return reached


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 5), st.integers(1, 3), st.integers(1, 4), st.data())
def test_plans_are_optimal_by_exhaustive_search(n_states, n_actions, horizon, data):
    """Deterministic maps: the plan is the shortest action sequence that reaches the goal (all sequences
    searched); stochastic maps: value iteration's probability is at least that of every open-loop sequence."""
    ns = np.array(data.draw(st.lists(st.lists(st.integers(0, n_states - 1), min_size=n_states, max_size=n_states),
                                     min_size=n_actions, max_size=n_actions)))
    obs = np.array(data.draw(st.lists(st.integers(0, 2), min_size=n_states, max_size=n_states)))
    start = data.draw(st.integers(0, n_states - 1))
    goal = data.draw(st.integers(0, 2))
    model = ActionHMM.from_deterministic(ns, obs, n_obs=3)
    g = (obs == goal).astype(float)
    best = None
    for k in range(horizon + 1):
        for seq in itertools.product(range(n_actions), repeat=k):
            if _reach_prob(model.to_dense().T, g, start, seq) == 1.0:
                best = k
                break
        if best is not None:
            break
    if best is None:
        with pytest.raises(UnreachableGoalError):
            plan(model, _onehot(n_states, start), goal, horizon)
    else:
        p = plan(model, _onehot(n_states, start), goal, horizon)
        assert len(p) == best and p.probability == 1.0
        assert _reach_prob(model.to_dense().T, g, start, p.actions) == 1.0

    # a stochastic map: random rows
    raw = np.array(data.draw(st.lists(st.floats(0.0, 1.0), min_size=n_actions * n_states * n_states,
                                      max_size=n_actions * n_states * n_states)))
    T = raw.reshape(n_actions, n_states, n_states) + 1e-3 * (ns[..., None] == np.arange(n_states))
    T /= T.sum(axis=2, keepdims=True)
    stoch = ActionHMM(T, model.E, model.B)
    best_open = max(_reach_prob(T, g, start, seq) for seq in itertools.product(range(n_actions), repeat=horizon))
    if best_open == 0:
        with pytest.raises(UnreachableGoalError):
            plan(stoch, _onehot(n_states, start), goal, horizon)
        return
    p = plan(stoch, _onehot(n_states, start), goal, horizon)
    assert p.probability >= best_open - 1e-12
    if n_actions == 1:  # one action: closed and open loop are the same
        assert p.probability == pytest.approx(best_open)


# --------------------------------------------------------------------------- CLI
def test_cli_plan_json(capsys):
    import json

    from hmmmerge.cli import main

    assert main(["plan", "--learner", "oracle", "--world", "maze", "--pairs", "30", "--episodes", "20",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["success_rate"] == 1.0 and out["path_ratio"] == 1.0
    assert 0.0 <= out["localisation_accuracy"] <= 1.0 and out["n_pairs"] == 30 and out["n_states"] == 51
    assert main(["plan", "--learner", "first-order", "--grid", "5x5", "--colours", "4", "--pairs", "30",
                 "--episodes", "50", "--from", "world", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_states"] == 4 and out["start"] == "world"
    assert main(["plan", "--learner", "first-order", "--world", "cscg-room", "--pairs", "40", "--episodes", "50",
                 "--compare", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["compare"]["oracle"]["success_rate"] > out["success_rate"]  # 4 colours: first order is lost
    assert {k: out["compare"]["first-order"][k] for k in ("success_rate", "path_ratio", "localisation_accuracy")} \
        == {k: out[k] for k in ("success_rate", "path_ratio", "localisation_accuracy")}  # the same pairs


@pytest.mark.parametrize("argv, message", [
    (["--learner", "nope"], "invalid choice: 'nope'"),
    (["--learner", "oracle", "--budget", "0.5"], "budget must be a finite number >= 1"),
    (["--learner", "oracle", "--pairs", "0"], "must be a positive integer"),
    (["--learner", "oracle", "--warmup", "-1"], "warmup must be"),
    ([], "the following arguments are required: --learner"),
])
def test_cli_plan_bad_arguments(argv, message, capsys):
    from hmmmerge.cli import main

    with pytest.raises(SystemExit) as info:
        main(["plan", *argv])
    err = capsys.readouterr().err
    assert info.value.code == 2 and message in err and err.count("\n") == 1


def test_a_dense_map_is_updated_on_surprise():
    """A map that gives every move a little probability (as EM's do) still learns the wall: the
    observation after the bump had probability below ``surprise``."""
    env = cycle_world(8, n_colours=8)
    T = 0.9999 * env.to_hmm().to_dense().T + 0.0001 / 8
    leaky = ActionHMM(T, np.eye(8), np.full(8, 1 / 8))
    blocked = block_passage(env, 0, 1)
    r = navigate(blocked, leaky, pairs=[(0, 1)], warmup=0, update_map=True, keep_paths=True)
    assert r.success[0] and r.map_updates == 1 and r.paths[0][:3] == [0, 0, 7]
    never = navigate(blocked, leaky, pairs=[(0, 1)], warmup=0, update_map=True, surprise=0.0)
    assert not never.success[0] and never.map_updates == 0


def test_readme_planning_example_runs(capsys):
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    code = re.search(r"## Using a map: localise, plan, navigate \(`hmmmerge.planning`\)\n.*?```python\n(.*?)```",
                     text, re.S).group(1)
    exec(compile(code, "README planning", "exec"), {})
    printed = capsys.readouterr().out.split()
    assert float(printed[-3]) >= 0.95 and 1.0 <= float(printed[-2]) <= 1.1 and float(printed[-1]) >= 0.95


# --------------------------------------------------------------------------- stochastic worlds
def test_navigation_in_a_slipping_world_replans_after_slips():
    env = gridworld(6, 6, n_colours=6, seed=0, slip=0.2)
    r = navigate(env, env.to_hmm(), 200, seed=0, budget=3)
    assert r.success_rate >= 0.95
    slipped = r.success & (r.steps > r.shortest)
    assert slipped.sum() >= 10  # moves went astray and the agent still arrived, re-planning from where it was
    assert r.path_ratio > 1.0


def test_distances_and_walls_in_a_stochastic_world():
    env = gridworld(4, 4, n_colours=4, seed=1, slip=0.3)
    g = nx.DiGraph(env.graph)  # every edge of positive probability
    for c in range(env.n_obs):
        targets = np.flatnonzero(env.obs == c)
        d = distances_to(env, targets)
        for s in range(env.n_states):
            lengths = nx.single_source_shortest_path_length(g, env.nodes[s])
            assert d[s] == min(lengths[env.nodes[t]] for t in targets)
    walled = block_passage(env, (3, 0), (3, 1))
    t = walled.transitions
    assert np.allclose(np.add.reduceat(t.probs, t.indptr[:-1]), 1.0)
    i, j = env.index[(3, 0)], env.index[(3, 1)]
    T = walled.to_hmm().to_dense().T
    assert T[:, i, j].max() == 0 and T[:, j, i].max() == 0
    assert np.allclose(T[:, i, i], env.to_hmm().to_dense().T[:, i, [i, j]].sum(axis=1))


def test_navigation_with_noisy_views_scores_the_place_not_the_view():
    env = gridworld(5, 5, n_colours=5, seed=0).with_noise(obs_noise=0.3)
    r = navigate(env, env.to_hmm(), 100, seed=0, keep_paths=True)
    assert all(env.obs[p[-1]] == g for p, g, ok in zip(r.paths, r.goals, r.success) if ok)
    assert r.success_rate >= 0.9


def test_navigation_from_given_start_states():
    env = maze(seed=0)
    r = navigate(env, env.to_hmm(), 30, seed=0, start=[0, 1, 2], warmup=0)
    assert set(r.starts.tolist()) <= {0, 1, 2}
    for bad in ([], [51], [-1], ["a"]):
        with pytest.raises(ValueError, match="start must be 'random', 'world' or state indices"):
            navigate(env, env.to_hmm(), 3, start=bad)


def test_navigation_to_given_goals():
    env = gridworld(5, 5, n_colours=5, seed=0)
    r = navigate(env, env.to_hmm(), 40, seed=0, goals=[1, 3])
    assert set(r.goals.tolist()) <= {1, 3} and r.success_rate == 1.0
    with pytest.raises(ValueError, match="goals must be observations in 0..4"):
        navigate(env, env.to_hmm(), 3, goals=[7])


def test_a_tiny_probability_of_arriving_is_not_lost_to_convergence():
    """A goal reachable with probability 1e-300 is reachable (value iteration does not stop on a tiny change
    while the set of states that can reach the goal still grows)."""
    T = np.array([[[1 - 1e-300, 1e-300], [0.0, 1.0]]])
    model = ActionHMM(T, np.array([[0, 1, 0], [1, 0, 0]]), [1.0, 0.0])
    p = plan(model, [1.0, 0.0], 0, horizon=1)
    assert p.probability == 1e-300 and p.actions.tolist() == [0]


# --------------------------------------------------------------------------- tolerance
def _leaky_forward_ring():
    """A ring of 6 (action 0 forward, 1 back), goal colour 2 two moves forward and four back; the map's forward
    moves from states 0 and 1 fail (stay) with probability 0.02, so going back (4 sure moves) is the most
    probable way to arrive within 4 moves: forward misses when fewer than 2 of 4 tries succeed,
    0.02**4 + 4 * 0.98 * 0.02**3 = 3.15e-5."""
    env = cycle_world(6, n_colours=6)
    T = env.to_hmm().to_dense().T.copy()
    for s in (0, 1):
        T[0, s] = 0.0
        T[0, s, s + 1], T[0, s, s] = 0.98, 0.02
    return env, ActionHMM(T, np.eye(6), np.full(6, 1 / 6))


def test_tolerance_trades_a_hair_of_probability_for_the_shorter_route():
    env, leaky = _leaky_forward_ring()
    miss = 0.02 ** 4 + 4 * 0.98 * 0.02 ** 3
    forward = plan(without_transitions(leaky, [(0, 1)]), _onehot(6, 0), 2, horizon=4)  # back made impossible
    assert forward.actions.tolist() == [0, 0] and forward.probability == pytest.approx(1 - miss, abs=1e-12)
    assert plan(leaky, _onehot(6, 0), 2, horizon=4).actions.tolist() == [1, 1, 1, 1]
    strict = navigate(env, leaky, pairs=[(0, 2)], warmup=0, tolerance=0.0, keep_paths=True)
    assert strict.steps[0] == 4 and strict.paths[0] == [0, 5, 4, 3, 2]  # the sure detour
    loose = navigate(env, leaky, pairs=[(0, 2)], warmup=0, tolerance=0.01, keep_paths=True)
    assert loose.steps[0] == 2 and loose.paths[0] == [0, 1, 2] and loose.path_ratio == 1.0
    assert navigate(env, leaky, pairs=[(0, 2)], warmup=0, tolerance=1e-5).steps[0] == 4  # 3.15e-5 is no tie


def test_tolerance_changes_nothing_on_a_deterministic_map():
    env = gridworld(5, 5, n_colours=5, seed=1)
    runs = [navigate(env, env.to_hmm(), 60, seed=2, tolerance=t) for t in (0.0, 0.01, 0.5)]
    for r in runs[1:]:
        assert np.array_equal(r.steps, runs[0].steps) and np.array_equal(r.success, runs[0].success)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_bad_tolerance_is_refused(bad):
    env = cycle_world(4, n_colours=4)
    with pytest.raises(ValueError, match="tolerance"):
        navigate(env, env.to_hmm(), 3, tolerance=bad)


# --------------------------------------------------------------------------- sparse and dense maps plan alike
def _pseudocount_map(counts, pseudocount, obs, n_obs):
    """A map as EM writes it: rows of ``counts + pseudocount`` normalised (every unseen move the same floor)."""
    T = counts + pseudocount
    T /= T.sum(axis=2, keepdims=True)
    H = T.shape[1]
    return ActionHMM(T, np.eye(n_obs)[obs], np.full(H, 1.0 / H))


def _as_csr(model):
    import scipy.sparse as sp

    return ActionHMM([sp.csr_matrix(m) for m in model.to_dense().T], model.E, model.B)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 9), st.integers(1, 3), st.sampled_from([0.0, 1e-3, 0.05]), st.data())
def test_sparse_and_dense_transitions_agree(n_states, n_actions, pseudocount, data):
    """The floor + sparse form of a map computes what its dense form does: T V, b T_a, rows."""
    import hmmmerge.planning as P

    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    counts = rng.integers(0, 5, (n_actions, n_states, n_states)) * (rng.random((n_actions, n_states, n_states)) < 0.3)
    counts[:, np.arange(n_states), rng.integers(0, n_states, n_states)] += 1  # every row has a move
    model = _pseudocount_map(counts.astype(float), pseudocount, rng.integers(0, 2, n_states), 2)
    dense, floor = P._Transitions(model, "dense"), P._Transitions(model, "sparse")
    assert dense.kind == "dense" and floor.kind in ("floor", "sparse")
    V, b = rng.random((n_states, 2)), rng.dirichlet(np.ones(n_states))
    np.testing.assert_allclose(floor.dot(V), dense.dot(V), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(floor.dot(V[:, 0]), model.to_dense().T.reshape(-1, n_states) @ V[:, 0], rtol=1e-12)
    rows = rng.integers(0, n_actions * n_states, 3)
    np.testing.assert_allclose(floor.dot(V, rows), dense.dot(V)[rows], rtol=1e-12, atol=1e-15)
    for a in range(n_actions):
        np.testing.assert_allclose(floor.predict(b, a), b @ model.to_dense().T[a], rtol=1e-12, atol=1e-15)
        for h in range(n_states):
            np.testing.assert_allclose(floor.row(a, h), model.to_dense().T[a, h], rtol=1e-12, atol=1e-15)


@settings(max_examples=40, deadline=None)
@given(st.integers(3, 12), st.integers(1, 3), st.sampled_from([0.0, 1e-4, 1e-2]), st.integers(1, 12), st.data())
def test_sparse_and_dense_maps_make_the_same_plans(n_states, n_actions, pseudocount, horizon, data):
    """One map planned on densely, as floor + sparse, and stored as CSR: the same plans (moves, expected
    states) and the same probability of arriving."""
    import hmmmerge.planning as P

    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    succ = rng.integers(0, n_states, (n_actions, n_states))
    counts = 10.0 * (succ[..., None] == np.arange(n_states))  # a world's moves, as counted ...
    counts += rng.integers(0, 3, counts.shape) * (rng.random(counts.shape) < 0.15)  # ... with some noise
    obs = rng.integers(0, 3, n_states)
    model = _pseudocount_map(counts, pseudocount, obs, 3)
    belief = rng.dirichlet(np.ones(n_states) * 0.3)
    goal = int(data.draw(st.integers(0, 2)))
    outcomes = []
    for form in ("dense", "sparse", "csr"):
        m = _as_csr(model) if form == "csr" else model
        old = P._SPARSE_SHARE
        P._SPARSE_SHARE = {"dense": -1.0, "sparse": 2.0, "csr": old}[form]
        try:
            p = plan(m, belief, goal, horizon)
            outcomes.append((p.actions.tolist(), p.states.tolist(), p.start, p.probability))
        except UnreachableGoalError:
            outcomes.append("unreachable")
        finally:
            P._SPARSE_SHARE = old
    assert all(o == "unreachable" for o in outcomes) or all(o != "unreachable" for o in outcomes)
    if outcomes[0] != "unreachable":
        for o in outcomes[1:]:
            assert o[:3] == outcomes[0][:3]
            assert o[3] == pytest.approx(outcomes[0][3], rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("pseudocount", [0.0, 1e-3])
def test_sparse_and_dense_maps_navigate_alike(pseudocount, monkeypatch):
    """A map of a world with EM's pseudocount, navigated densely and as floor + sparse: the same moves on
    every pair (same steps, successes and localisation curve)."""
    import hmmmerge.planning as P

    env = gridworld(5, 5, n_colours=4, seed=3)
    ns = env.next_state
    counts = 5.0 * (ns[..., None] == np.arange(env.n_states))
    model = _pseudocount_map(counts, pseudocount, env.obs, env.n_obs)
    runs = []
    for share in (-1.0, 2.0):
        monkeypatch.setattr(P, "_SPARSE_SHARE", share)
        assert (P._Transitions(model).kind == "dense") == (share < 0)
        runs.append(navigate(env, model, 40, seed=5))
    assert np.array_equal(runs[0].steps, runs[1].steps) and np.array_equal(runs[0].success, runs[1].success)
    np.testing.assert_array_equal(runs[0].localisation_curve, runs[1].localisation_curve)
    assert runs[0].success_rate == 1.0


def test_value_tables_are_kept_within_the_cache(monkeypatch):
    """Per-goal value tables are reused across pairs, and the least recently used is dropped past the cap."""
    import hmmmerge.planning as P

    env = gridworld(4, 4, n_colours=4, seed=0)
    nav = P._Navigator(env.to_hmm(), None)
    first = nav.tables(1, 5)
    assert nav.tables(1, 3) is first and nav.held == first.size  # reused: no new tables for a shorter horizon
    monkeypatch.setattr(P, "_CACHE_FLOATS", first.size + 1)
    nav.tables(2, 5)
    assert list(nav.policy) == [2] and nav.held == nav.policy[2].size  # goal 1 dropped
    free = navigate(env, env.to_hmm(), 30, seed=1)
    monkeypatch.setattr(P, "_CACHE_FLOATS", 0)  # no cache beyond the current goal: the same navigation
    tight = navigate(env, env.to_hmm(), 30, seed=1)
    assert np.array_equal(free.steps, tight.steps) and free.success_rate == tight.success_rate == 1.0


def test_a_map_is_scanned_once_and_again_when_its_transitions_change():
    import hmmmerge.planning as P

    env = cycle_world(6, n_colours=6)
    model = ActionHMM(0.99 * env.to_hmm().to_dense().T + 0.01 / 6, np.eye(6), np.full(6, 1 / 6))
    first = P._transitions_of(model)
    assert P._transitions_of(model) is first
    before = plan(model, _onehot(6, 0), 2, 10).actions.tolist()
    model.T = model.T[::-1].copy()  # the actions swapped: forward is now back
    assert P._transitions_of(model) is not first
    assert plan(model, _onehot(6, 0), 2, 10).actions.tolist() == [1 - a for a in before]


def test_long_plans_span_several_batches_of_sweeps(monkeypatch):
    """A goal 300 moves away (sweeps run 256 at a time on a sparse map): the same shortest plan as the dense
    loop's, on a deterministic ring and on a leaky one."""
    import hmmmerge.planning as P

    env = cycle_world(600, n_colours=600)
    ring = env.to_hmm()
    dense = ring.to_dense().T
    for T in (dense, 0.999 * dense + 0.001 / 600):
        plans = []
        for share in (-1.0, 2.0):  # the dense loop, then the kernel
            monkeypatch.setattr(P, "_SPARSE_SHARE", share)
            model = ActionHMM(T, ring.E, ring.B)
            assert (P._transitions_of(model).kind == "dense") == (share < 0)
            p = plan(model, _onehot(600, 0), 300, horizon=1000)
            plans.append((p.actions.tolist(), p.states.tolist(), p.probability))
        assert plans[0][:2] == plans[1][:2] and len(plans[0][0]) == 300
        assert plans[0][2] == pytest.approx(plans[1][2], rel=1e-9)
    assert plan(ring, _onehot(600, 0), 300, horizon=1000).actions.tolist() == [0] * 300  # both ways tie: action 0

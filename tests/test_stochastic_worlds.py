"""Stochastic worlds: edge probabilities, observation distributions and noise, slip, random starts, the oracle."""

import hashlib
import json
import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmmerge import Environment, gridworld, random_walk
from hmmmerge.environment import PROB_ATOL
from hmmmerge.evaluate import evaluate_model
from hmmmerge.gallery import WORLDS, torus, world
from hmmmerge.reproduce.beyond import random_graph


def slippery_pair():
    """a -> b with 0.25, a -> a with 0.75 (action 0); b -> a surely; action 1 stays. a's colour is 0 or 2."""
    g = nx.MultiDiGraph(start="a")
    g.add_node("a", obs={0: 0.7, 2: 0.3})
    g.add_node("b", obs=1)
    g.add_edge("a", "b", action=0, p=0.25)
    g.add_edge("a", "a", action=0, p=0.75)
    g.add_edge("b", "a", action=0)
    g.add_edge("a", "a", action=1)
    g.add_edge("b", "b", action=1)
    return g


# ---------------------------------------------------------------------------- validation
@pytest.mark.parametrize("edit, words", [
    (lambda g: g.add_edge("b", "b", action=0, p=0.5), ["'b'", "two edges", "action 0", "without a probability"]),
    (lambda g: nx.set_edge_attributes(g, {("a", "b", 0): 0.3}, "p"), ["'a'", "action 0", "sum to 1.05", "1e-06"]),
    (lambda g: nx.set_edge_attributes(g, {("a", "b", 0): -0.25, ("a", "a", 0): 1.25}, "p"), [">= 0", "-0.25"]),
    (lambda g: nx.set_edge_attributes(g, {("a", "b", 0): math.nan}, "p"), ["finite", "nan"]),
    (lambda g: nx.set_edge_attributes(g, {("a", "b", 0): "0.25"}, "p"), ["'a' -> 'b'", "a number"]),
    (lambda g: nx.set_edge_attributes(g, {("a", "b", 0): True}, "p"), ["'a' -> 'b'", "a number"]),
    (lambda g: g.nodes["a"].update(obs={0: 0.7, 2: 0.2}), ["'a'", "obs distribution", "sums to 0.9"]),
    (lambda g: g.nodes["a"].update(obs={0: 1.2, 2: -0.2}), ["'a'", "colour 2", ">= 0"]),
    (lambda g: g.nodes["a"].update(obs={"x": 1.0}), ["'a'", "colour 'x'"]),
    (lambda g: g.nodes["a"].update(obs={}), ["'a'", "at least one colour"]),
    (lambda g: g.nodes["a"].update(obs="{not json"), ["'a'", "distribution"]),
    (lambda g: g.graph.update(obs_noise=1.5), ["obs_noise", "[0, 1]", "1.5"]),
    (lambda g: g.graph.update(obs_noise=math.nan), ["obs_noise", "[0, 1]", "nan"]),
    (lambda g: g.graph.update(obs_noise=-0.1), ["obs_noise", "[0, 1]"]),
])
def test_probabilities_are_validated(edit, words):
    g = slippery_pair()
    edit(g)
    with pytest.raises(ValueError) as info:
        Environment(g)
    message = str(info.value)
    assert "\n" not in message
    for w in words:
        assert w in message, (w, message)


def test_sums_within_the_stated_tolerance_are_accepted_and_rescaled():
    g = slippery_pair()
    nx.set_edge_attributes(g, {("a", "b", 0): 0.25 + PROB_ATOL / 2}, "p")
    T = Environment(g).to_hmm().T[0].toarray()
    assert T.sum(axis=1) == pytest.approx([1.0, 1.0], abs=1e-15)
    nx.set_edge_attributes(g, {("a", "b", 0): 0.25 + 2 * PROB_ATOL}, "p")
    with pytest.raises(ValueError, match="sum to 1.000002"):
        Environment(g)


@pytest.mark.parametrize("bad", [-0.1, 1.5, math.nan, math.inf, "0.1", True])
def test_slip_and_noise_parameters_are_checked(bad):
    env = gridworld(3, 3)
    for kw in ({"slip": bad}, {"obs_noise": bad}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            env.with_noise(**kw)
        with pytest.raises(ValueError, match=next(iter(kw))):
            gridworld(3, 3, **kw)
        with pytest.raises(ValueError, match=next(iter(kw))):
            world("maze", **kw)


def test_the_process_arrays():
    env = Environment(slippery_pair(), obs_noise=0.1)
    assert not env.is_deterministic and not env.deterministic_moves
    assert env.next_state.tolist() == [[0, 0], [0, 1]]  # a's most likely successor under action 0 is a itself
    assert env.obs.tolist() == [0, 1]                    # a's most likely colour
    assert env.n_obs == 3
    t = env.transitions
    assert t.indptr.tolist() == [0, 2, 3, 4, 5]
    assert t.indices.tolist() == [0, 1, 0, 0, 1] and t.probs.tolist() == [0.75, 0.25, 1.0, 1.0, 1.0]
    noise = 0.1 / 3
    assert env.emission == pytest.approx(np.array([[0.63 + noise, noise, 0.27 + noise], [noise, 0.9 + noise, noise]]))
    hmm = env.to_hmm()
    assert hmm.T[0].toarray().tolist() == [[0.75, 0.25], [1.0, 0.0]]
    assert hmm.B.tolist() == [1.0, 0.0]
    assert env.to_hmm(start="random").B.tolist() == [0.5, 0.5]
    assert env.to_hmm(start={"b": 1.0}).B.tolist() == [0.0, 1.0]


def test_zero_probability_edges_are_no_transitions():
    g = slippery_pair()
    g.add_edge("b", "b", action=0, p=0.0)
    nx.set_edge_attributes(g, {("b", "a", 0): 1.0}, "p")
    env = Environment(g)
    assert env.to_hmm().T[0].toarray()[1].tolist() == [1.0, 0.0]
    walk = random_walk(env, 50, 20, seed=0)
    b_moves = (walk.states[:, :-1] == 1) & (walk.actions[:, 1:] == 0)
    assert b_moves.any() and (walk.states[:, 1:][b_moves] == 0).all()


# ---------------------------------------------------------------------------- the oracle is the process
def _binomial_bound(p, n, z=5.0):
    """``z`` binomial standard deviations of a frequency over ``n`` draws, plus one count of slack."""
    return z * np.sqrt(p * (1 - p) / np.maximum(n, 1)) + 1.0 / np.maximum(n, 1)


def test_to_hmm_matches_transition_and_emission_counts_of_a_long_walk():
    """Counted frequencies of a 200,000-move walk agree with ``to_hmm()`` within 5 binomial sd per entry
    (about 1,000 entries: a false alarm has probability < 1e-3); impossible events are never seen."""
    g = nx.MultiDiGraph(gridworld(3, 3, n_colours=4, seed=2).graph)
    g.nodes[(1, 1)]["obs"] = {0: 0.5, 1: 0.3, 3: 0.2}
    env = Environment(g).with_noise(slip=0.2, obs_noise=0.1)
    hmm = env.to_hmm()
    walk = random_walk(env, 2000, 100, seed=7)
    S, A, O = env.n_states, env.n_actions, env.n_obs
    s, a, s2 = walk.states[:, :-1].ravel(), walk.actions[:, 1:].ravel(), walk.states[:, 1:].ravel()
    moves = np.zeros((A, S, S))
    np.add.at(moves, (a, s, s2), 1)
    n = moves.sum(axis=2, keepdims=True)
    T = np.stack([hmm.T[b].toarray() for b in range(A)])
    assert (n > 1000).all()
    assert (np.abs(moves / n - T) <= _binomial_bound(T, n)).all()
    assert (moves[T == 0] == 0).all()
    views = np.zeros((S, O))
    np.add.at(views, (walk.states.ravel(), walk.obs.ravel()), 1)
    m = views.sum(axis=1, keepdims=True)
    assert (np.abs(views / m - hmm.E) <= _binomial_bound(hmm.E, m)).all()
    # the first states follow the start distribution
    starts = random_walk(env, 20000, 0, seed=8, start="random").states[:, 0]
    freq = np.bincount(starts, minlength=S) / starts.size
    assert (np.abs(freq - 1 / S) <= _binomial_bound(1 / S, starts.size)).all()


def test_start_distributions():
    env = gridworld(3, 3, n_colours=3, seed=0)
    assert (random_walk(env, 5, 3, seed=0, start=(0, 2)).states[:, 0] == env.index[(0, 2)]).all()
    assert (random_walk(env, 5, 3, seed=0, start="(0, 2)").states[:, 0] == env.index[(0, 2)]).all()
    dist = random_walk(env, 4000, 0, seed=1, start={(0, 0): 0.25, (2, 2): 0.75}).states[:, 0]
    assert set(dist.tolist()) == {env.index[(0, 0)], env.index[(2, 2)]}
    assert abs((dist == env.index[(2, 2)]).mean() - 0.75) <= _binomial_bound(0.75, 4000)
    array = np.zeros(9)
    array[[1, 4]] = 0.5
    assert set(random_walk(env, 200, 0, seed=2, start=array).states[:, 0].tolist()) == {1, 4}
    for bad, words in (((5, 5), "not a node"), ({(0, 0): 0.5}, "sums to 0.5"), (np.ones(3) / 3, "3 entries"),
                       ({(9, 9): 1.0}, "not a node"), ({(0, 0): -1.0, (1, 1): 2.0}, ">= 0")):
        with pytest.raises(ValueError, match=words):
            random_walk(env, 2, 2, start=bad)


def test_the_oracle_on_a_slip_world_predicts_the_closed_form_accuracy():
    """A 3x3 torus whose nine cells have nine colours: after each view the state is known, and a move
    reaches its intended cell with probability 1 - p + p/4 (the four neighbours are distinct), which the
    oracle predicts; so each scored step is right with exactly that probability, independently."""
    p = 0.2
    env = torus(3, 3, n_colours=9, seed=0, slip=p)
    assert len(set(env.obs.tolist())) == 9
    expected = 1 - p + p / 4
    r = evaluate_model(env, env.to_hmm(), n_episodes=400, episode_length=50, seed=3)
    n = r.n_scored_steps
    assert abs(r.accuracy - expected) <= 4 * math.sqrt(expected * (1 - expected) / n)
    assert r.oracle_accuracy == r.accuracy and r.oracle_surprise == r.surprise
    # the surprise is the entropy of a move: -(q log q + 3 (p/4) log (p/4)), q = 1 - p + p/4
    entropy = -(expected * math.log(expected) + 3 * (p / 4) * math.log(p / 4))
    assert abs(r.surprise - entropy) <= 2 * (r.surprise_ci[1] - r.surprise)  # two half-widths of the 95% CI
    # the clean map predicts the intended cell too, and the next view tells where the move went: the same
    # accuracy, but infinite surprise
    clean = evaluate_model(env, torus(3, 3, n_colours=9, seed=0).to_hmm(), n_episodes=400, seed=3)
    assert clean.accuracy == r.accuracy and clean.surprise == math.inf


def test_the_oracle_on_noisy_views_predicts_the_closed_form_accuracy():
    """Deterministic moves from a known start: the state is always known, the oracle predicts its colour,
    and the view shows it with probability 1 - q + q / n_obs."""
    q = 0.3
    env = gridworld(4, 4, n_colours=5, seed=1, obs_noise=q)
    expected = 1 - q + q / 5
    r = evaluate_model(env, gridworld(4, 4, n_colours=5, seed=1).to_hmm(), n_episodes=300, seed=4)
    assert abs(r.oracle_accuracy - expected) <= 4 * math.sqrt(expected * (1 - expected) / r.n_scored_steps)
    # the clean map loses track at the first noisy view: below the oracle, and infinitely surprised
    assert r.accuracy < r.oracle_accuracy - 0.1
    assert r.surprise == math.inf and math.isfinite(r.oracle_surprise)


def test_random_starts_reach_the_evaluator_and_the_oracle():
    env = world("two-rooms", seed=0)
    r = evaluate_model(env, env.to_hmm(start="random"), n_episodes=50, seed=0, start="random")
    fixed = evaluate_model(env, env.to_hmm(), n_episodes=50, seed=0, start="random", smoothing=1e-3)
    assert r.accuracy == r.oracle_accuracy
    assert fixed.oracle_accuracy == r.accuracy and fixed.surprise > fixed.oracle_surprise
    assert evaluate_model(env, env.to_hmm(), n_episodes=5, oracle=False).oracle_accuracy is None


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), slip=st.floats(0, 1), noise=st.floats(0, 1))
def test_with_noise_is_the_mixture(seed, slip, noise):
    """Slipping is ``(1 - p) T[a] + p mean_b T[b]`` and noise ``(1 - q) E + q / O``, on random stochastic worlds."""
    rng = np.random.default_rng(seed)
    S, A, O = 4, 3, 3
    g = nx.MultiDiGraph(start=0)
    for s in range(S):
        g.add_node(s, obs=int(rng.integers(O)) if rng.random() < 0.5 else dict(enumerate(rng.dirichlet(np.ones(O)))))
        for a in range(A):
            targets = rng.choice(S, size=int(rng.integers(1, 3)), replace=False)
            for t, q in zip(targets, rng.dirichlet(np.ones(len(targets)))):
                g.add_edge(s, int(t), action=a, p=float(q))
    base = Environment(g, n_obs=O)
    env = base.with_noise(slip=slip, obs_noise=noise)
    T0 = np.stack([m.toarray() for m in base.to_hmm().T])
    T = np.stack([m.toarray() for m in env.to_hmm().T])
    expected = (1 - slip) * T0 + slip * T0.mean(axis=0, keepdims=True) if A > 1 else T0
    assert np.allclose(T, expected, atol=1e-12)
    assert np.allclose(env.emission, (1 - noise) * base.emission + noise / O, atol=1e-12)
    assert env.obs.tolist() == base.obs.tolist()


def test_gallery_worlds_take_slip_and_noise():
    for name in WORLDS:
        clean = world(name, seed=1)
        env = world(name, seed=1, slip=0.1, obs_noise=0.05)
        assert env.nodes == clean.nodes and env.start == clean.start
        assert (env.next_state == clean.next_state).all() and (env.obs == clean.obs).all()  # the intended moves
        T = np.stack([m.toarray() for m in env.to_hmm().T])
        T0 = np.stack([m.toarray() for m in clean.to_hmm().T])
        assert np.allclose(T, 0.9 * T0 + 0.1 * T0.mean(axis=0, keepdims=True))
        assert env.obs_noise == 0.05 and env.graph.graph.get("name") == clean.graph.graph.get("name")


# ---------------------------------------------------------------------------- deterministic worlds unchanged
def _digest(env) -> str:
    """Walks (uniform and with a policy), the oracle's arrays and the JSON file of a world."""
    h = hashlib.sha256()
    t = random_walk(env, 20, 30, seed=3)
    for x in (t.obs, t.actions, t.states):
        h.update(np.ascontiguousarray(x, dtype=np.int64).tobytes())
    pol = np.random.default_rng(0).dirichlet(np.ones(env.n_actions), size=env.n_states)
    h.update(random_walk(env, 5, 10, seed=4, policy=pol).states.astype(np.int64).tobytes())
    m = env.to_hmm()
    for a in range(m.n_actions):
        h.update(m.T[a].toarray().tobytes())
    h.update(m.E.tobytes())
    h.update(m.B.tobytes())
    h.update(json.dumps(env.to_json_dict(), sort_keys=True).encode())
    return h.hexdigest()[:16]


# digests computed with the code before stochastic worlds existed (main at 5c52501)
BEFORE = {"grid": "5988c3e1e5398b74", "maze": "32a59f4726806989", "torus": "b30fd6ba519ff409",
          "loop": "b7af301fcc408bb3", "random-graph": "7daef324b66f8b7f"}


@pytest.mark.parametrize("name, build", [
    ("grid", lambda: gridworld()), ("maze", lambda: world("maze", seed=1)), ("torus", lambda: world("torus", seed=2)),
    ("loop", lambda: world("aliased-loop")), ("random-graph", lambda: random_graph(30, 3, 5, seed=1)),
])
def test_deterministic_worlds_are_unchanged(name, build, tmp_path):
    env = build()
    assert env.is_deterministic and _digest(env) == BEFORE[name]
    # the same world spelled with p = 1 on every edge, or with zero noise, is the same process
    g = nx.MultiDiGraph(env.graph)
    nx.set_edge_attributes(g, 1.0, "p")
    assert _digest(env.with_noise(slip=0.0, obs_noise=0.0)) == BEFORE[name]
    same = Environment(g, n_obs=env.n_obs)
    assert same.is_deterministic
    a, b = random_walk(env, 10, 20, seed=5), random_walk(same, 10, 20, seed=5)
    assert (a.obs == b.obs).all() and (a.states == b.states).all()
    # GraphML as networkx writes the graph itself
    env.save(tmp_path / "w.graphml")
    nx.write_graphml(env.graph, tmp_path / "nx.graphml")
    assert (tmp_path / "w.graphml").read_bytes() == (tmp_path / "nx.graphml").read_bytes()


# ---------------------------------------------------------------------------- files
def _same_process(a: Environment, b: Environment) -> None:
    assert a.nodes == b.nodes and a.start == b.start and a.n_obs == b.n_obs and a.obs_noise == b.obs_noise
    assert (a.next_state == b.next_state).all() and (a.obs == b.obs).all()
    ha, hb = a.to_hmm(), b.to_hmm()
    for m, n in zip(ha.T, hb.T):
        assert abs(m - n).max() <= 1e-15
    assert np.abs(ha.E - hb.E).max() <= 1e-15
    wa, wb = random_walk(a, 30, 20, seed=9, start="random"), random_walk(b, 30, 20, seed=9, start="random")
    assert (wa.obs == wb.obs).all() and (wa.states == wb.states).all()


@pytest.mark.parametrize("build", [
    lambda: gridworld(3, 4, n_colours=3, seed=0, slip=0.1, obs_noise=0.05),
    lambda: Environment(slippery_pair(), obs_noise=0.2),
    lambda: world("aliased-loop", slip=0.3),
])
def test_stochastic_worlds_round_trip_through_every_file_format(build, tmp_path):
    env = build()
    for name in ("w.json", "w.graphml"):
        env.save(tmp_path / name)
        _same_process(env, Environment.load(tmp_path / name))
    _same_process(env, Environment.from_json_dict(json.loads(json.dumps(env.to_json_dict()))))
    # networkx's own writers: node-link JSON always; GraphML when every obs is a plain colour
    with open(tmp_path / "nx.json", "w") as f:
        json.dump(nx.node_link_data(env.graph, edges="edges"), f, default=lambda x: x.tolist())
    _same_process(env, Environment.load(tmp_path / "nx.json"))
    if all(isinstance(o, int) for _, o in env.graph.nodes(data="obs")):
        nx.write_graphml(env.graph, tmp_path / "nx.graphml")
        _same_process(env, Environment.load(tmp_path / "nx.graphml"))

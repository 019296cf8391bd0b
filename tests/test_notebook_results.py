"""The library results notebooks 03-05 show, checked directly (same worlds, seeds and settings).

Each test names the notebook whose claim it checks; the notebooks assert the same facts when executed
(tests/test_notebooks.py), these tests keep them checked without a Jupyter kernel.
"""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest

from hmmmerge import Environment, gridworld, random_walk
from hmmmerge.agent import TwoLevelMemory
from hmmmerge import build_model
from hmmmerge.clusters import Clusters, level2_hmm
from hmmmerge.commands.env import describe
from hmmmerge.episodic import EpisodicMemory
from hmmmerge.evaluate import evaluate_model, position_transition_matrix
from hmmmerge.structure import aliasing_depths
from hmmmerge.successor import successor_features, true_successor_features
from hmmmerge.worlds import grid_colours


# --------------------------------------------------------------------------- notebook 03
def enumerated_sf(env, gamma, horizon):
    """SF of every state by walking all A**horizon action sequences (the definition, no matrices)."""
    seqs = np.array(list(itertools.product(range(env.n_actions), repeat=horizon)))
    out = np.zeros((env.n_states, env.n_obs))
    for s in range(env.n_states):
        x = np.full(len(seqs), s)
        for step in range(horizon):
            x = env.next_state[seqs[:, step], x]
            out[s] += gamma**step * np.bincount(env.obs[x], minlength=env.n_obs) / len(seqs)
    return out


@pytest.mark.parametrize("which", ["tiny grid", "random world"])
def test_true_sf_closed_form_equals_enumeration(which):
    """Notebook 03, section 1: sum_l gamma^l e_s P^(l+1) O equals enumeration; the tail is gamma^h / (1 - gamma)."""
    if which == "tiny grid":
        env, gamma, h = gridworld(2, 3, n_colours=3, seed=0), 0.8, 6
    else:
        rng = np.random.default_rng(5)
        env = Environment.from_arrays(rng.integers(0, 7, size=(3, 7)), rng.integers(0, 3, size=7))
        gamma, h = 0.6, 7
    S, A = env.n_states, env.n_actions
    P = np.zeros((S, S))
    np.add.at(P, (np.repeat(np.arange(S), A), env.next_state.T.ravel()), 1.0 / A)
    O = np.eye(env.n_obs)[env.obs]
    matrix_form = sum(gamma**l * np.linalg.matrix_power(P, l + 1) @ O for l in range(h))
    library = true_successor_features(env, list(range(S)), gamma=gamma, horizon=h)
    np.testing.assert_allclose(library, enumerated_sf(env, gamma, h), atol=1e-12)
    np.testing.assert_allclose(library, matrix_form, atol=1e-12)
    tail = np.linalg.solve(np.eye(S) - gamma * P, P @ O) - library
    assert tail.min() > -1e-12
    np.testing.assert_allclose(tail.sum(axis=1), gamma**h / (1 - gamma))


def test_episodic_sf_gap_is_noise_plus_purity_bias(paper_world):
    """Notebook 03, sections 2-3 on one world: the gap closes with size and purity.

    Noise (to the mixture of the members' true SFs) ~ size^-1/2 at any purity; bias ~ 1 - purity, flat in size.
    """
    env = paper_world
    memory = EpisodicMemory(env.n_obs, env.n_actions)
    memory.observe_trajectories(random_walk(env, 400, 50, seed=100))
    labels, emission = memory.labels, memory.emission
    truth = true_successor_features(env, list(range(env.n_states)))
    set_form = true_successor_features(env, list(range(env.n_states)), form="set")
    own = [np.flatnonzero(labels == s) for s in range(env.n_states)]
    sizes, purities = (5, 20, 80), (1.0, 0.6)
    cells = [s for s in range(env.n_states) if len(own[s]) >= max(sizes)]
    assert len(cells) >= 40
    rng = np.random.default_rng(0)
    sim, noise, bias, to_set = {}, {}, {}, {}
    for p, n in itertools.product(purities, sizes):
        k = round(p * n)
        sets, target = [], []
        for s in cells:
            others = np.flatnonzero((emission == env.obs[s]) & (labels != s))
            for _ in range(3):
                sets.append(np.concatenate([rng.choice(own[s], k, replace=False),
                                            rng.choice(others, n - k, replace=False)]))
                target.append(s)
        sf = successor_features(memory, sets, gamma=0.8, horizon=25)
        mixture = np.array([truth[labels[m]].mean(axis=0) for m in sets])
        d = np.linalg.norm(sf - truth[target], axis=1)
        sim[p, n] = np.exp(-d).mean()
        noise[p, n] = np.linalg.norm(sf - mixture, axis=1).mean()
        bias[p, n] = np.linalg.norm(mixture - truth[target], axis=1).mean()
        to_set[p, n] = np.linalg.norm(sf - set_form[target], axis=1).mean()
    for p in purities:
        assert sim[p, 5] < sim[p, 20] < sim[p, 80]
    for n in sizes:
        assert sim[1.0, n] > sim[0.6, n]
        assert abs(noise[1.0, n] - noise[0.6, n]) < 0.15 * noise[1.0, n]  # noise does not depend on purity
        assert bias[1.0, n] < 1e-12
    slope = np.polyfit(np.log(sizes), np.log([noise[1.0, n] for n in sizes]), 1)[0]
    assert -0.65 < slope < -0.35  # Monte-Carlo rate
    assert abs(bias[0.6, 20] - bias[0.6, 80]) < 0.1 * bias[0.6, 80]  # bias does not shrink with size
    assert sim[1.0, 80] > 0.75
    # a large pure cluster approaches the probabilistic (expected) SF, not Algorithm 2 run on the true graph
    assert np.exp(-to_set[1.0, 80]) < sim[1.0, 80] - 0.1


# --------------------------------------------------------------------------- notebook 04
@pytest.fixture(scope="module")
def small_agent():
    env = gridworld(4, 4, n_colours=8, seed=0)
    train = random_walk(env, 30, 20, seed=1)
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge="sf", initial_size=5, merge_iterations=10,
                           refresh_every=50, sleep_every=100, seed=0).fit(train)
    return env, train, agent


def test_two_level_factor_graph_posterior_is_level1_filter_times_C(small_agent):
    """Notebook 04, section 1: pgmpy's H2 posterior on the exported two-level graph equals filter(level 1) @ C."""
    pytest.importorskip("pgmpy")
    from hmmmerge.factor_graph import pgmpy_filter, two_level_factor_graph

    _, train, agent = small_agent
    level1 = agent.level1_hmm()
    C = agent.clusters_.connection_matrix(agent.memory_.n_states)
    o, a = train.obs[0, :4], train.actions[0, :4]
    fg, evidence = two_level_factor_graph(level1, C, o, a)
    ll, post = pgmpy_filter(fg, evidence, variable="H2")
    Cx = np.hstack([C.toarray(), np.asarray(C.sum(axis=1)) == 0])
    np.testing.assert_allclose(post, level1.filter(o, a) @ Cx, atol=1e-12)
    assert ll == pytest.approx(level1.log_likelihood(o, a), abs=1e-12)


def test_level2_prefix_queries_match_filter_while_no_mass_on_unknown_rows(small_agent):
    """Notebook 04, section 1: on the sub-stochastic level 2, pgmpy on growing prefixes equals the filter."""
    pytest.importorskip("pgmpy")
    from hmmmerge.factor_graph import pgmpy_filter, to_factor_graph

    env, _, agent = small_agent
    level2 = agent.level2_hmm()
    known = [np.asarray(level2.T[k].sum(axis=1)).ravel() > 0 for k in range(env.n_actions)]
    assert not all(k.all() for k in known)  # some transitions are unknown: the case that needs care
    test = random_walk(env, 1000, 20, seed=1)
    checked = 0
    for e in range(test.n_episodes):
        o, a = test.obs[e, :5], test.actions[e, :5]
        post = level2.filter(o, a)
        logp = level2.run_filter(o, a).log_probs[0]
        clean = np.isfinite(logp).all() and all(post[t - 1][~known[a[t]]].sum() == 0 for t in range(1, len(o)))
        if not clean:
            continue
        for t in range(len(o)):
            ll, p = pgmpy_filter(*to_factor_graph(level2, o[: t + 1], a[: t + 1]))
            np.testing.assert_allclose(p[-1], post[t], atol=1e-10)
            assert ll == pytest.approx(logp[: t + 1].sum(), abs=1e-10)
        checked += 1
        if checked == 2:
            break
    assert checked == 2


def test_perfect_clusters_give_the_true_map_and_learned_level2_beats_first_order(small_agent):
    """Notebook 04, sections 2-3: C = true cell recovers T exactly (surprise 0).

    The learned level 2 smears the rows but beats first-order on accuracy; level 1 has zero-probability moves.
    """
    env, train, agent = small_agent
    memory, labels = agent.memory_, agent.memory_.labels
    S = env.n_states
    true_T = np.zeros((env.n_actions, S, S))
    for k in range(env.n_actions):
        true_T[k, np.arange(S), env.next_state[k]] = 1.0
    perfect = level2_hmm(memory, Clusters(labels))
    pos = position_transition_matrix(perfect, labels, labels, n_positions=S, per_action=True)
    np.testing.assert_array_equal(pos, true_T)  # the walk tries all 64 (cell, move) pairs
    level2 = agent.level2_hmm()
    assignment = agent.clusters_.assignment[: memory.n_states]
    learned = position_transition_matrix(level2, assignment, labels, n_positions=S)
    assert 0.5 * np.abs(learned - true_T.mean(0)).sum(axis=1).mean() > 0.2
    test = random_walk(env, 100, 20, seed=1)
    r_perfect = evaluate_model(env, perfect, trajectories=test)
    assert (r_perfect.accuracy, r_perfect.surprise) == (1.0, 0.0)
    first_order = build_model("first-order", train, env=env)
    acc_fo = evaluate_model(env, first_order, trajectories=test).accuracy
    r_level2 = evaluate_model(env, level2, trajectories=test, smoothing=0.01)
    assert r_level2.accuracy > acc_fo
    assert evaluate_model(env, agent.level1_hmm(), trajectories=test).zero_prob_steps > 0


# --------------------------------------------------------------------------- notebook 05
def regular_graph_world(n_nodes=24, degree=3, n_colours=4, seed=1):
    """The world of notebook 05 (same code): a random regular graph, per-node random action order."""
    undirected = nx.random_regular_graph(degree, n_nodes, seed=seed)
    rng = np.random.default_rng(seed)
    colours = grid_colours(n_nodes, n_colours, "balanced", seed=seed)
    g = nx.MultiDiGraph()
    for v in sorted(undirected):
        g.add_node(v, obs=int(colours[v]))
    for v in sorted(undirected):
        for action, u in zip(rng.permutation(degree), sorted(undirected[v])):
            g.add_edge(v, u, action=int(action))
    return Environment(g, start=0)


def test_networkx_world_characterisation_and_validation():
    """Notebook 05, section 1: 6 clones per colour, Markov radius 0, every vertex identifiable; bad graphs rejected."""
    env = regular_graph_world()
    assert (env.n_states, env.n_actions, env.n_obs) == (24, 3, 4)
    report = describe(env, k=3)
    assert set(report["clones"].values()) == {6}
    assert report["markov_radius"] == 0
    depths = aliasing_depths(env)
    assert (depths >= 1).all() and depths.max() == 2
    undirected = nx.random_regular_graph(3, 24, seed=1)
    nx.set_node_attributes(undirected, 0, "obs")
    with pytest.raises(ValueError, match="undirected"):
        Environment(undirected)
    broken = nx.MultiDiGraph(env.graph)
    broken.remove_edge(*next((u, v, k) for u, v, k, d in broken.edges(keys=True, data=True) if d["action"] == 2))
    with pytest.raises(ValueError, match="no edge for action 2"):
        Environment(broken)


def test_baselines_on_networkx_world():
    """Notebook 05, section 2: EM recovers the world; the two-level memory (size 1) beats first-order."""
    env = regular_graph_world()
    train = random_walk(env, 200, 50, seed=0)
    test = random_walk(env, 100, 50, seed=1)
    score = lambda model: evaluate_model(env, model, trajectories=test)  # noqa: E731
    oracle = score(env.to_hmm())
    assert (oracle.accuracy, oracle.surprise) == (1.0, 0.0)
    first_order = score(build_model("first-order", train, env=env))
    em = score(build_model("em", train, env=env, seed=0, n_clones=6, n_iter=50, n_init=2))
    assert em.accuracy > 0.9 and em.surprise < 0.05
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge="sf", initial_size=1, seed=0).fit(train)
    two_level = score(agent.level2_hmm())
    assert two_level.accuracy > first_order.accuracy + 0.1
    bfmm = score(build_model("bfmm", train, env=env, seed=0))
    assert bfmm.accuracy < em.accuracy
    folds = score(build_model("bfmm", train, env=env, seed=0, search="fold"))
    assert bfmm.accuracy < folds.accuracy < em.accuracy

"""The online two-level agent: protocol, no-prediction rule, level-1 consistency, files."""

import numpy as np
import pytest

from hmmmerge import Trajectories, random_walk
from hmmmerge.agent import PREDICTORS, TwoLevelMemory
from hmmmerge.merging import SFMerger
from hmmmerge.models import MERGERS
from hmmmerge.episodic import EpisodicMemory


@pytest.fixture(scope="module")
def world(paper_world, paper_walk):
    return paper_world, paper_walk


def _fit(traj, **kw):
    kw.setdefault("seed", 0)
    return TwoLevelMemory(10, 4, **kw).fit(traj)


def test_deterministic_under_seed(world):
    _, traj = world
    a, b = _fit(traj, merge="sf"), _fit(traj, merge="sf")
    ha, hb = a.history(), b.history()
    for key in ha:
        assert np.array_equal(ha[key], hb[key], equal_nan=True), key
    assert np.array_equal(a.clusters_.assignment, b.clusters_.assignment)
    c = _fit(traj, merge="sf", seed=5)
    assert not np.array_equal(a.clusters_.assignment[: a.memory_.n_states], c.clusters_.assignment[: c.memory_.n_states])


@pytest.mark.parametrize("merge", list(MERGERS))
def test_level1_inside_agent_is_algorithm_1(world, merge):
    """Every merger reads level 1 through read-only views and leaves it exactly as Algorithm 1 wrote it."""
    _, traj = world
    agent = _fit(traj, merge=merge)
    mem = EpisodicMemory(10, 4)
    states, pred = mem.observe_trajectories(traj)
    assert np.array_equal(agent.memory_.next_state, mem.next_state)
    assert np.array_equal(agent.memory_.emission, mem.emission)
    assert np.array_equal(agent.memory_.labels, mem.labels)
    assert np.array_equal(agent.last_states_, states)
    l1 = (pred[:, 1:] == traj.obs[:, 1:]).mean(axis=1)
    assert np.allclose(agent.history()["l1_accuracy"], l1)
    assert np.allclose(agent.history()["l1_no_prediction"], (pred[:, 1:] < 0).mean(axis=1))


def test_first_order_predictions(world):
    _, traj = world
    agent = _fit(traj, merge="none")
    counts = np.zeros((10, 4, 10), dtype=int)
    correct = np.zeros(traj.n_episodes)
    for e in range(traj.n_episodes):
        for t in range(1, traj.obs.shape[1]):
            row = counts[traj.obs[e, t - 1], traj.actions[e, t]]
            guess = int(row.argmax()) if row.sum() else -1
            correct[e] += guess == traj.obs[e, t]
            counts[traj.obs[e, t - 1], traj.actions[e, t], traj.obs[e, t]] += 1
    assert np.allclose(agent.history()["first_order_accuracy"], correct / (traj.obs.shape[1] - 1))


def test_size1_without_merges_is_level1(world):
    """With singleton clusters and no merges, level 2 predicts exactly what level 1 predicts, or nothing."""
    _, traj = world
    agent = TwoLevelMemory(10, 4, merge="none", initial_size=1, seed=0).fit(traj)
    l1, l2 = agent.last_predictions_["l1"], agent.last_predictions_["l2"]
    said = l2 >= 0
    assert said.sum() > 100
    assert np.array_equal(l2[said], l1[said])
    assert (agent.history()["l2_accuracy"] <= agent.history()["l1_accuracy"] + 1e-12).all()


def test_no_prediction_counts_as_wrong(paper_world):
    traj = random_walk(paper_world, 3, seed=0)
    agent = TwoLevelMemory(10, 4).fit(traj)  # no sleep yet: level 2 has no clusters
    h = agent.history()
    assert (h["l2_no_prediction"] == 1.0).all() and (h["l2_accuracy"] == 0.0).all()
    # level 1 on its very first episode predicts nothing, hence accuracy 0 even if colour 0 is common
    assert h["l1_accuracy"][0] == 0.0 and h["l1_no_prediction"][0] == 1.0


def test_sleep_schedule(world):
    _, traj = world  # 80 episodes x 51 steps = 4080 steps
    agent = _fit(traj, merge="sf")
    assert agent.steps_ == 80 * 51
    # a sleep is due after every 500 steps and applied at the next episode start
    due = [(k * 500) // 51 + 1 for k in range(1, 9)]   # episode index where each sleep runs
    assert agent.sleeps_ == sum(d < 80 for d in due)
    n_clusters = agent.history()["n_clusters"]
    assert n_clusters[: due[0]].max() == 0 and n_clusters[due[0]] > 0


def test_save_load_resume_is_exact(tmp_path, world):
    _, traj = world
    whole = _fit(traj, merge="sf")
    part = _fit(traj[:37], merge="sf")
    path = tmp_path / "agent.npz"
    part.save(path)
    resumed = TwoLevelMemory.load(path).partial_fit(traj[37:])
    hw, hr = whole.history(), resumed.history()
    for key in hw:
        assert np.allclose(hw[key], hr[key], equal_nan=True), key
    assert np.array_equal(whole.clusters_.assignment[: whole.memory_.n_states],
                          resumed.clusters_.assignment[: resumed.memory_.n_states])
    assert resumed.summary()["episodes"] == 80


def test_summary_keys_and_models(world):
    _, traj = world
    agent = _fit(traj, merge="sf")
    s = agent.summary()
    for key in ("l1_accuracy", "l2_accuracy", "first_order_accuracy", "no_prediction_share", "purity",
                "n_clusters", "n_first_level_states"):
        assert key in s
    assert 0 <= s["purity"] <= 1
    l2 = agent.level2_hmm()
    assert l2.n_states == agent.n_clusters_
    assert agent.level1_hmm().n_states == agent.memory_.n_states
    assert set(PREDICTORS) == {"l1", "l2", "l2_filter", "first_order"}


def test_bad_inputs(tmp_path, paper_world):
    one = Trajectories([[0, 1]], [[-1, 0]])
    with pytest.raises(ValueError, match="merge"):   # checked by fit, not by the constructor
        TwoLevelMemory(10, 4, merge="kmeans").fit(one)
    with pytest.raises(ValueError, match="initial_size"):
        TwoLevelMemory(10, 4, initial_size=0).fit(one)
    with pytest.raises(ValueError, match="initial_size is 5 on the merger and 10 on the agent"):
        TwoLevelMemory(10, 4, merger=SFMerger(initial_size=5)).fit(one)
    with pytest.raises(ValueError, match="does not name the mode"):
        TwoLevelMemory(10, 4, merge="random", merger=SFMerger()).fit(one)
    with pytest.raises(ValueError, match="gamma"):
        TwoLevelMemory(10, 4, merger=SFMerger(gamma=1.5)).fit(one)
    with pytest.raises(TypeError, match="merger must be None or a merger"):
        TwoLevelMemory(10, 4, merger="sf").fit(one)
    agent = TwoLevelMemory(3, 2)
    with pytest.raises(ValueError, match="observation 5"):
        agent.fit(Trajectories([[0, 5]], [[-1, 0]]))
    with pytest.raises(ValueError, match="action 3"):
        agent.fit(Trajectories([[0, 1]], [[-1, 3]]))
    with pytest.raises(ValueError, match="no episodes"):
        agent.summary()
    with pytest.raises(ValueError, match="observations"):
        agent.run(paper_world, 2)
    np.savez(tmp_path / "junk.npz", x=np.zeros(3))
    with pytest.raises(ValueError, match="junk.npz"):
        TwoLevelMemory.load(tmp_path / "junk.npz")


def test_online_connection_probability_and_choice():
    """A state joins a cluster with probability 1 - exp(H(q)) / n_o, drawn from q."""
    from hmmmerge._agent_kernels import Belief, connect_online

    q = np.array([0.7, 0.2, 0.1])
    bel = Belief(np.zeros(5), np.array([1, 3, 4, 0, 0]), np.array([3]), np.zeros(1))
    bel.p[[1, 3, 4]] = q
    em_ptr = np.array([0, 0, 4])        # four clusters emit observation 1
    p_connect = 1 - np.exp(-(q * np.log(q)).sum()) / 4
    grid = (np.arange(2000) + 0.5) / 2000
    connected, chosen = 0, []
    for u in grid:
        cluster_of = np.full(3, -1)
        connect_online(2, 1, cluster_of, bel, em_ptr, u, 0.5)
        connected += cluster_of[2] >= 0
    assert connected / len(grid) == pytest.approx(p_connect, abs=1e-3)
    for u in grid:
        cluster_of = np.full(3, -1)
        connect_online(2, 1, cluster_of, bel, em_ptr, 0.0, u)
        chosen.append(cluster_of[2])
    freq = np.bincount(chosen, minlength=5)[[1, 3, 4]] / len(grid)
    assert np.allclose(freq, q, atol=1e-3)
    # a uniform belief over every cluster of the colour never connects
    cluster_of = np.full(3, -1)
    bel.p[[1, 3, 4]] = 1 / 3
    connect_online(2, 1, cluster_of, bel, np.array([0, 0, 3]), 0.0, 0.5)
    assert cluster_of[2] == -1


def test_literal_reading_switches(world):
    """Without online connection or contradiction splits the agent is the literal text of the paper."""
    _, traj = world
    literal = _fit(traj, merger=SFMerger(split_contradictions=False), online_connect=False)
    assert literal.get_params()["online_connect"] is False
    # without online connection only sleeps connect states: those of the last episode stay unconnected
    fresh = slice(int(literal.history()["n_states"][-2]), literal.memory_.n_states)
    assert (literal.clusters_.assignment[fresh] == -1).all()
    online = _fit(traj, merge="sf")
    fresh = slice(int(online.history()["n_states"][-2]), online.memory_.n_states)
    assert (online.clusters_.assignment[fresh] >= 0).any()


def test_estimator_conventions(world):
    """Parameters are attributes; fit starts afresh, partial_fit continues; learned state ends with '_'."""
    _, traj = world
    agent = TwoLevelMemory(10, 4, merge="random", initial_size=3, seed=2)
    params = agent.get_params()
    assert params["merge"] == "random" and params["initial_size"] == 3 and params["seed"] == 2
    assert repr(agent) == "TwoLevelMemory(n_obs=10, n_actions=4, merge='random', initial_size=3, seed=2)"
    assert TwoLevelMemory(**params).get_params() == params
    assert not hasattr(agent, "memory_")
    once = agent.fit(traj[:30]).history()
    twice = agent.fit(traj[:30]).history()   # starts over: the same result, not 60 episodes
    assert all(np.array_equal(once[k], twice[k], equal_nan=True) for k in once)
    whole = TwoLevelMemory(**params).fit(traj[:30]).history()
    split = TwoLevelMemory(**params).partial_fit(traj[:12]).partial_fit(traj[12:30]).history()
    assert all(np.array_equal(whole[k], split[k], equal_nan=True) for k in whole)
    with pytest.raises(ValueError, match="not a parameter"):
        agent.set_params(colour=3)
    with pytest.raises(ValueError, match="merge"):   # checked at the next fit
        agent.set_params(merge="kmeans").fit(traj[:2])
    deep = TwoLevelMemory(10, 4, merger=SFMerger()).set_params(merger__gamma=0.5)
    assert deep.merger.gamma == 0.5 and deep.get_params()["merger__gamma"] == 0.5


def test_merge_mode_registry_and_place_hook(world, monkeypatch):
    """A new mode plugs in as an object or with one catalogue entry; its place hook sees every step's state."""
    from hmmmerge import models
    from hmmmerge.merging import NoMerger

    _, traj = world
    seen = []

    class Placing(NoMerger):
        def __init__(self, initial_size=None, label="y"):
            super().__init__(initial_size)
            self.label = label

        def place(self, memory, clusters, states, rng):
            seen.append(states.copy())
            return False

    agent = TwoLevelMemory(10, 4, merger=Placing(label="x")).fit(traj[:20])
    assert agent.merger_.label == "x" and agent.merger_ is not agent.merger
    assert agent.get_params()["merger__label"] == "x" and agent.merge_ == "Placing"
    assert np.array_equal(np.concatenate(seen), agent.last_states_.ravel())
    monkeypatch.setitem(models.MERGERS, "toy", models.MergerEntry("toy", Placing, "a test mode"))
    seen.clear()
    by_name = TwoLevelMemory(10, 4, merge="toy").fit(traj[:20])
    assert by_name.merge_ == "toy" and by_name.merger_.label == "y"
    assert np.array_equal(np.concatenate(seen), by_name.last_states_.ravel())
    # without the hook and with the same partition-only sleep, the result is merge="none"
    ref = TwoLevelMemory(10, 4, merge="none").fit(traj[:20])
    assert np.array_equal(ref.clusters_.assignment, agent.clusters_.assignment)

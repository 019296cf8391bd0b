"""The agent's online step (``agent_steps``) filters the anchored and the pure level-2 belief once while they
are equal (they start alike at every episode start), and the online connection skips the entropy when a bound
from the largest mass already rules the connection out: every prediction, belief, connection and learned model
is the one of the plain step that filters both every move and always sums the entropy, bit for bit, for every
learner."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

import hmmmerge._agent_kernels as K
from hmmmerge import gridworld, random_walk
from hmmmerge._episodic_kernels import CURRENT, l1_observe
from hmmmerge.agent import TwoLevelMemory

SHARED = K.agent_steps  # the step under test (the lives below put a recording wrapper in its place)


@njit(cache=False)
def plain_connect_online(h, o, cluster_of, bel, em_ptr, u_connect, u_choose):
    """The online connection with the entropy always summed."""
    m = bel.size[0]
    entropy = 0.0
    for q in range(m):
        p = bel.p[bel.support[q]]
        if p > 0.0:
            entropy -= p * np.log(p)
    n_o = em_ptr[o + 1] - em_ptr[o]
    if n_o == 0:
        return False
    p_connect = 1.0 - np.exp(entropy) / n_o
    if p_connect <= 1e-12 or u_connect >= p_connect:
        return False
    acc = 0.0
    chosen = bel.support[m - 1]
    for q in range(m):
        acc += bel.p[bel.support[q]]
        if u_choose < acc:
            chosen = bel.support[q]
            break
    cluster_of[h] = chosen
    return True


@njit(cache=False)
def plain_agent_steps(steps, g0, g1, l1, l2, anchored, filtered, fo, scratch, out, online):
    """The step before the shared filter: both beliefs propagated and conditioned on every move."""
    k = l2.n_clusters
    for g in range(g0, g1):
        a = steps.actions[g]
        o = steps.obs[g]
        if a >= 0:
            h = l1.next_state[a, l1.scal[CURRENT]]
            out.l1[g] = l1.emission[h] if h >= 0 else -1
            out.first_order[g] = K._first_order_step(fo, a, o)
            if k > 0:
                mt, total = K._predict(anchored, a, l2, scratch)
                out.l2[g] = K._argmax_or_none(scratch.obs_dist, total)
                K._condition(anchored, mt, total, o, l2, scratch)
                mt, total = K._predict(filtered, a, l2, scratch)
                out.l2_filter[g] = K._argmax_or_none(scratch.obs_dist, total)
                K._condition(filtered, mt, total, o, l2, scratch)
                if filtered.size[0] == 0:
                    K._set_emitters(filtered, o, l2)
            else:
                out.l2[g] = -1
                out.l2_filter[g] = -1
        fo.prev[0] = o
        h1 = l1_observe(l1.next_state, l1.emission, l1.labels, l1.scal, a, o, steps.labels[g])
        out.state[g] = h1
        if k > 0:
            c = l2.cluster_of[h1]
            if c < 0 and online and a >= 0 and anchored.size[0] > 0:
                out.joined[g] = plain_connect_online(h1, o, l2.cluster_of, anchored, l2.em_ptr,
                                                 steps.uniforms[g, 0], steps.uniforms[g, 1])
            elif c >= 0:
                K._set_onehot(anchored, c)
            elif a < 0:
                K._set_emitters(anchored, o, l2)
            if a < 0:
                if c >= 0:
                    K._set_onehot(filtered, c)
                else:
                    K._set_emitters(filtered, o, l2)


def _life(kernel, monkeypatch, merge, env, start, episodes, length):
    """An agent's life with ``kernel`` as the step; after every chunk the beliefs are kept (copies)."""
    beliefs = []

    def step(steps, g0, g1, l1, l2, anchored, filtered, *rest):
        kernel(steps, g0, g1, l1, l2, anchored, filtered, *rest)
        beliefs.append(tuple(x.copy() for b in (anchored, filtered) for x in (b.p, b.support[:b.size[0]])))

    monkeypatch.setattr(K, "agent_steps", step)
    traj = random_walk(env, episodes, length, seed=3, start=start)
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge=merge, refresh_every=70, sleep_every=300, seed=5)
    agent.fit(traj[: episodes // 2]).partial_fit(traj[episodes // 2:])
    return agent, beliefs


@pytest.mark.parametrize("merge, env, start", [
    ("replay", gridworld(6, 6, 6, seed=1), "random"),
    ("replay", gridworld(6, 6, 6, seed=1, obs_noise=0.1, slip=0.05), None),
    ("fold", gridworld(6, 6, 6, seed=1), "random"),
    ("fold", gridworld(6, 6, 6, seed=1, obs_noise=0.05), None),
    ("sf", gridworld(5, 5, 5, seed=2), "random"),
])
def test_the_shared_filter_is_the_plain_step_bit_for_bit(monkeypatch, merge, env, start):
    ref, ref_beliefs = _life(plain_agent_steps, monkeypatch, merge, env, start, 60, 30)
    new, new_beliefs = _life(SHARED, monkeypatch, merge, env, start, 60, 30)
    for name in ref.last_predictions_:
        assert np.array_equal(ref.last_predictions_[name], new.last_predictions_[name]), name
    assert np.array_equal(ref.last_states_, new.last_states_)
    assert np.array_equal(ref.clusters_.assignment, new.clusters_.assignment)
    h_ref, h_new = ref.history(), new.history()
    assert h_ref.keys() == h_new.keys()
    assert all(np.array_equal(h_ref[key], h_new[key], equal_nan=True) for key in h_ref)
    assert len(ref_beliefs) == len(new_beliefs)
    for r, n in zip(ref_beliefs, new_beliefs):
        assert all(np.array_equal(x, y) for x, y in zip(r, n))
    # the shared path was taken: the two beliefs are equal after many chunks of these lives
    shared = [len(b[1]) for b in new_beliefs if np.array_equal(b[0], b[2]) and np.array_equal(b[1], b[3])]
    assert sum(n >= 1 for n in shared) > 0
    if merge == "replay":  # replay's emission floor keeps every cluster in the beliefs
        assert sum(n > 1 for n in shared) > 5


def test_beliefs_equal_only_bit_for_bit():
    b1, b2 = K.new_belief(4), K.new_belief(4)
    for b in (b1, b2):
        b.p[[2, 0]] = 0.25, 0.75
        b.support[:2] = 2, 0
        b.size[0] = 2
    assert K._same_belief(b1, b2)
    b2.p[0] = np.nextafter(0.75, 1.0)
    assert not K._same_belief(b1, b2)
    b2.p[0] = 0.75
    b2.support[:2] = 0, 2   # the same set in another order: another order of the next sums
    assert not K._same_belief(b1, b2)
    b2.size[0] = 1
    assert not K._same_belief(b1, b2)
    K._copy_belief(b1, b2)
    assert K._same_belief(b1, b2) and b2.p.tolist() == [0.75, 0.0, 0.25, 0.0]


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 60), st.integers(0, 8), st.floats(0.0, 6.0), st.integers(0, 2**32 - 1),
       st.sampled_from(["draw", "at p_connect", "ulp below", "ulp above", "zero", "tiny masses"]))
def test_the_connection_with_the_bound_is_the_plain_one(m, n_o, peak, seed, case):
    rng = np.random.default_rng(seed)
    k = m + 3
    p = rng.random(m) ** (1.0 + peak * 4)   # from flat to one cluster holding nearly all
    if case == "tiny masses":
        p[1:] *= 1e-200
    p /= p.sum()
    support = rng.permutation(k)[:m]
    bel = K.new_belief(k)
    bel.p[support], bel.support[:m], bel.size[0] = p, support, m
    em_ptr = np.array([0, n_o, n_o + 2], dtype=np.int64)
    entropy = 0.0
    for x in p:   # the plain kernel's sum, in its order
        entropy -= x * np.log(x) if x > 0 else 0.0
    exact = 1.0 - np.exp(entropy) / max(n_o, 1)
    u = {"draw": rng.random(), "at p_connect": exact, "ulp below": np.nextafter(exact, -np.inf),
         "ulp above": np.nextafter(exact, np.inf), "zero": 0.0, "tiny masses": rng.random()}[case]
    u = float(min(max(u, 0.0), np.nextafter(1.0, 0.0)))
    u_choose = rng.random()
    got, want = np.full(2, -1), np.full(2, -1)
    assert K.connect_online(1, 0, got, bel, em_ptr, u, u_choose) == \
        plain_connect_online(1, 0, want, bel, em_ptr, u, u_choose)
    assert got.tolist() == want.tolist()

"""Forward-pass speed: hmmmerge's numba filter vs hmmlearn and pgmpy, on the same data, in one run.

    python benchmarks/bench_forward.py            # full run (about a minute)
    python benchmarks/bench_forward.py --quick    # smaller pgmpy windows

1. A dense 300-state, one-action model, one 2,000-step sequence:
   ``ActionHMM.log_likelihood`` vs hmmlearn ``CategoricalHMM.score``
   (``implementation="scaling"`` and ``"log"``); log-likelihoods compared.
2. pgmpy exact inference on the same model unrolled as a factor graph.  Its
   probabilities are unscaled, so a 2,000-step window underflows (P ~ e^-4600);
   windows of W steps are timed and scaled linearly to 2,000 steps (a chain
   query is linear in W; the filter, one query per step, is quadratic and is
   scaled as such).  Reported separately: building the pgmpy model, one
   VariableElimination query (log-likelihood of the window), the full filter
   (posterior at every step, what our one pass returns), BeliefPropagation.
3. Level-2-like scoring: a random sparse 5,000-state model (4 successors per
   (state, action)) scores 100 fresh episodes of the paper's world.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def best_of(fn, repeat=5):
    times = []
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def dense_model(H, O, A, seed=0):
    from hmmmerge import ActionHMM

    rng = np.random.default_rng(seed)
    T = rng.random((A, H, H))
    T /= T.sum(axis=2, keepdims=True)
    E = rng.random((H, O))
    E /= E.sum(axis=1, keepdims=True)
    return ActionHMM(T, E, np.full(H, 1.0 / H))


def random_sparse_model(H, O, A, k, seed=0):
    import scipy.sparse as sp

    from hmmmerge import ActionHMM

    rng = np.random.default_rng(seed)
    mats = []
    for _ in range(A):
        cols = rng.integers(0, H, size=(H, k))
        w = rng.random((H, k)) + 0.1
        w /= w.sum(axis=1, keepdims=True)
        m = sp.csr_matrix((w.ravel(), (np.repeat(np.arange(H), k), cols.ravel())), shape=(H, H))
        mats.append(m)  # duplicate columns are summed: rows still sum to 1
    E = np.zeros((H, O))
    E[np.arange(H), np.arange(H) % O] = 1.0
    return ActionHMM(mats, E, np.full(H, 1.0 / H))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller pgmpy windows")
    args = ap.parse_args(argv)

    H, O, L = 300, 10, 2000
    hmm = dense_model(H, O, 1)
    rng = np.random.default_rng(1)
    obs = rng.integers(0, O, size=L)
    acts = np.zeros(L, dtype=np.int64)
    acts[0] = -1
    hmm.log_likelihood(obs, acts)  # load the numba kernel
    t_ours, ll = best_of(lambda: hmm.log_likelihood(obs, acts))
    t_filter, _ = best_of(lambda: hmm.run_filter(obs[None], acts[None], predictions=True, posteriors=True))
    hmm4 = dense_model(H, O, 4, seed=2)
    acts4 = rng.integers(0, 4, size=L)
    acts4[0] = -1
    t_ours4, _ = best_of(lambda: hmm4.log_likelihood(obs, acts4))

    rows = [("hmmmerge forward (log-lik)", t_ours, ll, None),
            ("hmmmerge filter + predictions + posteriors", t_filter, None, None),
            ("hmmmerge forward, 4 actions", t_ours4, None, None)]

    from hmmlearn.hmm import CategoricalHMM

    for impl in ("scaling", "log"):
        ref = CategoricalHMM(n_components=H, n_features=O, implementation=impl)
        ref.startprob_, ref.transmat_, ref.emissionprob_ = hmm.B, hmm.T[0], hmm.E
        ref.score(obs.reshape(-1, 1))
        t, l2 = best_of(lambda: ref.score(obs.reshape(-1, 1)), repeat=3)
        rows.append((f"hmmlearn CategoricalHMM.score ({impl})", t, l2, None))

    print(f"\n1. {H} states, {L} steps, one action (dense); best of several runs")
    print(f"{'method':<46} {'time s':>9} {'ratio':>8} {'|dLL|/|LL|':>11}")
    for name, t, l2, _ in rows:
        rel = "-" if l2 is None else f"{abs(l2 - ll) / abs(ll):.1e}"
        print(f"{name:<46} {t:>9.4f} {t / t_ours:>7.1f}x {rel:>11}")

    # ------------------------------------------------------------------ pgmpy
    from pgmpy.inference import BeliefPropagation, VariableElimination

    from hmmmerge.factor_graph import pgmpy_filter, to_factor_graph, to_markov_network

    windows = (25, 50) if args.quick else (25, 50, 100, 200)
    print(f"\n2. pgmpy on the same model, windows of W steps, scaled to {L} steps "
          f"(ours: {t_ours * 1e3:.1f} ms for {L} steps)")
    print(f"{'W':>4} {'build s':>8} {'VE LL s':>8} {'dLL':>9} {'-> 2000: build+VE s':>20} "
          f"{'ratio':>8} {'VE only':>8}")
    for W in windows:
        t0 = time.perf_counter()
        fg, ev = to_factor_graph(hmm, obs[:W])
        mm = to_markov_network(fg)
        ve = VariableElimination(mm)
        t_build = time.perf_counter() - t0
        t_q, phi = best_of(lambda: ve.query([f"H_{W - 1}"], evidence=ev, show_progress=False), repeat=3)
        dll = float(np.log(phi.values.sum())) - hmm.log_likelihood(obs[:W], acts[:W])
        scale = L / W
        total = (t_build + t_q) * scale
        print(f"{W:>4} {t_build:>8.3f} {t_q:>8.4f} {dll:>9.1e} {total:>20.2f} {total / t_ours:>7.0f}x "
              f"{t_q * scale / t_ours:>7.1f}x")

    print(f"\n   the whole filter (posterior at every step: one VE query per step, cost ~ W^2), "
          f"vs our filter with posteriors ({t_filter * 1e3:.1f} ms)")
    for W in (10, 25) if args.quick else (10, 25, 50):
        fg, ev = to_factor_graph(hmm, obs[:W])
        t0 = time.perf_counter()
        llp, post = pgmpy_filter(fg, ev, method="ve")
        t = time.perf_counter() - t0
        err = np.abs(post - hmm.filter(obs[:W], acts[:W])).max()
        est = t * (L / W) ** 2
        print(f"   W={W:>3}: {t:7.2f} s, max |posterior diff| {err:.1e}; scaled to {L} steps ~{est:,.0f} s "
              f"= {est / t_filter:,.0f}x ours")

    W = 10
    fg, ev = to_factor_graph(hmm, obs[:W])
    t0 = time.perf_counter()
    bp = BeliefPropagation(to_markov_network(fg))
    bp.calibrate()
    t_cal = time.perf_counter() - t0
    t0 = time.perf_counter()
    q = bp.query([f"H_{W - 1}"], evidence=ev, show_progress=False)
    t_bpq = time.perf_counter() - t0
    err = np.abs(np.asarray(q.values) - hmm.filter(obs[:W], acts[:W])[-1]).max()
    est = (t_cal + t_bpq) * L / W
    print(f"   BeliefPropagation, W={W}: calibrate {t_cal:.2f} s + one query {t_bpq:.2f} s "
          f"(posterior diff {err:.1e}); scaled linearly to {L} steps ~{est:.0f} s = {est / t_ours:,.0f}x ours")

    # ------------------------------------------------------------------ level-2-like scoring
    from hmmmerge import gridworld
    from hmmmerge.evaluate import evaluate_model, surprise

    env = gridworld(10, 10, n_colours=10, seed=0)
    t0 = time.perf_counter()
    big = random_sparse_model(5000, env.n_obs, env.n_actions, 4, seed=3)
    t_make = time.perf_counter() - t0
    evaluate_model(env, big, n_episodes=2, episode_length=5)  # load the sparse kernel
    t_eval, r = best_of(lambda: evaluate_model(env, big, n_episodes=100, seed=5, smoothing=1e-3), repeat=3)
    t_sur, s = best_of(lambda: surprise(env, big, n_episodes=100, seed=5, smoothing=1e-3), repeat=3)
    print(f"\n3. random sparse model, 5,000 states, 4 successors per (state, action), built in {t_make:.2f} s")
    print(f"   evaluate_model, 100 fresh episodes x 51 steps (with predictions/accuracy): {t_eval:.3f} s "
          f"(target < 2 s); accuracy {r.accuracy:.3f}, surprise {r.surprise:.3f} nats/step (eps 1e-3)")
    print(f"   surprise() only: {t_sur:.3f} s; {s.zero_prob_steps} zero-probability steps of {s.n_scored_steps}")


if __name__ == "__main__":
    main()

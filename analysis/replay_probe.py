"""Where replay misses on the probe worlds of ``bench_unseen_worlds.py --set probe``: one life, measured.

One replay life on the benchmark's own walk (world, condition, seed as in the benchmark: the same
world, training and held-out episodes), fed in 100-episode blocks as the benchmark does, and at the
checkpoints of ``--checkpoints`` (episodes; beyond the benchmark's 1,000 the walk goes on with
episodes of the same process from another seed):

* held-out accuracy of level 2 (the lumped model the agent predicts with) and of the unlumped clone
  HMM of the same merger (``T``, ``B``, emissions with the learned rate of random views): their gap
  is what the lumping costs;
* C, the clones, the learned slip share and rate of random views, the fit CPU seconds so far;
* with ``--structure``, at the end: the clones that hold two places or more.  A clone whose next view
  under some action it took is not one view with probability >= 0.9 stands for more than one place
  of a deterministic world (``mixed``); their share of the visits, and the share of their incoming
  counts that come from other mixed clones (``chained``: against the share of all incoming counts
  that go to mixed clones) -- chained merges are regions of places merged together, which a split
  by the way in (the previous clone, itself merged) cannot part.

``--params`` sets :class:`~hmmmerge.replay.ReplayMerger` parameters (JSON, e.g. ``{"n_iter": 8}``).
``--alloc-by-visits N`` gives each view clones in proportion to its visits in the first ``N`` training
episodes (at least 1, at most ``--alloc-cap``; the total is the default's), instead of the same number
to every view: the measurement (session 9) that led to the learner's ``ReplayMerger(alloc="visits")``
(session 10), made by rewriting the merger's clone layout when it is built; the learner's own allocation at
the first sleep is then skipped.

Session 11 (BENCHMARKS.md, "Few-colour worlds under slips, session 11"): ``--refit N`` runs N batch-EM
iterations (no slip mixture) from the merger's final clone HMM on every training episode so far (or the last
``--refit-last`` ones) and scores it: forgetting against a local optimum; ``--deep EPISODES`` makes the
experiment that led to the learner's deep sleeps (batch EM over the buffer after those episodes, the kept
counts replaced, ``--deep-iter`` iterations); ``--set`` sets class attributes or module constants (JSON);
``--agent-seed`` the learner's seed (the benchmark's is 1), for means over learner seeds.

    python analysis/replay_probe.py torus-9x9-c3 clean 0 [--params '{"n_iter": 8}'] [--checkpoints 1000,3000]
        [--structure] [--alloc-by-visits 10 --alloc-cap 30] [--refit 50 [--refit-last 200]] [--agent-seed 2]
        [--deep 100,200,300 --deep-iter 20] [--set '{"NOISE_AFTER": 100000}']

Prints one JSON line per checkpoint.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _bench():
    spec = importlib.util.spec_from_file_location("bench_unseen_worlds",
                                                  os.path.join(ROOT, "benchmarks", "bench_unseen_worlds.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def clone_hmm(m):
    """The merger's unlumped clone HMM: ``T``, ``B`` and each clone's view (with the rate of random views)."""
    from hmmmerge.hmm import ActionHMM

    E = np.full((m._H, m._K), m._noise / m._K)
    E[np.arange(m._H), m._colour] += 1.0 - m._noise
    return ActionHMM(m._T, E, m._B / m._B.sum())


def structure(m) -> dict:
    """Mixed clones (next view not determined by an action taken), their visits and how they chain."""
    w = m._weights()
    nv = np.zeros((m._A, m._H, m._K))
    for v in range(m._K):
        nv[:, :, v] = m._T[:, :, m._colour == v].sum(axis=2)
    live = w > 0.05
    taken = m._S.sum(axis=2) > 1e-3 * w[None, :]
    mixed = ((nv.max(axis=2) < 0.9) & taken).any(axis=0) & live
    into = m._S.sum(axis=0)
    return {"live_clones": int(live.sum()), "mixed_clones": int(mixed.sum()),
            "visits_per_episode_mixed": round(float(w[mixed].sum()), 2),
            "visits_per_episode_all": round(float(w[live].sum()), 2),
            "chained": round(float(into[np.ix_(mixed, mixed)].sum() / max(into[:, mixed].sum(), 1e-12)), 3),
            "into_mixed": round(float(into[:, mixed].sum() / max(into.sum(), 1e-12)), 3)}


def refit(m, train, more, episodes: int, n_iter: int, score, last: int = 0) -> dict:
    """Batch EM (``CloneHMM``'s iterations, no slip mixture) on all ``episodes`` training episodes seen, from the
    merger's clone HMM: its held-out tells forgetting (stepwise EM lost what the data holds) from a local
    optimum (batch EM from the same start stays put)."""
    from hmmmerge.baselines import _em_kernels as K
    from hmmmerge.baselines.em import _Data, _run_em
    from hmmmerge.hmm import ActionHMM

    parts = [train] if more is None else [train, more]
    L = parts[0].obs.shape[1]
    lo = (episodes - last) * L if last else 0
    obs = np.concatenate([p.obs.ravel() for p in parts])[lo:episodes * L]
    acts = np.concatenate([p.actions.ravel() for p in parts])[lo:episodes * L]
    data = _Data(K, obs, acts, m._sizes)
    run = _run_em(K, data, m._T.copy(), m._B / m._B.sum(), n_iter, 1e-3, 0.0)
    E = np.zeros((m._H, m._K))
    E[np.arange(m._H), m._colour] = 1.0
    return {"refit_iter": n_iter, "refit_last": last, "refit": round(score(ActionHMM(run["T"], E, run["B"])), 4),
            "refit_ll_gain_per_step": round((run["lls"][-1] - run["lls"][0]) / len(obs), 4)}


def deep_sleep(m, n_iter: int) -> None:
    """Experiment: batch EM over every buffered episode from the current model, ``n_iter`` iterations, the
    kept counts replaced by the last one's (per episode)."""
    from hmmmerge._replay_kernels import absorb_counts

    eps = m._episodes
    obs = np.concatenate([e[0] for e in eps])
    acts = np.concatenate([e[1] for e in eps])
    m._add_pairs(obs, acts)
    d = m._data(obs, acts)
    on = np.ones(len(m._pairs), dtype=np.bool_)
    n = len(eps)
    for _ in range(n_iter):
        ll, C, Bc = m._expected_counts(d)
        m._S[:] = 0.0
        m._Z[:] = 0.0
        m._g = 1.0
        slipped = absorb_counts(m._S, C, m._Q, m._Z, m._pairs, on, m._starts, m._sizes, m._slip, 1.0 / n, 0.0)
        m._Sb[:] = Bc / n
        m._Sslip = slipped / n
        m._m_step()
    m._var = 1.0 / n


def allocate_by_visits(obs, n_obs: int, cap: int | None):
    """Patch :class:`ReplayMerger` so that its clones per view follow the view counts of ``obs`` (same total)."""
    from hmmmerge.replay import ReplayMerger

    visits = np.bincount(np.asarray(obs).ravel(), minlength=n_obs).astype(float)
    init = ReplayMerger._init
    ReplayMerger._allocate = lambda self, obs, memory, sample=False: None   # this layout, not the learner's own (alloc)

    def _init(self, n, n_actions):
        init(self, n, n_actions)
        sizes = np.maximum(1, np.floor(visits / visits.sum() * self._H)).astype(np.int64)
        if cap:
            sizes = np.minimum(sizes, cap)
        self._sizes = sizes
        self._starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self._H = int(sizes.sum())
        self._colour = np.repeat(np.arange(self._K), sizes)
        self._block = np.arange(self._H, dtype=np.int64)
        self._cluster_of = np.full(self._H, -1, dtype=np.int64)

    ReplayMerger._init = _init


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("world")
    parser.add_argument("condition")
    parser.add_argument("seed", type=int)
    parser.add_argument("--params", default="{}", help="ReplayMerger parameters, JSON")
    parser.add_argument("--checkpoints", default="1000", help="episodes at which to measure (multiples of 100)")
    parser.add_argument("--structure", action="store_true", help="the mixed clones at the end")
    parser.add_argument("--alloc-by-visits", type=int, default=0, metavar="N")
    parser.add_argument("--alloc-cap", type=int, default=0)
    parser.add_argument("--refit", type=int, default=0, metavar="N",
                        help="at the last checkpoint, N batch EM iterations on every training episode so far, "
                             "started from the merger's clone HMM (forgetting vs local optimum)")
    parser.add_argument("--refit-last", type=int, default=0, metavar="N", help="--refit on the last N episodes only")
    parser.add_argument("--agent-seed", type=int, default=1,
                        help="last entry of the agent's seed [seed, seed, N] (1: the benchmark's)")
    parser.add_argument("--deep", default="", help="episodes after which a deep sleep is made (experiment)")
    parser.add_argument("--deep-iter", type=int, default=20)
    parser.add_argument("--set", default="{}", help="ReplayMerger class attributes to set, JSON (experiments)")
    args = parser.parse_args(argv)
    from hmmmerge import random_walk
    from hmmmerge.agent import TwoLevelMemory
    from hmmmerge.evaluate import evaluate_model
    from hmmmerge.replay import ReplayMerger

    bench = _bench()
    checkpoints = sorted(int(x) for x in args.checkpoints.split(","))
    if any(c <= 0 or c % 100 for c in checkpoints):
        parser.error("--checkpoints must be positive multiples of 100")
    minigrid = bench.PROBE_WORLDS.get(args.world, ("",))[0] == "minigrid"
    config = {"world": args.world, "condition": args.condition, "colouring": args.seed, "seed": args.seed,
              "episodes": 1000, "episode_length": bench.MINIGRID_EPISODE_LENGTH if minigrid else 50,
              "eval_episodes": 100}
    env = bench.build_world(args.world, args.seed, args.condition)
    train, fresh = bench.walks(env, config)
    start = bench.CONDITIONS[args.condition]["start"]
    more = (random_walk(env, checkpoints[-1] - 1000, config["episode_length"], seed=[args.seed, 999], start=start)
            if checkpoints[-1] > 1000 else None)
    if args.alloc_by_visits:
        allocate_by_visits(train.obs[:args.alloc_by_visits], env.n_obs, args.alloc_cap)
    params = json.loads(args.params)
    import hmmmerge.replay as replay_module

    for k, v in json.loads(args.set).items():   # class attributes, or module constants (upper case)
        setattr(ReplayMerger if hasattr(ReplayMerger, k) else replay_module, k, v)
    agent = TwoLevelMemory(env.n_obs, env.n_actions, merge="replay", seed=[args.seed, args.seed, args.agent_seed],
                           **({"merger": ReplayMerger(**params)} if params else {}))
    cpu = 0.0
    for b in range(0, checkpoints[-1], 100):
        block = train[b:b + 100] if b < 1000 else more[b - 1000:b - 900]
        c = time.process_time()
        agent.partial_fit(block)
        if args.deep and b + 100 in [int(x) for x in args.deep.split(",")]:
            deep_sleep(agent.merger_, args.deep_iter)
        cpu += time.process_time() - c
        if b + 100 not in checkpoints:
            continue
        m = agent.merger_
        score = lambda model: evaluate_model(env, model, trajectories=fresh, smoothing=1e-3,  # noqa: E731
                                             start=start).accuracy
        out = {"world": args.world, "condition": args.condition, "seed": args.seed, "agent_seed": args.agent_seed, "params": params, "set": json.loads(args.set),
               "alloc_by_visits": args.alloc_by_visits, "alloc_cap": args.alloc_cap, "episodes": b + 100,
               "level2": round(score(m.level2_hmm(agent.memory_, agent.clusters_)), 4),
               "clone_hmm": round(score(clone_hmm(m)), 4), "C": int(agent.n_clusters_), "clones": int(m._H),
               "max_clones_per_view": int(m._sizes.max()), "slip": round(float(m._slip), 4),
               "noise": round(float(m._noise), 4), "fit_cpu_s": round(cpu, 2)}
        if args.structure and b + 100 == checkpoints[-1]:
            out.update(structure(m))
        if args.refit and b + 100 == checkpoints[-1]:
            out.update(refit(m, train, more, b + 100, args.refit, score, args.refit_last))
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

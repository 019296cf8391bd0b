"""The walks and runs behind bench_fold and fig:beyond_paper: noise, random starts and slips do what they say."""

from __future__ import annotations

import numpy as np

from hmmmerge.reproduce.beyond import bench_walks, bench_world, offline_run, random_graph


def _cfg(**kw):
    return dict({"world": "grid", "colouring": 0, "seed": 3, "episodes": 400, "eval_episodes": 50}, **kw)


def test_clean_walk_follows_the_world():
    env = bench_world(_cfg())
    train, fresh = bench_walks(env, _cfg())
    assert (train.states[:, 0] == env.start).all()
    assert (train.obs == env.obs[train.states]).all()
    assert (train.states[:, 1:] == env.next_state[train.actions[:, 1:], train.states[:, :-1]]).all()
    again, _ = bench_walks(env, _cfg())
    assert (again.obs == train.obs).all()  # reproducible from the configuration
    assert not np.array_equal(fresh.obs[:10], train.obs[:10])


def test_noise_rate_random_start_and_slips():
    env = bench_world(_cfg())
    noisy, _ = bench_walks(env, _cfg(noise=0.2))
    wrong = (noisy.obs != env.obs[noisy.states]).mean()
    assert abs(wrong - 0.2 * (1 - 1 / env.n_obs)) < 0.01  # a replaced colour may be the true one
    starts, _ = bench_walks(env, _cfg(start="random"))
    assert len(np.unique(starts.states[:, 0])) > 90
    slip, _ = bench_walks(env, _cfg(slip=0.2))
    meant = env.next_state[slip.actions[:, 1:], slip.states[:, :-1]]
    moved_otherwise = (slip.states[:, 1:] != meant).mean()
    assert 0.05 < moved_otherwise < 0.2  # a slip to the chosen action or to a wall-blocked twin is invisible


def test_rpni_refuses_noisy_data_in_a_run():
    r = offline_run(_cfg(noise=0.05, model="rpni", episodes=30, eval_episodes=5))
    assert int(r["refused"]) == 1 and "deterministic" in str(r["message"])


def test_random_graph_is_a_world():
    env = random_graph(60, 3, 10, seed=0)
    assert env.n_states == 60 and env.n_actions == 3 and np.bincount(env.obs).tolist() == [6] * 10

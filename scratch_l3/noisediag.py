import sys, os, numpy as np
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.getcwd()+'/benchmarks')
import bench_world_as_it_is as Bw
from hmmmerge.agent import TwoLevelMemory
from hmmmerge._replay_kernels import block_argmax
w, cond, col, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
cfg = dict(world=w, condition=cond, colouring=col, seed=seed, learner='replay', episodes=1000, episode_length=50, eval_episodes=100)
env = Bw.build_world(w, col, cond)
clean_env = Bw.build_world(w, col, 'clean')
train, fresh = Bw.walks(env, cfg)
a = TwoLevelMemory(env.n_obs, env.n_actions, merge='replay', seed=[col, seed, 1])
a.partial_fit(train)
m = a.merger_
true_col = np.array([clean_env.obs_of(s) if hasattr(clean_env,'obs_of') else 0 for s in range(env.n_states)]) if False else None
# true colour of each state from the clean env's emission
E = clean_env.emission

tc = np.asarray(E).argmax(1)
last = train[900:1000]
obs = last.obs.ravel(); acts = last.actions.ravel(); st = last.states.ravel()
noisy = obs != tc[st]
d = m._data(obs, acts)
views, n = m._views_read_as_noise(d, obs, acts)
rep = np.zeros(len(obs), bool) if views is None else views != obs
print('noise rate est', m._noise, 'true noisy share', noisy.mean(), 'repaired', rep.sum(), 'true noisy', noisy.sum(), 'hits', (rep & noisy).sum(), 'correctly restored', ((views == tc[st]) & noisy).sum() if views is not None else 0)
post = d.posteriors(m._T, m._B)
cl = m._starts[obs] + block_argmax(post, d.off)
tab = np.zeros((m._H, env.n_states)); np.add.at(tab, (cl[~noisy], st[~noisy]), 1)
used = tab.sum(1) > 0
print('clones used', used.sum(), 'mixed', sum((tab[h] > 0.1*tab[h].sum()).sum() > 1 for h in np.flatnonzero(used)), 'clusters', a.n_clusters_)
r = Bw._score(env, m.level2_hmm(a.memory_, a.clusters_), fresh, None)
print(r)

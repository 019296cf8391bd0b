# G statistics of pure vs mixed clones over a life (truth from the posterior decode of the batch)
import sys, os, numpy as np
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.getcwd()+'/benchmarks')
import bench_world_as_it_is as Bw
from hmmmerge.agent import TwoLevelMemory
import hmmmerge.replay as RP
orig = RP.ReplayMerger._split
rows = []
def patched(self, d):
    n = orig(self, d)
    return n
w, cond, col, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
cfg = dict(world=w, condition=cond, colouring=col, seed=seed, learner='replay', episodes=1000, episode_length=50, eval_episodes=100)
env = Bw.build_world(w, col, cond)
train, fresh = Bw.walks(env, cfg)
os.environ['L3_THR'] = '1e9'   # no split: only look
a = TwoLevelMemory(env.n_obs, env.n_actions, merge='replay', seed=[col, seed, 1])
from hmmmerge._replay_kernels import block_argmax
for b in range(0, 1000, 50):
    a.partial_fit(train[b:b+50])
    m = a.merger_
    last = train[max(0,b-50):b+50]
    obs = last.obs.ravel(); acts = last.actions.ravel(); st = last.states.ravel()
    d = m._data(obs, acts); post = d.posteriors(m._T, m._B)
    cl = m._starts[obs] + block_argmax(post, d.off)
    tab = np.zeros((m._H, env.n_states)); np.add.at(tab, (cl, st), 1)
    for h, G in m._split_G.items():
        if tab[h].sum() < 10: continue
        mixed = (tab[h] > 0.1 * tab[h].sum()).sum() > 1
        rows.append((b, mixed, G, m._split_n[h]))
rows = np.array(rows)
for mixed in (0, 1):
    r = rows[rows[:, 1] == mixed]
    print('mixed' if mixed else 'pure', len(r), 'G quantiles', np.round(np.quantile(r[:, 2], [.5, .9, .99, 1]), 1).tolist() if len(r) else '')
    # G relative to df
    if len(r):
        z = r[:, 2] - 2 * r[:, 3]
        print('   G-2df quantiles', np.round(np.quantile(z, [.5, .9, .99, 1]), 1).tolist(), ' df median', np.median(r[:, 3]))

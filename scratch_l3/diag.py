import sys, os, numpy as np
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.getcwd()+'/benchmarks')
import bench_world_as_it_is as Bw
from hmmmerge.agent import TwoLevelMemory
w, cond, col, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
cfg = dict(world=w, condition=cond, colouring=col, seed=seed, learner='replay', episodes=1000, episode_length=50, eval_episodes=100)
env = Bw.build_world(w, col, cond)
train, fresh = Bw.walks(env, cfg)
a = TwoLevelMemory(env.n_obs, env.n_actions, merge='replay', seed=[col, seed, 1])
for b in range(0, 1000, 100):
    a.partial_fit(train[b:b+100])
    m = a.merger_
    last = train[max(0,b-100):b+100]
    obs = last.obs.ravel(); acts = last.actions.ravel(); st = last.states.ravel()
    d = m._data(obs, acts)
    post = d.posteriors(m._T, m._B)
    from hmmmerge._replay_kernels import block_argmax
    cl = m._starts[obs] + block_argmax(post, d.off)
    S = env.n_states
    tab = np.zeros((m._H, S)); np.add.at(tab, (cl, st), 1)
    # clones per state and states per clone
    S = env.n_states
    tab = np.zeros((m._H, S)); np.add.at(tab, (cl, st), 1)
    used = tab.sum(1) > 0
    mixed = [(h, np.flatnonzero(tab[h] > 0.05*tab[h].sum()).tolist()) for h in np.flatnonzero(used)]
    nmixed = sum(len(s) > 1 for h, s in mixed)
    # states whose main clone is shared
    main = tab.argmax(0)
    lg = getattr(m, "_split_log", [])
    print('  splits:', [(h, round(g), j, np.flatnonzero(tab[h] > 0.05*tab[h].sum()).tolist()) for h, g, j in lg])
    wv = m._weights(); 
    print('  weights view0:', np.round(np.sort(wv[:m._sizes[0]])[::-1], 2).tolist())
    print("ep", b+100, 'clones used', used.sum(), 'mixed clones', nmixed, 'states', S, 'distinct main clones', len(set(main[tab.sum(0)>0].tolist())), 'slip', round(m._slip,4), 'noise', round(m._noise,4), 'blocks', m._block.max()+1, 'clusters', a.n_clusters_)
print([ (h, s, round(m._split_G.get(h, -1)), m._split_n.get(h,-1)) for h, s in mixed if len(s) > 1])
print('pure G', sorted([round(m._split_G.get(h, -1)) for h, s in mixed if len(s) == 1]))
r = Bw._score(env, m.level2_hmm(a.memory_, a.clusters_), fresh, Bw.CONDITIONS[cond]['start'])
print(r)

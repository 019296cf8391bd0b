"""Scratch: run replay on a set of (world, condition, colouring, seed) and compare with stored EM/oracle."""
import sys, json, glob, time, os, collections
sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), 'benchmarks'))
import bench_world_as_it_is as B
from concurrent.futures import ProcessPoolExecutor

SETS = {
 'cscg': [('cscg-room', c, i, i) for c in ['clean','slip-0.05','slip-0.10','noise-0.05'] for i in range(3)],
 'paper': [('paper-grid','clean',0,1),('paper-grid','clean',2,2),('paper-grid','clean',1,0),('paper-grid','noise-0.05',2,1),('paper-grid','noise-0.05',2,0)],
 'maze': [('maze','slip-0.10',1,1),('maze','slip-0.05',2,2),('maze','slip-0.05',1,1)],
 'fr': [('fourrooms-3x3','clean',0,1),('fourrooms-3x3','clean',0,0)],
 'guard': [('torus','clean',0,0),('two-rooms','clean',1,1),('maze','clean',2,2),('paper-grid','slip-0.05',2,2),('random-graph','noise-0.05',0,0),('torus','noise-0.05',1,1)],
}
def ref():
    R = collections.defaultdict(dict)
    for f in glob.glob('/work/bench_out/world_as_it_is/runs/*.json'):
        r = json.load(open(f)); c = r['config']
        if c.get('episodes') != 1000: continue
        R[(c['world'], c['condition'], c['colouring'], c['seed'])][c['learner']] = r
    return R
def one(k):
    w, cond, col, seed = k
    cfg = dict(world=w, condition=cond, colouring=col, seed=seed, learner='replay', episodes=1000,
               episode_length=100 if w.startswith('fourrooms') else 50, eval_episodes=100)
    os.environ['NUMBA_NUM_THREADS'] = '1'
    r = B.run_one(cfg)
    return k, r
if __name__ == '__main__':
    names = sys.argv[1].split(',')
    keys = [k for n in names for k in SETS[n]]
    R = ref()
    tot = collections.defaultdict(list)
    with ProcessPoolExecutor(int(os.environ.get('J', 2))) as ex:
        for k, r in ex.map(one, keys):
            d = R[k]; em = d['em']['heldout_accuracy']; old = d['replay']['heldout_accuracy']
            h = r['heldout_accuracy']; o = r['oracle_accuracy']
            print('%-14s %-11s %d %d  new %.3f old %.3f (%+.3f)  dEM %+.3f dOr %+.3f  cpu %.2f (old %.2f) l/2 %.2f' % (
                *k, h, old, h - old, h - em, h - o, r['fit_cpu_s'], d['replay']['fit_cpu_s'],
                r['block_cpu_s'][-1] / r['block_cpu_s'][1]), flush=True)
            tot['d'].append(h - old)
    import numpy as np
    print('mean change %+.4f' % np.mean(tot['d']))

"""Scratch: run replay on a set of (world, condition, colouring, seed) and compare with stored EM/oracle."""
import numpy as np
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
    R = ref()
    SETS['all'] = sorted([k for k in R if 'replay' in R[k] and k[0] != 'fourrooms-7x7'], key=lambda k: (k[0] != 'paper-grid', k))
    SETS['focus'] = SETS['cscg'] + [k for k in SETS['all'] if k[0] == 'paper-grid' and k[1] in ('clean', 'noise-0.05')] + [k for k in SETS['all'] if k[0] == 'maze' and k[1].startswith('slip')]
    SETS['pc'] = [k for k in SETS['all'] if k[0] == 'paper-grid' and k[1] in ('clean', 'noise-0.05')]
    keys = [k for n in names for k in SETS[n]]
    recs = []
    tot = collections.defaultdict(list)
    with ProcessPoolExecutor(int(os.environ.get('J', 2))) as ex:
        for k, r in ex.map(one, keys):
            d = R[k]; em = d['em']['heldout_accuracy']; old = d['replay']['heldout_accuracy']
            h = r['heldout_accuracy']; o = r['oracle_accuracy']
            print('%-14s %-11s %d %d  new %.3f old %.3f (%+.3f)  dEM %+.3f dOr %+.3f  cpu %.2f (old %.2f) l/2 %.2f' % (
                *k, h, old, h - old, h - em, h - o, r['fit_cpu_s'], d['replay']['fit_cpu_s'],
                r['block_cpu_s'][-1] / r['block_cpu_s'][1]), flush=True)
            tot['d'].append(h - old)
            rec = dict(r, status='ok', config=dict(world=k[0], condition=k[1], colouring=k[2], seed=k[3], episodes=1000))
            recs.append((k, rec, B.run_meets(rec, d['em']), B.run_meets(d['replay'], d['em'])))
    out = os.environ.get('OUT')
    if out:
        json.dump([(k, r) for k, r, *_ in recs], open(out, 'w'))
    groups = collections.defaultdict(list)
    for k, rec, m, mold in recs:
        groups[(k[0], k[1])].append((k, rec, m, mold))
    print('--- per cell: met new (old), worst dEM / dOr, max cpu')
    for g, xs in sorted(groups.items()):
        dem = min(x[1]['heldout_accuracy'] - R[x[0]]['em']['heldout_accuracy'] for x in xs)
        dor = min(x[1]['heldout_accuracy'] - x[1]['oracle_accuracy'] for x in xs)
        print('%-14s %-11s acc %s (%s) cost %s  worst %+.3f / %+.3f  mean %.3f  cpu %.2f' % (*g, all(x[2][0] for x in xs), all(x[3][0] for x in xs), all(x[2][1] for x in xs), dem, dor, np.mean([x[1]['heldout_accuracy'] for x in xs]), max(x[1]['fit_cpu_s'] for x in xs)))
    print('mean change %+.4f' % np.mean(tot['d']))

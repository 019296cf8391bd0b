"""fig:sf_gw_acc -- level-2 accuracy learning curves: {random, sf, no merge} x size {1, 10, 100}, plus first order.

Runs (cached and resumable under OUT/runs/, shared with `hmmmerge reproduce`) and writes
OUT/sf_gw_acc.png and OUT/sf_gw_acc.csv:

    python analysis/sf_gw_acc.py --out DIR [--quick] [--executor local|dask://HOST:PORT]
"""

import sys

from hmmmerge.reproduce import figure_main

if __name__ == "__main__":
    sys.exit(figure_main("sf_gw_acc"))

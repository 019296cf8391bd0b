"""fig:sf_gw_n_clusters -- number of clusters over episodes: {random, sf, no merge} x size {1, 10, 100}.

Runs (cached and resumable under OUT/runs/, shared with `hmmmerge reproduce`) and writes
OUT/sf_gw_n_clusters.png and OUT/sf_gw_n_clusters.csv:

    python analysis/sf_gw_n_clusters.py --out DIR [--quick] [--executor local|dask://HOST:PORT]
"""

import sys

from hmmmerge.reproduce import figure_main

if __name__ == "__main__":
    sys.exit(figure_main("sf_gw_n_clusters"))

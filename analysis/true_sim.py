"""fig:true_sim -- similarity exp(-||SF_episodic - SF_true||) vs cluster size and purity (Section 3.1).

Runs (cached and resumable under OUT/runs/, shared with `hmmmerge reproduce`) and writes
OUT/true_sim.png and OUT/true_sim.csv:

    python analysis/true_sim.py --out DIR [--quick] [--executor local|dask://HOST:PORT]
"""

import sys

from hmmmerge.reproduce import figure_main

if __name__ == "__main__":
    sys.exit(figure_main("true_sim"))

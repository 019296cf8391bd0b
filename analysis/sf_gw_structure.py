"""fig:sf_gw_structure -- position-to-position transition matrices of level 2 (size 10) and the ground truth.

Runs (cached and resumable under OUT/runs/, shared with `hmmmerge reproduce`) and writes
OUT/sf_gw_structure.png and OUT/sf_gw_structure.csv:

    python analysis/sf_gw_structure.py --out DIR [--quick] [--executor local|dask://HOST:PORT]
"""

import sys

from hmmmerge.reproduce import figure_main

if __name__ == "__main__":
    sys.exit(figure_main("sf_gw_structure"))

"""fig:size_pos_acc -- SF merge accuracy per grid position for three maps (colour numbers drawn in the cells).

Runs (cached and resumable under OUT/runs/, shared with `hmmmerge reproduce`) and writes
OUT/size_pos_acc.png and OUT/size_pos_acc.csv:

    python analysis/size_pos_acc.py --out DIR [--quick] [--executor local|dask://HOST:PORT]
"""

import sys

from hmmmerge.reproduce import figure_main

if __name__ == "__main__":
    sys.exit(figure_main("size_pos_acc"))

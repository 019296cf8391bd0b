"""fig:size_purity_merge_acc -- SF merge accuracy (probe / candidate classification among same-colour clusters) vs cluster size and purity.

Runs (cached and resumable under OUT/runs/, shared with `hmmmerge reproduce`) and writes
OUT/size_purity_merge_acc.png and OUT/size_purity_merge_acc.csv:

    python analysis/size_purity_merge_acc.py --out DIR [--quick] [--executor local|dask://HOST:PORT]
"""

import sys

from hmmmerge.reproduce import figure_main

if __name__ == "__main__":
    sys.exit(figure_main("size_purity_merge_acc"))

"""fig:purity_random -- purity of random partitions vs cluster size and number of clones (simulated, and the exact law).

Runs (cached and resumable under OUT/runs/, shared with `hmmmerge reproduce`) and writes
OUT/purity_random.png and OUT/purity_random.csv:

    python analysis/purity_random.py --out DIR [--quick] [--executor local|dask://HOST:PORT]
"""

import sys

from hmmmerge.reproduce import figure_main

if __name__ == "__main__":
    sys.exit(figure_main("purity_random"))

"""fig:beyond_paper -- beyond the paper: online accuracy of fold, sf and random merges, the context baseline
as an online learner, and EM's held-out level, on the paper's 10x10 world.

Runs (cached and resumable under OUT/runs/beyond-*, shared with `hmmmerge reproduce`) and writes
OUT/beyond_paper.png and OUT/beyond_paper.csv:

    python analysis/beyond_paper.py --out DIR [--quick] [--executor local|dask://HOST:PORT]
"""

import sys

from hmmmerge.reproduce import figure_main

if __name__ == "__main__":
    sys.exit(figure_main("beyond_paper"))

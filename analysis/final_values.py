"""Final values at episode 1,000 (smoothed mean over runs) next to the paper's numbers, with the difference.

Runs (cached and resumable under OUT/runs/, shared with `hmmmerge reproduce`) and writes
OUT/final_values.csv and OUT/final_values.md:

    python analysis/final_values.py --out DIR [--quick] [--executor local|dask://HOST:PORT]
"""

import sys

from hmmmerge.reproduce import figure_main

if __name__ == "__main__":
    sys.exit(figure_main("final_values"))

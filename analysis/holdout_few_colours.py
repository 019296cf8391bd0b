"""Hold-out check of `replay` on worlds of 2-3 colours that no benchmark set uses: the same as
``analysis/holdout_worlds.py --set few`` (kept so that session 13's command still runs).

    PYTHONPATH=$PWD python analysis/holdout_few_colours.py OUT.jsonl --learners oracle,replay,em --seeds 0,1
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from holdout_worlds import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main(["--set", "few", *sys.argv[1:]]))

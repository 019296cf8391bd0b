"""Start-up cost: ``import hmmmerge`` and ``hmmmerge --help``, beside their peers, in fresh processes.

    python benchmarks/bench_import.py              # 15 rounds (about half a minute)
    python benchmarks/bench_import.py --rounds 5
    python benchmarks/bench_import.py --before /tmp/old   # also time another checkout's package (a folder
                                                          # holding hmmmerge/, e.g. from `git archive REV hmmmerge`)

Every probe runs in a new interpreter, interleaved round by round so that
machine load hits all of them alike; the table shows medians.  Targets
(issue 13): ``import hmmmerge`` under 0.3 s, ``hmmmerge --help`` under 0.5 s.

* *import* rows: seconds spent in the import statement, measured inside the
  child (``time.perf_counter`` around it), so interpreter start-up is excluded.
* *process* rows: wall time of the whole process, start-up included, as a
  user waits for it.

Peers: the interpreter doing nothing, ``import numpy`` and ``import
networkx`` (what building any world needs), and "eager": every public name
of ``hmmmerge`` touched at once, i.e. what ``import hmmmerge`` cost before
the names became lazy (numba kernels, scipy, networkx all loaded).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

IMPORTS = {
    "import hmmmerge": "import hmmmerge",
    "import numpy (peer)": "import numpy",
    "import networkx (peer)": "import networkx",
    "hmmmerge.gridworld() (first world)": "import hmmmerge; hmmmerge.gridworld()",
    "eager: every public name (before)": "import hmmmerge\nfor n in hmmmerge.__all__:\n    getattr(hmmmerge, n)",
}


def timed_import(code: str, root=ROOT) -> float:
    probe = f"import time\nt = time.perf_counter()\n{code}\nprint(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         cwd=root, env=_env(root))
    return float(out.stdout.split()[-1])


def timed_process(argv, root=ROOT) -> float:
    t = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True, cwd=root, env=_env(root))
    return time.perf_counter() - t


def _env(root):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def console_script() -> list[str] | None:
    """The installed ``hmmmerge`` entry point, run by this interpreter (skipping shims such as pyenv's)."""
    script = Path(sys.executable).parent / "hmmmerge"
    if script.exists():
        return [sys.executable, str(script)]
    found = shutil.which("hmmmerge")
    return [found] if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--before", type=Path, help="a folder holding another version's hmmmerge/ package")
    args = parser.parse_args()
    imports = {name: (code, ROOT) for name, code in IMPORTS.items()}
    processes = {
        "python -c pass (interpreter, peer)": ([sys.executable, "-c", "pass"], ROOT),
        "python -m hmmmerge --help": ([sys.executable, "-m", "hmmmerge", "--help"], ROOT),
        "python -c 'import networkx' (peer)": ([sys.executable, "-c", "import networkx"], ROOT),
    }
    script = console_script()
    if script:
        processes["hmmmerge --help (console script)"] = (script + ["--help"], ROOT)
    if args.before:
        before = args.before.resolve()
        if not (before / "hmmmerge" / "__init__.py").exists():
            parser.error(f"--before {before}: no hmmmerge/__init__.py there")
        imports["import hmmmerge (--before)"] = ("import hmmmerge", before)
        processes["python -m hmmmerge --help (--before)"] = ([sys.executable, "-m", "hmmmerge", "--help"], before)
    times = {name: [] for name in [*imports, *processes]}
    for code, root in imports.values():  # warm the file cache and the .pyc files
        timed_import(code, root)
    for _ in range(args.rounds):
        for name, (code, root) in imports.items():
            times[name].append(timed_import(code, root))
        for name, (argv, root) in processes.items():
            times[name].append(timed_process(argv, root))
    med = {name: statistics.median(v) for name, v in times.items()}
    print(f"{args.rounds} rounds, medians; python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'import (in-process)':<44}{'s':>8}{'x import numpy':>18}")
    for name in imports:
        print(f"{name:<44}{med[name]:>8.4f}{med[name] / med['import numpy (peer)']:>18.2f}")
    print(f"{'process (wall, start-up included)':<44}{'s':>8}{'x python -c pass':>18}")
    base = med["python -c pass (interpreter, peer)"]
    for name in processes:
        print(f"{name:<44}{med[name]:>8.3f}{med[name] / base:>18.2f}")


if __name__ == "__main__":
    main()

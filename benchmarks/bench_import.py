"""Start-up and whole-process cost: ``import hmmmerge``, ``hmmmerge --help`` and the 1,000-episode paper run.

    python benchmarks/bench_import.py              # 15 rounds of start-up probes, 5 paper runs (about 1 min)
    python benchmarks/bench_import.py --rounds 5 --run-rounds 3
    python benchmarks/bench_import.py --before /tmp/old   # also time another checkout side by side (a folder
                                                          # holding hmmmerge/, e.g. `git worktree add --detach
                                                          # /tmp/old REV` or `git archive REV | tar -x -C /tmp/old`)
    python benchmarks/bench_import.py --skip-run   # start-up probes only
    python benchmarks/bench_import.py --before-rev 1673e3e --rounds 3 --run-rounds 7   # the paper run side by
                                                   # side with a commit, checked out in a temporary worktree

Every probe runs in a new interpreter, interleaved round by round so that
machine load hits all of them alike; the table shows medians.  Targets
(issue 13): ``import hmmmerge`` under 0.3 s, ``hmmmerge --help`` under 0.5 s.

* *import* rows: seconds spent in the import statement, measured inside the
  child (``time.perf_counter`` around it), so interpreter start-up is excluded.
* *process* rows: wall time of the whole process, start-up included, as a
  user waits for it.

*Paper run* (issue 11's target, <= 0.7 s): ``hmmmerge run --episodes 1000
--size 10 --merge sf --json`` as a whole process, pinned to one core with
``taskset`` when present, best wall and CPU time of ``--run-rounds`` runs,
alternating the checkouts (after one warm-up run each, which fills numba's
cache) and with the sources byte-compiled first (``compileall``: an installed
package has its ``.pyc`` files; an editable checkout under
``PYTHONDONTWRITEBYTECODE=1``, as on the development machines, would otherwise
compile hmmmerge's sources in every process, about 0.08 s).  The outputs of
both checkouts, minus ``wall_s``, are compared.  Floors
in the same run: the bare interpreter, ``import numpy``, ``import numba``, and
"numba floor": ``import numba`` plus the first call of one trivial cached
kernel (what any process running a numba kernel pays before doing any work),
also with the cycle collector set as ``hmmmerge``'s program sets it (see
``hmmmerge.cli._program_collector``), and also loading the kernel as
``hmmmerge run`` does (without numba's compiler set-up, see
``hmmmerge._numba_cache``).
A breakdown per checkout runs the command ``--breakdown-rounds`` more times with CPU
timers around the phases (benchmark-only wrappers; exclusive times; each
phase's least time over the rounds): interpreter
start and exit, imports, numba load (first call of each kernel: numba's
target set-up and the cached machine code), learner (``partial_fit``),
held-out scoring, JSON, cycle collections (Python's ``gc``, wherever they
fall) and the rest (argument parsing, world, summary).

Peers: the interpreter doing nothing, ``import numpy`` and ``import
networkx`` (what building any world needs), and "eager": every public name
of ``hmmmerge`` touched at once, i.e. what ``import hmmmerge`` cost before
the names became lazy (numba kernels, scipy, networkx all loaded).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
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


PAPER_RUN = ["run", "--episodes", "1000", "--size", "10", "--merge", "sf", "--json"]

#: in-process breakdown of one paper run: exclusive CPU seconds per phase, printed as JSON (benchmark-only wrappers)
BREAKDOWN = r"""
import time
T0 = time.process_time()
import sys, json, functools
acc, stack = {}, []

def timed(phase, f):
    @functools.wraps(f)
    def g(*a, **k):
        if phase == "imports" and stack and stack[-1] == "numba load":
            return f(*a, **k)  # numba's own imports at its first call count as numba load
        t = time.process_time()
        stack.append(phase)
        try:
            return f(*a, **k)
        finally:
            dt = time.process_time() - t
            stack.pop()
            acc[phase] = acc.get(phase, 0.0) + dt
            if stack:
                acc[stack[-1]] = acc.get(stack[-1], 0.0) - dt
    return g

def patch(module, owner, name, phase):
    target = getattr(module, owner) if owner else module
    setattr(target, name, timed(phase, getattr(target, name)))

PATCHES = {
    "numba.core.dispatcher": ("Dispatcher", "_compile_for_args", "numba load"),
    "hmmmerge.agent": ("TwoLevelMemory", "partial_fit", "learner"),
    "hmmmerge.commands.run": (None, "_surprise", "scoring"),
    "hmmmerge.cli": (None, "print_json", "JSON"),
}
boot = sys.modules["_frozen_importlib"]
find_and_load = boot._find_and_load

def loading(name, import_):
    module = find_and_load(name, import_)
    if name in PATCHES:
        patch(module, *PATCHES[name])
    return module

boot._find_and_load = timed("imports", loading)
gc_start = []

def collecting(phase, info):  # cycle collections, taken out of the phase they interrupt
    if phase == "start":
        gc_start.append(time.process_time())
        return
    dt = time.process_time() - gc_start.pop()
    acc["cycle collection"] = acc.get("cycle collection", 0.0) + dt
    if stack:
        acc[stack[-1]] = acc.get(stack[-1], 0.0) - dt

import gc
gc.callbacks.append(collecting)
from hmmmerge.cli import main
import contextlib, io
sys.argv = ["hmmmerge", *sys.argv[1:]]  # main() as the program runs it
with contextlib.redirect_stdout(io.StringIO()):
    main()
total = time.process_time() - T0
acc["other (parsing, world, summary)"] = total - sum(acc.values())
print(json.dumps({"in_process": total, **acc}))
"""

FLOOR_KERNEL = """
import numba

@numba.njit(cache=True)
def total(a):
    s = 0.0
    for x in a:
        s += x
    return s
"""


def _pin() -> list[str]:
    return ["taskset", "-c", "0"] if shutil.which("taskset") else []


def timed_run(argv, root, cwd=None) -> tuple[float, float, str]:
    """(wall, CPU) seconds and stdout of one process, pinned to one core when ``taskset`` exists."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run([*_pin(), *argv], capture_output=True, text=True, check=True, cwd=cwd or root,
                         env=_env(root))
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), out.stdout


def paper_run(roots: dict, rounds: int, breakdown_rounds: int = 3) -> None:
    """The paper run of each checkout, side by side with the floors; then the breakdown of each."""
    outputs = {}
    for root in roots.values():  # byte-compiled as an installed package is (PYTHONDONTWRITEBYTECODE may be set)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(root) / "hmmmerge")], check=True,
                       capture_output=True)
    for name, root in roots.items():  # warm-up: fills numba's cache of that checkout
        out = json.loads(timed_run([sys.executable, "-m", "hmmmerge", *PAPER_RUN], root)[2])
        out.pop("wall_s")
        outputs[name] = out
    with tempfile.TemporaryDirectory() as floor_dir:
        Path(floor_dir, "floor_kernel.py").write_text(FLOOR_KERNEL)
        probes = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "import numpy": [sys.executable, "-c", "import numpy"],
            "import numba": [sys.executable, "-c", "import numba"],
            "numba floor (import + 1st cached call)": [
                sys.executable, "-c", "import numpy, floor_kernel; floor_kernel.total(numpy.ones(3))"],
            "numba floor, collector as hmmmerge's": [
                sys.executable, "-c", "import atexit, gc; gc.set_threshold(100_000, 10, 10); atexit.register(gc.freeze)"
                                      "\nimport numpy, floor_kernel; floor_kernel.total(numpy.ones(3))"],
            "numba floor, collector + lazy load (as run)": [
                sys.executable, "-c", "import atexit, gc; gc.set_threshold(100_000, 10, 10); atexit.register(gc.freeze)"
                                      "\nfrom hmmmerge._numba_cache import load_cached_kernels_lazily"
                                      "\nload_cached_kernels_lazily()"
                                      "\nimport numpy, floor_kernel; floor_kernel.total(numpy.ones(3))"],
        }
        timed_run(probes["numba floor (import + 1st cached call)"], ROOT, cwd=floor_dir)  # compile once
        runs = {f"paper run ({name})": ([sys.executable, "-m", "hmmmerge", *PAPER_RUN], root, None)
                for name, root in roots.items()}
        jobs = {**runs, **{name: (argv, ROOT, floor_dir) for name, argv in probes.items()}}
        times = {name: [] for name in jobs}
        for _ in range(rounds):
            for name, (argv, root, cwd) in jobs.items():
                times[name].append(timed_run(argv, root, cwd)[:2])
    print(f"\npaper run `hmmmerge {' '.join(PAPER_RUN)}`, best of {rounds}, "
          f"{'one core (taskset -c 0)' if _pin() else 'not pinned (no taskset)'}; load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'process':<44}{'wall s':>8}{'CPU s':>8}{'x target 0.7 s':>16}")
    for name, ts in times.items():
        wall, cpu = min(t[0] for t in ts), min(t[1] for t in ts)
        print(f"{name:<44}{wall:>8.3f}{cpu:>8.3f}{wall / 0.7:>16.2f}")
    if len(roots) > 1:
        names = list(roots)
        same = all(outputs[n] == outputs[names[0]] for n in names[1:])
        best = {n: [min(t[i] for t in times[f"paper run ({n})"]) for i in (0, 1)] for n in names}
        print(f"outputs (minus wall_s) identical across checkouts: {'yes' if same else 'NO'}; "
              f"{names[0]} / {names[-1]}: wall {best[names[0]][0] / best[names[-1]][0]:.2f}x, "
              f"CPU {best[names[0]][1] / best[names[-1]][1]:.2f}x")
    rows = {name: {} for name in roots}
    for _ in range(breakdown_rounds):  # interleaved; each phase's least CPU time over the rounds
        for name, root in roots.items():
            _, cpu, text = timed_run([sys.executable, "-c", BREAKDOWN, *PAPER_RUN], root)
            phases = json.loads(text)
            phases = {"python start + exit": cpu - phases.pop("in_process"), **phases}
            for key, value in phases.items():
                rows[name][key] = min(value, rows[name].get(key, value))
    keys = list(dict.fromkeys(k for phases in rows.values() for k in phases))
    print(f"\nbreakdown (instrumented runs, CPU s, exclusive, least of {breakdown_rounds} per phase)"
          f"{''.join(f'{n:>12}' for n in rows)}")
    for key in keys:
        print(f"{key:<56}" + "".join(f"{rows[n].get(key, 0.0):>12.3f}" for n in rows))
    print(f"{'total (sum of the phases)':<56}" + "".join(f"{sum(rows[n].values()):>12.3f}" for n in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--run-rounds", type=int, default=5, help="paper runs per checkout (best of)")
    parser.add_argument("--breakdown-rounds", type=int, default=3, help="instrumented paper runs per checkout")
    parser.add_argument("--skip-run", action="store_true", help="skip the paper run")
    parser.add_argument("--before", type=Path, help="a folder holding another version's hmmmerge/ package")
    parser.add_argument("--before-rev", metavar="REV",
                        help="a commit to compare with, checked out in a temporary worktree (removed afterwards)")
    args = parser.parse_args()
    if args.before and args.before_rev:
        parser.error("give --before or --before-rev, not both")
    if args.before_rev:
        with tempfile.TemporaryDirectory() as tmp:
            args.before = Path(tmp) / "before"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(args.before), args.before_rev],
                           check=True, capture_output=True)
            try:
                print(f"before: {args.before_rev} (temporary worktree)")
                _run(parser, args)
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(args.before)],
                               capture_output=True)
        return
    _run(parser, args)


def _run(parser, args) -> None:
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
    if not args.skip_run:
        paper_run({**({"before": args.before.resolve()} if args.before else {}), "now": ROOT}, args.run_rounds,
                  args.breakdown_rounds)


if __name__ == "__main__":
    main()

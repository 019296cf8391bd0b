"""``hmmmerge run``: the ARCHITECTURE keys, files written, resume, bad arguments."""

from hmmmerge.merging import SFMerger
import csv
import json

import numpy as np

from hmmmerge.cli import main

KEYS = ("l1_accuracy", "l2_accuracy", "first_order_accuracy", "no_prediction_share", "purity", "n_clusters",
        "n_first_level_states", "surprise", "wall_s")


def _run(capsys, *argv):
    assert main(["run", "--json", *argv]) == 0
    text = capsys.readouterr().out
    return json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))  # strict JSON


def test_keys_and_values(capsys):
    out = _run(capsys, "--episodes", "40", "--eval-episodes", "5", "--size", "5")
    for key in KEYS:
        assert key in out, key
    for key in ("l1_accuracy", "l2_accuracy", "first_order_accuracy", "no_prediction_share"):
        assert 0.0 <= out[key] <= 1.0
    assert out["episodes"] == 40 and out["params"]["initial_size"] == 5
    assert out["surprise"] > 0 and out["surprise_smoothing_epsilon"] == 0.001


def test_same_seed_same_numbers_and_literal_switch(capsys):
    a = _run(capsys, "--episodes", "30", "--eval-episodes", "0")
    b = _run(capsys, "--episodes", "30", "--eval-episodes", "0")
    for key in ("l2_accuracy", "n_clusters", "purity"):
        assert a[key] == b[key]
    lit = _run(capsys, "--episodes", "30", "--eval-episodes", "0", "--literal")
    assert lit["params"]["online_connect"] is False
    assert lit["params"]["merger"] == {"name": "sf", "params": {**SFMerger().get_params(), "split_contradictions": False}}


def test_out_and_resume(capsys, tmp_path):
    out = _run(capsys, "--episodes", "25", "--eval-episodes", "0", "--out", str(tmp_path))
    with open(tmp_path / "history.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 25
    assert np.isclose(float(rows[-1]["n_states"]), out["n_first_level_states"])
    more = _run(capsys, "--episodes", "10", "--eval-episodes", "0", "--resume", str(tmp_path / "agent.npz"))
    assert more["episodes"] == 35
    assert more["n_first_level_states"] >= out["n_first_level_states"]


def test_bad_arguments(capsys):
    for argv in (["--episodes", "0"], ["--size", "0"], ["--smoothing", "0"], ["--merge", "kmeans"],
                 ["--resume", "/nonexistent/agent.npz"]):
        code = None
        try:
            code = main(["run", "--json", *argv])
        except SystemExit as e:  # argparse choices
            code = e.code
        assert code == 2, argv
        err = capsys.readouterr().err.strip()
        assert err and "Traceback" not in err and len(err.splitlines()) == 1


def test_collector_and_numba_loading_tuned_only_for_the_program(capsys):
    """`python -m hmmmerge` tunes the cycle collector (larger young generation, frozen at exit) and loads
    cached numba kernels without numba's compiler set-up, and prints the same as `main` called in-process,
    which leaves the caller's collector and numba as they were."""
    import gc
    import os
    import subprocess
    import sys

    from numba.core.caching import Cache

    args = ["run", "--episodes", "5", "--eval-episodes", "3", "--json"]
    before = gc.get_threshold(), gc.get_freeze_count()
    assert main(args) == 0
    assert (gc.get_threshold(), gc.get_freeze_count()) == before
    assert not getattr(Cache.load_overload, "lazy", False)
    inproc = json.loads(capsys.readouterr().out)
    probe = ("import gc, sys\nfrom hmmmerge.cli import main\nsys.argv = ['hmmmerge', *sys.argv[1:]]\n"
             "code = main()\nfrom numba.core.caching import Cache\n"
             "print(gc.get_threshold()[0], getattr(Cache.load_overload, 'lazy', False), file=sys.stderr)\n"
             "sys.exit(code)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, check=True,
                         cwd=root, env={**os.environ, "PYTHONPATH": root})
    assert out.stderr.split()[-2:] == ["100000", "True"]
    program = json.loads(out.stdout)
    inproc.pop("wall_s"), program.pop("wall_s")
    assert program == inproc


LAZY_KERNELS = """
import numpy as np
from numba import njit

@njit(cache=True)
def grown(n):
    out = np.empty(n, dtype=np.int64)  # allocates through numba's runtime
    for i in range(n):
        out[i] = i * i
    return out, out.sum()
"""


def test_lazy_numba_loading_compiles_then_loads_the_same(tmp_path):
    """With :func:`hmmmerge._numba_cache.load_cached_kernels_lazily`, a kernel missing from the cache compiles
    (numba's compiler sets itself up), the next process loads it from the cache without numba's
    implementation registries (polynomials stand for them), and both give what a process without it gives."""
    import os
    import subprocess
    import sys

    (tmp_path / "lazy_kernels.py").write_text(LAZY_KERNELS)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    probe = ("import sys\nfrom hmmmerge._numba_cache import load_cached_kernels_lazily\n"
             "applied = load_cached_kernels_lazily() if sys.argv[1] == 'lazy' else False\n"
             "import lazy_kernels\nvalues, total = lazy_kernels.grown(5)\n"
             "print(values.tolist(), total, applied, 'numba.np.polynomial.polynomial_functions' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + str(tmp_path), "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", probe, mode], capture_output=True, text=True, check=True,
                           cwd=tmp_path, env=env).stdout.split("] ") for mode in ("lazy", "lazy", "plain")]
    assert [r[0] for r in runs] == ["[0, 1, 4, 9, 16"] * 3
    assert [r[1].split() for r in runs] == [["30", "True", "True"],    # compiled: numba set itself up
                                            ["30", "True", "False"],   # loaded: no registries imported
                                            ["30", "False", "True"]]

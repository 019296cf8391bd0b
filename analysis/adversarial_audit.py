"""Adversarial audit (issue 15): hostile inputs through the CLI and the API, each in a subprocess.

Every case runs in its own process under an address-space cap (``--cap-gib``)
and a timeout, and its outcome is classified:

* ``clean``: a one-line error on stderr with exit code 2 (CLI) or a
  ``ValueError`` / ``TypeError`` (API), or exit 0 with a result that the case
  checks is correct;
* ``signal``: the process died of a signal (segfault, kernel OOM kill);
* ``hang``: the timeout passed;
* ``wrong``: exit 0 where the input should have been refused, or a result that
  fails the case's check (a silently wrong answer);
* ``traceback``: any other failure (a traceback, several lines, another exit code).

Writes to non-regular files are checked after each case (the device, FIFO and
folder must still be what they were), and the process tree of a sweep whose
parent is killed is checked for survivors.

    python analysis/adversarial_audit.py [--cap-gib 4] [--timeout 120] [--jobs 2] [--json FILE]

Prints one line per case that was not clean, then the shares.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import zipfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------- running one case
def _limit(cap_bytes):
    def pre():
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (cap_bytes, cap_bytes))
        os.setsid()

    return pre


def run_case(case, cap_bytes, timeout):
    """Run one case; returns ``(outcome, detail)``."""
    argv = case["argv"]
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("HMMMERGE_MAX_MEMORY", None)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=case.get("cwd", ROOT),
                            preexec_fn=_limit(cap_bytes))
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "hang", f"over {timeout} s"
    wall = time.perf_counter() - start
    out, err = out.decode(errors="replace"), err.decode(errors="replace")
    lines = [x for x in err.strip().splitlines() if x.strip()]
    code = proc.returncode
    if code < 0:
        return "signal", f"signal {-code}"
    if code == 2 and len(lines) == 1:
        if case["expect"] in ("error", "any"):
            return "clean", lines[0][:160]
        return "wrong", f"refused a valid input: {lines[0][:160]}"
    if code == 0 and not lines:
        if case["expect"] == "error":
            return "wrong", "exit 0 where an error was due: " + out.strip()[:160]
        check = case.get("check")
        if check is not None:
            verdict = check(out)
            if isinstance(verdict, str) or not verdict:
                return "wrong", str(verdict)[:200]
        return "clean", f"ok ({wall:.1f} s)"
    return "traceback", f"exit {code}: " + (lines[-1][:200] if lines else "(no stderr)")


# --------------------------------------------------------------------------- cases
def _cli(*args, expect="error", check=None):
    return {"argv": [sys.executable, "-m", "hmmmerge", *map(str, args)], "expect": expect, "check": check,
            "name": "hmmmerge " + " ".join(map(str, args))}


API_PRELUDE = """
import sys, json, numpy as np
def main():
{body}
try:
    main()
except (ValueError, TypeError) as e:
    print(" ".join(str(e).split()), file=sys.stderr); sys.exit(2)
"""


def _api(name, body="", expect="error", check=None):
    code = API_PRELUDE.format(body=textwrap.indent(textwrap.dedent(body), "    "))
    return {"argv": [sys.executable, "-c", code], "expect": expect, "check": check, "name": "API: " + name}


def _json_check(fn):
    def check(out):
        try:
            return fn(json.loads(out))
        except Exception as e:  # noqa: BLE001 - the verdict
            return f"output not as expected: {type(e).__name__}: {e}"

    return check


CLOSED_STDOUT = """
import json, os, subprocess, sys
cmd = [sys.executable, "-m", "hmmmerge", *json.loads(sys.argv[1])]
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
p.stdout.close()  # the reader is gone, as after `| head`
err = p.stderr.read().decode()
code = p.wait()
sys.stderr.write(err)
sys.exit(code)
"""


def size_cases(tmp):
    c = []
    for args in (["env", "--grid", "100000x100000"], ["env", "--grid", "1000x1000"], ["env", "--grid", "0x5"],
                 ["env", "--grid", "axb"], ["env", "--grid", "-3x4"], ["env", "--colours", "1000000000"],
                 ["env", "--colours", "0"], ["env", "--colours", "-4"], ["env", "--k", "-1"], ["env", "--seed", "-1"],
                 ["env", "--world", "no-such-world"],
                 ["run", "--episodes", "1000000000"], ["run", "--episode-length", "1000000000"],
                 ["run", "--eval-episodes", "1000000000"], ["run", "--episodes", "0"], ["run", "--episodes", "-5"],
                 ["run", "--episode-length", "0"], ["run", "--eval-episodes", "-1"], ["run", "--size", "0"],
                 ["run", "--size", "-10"], ["run", "--merge-iterations", "-1"],
                 ["run", "--merge-iterations", "1000000000", "--episodes", "20"],
                 ["run", "--grid", "300x300", "--colours", "90000"], ["run", "--grid", "10x10", "--colours", "90000"],
                 ["run", "--smoothing", "0"], ["run", "--smoothing", "2"], ["run", "--smoothing", "nan"],
                 ["run", "--agent-seed", "-5"], ["run", "--episodes", "1e9"], ["run", "--seed", "-3"],
                 ["evaluate", "--clones", "1000000", "--models", "em", "--episodes", "5"],
                 ["evaluate", "--em-iter", "1000000000", "--models", "em"], ["evaluate", "--models", "nope"],
                 ["evaluate", "--episodes", "1000000000"], ["evaluate", "--pseudocount", "-1"],
                 ["evaluate", "--smoothing", "5"], ["baseline", "em", "--clones", "0"],
                 ["baseline", "first-order", "--grid", "10x10", "--colours", "90000"],
                 ["demo", "--seeds", "1000000000", "--out", f"{tmp}/demo"], ["demo", "--seeds", "0", "--out", f"{tmp}/d0"],
                 ["demo", "--episodes", "1000000000", "--out", f"{tmp}/d1"],
                 ["demo", "--episodes", "0", "--out", f"{tmp}/d2"],
                 ["reproduce", "--quick", "--only", "true_sim", "--executor", "local:100000", "--out", f"{tmp}/r1"],
                 ["reproduce", "--quick", "--only", "true_sim", "--executor", "threads:100000", "--out", f"{tmp}/r2"],
                 ["reproduce", "--quick", "--only", "true_sim", "--executor", "local:0", "--out", f"{tmp}/r3"],
                 ["reproduce", "--quick", "--only", "true_sim", "--executor", "local:-2", "--out", f"{tmp}/r4"],
                 ["reproduce", "--quick", "--only", "true_sim", "--executor", "bogus", "--out", f"{tmp}/r5"],
                 ["reproduce", "--quick", "--only", "no_such_figure", "--out", f"{tmp}/r6"]):
        c.append(_cli(*args))
    c.append(_cli())  # no command
    c.append(_cli("no-such-command"))
    c.append(_cli("run", "--no-such-option"))
    c.append(_cli("reproduce", "--quick", "--only", "true_sim", "--executor", "dask://127.0.0.1:1", "--out", f"{tmp}/r7"))
    for cmd in (["run", "--episodes", "40", "--json"], ["env", "--grid", "20x20", "--per-vertex"],
                ["evaluate", "--models", "oracle,first-order", "--episodes", "20", "--json"]):
        c.append({"argv": [sys.executable, "-c", CLOSED_STDOUT, json.dumps(cmd)], "expect": "ok", "check": None,
                  "name": "hmmmerge " + " ".join(cmd) + " with stdout closed (| head)"})
    # valid but large: must answer (or refuse in one line) within the timeout
    c.append(_cli("env", "--grid", "300x300", "--json", expect="ok",
                  check=_json_check(lambda r: r["n_states"] == 90000 or "bad n_states")))
    c.append(_cli("env", "--grid", "200x200", "--colours", "40000", "--json", expect="ok",
                  check=_json_check(lambda r: r["n_states"] == 40000 or "bad n_states")))
    c.append(_cli("env", "--grid", "100x100", "--plot", f"{tmp}/big.png", "--json", expect="ok",
                  check=_json_check(lambda r: os.path.getsize(f"{tmp}/big.png") > 0 or "no picture")))
    return c


def write_cases(tmp, specials):
    c = []
    for kind, path in specials.items():
        c.append(_cli("env", "--world", "aliased-loop", "--plot", path))
        if kind == "folder":  # --out names a folder: writing into it is right
            c.append(_cli("run", "--episodes", "3", "--eval-episodes", "0", "--out", path, "--json", expect="ok",
                          check=lambda out, path=path: os.path.isfile(os.path.join(path, "agent.npz")) or "no agent.npz"))
        else:
            c.append(_cli("run", "--episodes", "3", "--eval-episodes", "0", "--out", path))
    link = os.path.join(tmp, "link.png")
    os.symlink(os.path.join(tmp, "link-target.png"), link)
    c.append(_cli("env", "--world", "aliased-loop", "--plot", link, "--json", expect="ok",
                  check=lambda out: (os.path.islink(link) and os.path.getsize(os.path.join(tmp, "link-target.png")) > 0)
                  or "the link was replaced or its target not written"))
    return c


def agent_cases(tmp):
    """Damaged agent files given to ``run --resume``."""
    base_dir = os.path.join(tmp, "agent")
    subprocess.run([sys.executable, "-m", "hmmmerge", "run", "--episodes", "12", "--eval-episodes", "0",
                    "--out", base_dir], check=True, capture_output=True, env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT)
    good = os.path.join(base_dir, "agent.npz")
    raw = open(good, "rb").read()
    with np.load(good, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    files = {}

    def put(name, data):
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        files[name] = path

    def put_arrays(name, unversioned=True, **changes):
        """The changed file as saved, and a copy without format, version and checksum (so that the
        array validation alone must catch it)."""
        d = dict(arrays)
        for k, v in changes.items():
            if v is None:
                d.pop(k, None)
            else:
                d[k] = v
        path = os.path.join(tmp, name)
        np.savez_compressed(path, **d)
        files[name] = path
        try:
            m = json.loads(str(d["meta"]))
            for k in ("format", "version", "checksum"):
                m.pop(k, None)
        except (KeyError, ValueError, TypeError):
            return
        if unversioned and isinstance(m, dict) and m:
            legacy = os.path.join(tmp, "unversioned-" + name)
            np.savez_compressed(legacy, **dict(d, meta=np.array(json.dumps(m))))
            files["unversioned-" + name] = legacy

    put("empty.npz", b"")
    for frac in (0.1, 0.5, 0.9, 0.99):
        put(f"truncated-{frac}.npz", raw[: int(len(raw) * frac)])
    rng = np.random.default_rng(0)
    for i in range(40):
        b = bytearray(raw)
        for pos in rng.integers(0, len(b), size=int(rng.integers(1, 8))):
            b[pos] ^= int(rng.integers(1, 256))
        put(f"flipped-{i}.npz", bytes(b))
    put("json.npz", json.dumps({"hello": 1}).encode())
    put("png.npz", b"\x89PNG\r\n\x1a\n" + bytes(100))
    put("zip-of-nothing.npz", _empty_zip())
    meta = json.loads(str(arrays["meta"]))
    for key in list(arrays):
        put_arrays(f"missing-{key}.npz", **{key: None})
    t2i = arrays.get("t2_indices")
    if t2i is not None and t2i.size:
        put_arrays("t2-indices-out-of-range.npz", t2_indices=t2i + 100_000)
        put_arrays("t2-indices-negative.npz", t2_indices=t2i - 100_000)
    t2d = arrays.get("t2_data")
    if t2d is not None and t2d.size:
        put_arrays("t2-data-nan.npz", t2_data=np.full_like(t2d, np.nan))
        put_arrays("t2-data-negative.npz", t2_data=-t2d)
        put_arrays("t2-data-inf.npz", t2_data=np.full_like(t2d, np.inf))
    put_arrays("t2-indptr-decreasing.npz", t2_indptr=arrays["t2_indptr"][::-1].copy())
    fo = [k for k in arrays if "fo_counts" in k]
    for k in fo:
        put_arrays(f"{k}-negative.npz", **{k: -np.abs(arrays[k]) - 1})
        put_arrays(f"{k}-float.npz", **{k: arrays[k].astype(float) + 0.5})
        put_arrays(f"{k}-wrong-shape.npz", **{k: arrays[k].ravel()})
    ns = [k for k in arrays if k.endswith("next_state")]
    for k in ns:
        put_arrays(f"{k}-float.npz", **{k: arrays[k].astype(float) + 0.5})
        put_arrays(f"{k}-huge.npz", **{k: arrays[k] + 10**9})
        put_arrays(f"{k}-object.npz", **{k: arrays[k].astype(str)})
    for k in arrays:
        if k.startswith("history_"):
            put_arrays(f"{k}-short.npz", **{k: arrays[k][:-1]})
            break
    for k in arrays:
        if k in ("assignment", "clusters_assignment") or k.endswith("assignment"):
            put_arrays(f"{k}-out-of-range.npz", **{k: arrays[k] + 10**9})
            put_arrays(f"{k}-below-minus-one.npz", **{k: arrays[k] * 0 - 7})
    for change, label in ((lambda m: m.update(version=999), "version-999"),
                          (lambda m: m["params" if "params" in m else "settings"].update(bogus=1), "unknown-setting"),
                          (lambda m: m.update(steps=-5), "negative-steps"),
                          (lambda m: m.update(rng="not a state"), "bad-rng"),
                          (lambda m: m.pop("params" if "params" in m else "settings"), "no-params")):
        m = json.loads(json.dumps(meta))
        change(m)
        put_arrays(f"meta-{label}.npz", unversioned=label != "version-999", meta=np.array(json.dumps(m)))
    put_arrays("meta-not-json.npz", meta=np.array("{not json"))
    cases = [_cli("run", "--resume", path, "--episodes", "3", "--eval-episodes", "2") for path in files.values()]
    cases.append(_cli("run", "--resume", good, "--episodes", "3", "--eval-episodes", "2", "--json", expect="ok",
                      check=_json_check(lambda r: r["episodes"] == 15 or f"episodes {r['episodes']} != 15")))
    cases.append(_cli("run", "--resume", os.path.join(tmp, "no-such-file.npz"), "--episodes", "3"))
    cases.append(_cli("run", "--resume", tmp, "--episodes", "3"))
    cases.append(_cli("run", "--resume", good, "--grid", "5x5", "--colours", "3", "--episodes", "3"))
    return cases


def _empty_zip() -> bytes:
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w"):
        pass
    return buf.getvalue()


def env_file_cases(tmp):
    """Damaged or ambiguous environment files given to ``env --graph``."""
    sys.path.insert(0, ROOT)
    from hmmmerge import gridworld

    good = os.path.join(tmp, "world.json")
    gridworld(3, 3, n_colours=3).save(good)
    raw = open(good, "rb").read()
    doc = json.loads(raw)
    cases = [_cli("env", "--graph", good, "--json", expect="ok",
                  check=_json_check(lambda r: r["n_states"] == 9 or "bad n_states"))]
    rng = np.random.default_rng(1)
    for i in range(30):
        b = bytearray(raw)
        for pos in rng.integers(0, len(b), size=int(rng.integers(1, 6))):
            b[pos] = int(rng.integers(0, 256))
        path = os.path.join(tmp, f"world-flipped-{i}.json")
        open(path, "wb").write(bytes(b))
        cases.append(_cli("env", "--graph", path, "--json", expect="any"))

    def put(name, obj):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(obj if isinstance(obj, str) else json.dumps(obj))
        return path

    nodes_key = "nodes"
    graph = doc.get("graph", doc)
    if isinstance(graph, dict) and nodes_key in graph:
        dup = json.loads(json.dumps(doc))
        g = dup.get("graph", dup)
        g[nodes_key].append(dict(g[nodes_key][0], obs=(g[nodes_key][0].get("obs", 0) + 1) % 3))
        cases.append(_cli("env", "--graph", put("dup-node.json", dup)))
    ids = {"directed": True, "multigraph": True, "graph": {"start": 1, "n_obs": 2},
           "nodes": [{"id": 1, "obs": 0}, {"id": 1.0, "obs": 1}, {"id": 2, "obs": 1}],
           "edges": [{"source": 1, "target": 2, "action": 0}, {"source": 2, "target": 1, "action": 0}]}
    cases.append(_cli("env", "--graph", put("ids-1-and-1.0.json", ids)))
    for name, text in (("empty.json", ""), ("not-json.json", "{"), ("list.json", "[]"), ("null.json", "null"),
                       ("huge-number.json", '{"nodes": [{"id": 1e999}]}')):
        cases.append(_cli("env", "--graph", put(name, text)))
    cases.append(_cli("env", "--graph", os.path.join(tmp, "missing.json")))
    cases.append(_cli("env", "--graph", tmp))
    return cases


def api_cases():
    c = []
    c.append(_api("weighted_purity with labels >= 2^61", """
        from hmmmerge.evaluate import weighted_purity
        rng = np.random.default_rng(0); a = rng.integers(0, 5, 300); small = rng.integers(0, 3, 300)
        huge = np.array([2**61, 2**62, 2**63 - 1])[small]
        print(json.dumps([weighted_purity(a, huge), weighted_purity(a, small)]))
    """, expect="ok", check=_json_check(lambda r: abs(r[0] - r[1]) < 1e-12 or f"{r[0]} != {r[1]}")))
    c.append(_api("a step of probability 1e-400", """
        from hmmmerge import ActionHMM
        T = np.array([[[1.0, 1e-200], [0.0, 1.0]]]); E = np.array([[1.0, 0.0], [1 - 1e-200, 1e-200]])
        print(json.dumps(ActionHMM(T, E, [1.0, 0.0]).log_likelihood([0, 1], [-1, 0])))
    """, expect="ok", check=_json_check(lambda r: abs(r - 2 * np.log(1e-200)) < 1e-9 or f"log p = {r}")))
    c.append(_api("a step of probability 1e-400, sparse", """
        import scipy.sparse as sp
        from hmmmerge import ActionHMM
        T = sp.csr_matrix(np.array([[1.0, 1e-200], [0.0, 1.0]])); E = np.array([[1.0, 0.0], [1 - 1e-200, 1e-200]])
        print(json.dumps(ActionHMM([T], E, [1.0, 0.0]).log_likelihood([0, 1], [-1, 0])))
    """, expect="ok", check=_json_check(lambda r: abs(r - 2 * np.log(1e-200)) < 1e-9 or f"log p = {r}")))
    for label, expr in (("complex T", "ActionHMM(np.ones((1, 1, 1)) + 1j, np.ones((1, 1)), [1.0])"),
                        ("complex E", "ActionHMM(np.ones((1, 1, 1)), np.ones((1, 1)) + 0j, [1.0])"),
                        ("NaN in T", "ActionHMM(np.full((1, 1, 1), np.nan), np.ones((1, 1)), [1.0])"),
                        ("negative T", "ActionHMM(np.array([[[2.0, -1.0], [0, 1]]]), np.eye(2), [1.0, 0])"),
                        ("rows of T not summing to 1", "ActionHMM(np.full((1, 2, 2), 0.7), np.eye(2), [1.0, 0])"),
                        ("E of the wrong shape", "ActionHMM(np.ones((1, 1, 1)), np.ones((2, 1)), [1.0])"),
                        ("from_deterministic with 1.5", "ActionHMM.from_deterministic([[1.5, 0]], [0, 1], n_obs=2)"),
                        ("from_deterministic with 0.999", "ActionHMM.from_deterministic([[1, 0]], [0, 0.999], n_obs=2)"),
                        ("from_deterministic with NaN", "ActionHMM.from_deterministic([[np.nan, 0]], [0, 1], n_obs=2)"),
                        ("from_deterministic with 2^70", "ActionHMM.from_deterministic([[2.0**70, 0]], [0, 1], n_obs=2)"),
                        ("from_deterministic with a huge model", "ActionHMM.from_deterministic([[0]], [0], n_obs=10**12)"),
                        ("log_likelihood of an unknown observation", "ActionHMM(np.ones((1, 1, 1)), np.ones((1, 1)), [1.0]).log_likelihood([5], [-1])"),
                        ("log_likelihood with a negative action", "ActionHMM(np.ones((1, 1, 1)), np.ones((1, 1)), [1.0]).log_likelihood([0, 0], [-1, -3])")):
        c.append(_api(label, f"from hmmmerge import ActionHMM\n{expr}\nprint('accepted')"))
    for label, fit in (("agent", "TwoLevelMemory(10, 4).fit(empty)"),
                       ("EM", "CloneHMM(n_clones=2).fit(empty, 10, 4)"),
                       ("best-first merging", "BestFirstMerging().fit(empty, 10, 4)"),
                       ("first order", "FirstOrderModel().fit(empty, 10, 4)"),
                       ("level 1", "EpisodicMemory(10, 4).observe_trajectories(empty)")):
        # the agent learns online: living no episode is a no-op, not an error
        c.append(_api(f"fitting 0 episodes: {label}", expect="ok" if label == "agent" else "error", body=f"""
            from hmmmerge.agent import TwoLevelMemory
            from hmmmerge.baselines.bfmm import BestFirstMerging
            from hmmmerge.baselines.em import CloneHMM
            from hmmmerge.baselines.first_order import FirstOrderModel
            from hmmmerge.episodic import EpisodicMemory
            from hmmmerge.rollouts import Trajectories
            empty = Trajectories(np.zeros((0, 5), dtype=np.int64), np.full((0, 5), -1, dtype=np.int64))
            {fit}
        """))
    for label, expr in (("gridworld 10^5 x 10^5", "gridworld(100000, 100000)"),
                        ("gridworld with 10^10 colours", "gridworld(10, 10, n_colours=10**10)"),
                        ("agent with 10^6 observations", "TwoLevelMemory(10**6, 4).fit(Trajectories([[0, 1]], [[-1, 0]]))"),
                        ("first-order with 10^6 observations", "FirstOrderModel().fit(Trajectories([[0, 999999]], [[-1, 0]]), 10**6, 4)"),
                        ("EM with 10^6 clones", "CloneHMM(n_clones=10**6).fit(Trajectories([[0, 1]], [[-1, 0]]), 2, 1)"),
                        ("markov_radii of 40,000 distinct colours", "markov_radii(Environment.from_arrays([np.roll(np.arange(40000), -1)], np.arange(40000)))"),
                        ("Sweep on local:100000", "Sweep('/tmp/hmmmerge-audit-sweep', example_run, [{'x': 1}]).run(executor='local:100000', progress=False)"),
                        ("make_executor threads:10^6", "make_executor('threads:1000000').__enter__()"),
                        ("make_executor max_workers=0", "make_executor('local', max_workers=0).__enter__()"),
                        ("make_executor of a number", "make_executor(5).__enter__()"),
                        ("random_walk of 10^9 episodes", "from hmmmerge import random_walk; random_walk(gridworld(), 10**9, 50)"),
                        ("random_walk of 10^12 moves", "from hmmmerge import random_walk; random_walk(gridworld(), 1, 10**12)"),
                        ("random_walk of -1 episodes", "from hmmmerge import random_walk; random_walk(gridworld(), -1, 50)"),
                        ("Sweep with a NaN in a configuration", "Sweep('/tmp/hmmmerge-audit-sweep', example_run, [{'x': float('nan')}])"),
                        ("Sweep of a lambda", "Sweep('/tmp/hmmmerge-audit-sweep', lambda c: {}, [{'x': 1}])"),
                        ("Sweep with a configuration twice", "Sweep('/tmp/hmmmerge-audit-sweep', example_run, [{'x': 1}, {'x': 1}])"),
                        ("weighted_purity of different lengths", "from hmmmerge.evaluate import weighted_purity; weighted_purity([0, 0], [1])"),
                        ("weighted_purity of float labels", "from hmmmerge.evaluate import weighted_purity; weighted_purity([0, 0], [0.5, 1.5])"),
                        ("weighted_purity with cluster -5", "from hmmmerge.evaluate import weighted_purity; weighted_purity([-5, 0], [1, 1])"),
                        ("gridworld of 0 rows", "gridworld(0, 5)"),
                        ("gridworld of 2.5 rows", "gridworld(2.5, 5)"),
                        ("gridworld with colours out of range", "gridworld(2, 2, n_colours=2, colours=[[0, 1], [2, 0]])"),
                        ("Environment.from_arrays with a successor out of range", "Environment.from_arrays([[5, 0]], [0, 1])"),
                        ("Environment.from_arrays with a negative observation", "Environment.from_arrays([[1, 0]], [0, -1])"),
                        ("TwoLevelMemory with merge 'bogus'", "TwoLevelMemory(10, 4, merge='bogus').fit(Trajectories([[0, 1]], [[-1, 0]]))"),
                        ("TwoLevelMemory with size 0", "TwoLevelMemory(10, 4, initial_size=0).fit(Trajectories([[0, 1]], [[-1, 0]]))"),
                        ("TwoLevelMemory.load of a missing file", "TwoLevelMemory.load('/nonexistent/agent.npz')"),
                        ("CloneHMM with -1 clones", "CloneHMM(n_clones=-1).fit(Trajectories([[0, 1]], [[-1, 0]]), 2, 1)"),
                        ("FirstOrderModel with a NaN pseudocount", "FirstOrderModel(pseudocount=float('nan')).fit(Trajectories([[0, 1]], [[-1, 0]]), 2, 1)")):
        c.append(_api(label, f"""
            from hmmmerge import Environment, gridworld
            from hmmmerge.agent import TwoLevelMemory
            from hmmmerge.baselines.em import CloneHMM
            from hmmmerge.baselines.first_order import FirstOrderModel
            from hmmmerge.rollouts import Trajectories
            from hmmmerge.structure import markov_radii
            from hmmmerge.sweep import Sweep, example_run, make_executor
            try:
                {expr}
            except FileNotFoundError as e:  # a missing file is a clear error too
                raise ValueError(str(e)) from None
        """))
    return c


# --------------------------------------------------------------------------- special checks
def make_specials(tmp):
    """A private device node (a copy of /dev/null, when mknod is allowed), a FIFO and a folder."""
    specials = {}
    dev = os.path.join(tmp, "device")
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        specials["device"] = dev
    except (PermissionError, OSError, AttributeError):
        pass
    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    specials["fifo"] = fifo
    folder = os.path.join(tmp, "folder")
    os.mkdir(folder)
    specials["folder"] = folder
    return specials


def specials_intact(specials) -> list[str]:
    test = {"device": stat.S_ISCHR, "fifo": stat.S_ISFIFO, "folder": stat.S_ISDIR}
    return [f"{kind} {path} replaced" for kind, path in specials.items()
            if not (os.path.lexists(path) and test[kind](os.lstat(path).st_mode))]


KILL_SCRIPT = """
import sys
from hmmmerge.sweep import Sweep, example_run, grid
configs = grid(x=list(range(8)), y=[1])
for c in configs:
    c.update(sleep=60)
Sweep(sys.argv[1], example_run, configs).run(executor="local:2", progress=False)
"""


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def surviving_workers(tmp, rounds=3) -> tuple[int, int]:
    """Kill the parent of a running sweep ``rounds`` times; returns (workers seen, workers alive 5 s later)."""
    seen = alive = 0
    for r in range(rounds):
        proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, os.path.join(tmp, f"kill{r}")],
                                env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT)
        workers = set()
        deadline = time.time() + 60
        while time.time() < deadline and len(workers) < 2:
            try:
                workers = {int(x) for x in open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()}
            except OSError:
                pass
            time.sleep(0.1)
        proc.kill()
        proc.wait()
        time.sleep(5)
        left = [w for w in workers if _alive(w)]
        seen += len(workers)
        alive += len(left)
        for w in left:
            os.kill(w, signal.SIGKILL)
    return seen, alive


# --------------------------------------------------------------------------- main
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cap-gib", type=float, default=4.0, help="address-space cap of each case (GiB)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds before a case counts as a hang")
    p.add_argument("--jobs", type=int, default=2, help="cases run at once")
    p.add_argument("--json", metavar="FILE", help="also write every outcome as JSON")
    p.add_argument("--skip", action="append", default=[], metavar="TEXT",
                   help="leave out cases whose name contains TEXT (e.g. 'local:100000' when auditing old code "
                        "that would fork that many workers)")
    args = p.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="hmmmerge-audit-")
    try:
        specials = make_specials(tmp)
        cases = (size_cases(tmp) + write_cases(tmp, specials) + agent_cases(tmp) + env_file_cases(tmp)
                 + api_cases())
        cases = [c for c in cases if not any(text in c["name"] for text in args.skip)]
        cap = int(args.cap_gib * (1 << 30))
        start = time.perf_counter()
        with cf.ThreadPoolExecutor(args.jobs) as ex:
            outcomes = list(ex.map(lambda c: run_case(c, cap, args.timeout), cases))
        # "any": a damaged file may still be a valid world; exit 0 with output is then correct
        outcomes = [("clean", d) if c["expect"] == "any" and o == "wrong" and d.startswith("exit 0") else (o, d)
                    for c, (o, d) in zip(cases, outcomes)]
        replaced = specials_intact(specials)
        seen, alive = surviving_workers(tmp)
        wall = time.perf_counter() - start
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    counts = {k: 0 for k in ("clean", "signal", "hang", "wrong", "traceback")}
    for case, (outcome, detail) in zip(cases, outcomes):
        counts[outcome] += 1
        if outcome != "clean":
            print(f"[{outcome}] {case['name'][:150]}: {detail}")
    n = len(cases)
    print(f"\n{n} hostile inputs, {wall:.0f} s: clean {counts['clean']} ({100 * counts['clean'] / n:.1f}%), "
          f"signals {counts['signal']}, hangs {counts['hang']}, silently wrong {counts['wrong']}, "
          f"tracebacks / other {counts['traceback']}")
    print(f"non-regular files replaced: {len(replaced)} of {len(specials)} checked"
          + ("" if not replaced else " (" + "; ".join(replaced) + ")"))
    print(f"workers outliving a killed sweep: {alive} of {seen}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"counts": counts, "n": n, "replaced": replaced, "workers_seen": seen, "workers_alive": alive,
                       "cases": [{"name": c["name"], "outcome": o, "detail": d} for c, (o, d) in zip(cases, outcomes)]},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
    """Run one case; returns ``(outcome, detail)``; ``lost`` if a file the case keeps changed or vanished."""
    outcome, detail = _run_case(case, cap_bytes, timeout)
    for path, digest in case.get("keep", {}).items():
        if _digest(path) != digest:
            return "lost", f"{path} shortened, changed or lost ({outcome}: {detail})"
    if outcome == "clean" and case.get("match") and case["match"] not in detail and not detail.startswith("ok"):
        return "wrong", f"the message does not say {case['match']!r}: {detail}"
    return outcome, detail


def _digest(path):
    """A file's content hash, or its kind for a FIFO, folder or device (never opened), or None if missing."""
    import hashlib

    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(mode):
        return f"kind {stat.S_IFMT(mode)}"
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _run_case(case, cap_bytes, timeout):
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
            return "clean", lines[0][:400]
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
def _cli(*args, expect="error", check=None, match=None, keep=()):
    """A command line; ``match``: text the one-line error must hold; ``keep``: files that must stay as they are."""
    return {"argv": [sys.executable, "-m", "hmmmerge", *map(str, args)], "expect": expect, "check": check,
            "name": "hmmmerge " + " ".join(map(str, args)), "match": match,
            "keep": {str(p): _digest(p) for p in keep}}


API_PRELUDE = """
import sys, json, numpy as np
def main():
{body}
try:
    main()
except (ValueError, TypeError) as e:
    print(" ".join(str(e).split()), file=sys.stderr); sys.exit(2)
"""


def _api(name, body="", expect="error", check=None, match=None):
    code = API_PRELUDE.format(body=textwrap.indent(textwrap.dedent(body), "    "))
    return {"argv": [sys.executable, "-c", code], "expect": expect, "check": check, "name": "API: " + name,
            "match": match}


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
    same_content = set()
    for i in range(40):
        b = bytearray(raw)
        for pos in rng.integers(0, len(b), size=int(rng.integers(1, 8))):
            b[pos] ^= int(rng.integers(1, 256))
        put(f"flipped-{i}.npz", bytes(b))
        if _same_arrays(raw, bytes(b)):  # the flips hit bytes zip readers ignore: the same agent, to be accepted
            same_content.add(f"flipped-{i}.npz")
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
    cases = [_cli("run", "--resume", path, "--episodes", "3", "--eval-episodes", "2",
                  expect="ok" if name in same_content else "error") for name, path in files.items()]
    cases.append(_cli("run", "--resume", good, "--episodes", "3", "--eval-episodes", "2", "--json", expect="ok",
                      check=_json_check(lambda r: r["episodes"] == 15 or f"episodes {r['episodes']} != 15")))
    cases.append(_cli("run", "--resume", os.path.join(tmp, "no-such-file.npz"), "--episodes", "3"))
    cases.append(_cli("run", "--resume", tmp, "--episodes", "3"))
    cases.append(_cli("run", "--resume", good, "--grid", "5x5", "--colours", "3", "--episodes", "3"))
    return cases


def _same_arrays(raw: bytes, other: bytes) -> bool:
    """Whether two ``.npz`` byte strings hold the same arrays (names, dtypes, shapes, bytes)."""
    import io

    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as a, np.load(io.BytesIO(other), allow_pickle=False) as b:
            return sorted(a.files) == sorted(b.files) and all(
                a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes()
                for k in a.files)
    except Exception:  # noqa: BLE001 - unreadable: not the same
        return False


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


# --------------------------------------------------------------------------- fold agent files and parameters (issue 24)
def fold_cases(tmp):
    """Damaged ``merge="fold"`` / ``"fold-noisy"`` agent files given to ``run --resume`` -- each change with its
    checksum recomputed and as a file without format, version and checksum (so that the validation of the
    merger's state alone must catch it) -- and absurd fold parameters through the API."""
    sys.path.insert(0, ROOT)
    from hmmmerge._agent_file import write_agent_file

    cases = []
    rng = np.random.default_rng(24)
    for merge, prefix in (("fold", "fold_"), ("fold-noisy", "foldnoisy_")):
        base_dir = os.path.join(tmp, f"agent-{merge}")
        subprocess.run([sys.executable, "-m", "hmmmerge", "run", "--merge", merge, "--episodes", "30",
                        "--eval-episodes", "0", "--out", base_dir], check=True, capture_output=True,
                       env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT)
        good = os.path.join(base_dir, "agent.npz")
        with np.load(good, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
        meta = json.loads(str(arrays.pop("meta")))
        legacy_meta = {k: v for k, v in meta.items() if k not in ("format", "version", "checksum")}

        def put(name, expect="error", meta_change=None, **changes):
            d = {k: v for k, v in dict(arrays, **changes).items() if v is not None}
            m = dict(meta, **(meta_change or {}))
            path = os.path.join(tmp, f"{merge}-{name}.npz")
            write_agent_file(path, m, **d)
            cases.append(_cli("run", "--resume", path, "--episodes", "3", "--eval-episodes", "0", expect=expect))
            path = os.path.join(tmp, f"{merge}-{name}-unversioned.npz")
            np.savez_compressed(path, meta=np.array(json.dumps(dict(legacy_meta, **(meta_change or {})))), **d)
            cases.append(_cli("run", "--resume", path, "--episodes", "3", "--eval-episodes", "0", expect=expect))

        def entry(key, value):
            a = arrays[key].copy()
            a.flat[a.size // 2] = value
            return a

        for key in sorted(k for k in arrays if k.startswith(prefix)):
            if arrays[key].size and arrays[key].dtype != bool:   # a counter may take any count
                put(f"{key}-1e6", expect="any" if key.endswith("stats") else "error", **{key: entry(key, 10**6)})
                put(f"{key}-minus-2", **{key: entry(key, -2)})
            put(f"{key}-float", **{key: arrays[key].astype(float) + 0.5})
            # files of older versions lack these: loading without them is right
            optional = key in ("fold_provisional", "foldnoisy_next_cid", "foldnoisy_visits", "foldnoisy_log",
                               "foldnoisy_retested")
            put(f"{key}-missing", expect="any" if optional else "error", **{key: None})
        stats = prefix + "stats"
        put(f"{stats}-short", **{stats: arrays[stats][:3]})
        for field, value in (("popped", "x"), ("steps", [1]), ("sleeps", 1.5)):
            put(f"meta-{field}", meta_change={field: value})
        for i in range(20):   # random entries set to odd values: a working agent or a one-line error
            keys = sorted(k for k in arrays if k.startswith(prefix) and arrays[k].size)
            key = keys[int(rng.integers(len(keys)))]
            a = arrays[key].copy()
            a.flat[int(rng.integers(a.size))] = [10**6, -1, 0, 1, 2**62][int(rng.integers(5))] if a.dtype != bool else 1
            put(f"random-{i}", expect="any", **{key: a})
    for merger, params in (("FoldMerger", "colour_past=10**6"), ("FoldMerger", "colour_past=2**63"),
                           ("FoldMerger", "colour_evidence=10**30"), ("FoldMerger", "min_evidence=10**30"),
                           ("StatisticalFoldMerger", "risk=5e-324"), ("StatisticalFoldMerger", "noise=5e-324")):
        cases.append(_api(f"{merger}({params}) on a small world", f"""
            from hmmmerge import gridworld, random_walk
            from hmmmerge.agent import TwoLevelMemory
            from hmmmerge.fold import {merger}
            TwoLevelMemory(10, 4, merger={merger}({params})).fit(random_walk(gridworld(), 5, 20, seed=0))
        """))
    return cases
# --------------------------------------------------------------------------- end of the fold cases


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
        # fit of no episodes is refused by every estimator (the agent's partial_fit of none is a no-op)
        c.append(_api(f"fitting 0 episodes: {label}", body=f"""
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


# --------------------------------------------------------------------------- issue 25: files, values, sizes
RUN_CK = ["run", "--episodes", "12", "--episode-length", "20", "--checkpoint-every", "4", "--eval-episodes", "0",
          "--json"]


def _hmmmerge(*args):
    subprocess.run([sys.executable, "-m", "hmmmerge", *map(str, args)], check=True, capture_output=True,
                   env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT)


def _rewrite_meta(path, change):
    """The agent file ``path`` rewritten with ``change(meta)`` applied and its checksum recomputed."""
    sys.path.insert(0, ROOT)
    from hmmmerge._agent_file import write_agent_file

    with np.load(path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    meta = json.loads(str(arrays.pop("meta")))
    for k in ("format", "version", "checksum"):
        meta.pop(k, None)
    change(meta)
    write_agent_file(path, meta, **arrays)


def _folder_files(d):
    return [os.path.join(d, name) for name in sorted(os.listdir(d))
            if os.path.isfile(os.path.join(d, name)) and name != "checkpoint.npz"]


def checkpoint_cases(tmp):
    """``run --resume D/checkpoint.npz --out D`` with a damaged run state: refused before any file changes."""
    base = os.path.join(tmp, "ck", "base")
    _hmmmerge(*RUN_CK, "--out", base)  # checkpoint at episode 8, history.csv of 12 rows

    def setitem(key, value):
        return lambda m: m["extra"].__setitem__(key, value)

    damages = {
        "target_episodes=10**12": setitem("target_episodes", 10**12), "target_episodes=8": setitem("target_episodes", 8),
        "target_episodes='12'": setitem("target_episodes", "12"), "target_episodes=12.5": setitem("target_episodes", 12.5),
        "history_rows=-1": setitem("history_rows", -1), "history_rows=5": setitem("history_rows", 5),
        "history_rows=9": setitem("history_rows", 9), "history_rows=0": setitem("history_rows", 0),
        "history_rows=True": setitem("history_rows", True), "history_rows=10**30": setitem("history_rows", 10**30),
        "walk_rng='x'": setitem("walk_rng", "x"), "walk_rng=[]": setitem("walk_rng", []),
        "walk_rng of MT19937": setitem("walk_rng", {"bit_generator": "MT19937", "state": {}}),
        "walk_rng state 2**200": lambda m: m["extra"]["walk_rng"]["state"].__setitem__("state", 2**200),
        "extra a list": lambda m: m.__setitem__("extra", [1, 2]), "extra a string": lambda m: m.__setitem__("extra", "x"),
        "extra a number": lambda m: m.__setitem__("extra", 7),
        "extra without target_episodes": lambda m: m["extra"].pop("target_episodes"),
        "extra without history_rows": lambda m: m["extra"].pop("history_rows"),
        "extra without walk_rng": lambda m: m["extra"].pop("walk_rng"),
        "episode_length 30": setitem("episode_length", 30),
        "popped=4": lambda m: m.__setitem__("popped", 4), "popped='x'": lambda m: m.__setitem__("popped", "x"),
    }
    cases = []
    for k, (label, change) in enumerate(damages.items()):
        d = os.path.join(tmp, "ck", f"d{k}")
        shutil.copytree(base, d)
        _rewrite_meta(os.path.join(d, "checkpoint.npz"), change)
        case = _cli(*RUN_CK, "--out", d, "--resume", os.path.join(d, "checkpoint.npz"), keep=_folder_files(d))
        case["name"] = f"run --resume checkpoint with {label} --out its folder"
        cases.append(case)
    for label, edit in (("a foreign row", lambda ls: ls[:3] + ["77" + ls[3][ls[3].index(","):]] + ls[4:]),
                        ("a missing row", lambda ls: ls[:4] + ls[5:]), ("4 rows only", lambda ls: ls[:5]),
                        ("another header", lambda ls: ["step" + ls[0][len("episode"):]] + ls[1:])):
        d = os.path.join(tmp, "ck", "h-" + label.replace(" ", "-"))
        shutil.copytree(base, d)
        path = os.path.join(d, "history.csv")
        with open(path) as f:
            lines = f.readlines()
        with open(path, "w") as f:
            f.writelines(edit(lines))
        case = _cli(*RUN_CK, "--out", d, "--resume", os.path.join(d, "checkpoint.npz"), keep=_folder_files(d))
        case["name"] = f"run --resume checkpoint --out its folder, history.csv with {label}"
        cases.append(case)
    with open(os.path.join(base, "history.csv")) as f:
        reference = f.read()
    d = os.path.join(tmp, "ck", "intact")
    shutil.copytree(base, d)

    def same_history(out, d=d):
        with open(os.path.join(d, "history.csv")) as f:
            return f.read() == reference or "history.csv differs from the uninterrupted run's"

    case = _cli(*RUN_CK, "--out", d, "--resume", os.path.join(d, "checkpoint.npz"), expect="ok", check=same_history)
    case["name"] = "run --resume an intact checkpoint --out its folder (history as uninterrupted)"
    cases.append(case)
    d = os.path.join(tmp, "ck", "continued")
    shutil.copytree(base, d)

    def continued(out, d=d):
        with open(os.path.join(d, "history.csv")) as f:
            episodes = [line.split(",", 1)[0] for line in f.read().splitlines()[1:]]
        return episodes == [str(e) for e in range(15)] or f"history.csv episodes {episodes}"

    case = _cli("run", "--episodes", "3", "--episode-length", "20", "--eval-episodes", "0", "--json", "--out", d,
                "--resume", os.path.join(d, "agent.npz"), expect="ok", check=continued)
    case["name"] = "run --resume D/agent.npz --out D (its history continued, not cut)"
    cases.append(case)
    return cases


def nonregular_input_cases(tmp):
    """FIFOs and devices where the toolkit reads (or appends to) a file: refused at once, left as they are."""
    sys.path.insert(0, ROOT)
    from hmmmerge import gridworld

    d = os.path.join(tmp, "nonregular")
    os.makedirs(d)

    def fifo(name):
        path = os.path.join(d, name)
        os.mkfifo(path)
        return path

    cases = []
    for name in ("world.json", "world.graphml"):
        path = fifo(name)
        cases.append(_cli("env", "--graph", path, match="is a FIFO", keep=[path]))
    path = fifo("agent.npz")
    cases.append(_cli("run", "--resume", path, "--episodes", "3", match="is a FIFO", keep=[path]))
    out = os.path.join(d, "out")
    os.makedirs(out)
    os.mkfifo(os.path.join(out, "history.csv"))
    cases.append(_cli("run", "--episodes", "3", "--eval-episodes", "0", "--out", out, match="is a FIFO",
                      keep=[os.path.join(out, "history.csv")]))
    ck = os.path.join(d, "ck")
    shutil.copytree(os.path.join(tmp, "ck", "base"), ck)
    os.unlink(os.path.join(ck, "history.csv"))
    os.mkfifo(os.path.join(ck, "history.csv"))
    cases.append(_cli(*RUN_CK, "--out", ck, "--resume", os.path.join(ck, "checkpoint.npz"), match="is a FIFO",
                      keep=_folder_files(ck) + [os.path.join(ck, "history.csv")]))
    cases.append(_cli("run", "--episodes", "3", "--eval-episodes", "0", "--out", ck, "--resume",
                      os.path.join(ck, "agent.npz"), match="is a FIFO", keep=[os.path.join(ck, "history.csv")]))
    for dev in ("/dev/zero", "/dev/urandom"):
        if os.path.exists(dev):  # read only: never written
            cases.append(_cli("env", "--graph", dev, match="is a device"))
            cases.append(_cli("run", "--resume", dev, "--episodes", "3", match="is a device"))
    good = os.path.join(d, "world.real.json")
    gridworld(3, 3, n_colours=3).save(good)
    link = os.path.join(d, "world.link.json")
    os.symlink(good, link)
    cases.append(_cli("env", "--graph", link, "--json", expect="ok",
                      check=_json_check(lambda r: r["n_states"] == 9 or "bad n_states")))
    # a sweep whose run file is a FIFO, and an executor checked when every run is done already
    rep = os.path.join(d, "reproduce")
    _hmmmerge("reproduce", "--quick", "--only", "true_sim", "--executor", "serial", "--out", rep, "--json")
    runs = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(os.path.join(rep, "runs")) for f in fs
                  if f.endswith(".npz"))
    done = os.path.join(d, "reproduce-done")
    shutil.copytree(rep, done)
    os.unlink(runs[0])
    os.mkfifo(runs[0])
    cases.append(_cli("reproduce", "--quick", "--only", "true_sim", "--executor", "serial", "--out", rep,
                      match="is a FIFO", keep=[runs[0]]))
    for spec in ("bogus", "local:²", "local:0", "tls://", "dask://host:99999"):
        cases.append(_cli("reproduce", "--quick", "--only", "true_sim", "--executor", spec, "--out", done,
                          match="executor"))
    cases.append(_cli("reproduce", "--quick", "--only", "true_sim", "--executor", "serial", "--out", done, "--json",
                      expect="ok"))
    return cases


def world_value_cases(tmp):
    """World files with huge values, deep nesting or GraphML defaults; unsigned values through the API."""
    d = os.path.join(tmp, "values")
    os.makedirs(d)

    def world(obs2, n_obs=None):
        graph = {"start": 0} if n_obs is None else {"start": 0, "n_obs": n_obs}
        return {"directed": True, "multigraph": True, "graph": graph,
                "nodes": [{"id": 0, "obs": 0}, {"id": 1, "obs": 1}, {"id": 2, "obs": obs2}],
                "edges": [{"source": u, "target": (u + 1) % 3, "action": 0} for u in range(3)]}

    def put(name, text):
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    graphml = ('<?xml version="1.0" encoding="utf-8"?>\n<graphml xmlns="http://graphml.graphdrawing.org/xmlns">\n'
               '<key id="d0" for="node" attr.name="obs" attr.type="{type}">{default}</key>\n'
               '<key id="d1" for="edge" attr.name="action" attr.type="int"><default>0</default></key>\n'
               '<key id="d2" for="graph" attr.name="start" attr.type="string"/>\n'
               '<graph edgedefault="directed"><data key="d2">0</data>\n'
               '<node id="0"><data key="d0">0</data></node><node id="1"><data key="d0">{obs1}</data></node>'
               '<node id="2"/>\n<edge source="0" target="1"/><edge source="1" target="2"/>'
               '<edge source="2" target="0"/>\n</graph></graphml>\n')
    cases = []
    for label, obs in (("2**63", 2**63), ("2**64", 2**64), ("10**30", 10**30), ("-1", -1), ("2**31", 2**31)):
        cases.append(_cli("env", "--graph", put(f"obs-{label}.json", json.dumps(world(obs))),
                          match=f"obs={obs};"))
    cases.append(_cli("env", "--graph", put("n_obs-10**30.json", json.dumps(world(2, n_obs=10**30))), match="n_obs="))
    cases.append(_cli("env", "--graph", put("colour-10**30.json", json.dumps(world({str(10**30): 1.0}))),
                      match="colour"))
    for t in ("int", "long"):
        cases.append(_cli("env", "--graph", put(f"23-digits-{t}.graphml", graphml.format(
            type=t, default="<default>2</default>", obs1="12345678901234567890123")), match="12345678901234567890123"))
    big = put("obs-10**8.json", json.dumps(world(10**8)))
    for cmd in (["env"], ["run", "--episodes", "3"], ["evaluate", "--episodes", "3"],
                ["baseline", "first-order", "--episodes", "3"]):
        cases.append(_cli(*cmd, "--graph", big, match="100000001 observations"))
    cases.append(_cli("env", "--graph", put("nested-100000.json", '{"nodes": ' + "[" * 100_000 + "]" * 100_000 + "}"),
                      match="nested too deeply"))
    cases.append(_cli("env", "--graph", put("nested-id.json", json.dumps(world(2)).replace('"id": 2', '"id": ' + "[" * 990 + "2" + "]" * 990)),
                      expect="any"))
    cases.append(_cli("env", "--graph", put("default.graphml", graphml.format(type="int", default="<default>2</default>",
                                                                             obs1="1")), "--json", expect="ok",
                      check=_json_check(lambda r: r["clones"] == {"0": 1, "1": 1, "2": 1} or f"clones {r['clones']}")))
    cases.append(_cli("env", "--graph", put("no-default.graphml", graphml.format(type="int", default="", obs1="1")),
                      match="node 2 has no 'obs'"))
    cases.append(_api("Trajectories with a uint64 observation 2**63", """
        from hmmmerge.trajectories import Trajectories
        Trajectories(np.array([[0, 2**63]], dtype=np.uint64), [[-1, 0]])
    """, match="9223372036854775808"))
    cases.append(_api("Environment with a uint64 observation 2**63", """
        import networkx as nx
        from hmmmerge import Environment
        g = nx.MultiDiGraph(); g.add_node(0, obs=np.uint64(2**63)); g.add_edge(0, 0, action=0)
        Environment(g, start=0)
    """, match="9223372036854775808"))
    cases.append(_api("Environment.from_arrays with a uint64 observation 2**63", """
        from hmmmerge import Environment
        Environment.from_arrays([[0]], np.array([2**63], dtype=np.uint64))
    """, match="9223372036854775808"))
    return cases


def gym_cases():
    """``from_gymnasium`` sizes: refused up front (they hung or ran out of memory)."""
    c = []
    for label, call in (("agent_view_size=10001", "from_gymnasium('MiniGrid-Empty-5x5-v0', agent_view_size=10001)"),
                        ("agent_view_size=10**9+1", "from_gymnasium('MiniGrid-Empty-5x5-v0', agent_view_size=10**9 + 1)"),
                        ("agent_view_size=4", "from_gymnasium('MiniGrid-Empty-5x5-v0', agent_view_size=4)"),
                        ("n_episodes=10**12", "from_gymnasium('FrozenLake-v1', n_episodes=10**12, episode_length=5)"),
                        ("episode_length=10**12", "from_gymnasium('FrozenLake-v1', n_episodes=5, episode_length=10**12)"),
                        ("n_episodes=-1", "from_gymnasium('FrozenLake-v1', n_episodes=-1)")):
        c.append(_api(f"from_gymnasium {label}", f"from hmmmerge.gym_worlds import from_gymnasium\n{call}"))
    c.append(_api("from_gymnasium agent_view_size=9 on a 5x5 grid (the largest it fills)", """
        from hmmmerge.gym_worlds import from_gymnasium
        print(json.dumps(from_gymnasium('MiniGrid-Empty-5x5-v0', agent_view_size=9).n_states))
    """, expect="ok", check=_json_check(lambda r: r == 36 or f"{r} states")))
    return c


def recording_cases(tmp):
    """Damaged recordings given to ``Recording.load``."""
    d = os.path.join(tmp, "recordings")
    os.makedirs(d)
    good = os.path.join(d, "good.npz")
    subprocess.run([sys.executable, "-c", "import sys\nfrom hmmmerge.gym_worlds import from_gymnasium\n"
                    "from_gymnasium('FrozenLake-v1', n_episodes=6, episode_length=4, is_slippery=False).save(sys.argv[1])",
                    good], check=True, capture_output=True, env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT)
    raw = open(good, "rb").read()
    vocab = open(good + ".vocabulary.json").read()
    with np.load(good, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    paths = {}

    def put(name, data=None, vocabulary=vocab, **changes):
        path = os.path.join(d, name + ".npz")
        if data is None:
            np.savez_compressed(path, **dict(arrays, **changes))
        else:
            with open(path, "wb") as f:
                f.write(data)
        with open(path + ".vocabulary.json", "w") as f:
            f.write(vocabulary)
        paths[name] = path

    put("empty", b"")
    for frac in (0.1, 0.5, 0.9):
        put(f"truncated-{frac}", raw[: int(len(raw) * frac)])
    rng = np.random.default_rng(2)
    for i in range(20):
        b = bytearray(raw)
        for pos in rng.integers(0, len(b), size=int(rng.integers(1, 6))):
            b[pos] ^= int(rng.integers(1, 256))
        put(f"flipped-{i}", bytes(b))
    put("nested-vocabulary", vocabulary='{"format": "hmmmerge.vocabulary", "version": 1, "observations": ['
        + "[" * 100_000 + "]" * 100_000 + "]}")
    put("empty-vocabulary", vocabulary="")
    put("length-0-n_actions--3", obs=np.zeros((0, 5), np.int64), actions=np.full((0, 5), -1), n_actions=np.int64(-3))
    put("n_actions--3", n_actions=np.int64(-3))
    put("n_actions-vector", n_actions=np.arange(3))
    put("dropped--1", dropped=np.int64(-1))
    put("obs-float", obs=arrays["obs"] + 0.5)
    put("obs-uint64-2**63", obs=np.full(arrays["obs"].shape, 2**63, dtype=np.uint64))
    put("obs-outside-vocabulary", obs=arrays["obs"] + 100)
    cases = []
    for name, path in paths.items():
        cases.append(_api(f"Recording.load of a recording: {name}", f"""
            from hmmmerge.gym_worlds import Recording
            Recording.load({path!r})
        """, expect="any" if name.startswith("flipped") else "error"))
    cases.append(_api("Recording.load of an intact recording", f"""
        from hmmmerge.gym_worlds import Recording
        print(json.dumps(Recording.load({good!r}).trajectories.obs.shape))
    """, expect="ok", check=_json_check(lambda r: r == [6, 5] or f"shape {r}")))
    return cases


def cli_option_cases(tmp):
    """Options that gave tracebacks or were silently ignored, and output folders that are not folders."""
    afile, afifo = os.path.join(tmp, "a-file"), os.path.join(tmp, "a-fifo")
    with open(afile, "w") as f:
        f.write("kept")
    os.mkfifo(afifo)
    c = [_cli("reproduce", "--quick", "--only", "true_sim", "--executor", "tls://127.0.0.1:1", "--out",
              os.path.join(tmp, "tls"), match="tls://127.0.0.1:1"),
         _cli("reproduce", "--quick", "--only", "true_sim", "--executor", "local:²", "--out", os.path.join(tmp, "sq"),
              match="digits 0-9"),
         _cli("evaluate", "--draw-factor-graph", "", match="--draw-factor-graph"),
         _cli("env", "--graph", "", match="--graph"), _cli("env", "--plot", "", match="--plot"),
         _cli("run", "--out", "", match="--out"), _cli("run", "--resume", "", match="--resume"),
         _cli("demo", "--executor", "bogus", "--out", os.path.join(tmp, "demo-bogus"), match="executor"),
         _cli("run", "--episodes", "3", "--out", afile, match="is a regular file, not a folder", keep=[afile]),
         _cli("reproduce", "--quick", "--only", "true_sim", "--out", afifo, match="is a FIFO, not a folder",
              keep=[afifo]),
         _cli("demo", "--colouring", str(2**70), "--episodes", "2", "--no-em", "--executor", "serial", "--json",
              "--out", os.path.join(tmp, "demo-2-70"), expect="ok",
              check=_json_check(lambda r: len(r["table"]) >= 4 or "no table"))]
    c.append(_api("TwoLevelMemory.partial_fit of 0 episodes (a no-op)", """
        from hmmmerge.agent import TwoLevelMemory
        from hmmmerge.rollouts import Trajectories
        empty = Trajectories(np.zeros((0, 5), dtype=np.int64), np.full((0, 5), -1, dtype=np.int64))
        print(json.dumps(TwoLevelMemory(10, 4).partial_fit(empty).episodes_))
    """, expect="ok", check=_json_check(lambda r: r == 0 or f"{r} episodes")))
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
    p.add_argument("--groups", metavar="G,G", help="only these groups of cases (default: all; names in main)")
    args = p.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="hmmmerge-audit-")
    try:
        specials = make_specials(tmp)
        groups = {"sizes": lambda: size_cases(tmp), "writes": lambda: write_cases(tmp, specials),
                  "agent-files": lambda: agent_cases(tmp), "env-files": lambda: env_file_cases(tmp),
                  "api": api_cases,
                  # issue 25: checkpoints, non-regular inputs, world values, Gymnasium, recordings, options
                  "checkpoints": lambda: checkpoint_cases(tmp), "non-regular": lambda: nonregular_input_cases(tmp),
                  "world-values": lambda: world_value_cases(tmp), "gym": gym_cases,
                  "recordings": lambda: recording_cases(tmp), "options": lambda: cli_option_cases(tmp),
                  # issue 24: fold / fold-noisy agent files and parameters
                  "fold": lambda: fold_cases(tmp)}
        chosen = args.groups.split(",") if args.groups else list(groups)
        unknown = sorted(set(chosen) - set(groups))
        if unknown:
            p.error(f"--groups: unknown {unknown}; choose from {list(groups)}")
        if "non-regular" in chosen and "checkpoints" not in chosen:
            chosen.insert(0, "checkpoints")  # the non-regular cases reuse the checkpointed run
        cases = [case for g in chosen for case in groups[g]()]
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
    counts = {k: 0 for k in ("clean", "signal", "hang", "wrong", "traceback", "lost")}
    for case, (outcome, detail) in zip(cases, outcomes):
        counts[outcome] += 1
        if outcome != "clean":
            print(f"[{outcome}] {case['name'][:150]}: {detail}")
    n = len(cases)
    print(f"\n{n} hostile inputs, {wall:.0f} s: clean {counts['clean']} ({100 * counts['clean'] / n:.1f}%), "
          f"signals {counts['signal']}, hangs {counts['hang']}, silently wrong {counts['wrong']}, "
          f"tracebacks / other {counts['traceback']}, files shortened or lost {counts['lost']}")
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

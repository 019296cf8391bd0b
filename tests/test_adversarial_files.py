"""Hostile files and values (issue 25): nothing lost on a damaged checkpoint, only regular files read or
written, sizes and values of world files, Gymnasium and recording inputs checked before anything is allocated.

Cases that could allocate or block run in a subprocess under an address-space
cap and a timeout, so that a regression fails instead of exhausting memory or
hanging; FIFOs are made with ``os.mkfifo`` under ``tmp_path`` and nothing is
ever written to a device path.
"""

import json
import os
import shutil
import stat
import sys
import textwrap

import numpy as np
import pytest

from hmmmerge._agent_file import write_agent_file
from hmmmerge.cli import main

sys.path.insert(0, os.path.dirname(__file__))
from test_adversarial import ROOT, _run  # noqa: E402  (the capped subprocess)


def _cli(*argv, timeout=120):
    return _run([sys.executable, "-m", "hmmmerge", *map(str, argv)], timeout=timeout)


def _one_line(stderr: str) -> bool:
    return len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr


def _refused(capsys, argv, match=None) -> str:
    """``main(argv)`` exits 2 with one line on stderr (containing ``match``); returns that line."""
    try:
        code = main(list(map(str, argv)))
    except SystemExit as e:  # argparse
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and _one_line(err), (argv, code, err)
    if match is not None:
        assert match in err, err
    return err


# --------------------------------------------------------------------------- damaged checkpoints
RUN = ["run", "--episodes", "12", "--episode-length", "20", "--checkpoint-every", "4", "--eval-episodes", "0",
       "--json"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A run of 12 episodes checkpointed every 4: checkpoint.npz at episode 8, history.csv of 12 rows."""
    d = tmp_path_factory.mktemp("ck") / "run"
    assert main([*RUN, "--out", str(d)]) == 0
    return d


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _rewrite_meta(path, change):
    """Rewrite the agent file ``path`` with ``change(meta)`` applied, checksum recomputed (a valid file)."""
    with np.load(path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    meta = json.loads(str(arrays.pop("meta")))
    for k in ("format", "version", "checksum"):
        meta.pop(k)
    change(meta)
    write_agent_file(path, meta, **arrays)


def _snapshot(d):
    return {p: (d / p).read_bytes() for p in sorted(os.listdir(d))}


def _set(key, value):
    return lambda m: m["extra"].__setitem__(key, value)


DAMAGED_EXTRA = {
    "history_rows -1": (_set("history_rows", -1), "'history_rows' -1 is outside 0..8"),
    "history_rows 5": (_set("history_rows", 5), "holds 8 rows of the episodes before the checkpoint"),
    "history_rows 9": (_set("history_rows", 9), "'history_rows' 9 is outside 0..8"),
    "history_rows 2.0": (_set("history_rows", 2.0), "'history_rows' is 2.0, expected an integer"),
    "history_rows true": (_set("history_rows", True), "'history_rows' is True, expected an integer"),
    "target_episodes 10**12": (_set("target_episodes", 10**12), "'target_episodes' 1000000000000 is too many"),
    "target_episodes 8": (_set("target_episodes", 8), "'target_episodes' 8 is not more than the 8 episodes"),
    "target_episodes '12'": (_set("target_episodes", "12"), "'target_episodes' is '12', expected an integer"),
    "walk_rng 'x'": (_set("walk_rng", "x"), "'walk_rng' is not a state of the walk's random generator"),
    "walk_rng of MT19937": (_set("walk_rng", {"bit_generator": "MT19937", "state": {}}), "'walk_rng' is not"),
    "walk_rng state 'x'": (lambda m: m["extra"]["walk_rng"].__setitem__("state", "x"), "'walk_rng' is not"),
    "walk_rng state 2**200": (lambda m: m["extra"]["walk_rng"]["state"].__setitem__("state", 2**200),
                              "'walk_rng' is not"),
    "extra a list": (lambda m: m.__setitem__("extra", [1, 2]), "meta 'extra' is a list"),
    "extra a string": (lambda m: m.__setitem__("extra", "walk_rng"), "meta 'extra' is a str"),
    "extra a number": (lambda m: m.__setitem__("extra", 3), "meta 'extra' is a int"),
    "no target_episodes": (lambda m: m["extra"].pop("target_episodes"), "run state has no 'target_episodes'"),
    "no walk_rng": (lambda m: m["extra"].pop("walk_rng"), "run state has no 'walk_rng'"),
    "other episode length": (_set("episode_length", 30), "has --episode-length 30; resume it with the same"),
    "popped 4": (lambda m: m.__setitem__("popped", 4), "history up to episode 4, not its last episode 8"),
    "popped a list": (lambda m: m.__setitem__("popped", [1]), "meta 'popped' is [1]"),
    "popped 100": (lambda m: m.__setitem__("popped", 100), "meta 'popped' is 100"),
}


_BATCH = textwrap.dedent("""
    import contextlib, io, json, sys
    from hmmmerge.cli import main
    out = []
    for argv in json.loads(sys.argv[1]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code
        out.append([code, err.getvalue()])
    print(json.dumps(out))
""")


def _batch(argvs, timeout=300):
    """Run each command line in one capped subprocess (a hang or a runaway fails the test); [[code, stderr]]."""
    res = _run([sys.executable, "-c", _BATCH, json.dumps([[str(a) for a in argv] for argv in argvs])],
               timeout=timeout)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_damaged_checkpoints_are_refused_before_any_file_changes(finished_run, tmp_path):
    argvs, folders = [], {}
    for case, (change, _) in DAMAGED_EXTRA.items():
        d = folders[case] = _copy(finished_run, tmp_path / case.replace(" ", "_").replace("*", "^"))
        _rewrite_meta(d / "checkpoint.npz", change)
        argvs.append([*RUN, "--out", d, "--resume", d / "checkpoint.npz"])
    before = {case: _snapshot(d) for case, d in folders.items()}
    for (case, (_, message)), (code, err) in zip(DAMAGED_EXTRA.items(), _batch(argvs)):
        assert code == 2 and _one_line(err) and message in err, (case, code, err)
        assert _snapshot(folders[case]) == before[case], case  # history.csv, agent.npz, level2.json untouched


def _history_rows(path):
    return [line.split(",", 1)[0] for line in path.read_text().splitlines()]


@pytest.mark.parametrize("damage", ["a foreign row", "a gap", "a text row", "not a history", "rows cut"])
def test_history_not_of_this_checkpoint_is_refused_and_kept(finished_run, tmp_path, capsys, damage):
    d = _copy(finished_run, tmp_path / "run")
    lines = (d / "history.csv").read_text().splitlines(keepends=True)
    if damage == "a foreign row":
        lines[3] = "77" + lines[3][lines[3].index(","):]
    elif damage == "a gap":
        del lines[4]
    elif damage == "a text row":
        lines[2] = "x" + lines[2]
    elif damage == "not a history":
        lines[0] = "step" + lines[0][len("episode"):]
    else:
        lines = lines[:5]  # 4 rows: fewer than the checkpoint's 8
    (d / "history.csv").write_text("".join(lines))
    before = _snapshot(d)
    _refused(capsys, [*RUN, "--out", d, "--resume", d / "checkpoint.npz"], "history.csv")
    assert _snapshot(d) == before


def test_intact_checkpoint_resumes_to_the_same_history(finished_run, tmp_path, capsys):
    d = _copy(finished_run, tmp_path / "run")
    before = _snapshot(d)
    assert main([*RUN, "--out", str(d), "--resume", str(d / "checkpoint.npz")]) == 0
    capsys.readouterr()
    assert (d / "history.csv").read_bytes() == before["history.csv"]  # rows 8..11 cut, then lived again
    assert _history_rows(d / "history.csv") == ["episode", *map(str, range(12))]


def test_checkpoint_resumed_into_another_folder_writes_a_new_history(finished_run, tmp_path, capsys):
    other = tmp_path / "other"
    assert main([*RUN, "--out", str(other), "--resume", str(finished_run / "checkpoint.npz")]) == 0
    capsys.readouterr()
    assert _history_rows(other / "history.csv") == ["episode", "8", "9", "10", "11"]


def test_saved_memory_resumed_into_its_folder_continues_its_history(finished_run, tmp_path, capsys):
    d = _copy(finished_run, tmp_path / "run")
    argv = ["run", "--episodes", "3", "--episode-length", "20", "--eval-episodes", "0", "--json"]
    assert main([*argv, "--out", str(d), "--resume", str(d / "agent.npz")]) == 0
    assert _history_rows(d / "history.csv") == ["episode", *map(str, range(15))]  # 12 kept, 3 added
    other = tmp_path / "other"  # another folder: its history starts with the new episodes
    assert main([*argv, "--out", str(other), "--resume", str(finished_run / "agent.npz")]) == 0
    assert _history_rows(other / "history.csv") == ["episode", "12", "13", "14"]
    capsys.readouterr()


# --------------------------------------------------------------------------- non-regular files
def test_open_regular_refuses_fifo_folder_and_device_without_blocking(tmp_path):
    from hmmmerge._io import check_regular_file, open_regular

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: a plain open() for reading would block forever
    for path, kind in ((fifo, "FIFO"), (tmp_path, "folder")):
        for mode in ("r", "rb", "a"):
            with pytest.raises(ValueError, match=f"is a {kind}, not a regular file"):
                open_regular(path, mode)
    if os.path.exists("/dev/null"):
        with pytest.raises(ValueError, match="is a device"):
            open_regular("/dev/null", "rb")  # refused before it is opened: nothing read or written
        with pytest.raises(ValueError, match="is a device"):
            check_regular_file("/dev/null")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "missing", "r")
    with open_regular(tmp_path / "new.txt", "a") as f:  # appending creates a missing file
        f.write("x")
    os.symlink(tmp_path / "new.txt", tmp_path / "link.txt")  # a link to a regular file is followed
    with open_regular(tmp_path / "link.txt", "r") as f:
        assert f.read() == "x"
    with pytest.raises(ValueError, match="open_regular reads or appends"):
        open_regular(tmp_path / "new.txt", "w")


@pytest.fixture(scope="module")
def world_file(tmp_path_factory):
    from hmmmerge import gridworld

    path = tmp_path_factory.mktemp("world") / "world.json"
    gridworld(3, 3, n_colours=3).save(path)
    return path


def _fifo(path):
    os.mkfifo(path)
    return path


def test_cli_refuses_fifos_and_devices_as_inputs(world_file, finished_run, tmp_path):
    """Each command line would block (a FIFO) or read without end (a device) if the check were missing:
    the capped subprocess with a timeout turns such a regression into a failure."""
    fifo_json, fifo_graphml = _fifo(tmp_path / "world.json"), _fifo(tmp_path / "world.graphml")
    fifo_npz = _fifo(tmp_path / "agent.npz")
    out = tmp_path / "out"
    out.mkdir()
    history_fifo = _fifo(out / "history.csv")
    resumed = _copy(finished_run, tmp_path / "resumed")
    (resumed / "history.csv").unlink()
    _fifo(resumed / "history.csv")
    cases = [
        (["env", "--graph", fifo_json], "is a FIFO, not a regular file"),
        (["env", "--graph", fifo_graphml], "is a FIFO, not a regular file"),
        (["run", "--resume", fifo_npz, "--episodes", "2"], "is a FIFO, not a regular file"),
        (["run", "--episodes", "2", "--eval-episodes", "0", "--out", out], "is a FIFO, not a regular file"),
        ([*RUN, "--out", resumed, "--resume", resumed / "checkpoint.npz"], "is a FIFO, not a regular file"),
        (["run", "--episodes", "2", "--eval-episodes", "0", "--out", resumed, "--resume", resumed / "agent.npz"],
         "is a FIFO, not a regular file"),
    ]
    if os.path.exists("/dev/zero"):
        cases.append((["env", "--graph", "/dev/zero"], "/dev/zero is a device, not a regular file"))
    for argv, message in cases:
        res = _cli(*argv, timeout=120)
        assert res.returncode == 2 and _one_line(res.stderr) and message in res.stderr, (argv, res.stderr)
    for fifo in (fifo_json, fifo_graphml, fifo_npz, history_fifo, resumed / "history.csv"):
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode), fifo
    assert os.listdir(out) == ["history.csv"]  # nothing written beside the FIFO


def test_symlinks_to_regular_files_keep_working(world_file, tmp_path, capsys):
    link = tmp_path / "link.json"
    os.symlink(world_file, link)
    assert main(["env", "--graph", str(link), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_states"] == 9


_FIFO_SWEEP = textwrap.dedent("""
    import os, sys
    from hmmmerge.sweep import Sweep, example_run
    sweep = Sweep(sys.argv[1], example_run, [{"x": 1}, {"x": 2}])
    os.makedirs(sys.argv[1])
    os.mkfifo(sweep.paths[1])
    try:
        sweep.run(executor="serial", progress=False)
    except ValueError as e:
        print(e)
""")


def test_sweep_refuses_a_fifo_result_file(tmp_path):
    res = _run([sys.executable, "-c", _FIFO_SWEEP, str(tmp_path / "runs")], timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "is a FIFO, not a regular file: cannot read it as a result file" in res.stdout


# --------------------------------------------------------------------------- world files: values and sizes
def _three_node_world(obs2, n_obs=None):
    graph = {"start": 0} if n_obs is None else {"start": 0, "n_obs": n_obs}
    return {"directed": True, "multigraph": True, "graph": graph,
            "nodes": [{"id": 0, "obs": 0}, {"id": 1, "obs": 1}, {"id": 2, "obs": obs2}],
            "edges": [{"source": u, "target": (u + 1) % 3, "action": 0} for u in range(3)]}


GRAPHML = """<?xml version="1.0" encoding="utf-8"?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns">
  <key id="d0" for="node" attr.name="obs" attr.type="{type}">{default}</key>
  <key id="d1" for="edge" attr.name="action" attr.type="int"><default>0</default></key>
  <key id="d2" for="graph" attr.name="start" attr.type="string"/>
  <graph edgedefault="directed">
    <data key="d2">0</data>
    <node id="0"><data key="d0">0</data></node>
    <node id="1"><data key="d0">{obs1}</data></node>
    <node id="2"{node2}
    <edge source="0" target="1"/>
    <edge source="1" target="2"/>
    <edge source="2" target="0"/>
  </graph>
</graphml>
"""


def _graphml(path, obs1="1", node2=' />', type="int", default="<default>2</default>"):
    path.write_text(GRAPHML.format(obs1=obs1, node2=node2, type=type, default=default))
    return path


def test_huge_observations_in_world_files_are_one_line_errors(tmp_path):
    cases = []
    for name, obs in (("2^63", 2**63), ("10^30", 10**30), ("-1", -1), ("2^31", 2**31)):
        path = tmp_path / f"obs-{name}.json"
        path.write_text(json.dumps(_three_node_world(obs)))
        cases.append((["env", "--graph", path], f"node 2 has obs={obs}; observations must be integers in"))
    path = tmp_path / "n_obs-huge.json"
    path.write_text(json.dumps(_three_node_world(2, n_obs=10**30)))
    cases.append((["env", "--graph", path], "n_obs=1000000000000000000000000000000 must be an integer"))
    for digits_type in ("int", "long"):
        path = _graphml(tmp_path / f"23-digits-{digits_type}.graphml", obs1="12345678901234567890123",
                        type=digits_type, default="")
        cases.append((["env", "--graph", path], "node 1 has obs=12345678901234567890123"))
    path = tmp_path / "obs-1e8.json"  # 3 states, an alphabet of 10^8 + 1: refused before the report allocates it
    path.write_text(json.dumps(_three_node_world(10**8)))
    cases.append((["env", "--graph", path], "alphabet of 100000001 observations (largest observation 100000000)"))
    cases.append((["run", "--graph", path, "--episodes", "2"], "first-order counts of 100000001 observations"))
    deep = tmp_path / "deep.json"
    deep.write_text('{"nodes": ' + "[" * 100_000 + "]" * 100_000 + "}")
    cases.append((["env", "--graph", deep], "nested too deeply to be a world file"))
    outcomes = _batch([argv for argv, _ in cases])
    for (argv, message), (code, err) in zip(cases, outcomes):
        assert code == 2 and _one_line(err) and message in err, (argv, code, err)


def test_graphml_key_default_applies_to_nodes_without_the_data(tmp_path):
    """A node without ``obs`` data takes its key's ``<default>`` (GraphML's rule): the same world as the file
    that writes the value out; without a default the node is still refused."""
    from hmmmerge import Environment

    implicit = Environment.load(_graphml(tmp_path / "default.graphml"))
    explicit = Environment.load(_graphml(tmp_path / "explicit.graphml", node2='><data key="d0">2</data></node>',
                                         default=""))
    assert implicit.obs.tolist() == explicit.obs.tolist() == [0, 1, 2]
    assert implicit.next_state.tolist() == explicit.next_state.tolist() == [[1, 2, 0]]  # edges: action default 0
    with pytest.raises(ValueError, match="node 2 has no 'obs' attribute"):
        Environment.load(_graphml(tmp_path / "no-default.graphml", default=""))
    overridden = Environment.load(_graphml(tmp_path / "override.graphml", obs1="5"))  # data beats the default
    assert overridden.obs.tolist() == [0, 5, 2]


def test_unsigned_values_keep_their_sign_in_messages():
    import networkx as nx

    from hmmmerge import Environment
    from hmmmerge.trajectories import Trajectories

    big = np.uint64(2**63)
    with pytest.raises(ValueError, match="holds 9223372036854775808, more than the largest index"):
        Trajectories(np.array([[0, big]], dtype=np.uint64), [[-1, 0]])
    g = nx.MultiDiGraph()
    g.add_node(0, obs=big)
    g.add_edge(0, 0, action=0)
    with pytest.raises(ValueError, match="obs=9223372036854775808; observations must be integers in"):
        Environment(g, start=0)
    g.nodes[0]["obs"] = np.uint64(3)  # an unsigned observation in range is an observation
    assert Environment(g, start=0).obs.tolist() == [3]


# --------------------------------------------------------------------------- Gymnasium worlds and recordings
_GYM_BOUNDS = textwrap.dedent("""
    import json
    from hmmmerge.gym_worlds import from_gymnasium
    out = []
    for env, kw in json.loads(__import__("sys").argv[1]):
        try:
            from_gymnasium(env, **kw)
            out.append("accepted")
        except ValueError as e:
            out.append(str(e))
    print(json.dumps(out))
""")


def test_from_gymnasium_bounds_sizes_up_front():
    pytest.importorskip("minigrid")
    cases = [("MiniGrid-Empty-5x5-v0", {"agent_view_size": 10001}, "agent_view_size 10001 is larger than a 5x5"),
             ("MiniGrid-Empty-5x5-v0", {"agent_view_size": 10**9 + 1}, "agent_view_size 1000000001 is larger"),
             ("FrozenLake-v1", {"n_episodes": 10**12, "episode_length": 5}, "a recording of 1000000000000 episodes"),
             ("FrozenLake-v1", {"n_episodes": 5, "episode_length": 10**12}, "x 1000000000000 moves needs about"),
             ("MiniGrid-Empty-5x5-v0", {"agent_view_size": 9}, "accepted")]  # the largest view a 5x5 grid fills
    res = _run([sys.executable, "-c", _GYM_BOUNDS, json.dumps([[e, kw] for e, kw, _ in cases])], timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    for (env, kw, message), got in zip(cases, json.loads(res.stdout.strip().splitlines()[-1])):
        assert message in got, (env, kw, got)


def test_views_beyond_the_bound_tell_no_more_states_apart():
    """Oracle for the bound: MiniGrid's own views of 11 and 13 cells (over the bound of 9 for a 5x5 grid, so
    rendered here directly) split the states into the same classes as the world built with a view of 9."""
    pytest.importorskip("minigrid")
    import gymnasium

    from hmmmerge.gym_worlds import from_gymnasium

    world = from_gymnasium("MiniGrid-Empty-5x5-v0", agent_view_size=9)
    classes9 = {}
    for i, node in enumerate(world.nodes):
        classes9.setdefault(int(world.obs[i]), set()).add(node)
    env = gymnasium.make("MiniGrid-Empty-5x5-v0")
    env.reset(seed=0)
    grid = env.unwrapped
    for x in range(grid.grid.width):  # as from_gymnasium does: the goal (a terminal object) becomes floor
        for y in range(grid.grid.height):
            if grid.grid.get(x, y) is not None and grid.grid.get(x, y).type in ("goal", "lava"):
                grid.grid.set(x, y, None)
    for view in (11, 13):
        grid.agent_view_size = view
        classes = {}
        for node in world.nodes:
            grid.agent_pos, grid.agent_dir = node[:2], node[2]
            classes.setdefault(grid.gen_obs()["image"].tobytes(), set()).add(node)
        assert sorted(map(sorted, classes.values())) == sorted(map(sorted, classes9.values())), view


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    pytest.importorskip("gymnasium")
    from hmmmerge.gym_worlds import from_gymnasium

    path = tmp_path_factory.mktemp("rec") / "lake.npz"
    from_gymnasium("FrozenLake-v1", n_episodes=6, episode_length=4, is_slippery=False, seed=0).save(path)
    return path


def _recording_copy(recording, dst, data=None, vocabulary=None, **arrays):
    """A copy of the recording with its bytes, its arrays or its vocabulary text replaced."""
    dst.write_bytes(recording.read_bytes())
    shutil.copy(str(recording) + ".vocabulary.json", str(dst) + ".vocabulary.json")
    if arrays:
        with np.load(recording, allow_pickle=False) as f:
            base = {k: f[k] for k in f.files}
        base.update(arrays)
        with open(dst, "wb") as f:
            np.savez_compressed(f, **base)
    if data is not None:
        dst.write_bytes(data)
    if vocabulary is not None:
        (dst.parent / (dst.name + ".vocabulary.json")).write_text(vocabulary)
    return dst


_LOAD_RECORDINGS = textwrap.dedent("""
    import json, sys
    from hmmmerge.gym_worlds import Recording
    out = []
    for path in json.loads(sys.argv[1]):
        try:
            r = Recording.load(path)
            out.append(["accepted", r.trajectories.obs.tolist(), r.n_actions])
        except ValueError as e:
            out.append(["refused", str(e)])
    print(json.dumps(out))
""")


def test_damaged_recordings_are_one_line_errors(recording, tmp_path):
    from hmmmerge.gym_worlds import Recording

    raw = recording.read_bytes()
    good = Recording.load(recording)
    cases = {"empty": dict(data=b""), "truncated": dict(data=raw[: len(raw) // 2]),
             "nested vocabulary": dict(vocabulary='{"format": "hmmmerge.vocabulary", "version": 1, "observations": ['
                                        + "[" * 100_000 + "]" * 100_000 + "]}"),
             "n_actions -3, no episodes": dict(obs=np.zeros((0, 5), np.int64), actions=np.full((0, 5), -1),
                                               n_actions=np.int64(-3)),
             "n_actions -3": dict(n_actions=np.int64(-3)),
             "n_actions a vector": dict(n_actions=np.arange(3)),
             "dropped -1": dict(dropped=np.int64(-1)),
             "obs float": dict(obs=good.trajectories.obs + 0.5),
             "obs 3-D": dict(obs=good.trajectories.obs[None]),
             "obs uint64 2^63": dict(obs=np.full(good.trajectories.obs.shape, 2**63, dtype=np.uint64)),
             "obs outside the vocabulary": dict(obs=good.trajectories.obs + 100),
             "action >= n_actions": dict(n_actions=np.int64(1))}
    rng = np.random.default_rng(0)
    for i in range(12):
        b = bytearray(raw)
        for pos in rng.integers(0, len(b), size=3):
            b[pos] ^= int(rng.integers(1, 256))
        cases[f"bit flips {i}"] = dict(data=bytes(b))
    paths = [str(_recording_copy(recording, tmp_path / f"r{k}.npz", **kw)) for k, kw in enumerate(cases.values())]
    paths.append(str(recording))
    res = _run([sys.executable, "-c", _LOAD_RECORDINGS, json.dumps(paths)], timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]  # no traceback escaped: each load was one result
    outcomes = json.loads(res.stdout.strip().splitlines()[-1])
    for name, outcome in zip(cases, outcomes):
        if outcome[0] == "accepted":  # a flipped byte the zip format does not check may leave a valid file
            assert name.startswith("bit flips") and outcome[1:] == [good.trajectories.obs.tolist(), 4], name
        else:
            assert outcome[1].startswith(paths[list(cases).index(name)]) and "\n" not in outcome[1], outcome
    assert outcomes[-1] == ["accepted", good.trajectories.obs.tolist(), 4]
    assert sum(o[0] == "refused" for o in outcomes[:12]) == 12  # every designed damage refused


def test_recording_from_a_fifo_is_refused(recording, tmp_path):
    script = "import sys\nfrom hmmmerge.gym_worlds import Recording\ntry:\n    Recording.load(sys.argv[1])\n" \
             "except ValueError as e:\n    print(e)"
    fifo = _fifo(tmp_path / "rec.npz")
    res = _run([sys.executable, "-c", script, str(fifo)], timeout=120)
    assert "is a FIFO, not a regular file: cannot read it as a recording" in res.stdout, res.stderr[-2000:]
    shutil.copy(recording, tmp_path / "ok.npz")
    _fifo(tmp_path / "ok.npz.vocabulary.json")
    res = _run([sys.executable, "-c", script, str(tmp_path / "ok.npz")], timeout=120)
    assert "is a FIFO, not a regular file: cannot read it as a vocabulary file" in res.stdout, res.stdout


# --------------------------------------------------------------------------- command-line options
def test_executor_specs_checked_before_anything_runs(tmp_path, capsys):
    from hmmmerge.sweep import Sweep, check_executor, example_run

    with pytest.raises(ValueError, match=r"executor 'local:²': the number of workers must be a positive integer "
                                         r"written in digits 0-9, got '²'"):
        check_executor("local:²")
    for spec, message in (("tls://", "is written tls://HOST:PORT"), ("dask://host:99999", "a port 1..65535"),
                          ("bogus", "executor must be local[:N]"), ("threads:0", "positive integer"),
                          ("local:100000", "100000 workers is more than the limit")):
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
            check_executor(spec)
    sweep = Sweep(tmp_path / "runs", example_run, [{"x": 1}])
    sweep.run(executor="serial", progress=False)
    with pytest.raises(ValueError, match="executor must be local"):  # nothing left to compute: still checked
        sweep.run(executor="bogus", progress=False)
    for argv, message in ((["demo", "--executor", "bogus", "--out", tmp_path / "d"], "executor must be local"),
                          (["reproduce", "--executor", "local:²", "--out", tmp_path / "r"], "digits 0-9"),
                          (["evaluate", "--draw-factor-graph", ""], "--draw-factor-graph: needs a path"),
                          (["env", "--graph", ""], "--graph: needs a path"),
                          (["run", "--out", ""], "--out: needs a path"),
                          (["run", "--resume", ""], "--resume: needs a path"),
                          (["env", "--plot", ""], "--plot: needs a path")):
        _refused(capsys, argv, message)
    assert not os.path.exists(tmp_path / "d") and not os.path.exists(tmp_path / "r")


def test_tls_executor_without_configuration_is_one_line(tmp_path):
    pytest.importorskip("distributed")
    script = textwrap.dedent("""
        import sys
        from hmmmerge.sweep import make_executor
        try:
            with make_executor("tls://127.0.0.1:1"):
                pass
        except (ValueError, OSError) as e:
            print(type(e).__name__, e)
    """)
    res = _run([sys.executable, "-c", script], timeout=120)
    assert res.returncode == 0 and "executor 'tls://127.0.0.1:1': cannot" in res.stdout, (res.stdout, res.stderr)


def test_output_folder_that_is_a_file_or_fifo_is_refused(tmp_path, capsys):
    afile, fifo = tmp_path / "afile", _fifo(tmp_path / "fifo")
    afile.write_text("keep me")
    for argv, message in ((["run", "--episodes", "2", "--eval-episodes", "0", "--out", afile], "is a regular file"),
                          (["run", "--episodes", "2", "--eval-episodes", "0", "--out", fifo], "is a FIFO"),
                          (["demo", "--out", afile], "is a regular file"),
                          (["reproduce", "--quick", "--only", "true_sim", "--out", fifo], "is a FIFO")):
        _refused(capsys, argv, message + ", not a folder")
    assert afile.read_text() == "keep me" and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    link = tmp_path / "link"  # a link to a folder is a folder
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", link)
    assert main(["run", "--episodes", "2", "--episode-length", "5", "--eval-episodes", "0", "--out", str(link),
                 "--json"]) == 0
    assert sorted(os.listdir(tmp_path / "real"))[:2] == ["agent.npz", "history.csv"]
    capsys.readouterr()

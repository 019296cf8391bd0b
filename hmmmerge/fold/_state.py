"""Checks of a fold merger's saved state: every array's dtype, shape and range, and the invariants the
kernels and the undo walk rely on (an acyclic union-find over placed nodes, journal rows that match the
placements, red blocks that match their promotions), before any of it is used.

A damaged file is then a one-line :class:`StateError` naming the file and the field, never an index out
of range in a kernel (a crash) or a cycle that a ``find`` would follow forever (a hang).
"""

from __future__ import annotations

import numpy as np

__all__ = ["StateError", "checked_state", "exact_state", "no_state", "noisy_state"]


class StateError(ValueError):
    """A saved fold state that cannot be trusted."""


def checked_state(check, d, source: str) -> dict:
    """``check(d)`` with every error (a :class:`StateError` or anything a damaged array raises on the way)
    as one :class:`StateError` line that names ``source``."""
    try:
        return check(d)
    except StateError as e:
        raise StateError(f"{source}: {e}") from None
    except (ValueError, TypeError, IndexError, KeyError, OverflowError) as e:   # not foreseen above: still one line
        raise StateError(f"{source}: fold merger state is malformed ({type(e).__name__}: {str(e)[:200]})") from None


def array(d, key: str, kind: str, shape: tuple, optional=None) -> np.ndarray:
    """``d[key]`` as int64 (``kind`` "i") or bool ("b"), of ``shape`` (``None``: any length), or
    ``optional`` when missing and given."""
    if key not in d:
        if optional is not None:
            return np.asarray(optional, dtype=bool if kind == "b" else np.int64)
        raise StateError(f"missing array {key!r}")
    a = np.asarray(d[key])
    if kind == "b":
        ok = a.dtype.kind == "b" or (a.dtype.kind in "iu" and bool(((a == 0) | (a == 1)).all()))
    else:
        ok = a.dtype.kind in "iu"
    if not ok:
        raise StateError(f"{key} has dtype {a.dtype}, expected {'booleans' if kind == 'b' else 'integers'}")
    if a.ndim != len(shape) or any(s is not None and s != t for s, t in zip(shape, a.shape)):
        want = "(" + ", ".join("n" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
        raise StateError(f"{key} has shape {a.shape}, expected {want}")
    if kind == "b":
        return a.astype(bool)
    if a.dtype.kind == "u" and a.size and a.max() >= 2**63:
        raise StateError(f"{key} holds {int(a.max())}, outside the int64 range")
    return a.astype(np.int64)


def in_range(key: str, a: np.ndarray, low: int, high: int) -> None:
    """Every entry of ``a`` in ``low..high - 1``."""
    if a.size and (a.min() < low or a.max() >= high):
        bad = int(a.min()) if a.min() < low else int(a.max())
        raise StateError(f"{key} holds {bad}, outside {low}..{high - 1}")


def checked(ok: bool, key: str, what: str) -> None:
    """Raise ``StateError("{key} {what}")`` unless ``ok``."""
    if not ok:
        raise StateError(f"{key} {what}")


def roots(uf: np.ndarray, key: str) -> np.ndarray:
    """The root of every node of the union-find ``uf`` (-1 for unplaced ones, ``uf == -1``), refusing
    a parent that is out of range or unplaced and cycles (``uf[0]`` must be 0)."""
    n = len(uf)
    in_range(key, uf, -1, n)
    checked(n >= 1 and uf[0] == 0, key, "does not start with the virtual start node 0 as a root")
    placed = uf >= 0
    checked(bool(placed[uf[placed]].all()), key, "links a placed node to an unplaced one")
    up = np.where(placed, uf, np.arange(n))
    for _ in range(max(n, 2).bit_length() + 1):   # pointer doubling: up = uf applied 2**i times
        up = up[up]
    checked(bool((up[up] == up).all() and (uf[up[placed]] == up[placed]).all()), key, "has a cycle")
    return np.where(placed, up, -1)


def no_state(d, key: str) -> None:
    """A merger without saved state (``key`` missing) is fresh: refused when level 1 beside it holds states."""
    level1 = sizes_of_level1(d)
    checked(level1 is None or level1[2] == 0, f"missing array {key!r}:", "the merger's state is not in the file")


def sizes_of_level1(d) -> tuple[int, int, int] | None:
    """``(n_obs, n_actions, n_states)`` of the level 1 stored beside the merger, if any (agent files)."""
    if "l1_emission" not in d or "l1_n_obs" not in d or "l1_n_actions" not in d:
        return None
    return int(np.asarray(d["l1_n_obs"])), int(np.asarray(d["l1_n_actions"])), len(np.asarray(d["l1_emission"]))


def tree(d, prefix: str, n: int, n_obs: int, n_actions: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The recorded prefix tree (``parent``, ``action``, ``colour`` of ``n`` nodes): node 0 is the start,
    every recorded node's parent is an earlier recorded node, its action in range (``n_actions`` exactly
    from the start) and its colour an observation; unrecorded nodes hold -1.  Checked against the level
    1 stored beside it, if any."""
    parent = array(d, f"{prefix}parent", "i", (n,))
    action = array(d, f"{prefix}action", "i", (n,))
    colour = array(d, f"{prefix}colour", "i", (n,))
    rec = parent >= 0
    checked(n >= 1 and parent[0] == -1, f"{prefix}parent", "does not start with -1 (the virtual start node)")
    checked(bool((parent[1:] < np.arange(1, n)).all()) and bool((parent >= -1).all()), f"{prefix}parent",
            "holds a node that is not an earlier node")
    checked(bool(((parent[rec] == 0) | rec[parent[rec]]).all()), f"{prefix}parent", "holds an unrecorded node")
    checked(bool(((action >= 0) == rec).all() and ((colour >= 0) == rec).all()), f"{prefix}action",
            "or colour is set for an unrecorded node or missing for a recorded one")
    in_range(f"{prefix}action", action, -1, n_actions + 1)
    checked(bool(((action == n_actions) == (parent == 0)).all()), f"{prefix}action",
            f"is not {n_actions} exactly for the first observations")
    in_range(f"{prefix}colour", colour, -1, n_obs)
    level1 = sizes_of_level1(d)
    if level1 is not None:
        checked(level1[:2] == (n_obs, n_actions), f"{prefix}sizes", f"do not match level 1 ({level1[0]} "
                f"observations, {level1[1]} actions)")
        checked(n <= level1[2] + 1, f"{prefix}parent", f"has {n} nodes, more than level 1's {level1[2]} states + 1")
        em = np.asarray(d["l1_emission"])
        h = np.flatnonzero(rec[1:])
        checked(bool((colour[h + 1] == em[h]).all()), f"{prefix}colour", "does not match level 1's observations")
    return parent, action, colour


def _same_set(a: np.ndarray, b: np.ndarray) -> bool:
    return len(a) == len(b) and bool((np.sort(a) == np.sort(b)).all())


def _clusters_bound(d) -> int:
    """One past the largest cluster id the clusters stored beside the merger hold (agent files)."""
    if "assignment" not in d:
        return 2**62
    a = np.asarray(d["assignment"])
    return int(a.max(initial=-1)) + 1 if a.dtype.kind in "iu" else 0


def exact_state(d) -> dict:
    """The arrays of a ``merge="fold"`` state (:meth:`hmmmerge.fold.FoldMerger.state_dict`), checked."""
    from .engine import CONFLICT, DELTA, PLACE, RED, ROOT, UNION

    n_obs, A, k, last, settled = (int(x) for x in array(d, "fold_sizes", "i", (5,)))
    checked(1 <= n_obs < 2**31 and 1 <= A < 2**31, "fold_sizes", f"hold {n_obs} observations and {A} actions")
    checked(0 <= k <= 2**62, "fold_sizes", f"hold the evidence minimum {k}, expected 0..2**62")
    n = len(array(d, "fold_parent", "i", (None,)))
    parent, action, colour = tree(d, "fold_", n, n_obs, A)
    nodes = np.arange(n)
    rec = (parent >= 0) | (nodes == 0)
    in_range("fold_sizes (the last state placed)", np.array([last]), -1, n - 1)
    uf = array(d, "fold_uf", "i", (n,))
    root = roots(uf, "fold_uf")
    placed = uf >= 0
    checked(bool(rec[placed].all() and placed[parent[placed & (nodes > 0)]].all()), "fold_uf",
            "places a node that is not recorded or whose parent is not placed")
    is_root = placed & (uf == nodes)
    red, has = array(d, "fold_red", "b", (n,)), array(d, "fold_has_row", "b", (n,))
    # a red block may later be folded into another red one (a fold reaching two reds through a loop)
    checked(bool(has[0] and (has >= is_root).all() and not (has & ~placed).any()), "fold_has_row",
            "does not cover the blocks or covers an unplaced node")
    checked(bool(red[0] and not (red & ~has).any()), "fold_red", "marks a node that never was a block")
    delta, dchild = (array(d, f"fold_{x}", "i", (n, A + 1)) for x in ("delta", "dchild"))
    in_range("fold_delta", delta, -1, n)
    in_range("fold_dchild", dchild, -1, n)
    t, c = delta[has], dchild[has]
    checked(bool(((t >= 0) == (c >= 0)).all() and placed[t[t >= 0]].all() and placed[c[c >= 0]].all()),
            "fold_delta", "or fold_dchild leads to an unplaced node")
    journal = array(d, "fold_journal", "i", (None, 5))
    J = len(journal)
    kind, x = journal[:, 0], journal[:, 1]
    in_range("fold_journal (operations)", kind, 0, 6)
    used = np.array([2, 2, 2, 5, 2, 1])[kind]   # fields of each operation; the rest hold -1
    checked(bool((journal[np.arange(5)[None, :] >= used[:, None]] == -1).all()), "fold_journal",
            "holds a value in a field its operation does not use")
    one = np.isin(kind, (PLACE, ROOT, UNION, RED))
    in_range("fold_journal (nodes)", x[one], 1, n)
    dl = journal[kind == DELTA]
    in_range("fold_journal (nodes)", dl[:, 1], 0, n)
    in_range("fold_journal (actions)", dl[:, 2], 0, A + 1)
    in_range("fold_journal (old transitions)", dl[:, 3:], -1, n)
    checked(bool(has[dl[:, 1]].all()), "fold_journal", "changes the transitions of a node without a row")
    uf_time, just = array(d, "fold_uf_time", "i", (n,)), array(d, "fold_just", "i", (n,))
    in_range("fold_just", just, -1, n)
    z = np.flatnonzero(placed & ~is_root)   # a root's time is stale after a union was rolled back: not used
    in_range("fold_uf_time", uf_time[z], 0, J)
    checked(bool((journal[uf_time[z], 0] == np.where(just[z] >= 0, PLACE, UNION)).all() and (x[uf_time[z]] == z).all()),
            "fold_uf_time", "does not point to the journal row that placed each node")
    z = np.flatnonzero(placed & (nodes > 0))
    checked(_same_set(x[kind == PLACE], z[just[z] >= 0]) and _same_set(x[kind == ROOT], np.flatnonzero(has)[1:])
            and _same_set(x[kind == UNION], np.flatnonzero(has & ~is_root)), "fold_journal",
            "does not match the placed nodes and blocks")
    j = just[z][just[z] >= 0]
    zj = z[just[z] >= 0]
    checked(bool(placed[j].all() and (j > 0).all()), "fold_just", "holds a node that is not placed")
    checked(bool((root[j] == root[zj]).all() and (root[parent[j]] == root[parent[zj]]).all()), "fold_just",
            "holds a transition of another block")
    reds = array(d, "fold_reds", "i", (None, 2))
    in_range("fold_reds", reds[:, 1], 1, n)
    checked(bool((x[kind == RED] == reds[:, 1]).all()) if (kind == RED).sum() == len(reds) else False, "fold_reds",
            "do not match the promotions of the journal")
    checked(bool((colour[reds[:, 1]] == reds[:, 0]).all() and red[reds[:, 1]].all()
                 and red.sum() == len(reds) + 1), "fold_reds", "do not match fold_red and the colours")
    conflicts = array(d, "fold_conflicts", "i", (None, 2))
    checked((kind == CONFLICT).sum() == len(conflicts), "fold_conflicts", "do not match the journal")
    in_range("fold_conflicts", conflicts, 1, n)
    checked(0 <= settled <= len(conflicts), "fold_sizes", f"hold {settled} settled conflicts of {len(conflicts)}")
    node, child = conflicts[settled:, 0], conflicts[settled:, 1]
    checked(bool(placed[node].all() and placed[child].all() and (root[parent[node]] == root[parent[child]]).all()),
            "fold_conflicts", "name nodes of different blocks")
    decisions = array(d, "fold_decisions", "i", (None,))
    in_range("fold_decisions", decisions, 0, J + 1)
    unions = np.flatnonzero(kind == UNION)
    checked(bool((np.diff(decisions) >= 0).all()) and (not len(unions) or (len(decisions) and decisions[0] <= unions[0])),
            "fold_decisions", "are not increasing journal positions before every union")
    stats = array(d, "fold_stats", "i", (4,))
    in_range("fold_stats", stats, 0, 2**62)
    cid = array(d, "fold_cid", "i", (None, 2))
    in_range("fold_cid (nodes)", cid[:, 0], 0, n)
    in_range("fold_cid (clusters)", cid[:, 1], 0, _clusters_bound(d))
    checked(bool(is_root[cid[:, 0]].all() and len(np.unique(cid[:, 0])) == len(cid)), "fold_cid",
            "names a node that is not a block, or one twice")
    pending = array(d, "fold_pending", "i", (None,))
    in_range("fold_pending", pending, 1, n)
    waiting = rec & ~placed
    checked(bool(waiting[pending].all() and _same_set(np.unique(pending), np.flatnonzero(waiting))
                 and (placed | waiting)[parent[pending]].all()), "fold_pending",
            "does not list exactly the recorded nodes that wait to be placed")
    prov = array(d, "fold_provisional", "i", (3,), optional=[-1, 0, 0])
    checked(-1 <= prov[0] <= J and 0 <= prov[1] <= J and 0 <= prov[2] <= J and (prov[0] >= 0 or prov[1:].sum() == 0),
            "fold_provisional", f"is {prov.tolist()}, not a pass of the journal")
    return dict(n_obs=n_obs, A=A, k=k, last=last, settled=settled, n=n, parent=parent, action=action, colour=colour,
                uf=uf, uf_time=uf_time, just=just, red=red, has_row=has, delta=delta, dchild=dchild, reds=reds,
                journal=journal, conflicts=conflicts, decisions=decisions, stats=stats, cid=cid, pending=pending,
                provisional=prov)


def noisy_state(d) -> dict:
    """The arrays of a ``merge="fold-noisy"`` state (:meth:`hmmmerge.fold.StatisticalFoldMerger.state_dict`),
    checked; files written before the decision log (no ``foldnoisy_visits``) count one visit per state."""
    K, A, last = (int(x) for x in array(d, "foldnoisy_sizes", "i", (3,)))
    checked(1 <= K < 2**31 and 1 <= A < 2**16, "foldnoisy_sizes", f"hold {K} colours and {A} actions")
    n = len(array(d, "foldnoisy_parent", "i", (None,)))
    parent, action, colour = tree(d, "foldnoisy_", n, K, A)
    nodes = np.arange(n)
    rec = (parent >= 0) | (nodes == 0)
    in_range("foldnoisy_sizes (the last state placed)", np.array([last]), -1, n - 1)
    pos = array(d, "foldnoisy_pos", "i", (n,))
    shallow = array(d, "foldnoisy_shallow", "i", (1 + A + A * A, K))
    in_range("foldnoisy_shallow", shallow, 0, 2**62)
    pk = np.where(parent > 0, pos[np.maximum(parent, 0)], -2)
    want = np.where(pk == -2, 0, np.where(pk == 0, 1 + action, np.where((pk > 0) & (pk <= A), 1 + A * pk + action, -1)))
    checked(bool((pos[rec & (nodes > 0)] == want[rec & (nodes > 0)]).all()), "foldnoisy_pos",
            "does not match the action paths")
    in_range("foldnoisy_pos", pos, -1, len(shallow))
    uf = array(d, "foldnoisy_uf", "i", (n,))
    root = roots(uf, "foldnoisy_uf")
    placed = uf >= 0
    checked(bool((rec == placed).all()), "foldnoisy_uf", "does not place exactly the recorded nodes")
    is_root = placed & (uf == nodes)
    red, has = array(d, "foldnoisy_red", "b", (n,)), array(d, "foldnoisy_has_row", "b", (n,))
    checked(bool(not (red & ~placed).any()), "foldnoisy_red", "marks an unplaced node")
    checked(bool((has >= is_root).all() and not (has & ~placed).any()), "foldnoisy_has_row",
            "does not cover the blocks or covers an unplaced node")
    delta = array(d, "foldnoisy_delta", "i", (n, A + 1))
    in_range("foldnoisy_delta", delta, -1, n)
    t = delta[has]
    checked(bool(placed[t[t >= 0]].all()), "foldnoisy_delta", "leads to an unplaced node")
    counts = array(d, "foldnoisy_counts", "i", (n, K))
    in_range("foldnoisy_counts", counts, 0, 2**62)
    visits = array(d, "foldnoisy_visits", "i", (n,), optional=placed.astype(np.int64))
    in_range("foldnoisy_visits", visits, 0, 2**62)
    if "foldnoisy_visits" in d:   # a block counts the visits of its states
        want = np.zeros((n, K), dtype=np.int64)
        h = np.flatnonzero(placed & (nodes > 0))
        np.add.at(want, (root[h], colour[h]), visits[h])
        checked(bool((counts[is_root] == want[is_root]).all()), "foldnoisy_counts", "do not add up the visits")
        want = np.zeros_like(shallow)
        h = np.flatnonzero((pos >= 0) & (nodes > 0))
        np.add.at(want, (pos[h], colour[h]), visits[h])
        checked(bool((shallow == want).all()), "foldnoisy_shallow", "does not add up the visits near the start")
    reds = array(d, "foldnoisy_reds", "i", (None,))
    in_range("foldnoisy_reds", reds, 1, n)
    checked(bool(red[reds].all() and placed[reds].all()), "foldnoisy_reds", "name a node that is not red")
    bound = _clusters_bound(d)
    cid = array(d, "foldnoisy_cid", "i", (None, 2))
    in_range("foldnoisy_cid (nodes)", cid[:, 0], 1, n)
    in_range("foldnoisy_cid (clusters)", cid[:, 1], 0, bound)
    checked(bool(has[cid[:, 0]].all() and len(np.unique(cid[:, 0])) == len(cid)), "foldnoisy_cid",
            "names a node that is not a block, or one twice")
    checked("assignment" not in d or bool(np.isin(np.flatnonzero(is_root)[1:], cid[:, 0]).all()), "foldnoisy_cid",
            "misses a block of the agent's clusters")
    nxt = array(d, "foldnoisy_next_cid", "i", (None, 3), optional=np.zeros((0, 3)))
    in_range("foldnoisy_next_cid (clusters)", nxt[:, [0]], -1, bound)
    in_range("foldnoisy_next_cid (actions)", nxt[:, 1], 0, A + 1)
    in_range("foldnoisy_next_cid (clusters)", nxt[:, 2], 0, bound)
    stats = array(d, "foldnoisy_stats", "i", (None,))
    checked(4 <= len(stats) <= 6, "foldnoisy_stats", f"has {len(stats)} counters, expected 4 to 6")
    in_range("foldnoisy_stats", stats, 0, 2**62)
    log = array(d, "foldnoisy_log", "i", (None, 3), optional=np.zeros((0, 3)))
    in_range("foldnoisy_log (decisions)", log[:, 0], 0, 2)
    in_range("foldnoisy_log (nodes)", log[:, 1:], -1, n)
    checked(bool(placed[log[:, 1]].all() and placed[log[log[:, 0] == 0, 2]].all()), "foldnoisy_log",
            "names a node that is not placed")
    retested = array(d, "foldnoisy_retested", "i", (1,), optional=[0])
    in_range("foldnoisy_retested", retested, 0, n)
    return dict(K=K, A=A, last=last, n=n, parent=parent, action=action, colour=colour, pos=pos, shallow=shallow,
                uf=uf, red=red, has_row=has, delta=delta, counts=counts, visits=visits, reds=reds, cid=cid,
                next_cid=nxt, stats=stats, log=log, retested=int(retested[0]))

"""The explicit factor graph: ActionHMMs and the two-level memory as pgmpy models.

pgmpy is the *explicit* layer and a cross-check, never the fast path: its
exact inference is orders of magnitude slower than the numba filter and its
probabilities are not scaled, so they underflow after a few hundred steps.
Keep windows short (tens of steps) and compare normalised posteriors.
pgmpy (about 3 s to import) is imported inside the functions.

Variable names in the unrolled graphs (``t`` is the position in the window):

* ``H_t`` hidden state of an ActionHMM (``H1_t`` / ``H2_t``: level 1 / level 2
  of the two-level memory), values ``0..H-1``;
* ``O_t`` observation, values ``0..O-1``;
* ``A_t`` the move that led to step ``t`` (``t >= 1``), values ``0..A-1``.

Factors: ``B(H_0)``, ``T(H_{t-1}, A_t, H_t) = T[a][i, j]``,
``E(H_t, O_t)`` and, for the two-level memory, ``C(H1_t, H2_t) = P(h2 | h1)``.
The window's observations and actions are returned as an ``evidence`` dict.
A row of ``T`` summing to 0 (an unknown transition) stays a zero factor row:
exact inference then computes the probabilities of the generative model,
which equal the filter's only while no belief mass reaches such a row (the
filter renormalises over states with a successor, see :mod:`hmmmerge.hmm`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._validation import check_symbols
from .trajectories import Trajectories

__all__ = [
    "draw_factor_graph",
    "pgmpy_filter",
    "to_markov_network",
    "to_dynamic_bayesian_network",
    "to_factor_graph",
    "two_level_factor_graph",
]


def _dense_T(hmm) -> np.ndarray:
    """(A, H, H) dense transitions."""
    if hmm.is_sparse:
        return np.stack([m.toarray() for m in hmm.T])
    return np.asarray(hmm.T)


def _check_hmm(hmm, max_states: int | None = None) -> None:
    if not all(hasattr(hmm, n) for n in ("T", "E", "B", "n_states", "n_actions", "n_obs", "is_sparse")):
        raise TypeError(f"expected an ActionHMM, got {type(hmm).__name__}")
    if max_states is not None and hmm.n_states > max_states:
        raise ValueError(
            f"the model has {hmm.n_states} states; exporting more than {max_states} to pgmpy is not sensible "
            "(pass max_states=None to force)"
        )


def _window(hmm, obs, actions) -> tuple[np.ndarray, np.ndarray]:
    o = np.asarray(obs)
    a = np.asarray(actions) if actions is not None else None
    if o.ndim != 1:
        raise ValueError(f"obs must be one episode (1-D), got shape {o.shape}")
    if a is None:
        if hmm.n_actions != 1:
            raise ValueError(f"actions are required: the model has {hmm.n_actions} actions")
        a = np.zeros(len(o), dtype=np.int64)
        if len(o):
            a[0] = -1
    traj = Trajectories(o, a)
    check_symbols(traj.obs, traj.actions, hmm.n_obs, hmm.n_actions)
    return traj.obs[0], traj.actions[0]


def _chain_factors(hmm, L: int, h: str = "H"):
    """Variables, factors and edges of the unrolled chain of one ActionHMM."""
    from pgmpy.factors.discrete import DiscreteFactor

    H, O, A = hmm.n_states, hmm.n_obs, hmm.n_actions
    T = _dense_T(hmm)
    T_hah = np.ascontiguousarray(T.transpose(1, 0, 2))  # (H_prev, A, H_next)
    variables, factors = [], []
    for t in range(L):
        variables += [f"{h}_{t}", f"O_{t}"]
        if t:
            variables.append(f"A_{t}")
    factors.append(DiscreteFactor([f"{h}_0"], [H], hmm.B.copy()))
    for t in range(L):
        factors.append(DiscreteFactor([f"{h}_{t}", f"O_{t}"], [H, O], hmm.E.copy()))
        if t:
            factors.append(DiscreteFactor([f"{h}_{t - 1}", f"A_{t}", f"{h}_{t}"], [H, A, H], T_hah.copy()))
    return variables, factors


def _assemble(variables, factors):
    from pgmpy.models import FactorGraph

    fg = FactorGraph()
    fg.add_nodes_from(variables)
    fg.add_factors(*factors)
    for f in factors:
        fg.add_edges_from([(v, f) for v in f.variables])
    # fg.check_model() holds by construction; pgmpy's check hashes every factor
    # repeatedly (seconds for a 40-step window), so it is left to the caller.
    return fg


def _variables(factor_graph) -> list:
    """Variable nodes (without pgmpy's slow check_model)."""
    return sorted({v for f in factor_graph.factors for v in f.variables}, key=lambda v: (_split(v)[1], str(v)))


def to_markov_network(factor_graph):
    """The same factors as a pgmpy ``DiscreteMarkovNetwork`` (what pgmpy's exact inference runs on).

    pgmpy 1.1's VariableElimination treats a FactorGraph's factor nodes as
    variables, so inference goes through this equivalent Markov network.

    >>> import numpy as np
    >>> from hmmmerge import ActionHMM
    >>> fg, ev = to_factor_graph(ActionHMM(np.full((1, 2, 2), 0.5), np.eye(2), [1.0, 0.0]), [0, 1])
    >>> sorted(to_markov_network(fg).nodes())
    ['A_1', 'H_0', 'H_1', 'O_0', 'O_1']
    """
    import itertools

    from pgmpy.models import DiscreteMarkovNetwork

    mm = DiscreteMarkovNetwork()
    mm.add_nodes_from(_variables(factor_graph))
    for f in factor_graph.factors:
        mm.add_edges_from(itertools.combinations(f.variables, 2))
    mm.add_factors(*factor_graph.factors)
    return mm


def _evidence(o, a) -> dict:
    ev = {f"O_{t}": int(v) for t, v in enumerate(o)}
    ev.update({f"A_{t}": int(a[t]) for t in range(1, len(a))})
    return ev


def to_factor_graph(hmm, obs, actions=None, *, max_states: int | None = 1000):
    """Unroll ``hmm`` over a window into a pgmpy ``FactorGraph``.

    Returns ``(factor_graph, evidence)``: variables ``H_t``, ``O_t``, ``A_t``
    (see the module docstring) and the window's observations and actions as
    ``{name: value}``.

    >>> import numpy as np
    >>> from hmmmerge import ActionHMM
    >>> hmm = ActionHMM(np.full((2, 2, 2), 0.5), np.eye(2), [1.0, 0.0])
    >>> fg, ev = to_factor_graph(hmm, [0, 1, 1], [-1, 0, 1])
    >>> sorted(fg.get_variable_nodes()), ev["O_2"], ev["A_2"]
    (['A_1', 'A_2', 'H_0', 'H_1', 'H_2', 'O_0', 'O_1', 'O_2'], 1, 1)
    """
    _check_hmm(hmm, max_states)
    o, a = _window(hmm, obs, actions)
    variables, factors = _chain_factors(hmm, len(o))
    return _assemble(variables, factors), _evidence(o, a)


def to_dynamic_bayesian_network(hmm, *, missing: str = "error", max_states: int | None = 1000):
    """The two-slice pgmpy ``DynamicBayesianNetwork`` of ``hmm``.

    Nodes ``("H", t)``, ``("O", t)``, ``("A", t)`` for slices ``t = 0, 1``.
    Edges: ``H -> O`` and ``A -> H`` inside a slice, ``H_0 -> H_1`` across.
    CPDs: ``P(H_1 | H_0, A_1) = T[a]``, ``P(O | H) = E``, ``P(H_0 | A_0) = B``
    (the same for every action: slice 0 has no move), and a uniform CPD on
    ``A`` (the action is always observed; the uniform policy of the paper).

    A Bayesian network needs proper conditional distributions, so rows of
    ``T`` that sum to 0 (unknown transitions) are an error by default;
    ``missing="uniform"`` fills them with a uniform row, ``missing="stay"``
    with a self-loop.

    >>> import numpy as np
    >>> from hmmmerge import ActionHMM
    >>> hmm = ActionHMM(np.full((2, 2, 2), 0.5), np.eye(2), [1.0, 0.0])
    >>> dbn = to_dynamic_bayesian_network(hmm)
    >>> dbn.check_model(), len(dbn.get_cpds())
    (True, 6)
    """
    from pgmpy.factors.discrete import TabularCPD
    from pgmpy.models import DynamicBayesianNetwork

    _check_hmm(hmm, max_states)
    if missing not in ("error", "uniform", "stay"):
        raise ValueError(f"missing must be 'error', 'uniform' or 'stay', got {missing!r}")
    H, O, A = hmm.n_states, hmm.n_obs, hmm.n_actions
    T = _dense_T(hmm).copy()
    empty = T.sum(axis=2) == 0  # (A, H)
    if empty.any():
        if missing == "error":
            a, i = np.argwhere(empty)[0]
            raise ValueError(
                f"T[{a}] row {i} sums to 0 (unknown transition; {int(empty.sum())} such rows): a Bayesian "
                "network needs proper CPDs; pass missing='uniform' or 'stay'"
            )
        if missing == "uniform":
            T[empty] = 1.0 / H
        else:
            aa, ii = np.nonzero(empty)
            T[aa, ii, ii] = 1.0
    dbn = DynamicBayesianNetwork()
    dbn.add_edges_from([(("H", 0), ("O", 0)), (("A", 0), ("H", 0)), (("H", 0), ("H", 1))])
    # evidence order (H_0, A_1): column index = h * A + a
    trans = T.transpose(2, 1, 0).reshape(H, H * A)
    cpds = [
        TabularCPD(("A", 0), A, np.full((A, 1), 1.0 / A)),
        TabularCPD(("A", 1), A, np.full((A, 1), 1.0 / A)),
        TabularCPD(("H", 0), H, np.repeat(hmm.B[:, None], A, axis=1), evidence=[("A", 0)], evidence_card=[A]),
        TabularCPD(("H", 1), H, trans, evidence=[("H", 0), ("A", 1)], evidence_card=[H, A]),
        TabularCPD(("O", 0), O, hmm.E.T.copy(), evidence=[("H", 0)], evidence_card=[H]),
        TabularCPD(("O", 1), O, hmm.E.T.copy(), evidence=[("H", 1)], evidence_card=[H]),
    ]
    dbn.add_cpds(*cpds)
    return dbn


def two_level_factor_graph(level1, C, obs, actions=None, *, max_states: int | None = 1000):
    """The two-level memory (the paper's Figure two_level_graph) unrolled over a window.

    Variables ``H1_t`` (level-1 state), ``H2_t`` (level-2 state), ``O_t``,
    ``A_t``; factors ``B(H1_0)``, ``T1(H1_{t-1}, A_t, H1_t)``, ``E(H1_t, O_t)``
    and ``C(H1_t, H2_t) = P(h2 | h1)``.  ``C`` is (n x k), dense or sparse,
    non-negative, rows summing to 1, or to 0 for a first-level state without a
    cluster; if any row sums to 0, ``H2`` gets one extra value ``k`` meaning
    "no cluster" (``P(H2 = k | h1) = 1`` for those states).

    Returns ``(factor_graph, evidence)``.  The posterior of ``H2_t`` given the
    evidence up to ``t`` is the level-1 filtered belief times ``C``.

    >>> import numpy as np
    >>> from hmmmerge import ActionHMM
    >>> level1 = ActionHMM.from_deterministic([[1, 2, -1]], [0, 1, 1], n_obs=2)
    >>> C = np.array([[1, 0], [0, 1], [0, 1]])
    >>> fg, ev = two_level_factor_graph(level1, C, [0, 1], [-1, 0])
    >>> sorted(fg.get_variable_nodes())
    ['A_1', 'H1_0', 'H1_1', 'H2_0', 'H2_1', 'O_0', 'O_1']
    """
    from pgmpy.factors.discrete import DiscreteFactor

    _check_hmm(level1, max_states)
    Cd = np.asarray(C.toarray() if sp.issparse(C) else C, dtype=np.float64)
    n = level1.n_states
    if Cd.ndim != 2 or Cd.shape[0] != n:
        raise ValueError(f"C must have shape ({n}, k) to match the level-1 model, got {Cd.shape}")
    if Cd.shape[1] == 0:
        raise ValueError("C has no columns: the level-2 model needs at least one state")
    if not np.isfinite(Cd).all():
        raise ValueError("C holds NaN or inf")
    if (Cd < 0).any():
        raise ValueError("C holds a negative entry")
    sums = Cd.sum(axis=1)
    bad = np.flatnonzero((np.abs(sums) > 1e-9) & (np.abs(sums - 1.0) > 1e-9))
    if len(bad):
        raise ValueError(f"C row {bad[0]} sums to {sums[bad[0]]:.12g}; rows are P(h2 | h1) and sum to 1 (or 0)")
    if (np.abs(sums) <= 1e-9).any():
        Cd = np.hstack([Cd, (np.abs(sums) <= 1e-9).astype(np.float64)[:, None]])
    k = Cd.shape[1]
    o, a = _window(level1, obs, actions)
    variables, factors = _chain_factors(level1, len(o), h="H1")
    for t in range(len(o)):
        variables.append(f"H2_{t}")
        factors.append(DiscreteFactor([f"H1_{t}", f"H2_{t}"], [n, k], Cd.copy()))
    return _assemble(variables, factors), _evidence(o, a)


def pgmpy_filter(factor_graph, evidence, variable: str = "H", *, method: str = "ve"):
    """Filtered posteriors and log-likelihood by pgmpy exact inference (a cross-check).

    For every ``t`` the posterior of ``{variable}_t`` given all actions of the
    window and the observations ``O_0..O_t``.

    * ``method="ve"``: VariableElimination; the unnormalised result of the
      query at ``t`` is ``P(o_0..o_t, {variable}_t | a)``, so the last one also
      gives ``log P(o | a)``.  Unscaled: it underflows on long windows.
    * ``method="bp"``: BeliefPropagation on the junction tree; each query asks
      the joint ``P({variable}_t, O_t | o_<t, a)`` (normalised by pgmpy), which
      gives the posterior and the predictive probability of ``o_t``; the
      log-likelihood is the sum of their logs.  (The unnormalised clique
      beliefs are no use here: pgmpy's convergence test compares them with an
      absolute tolerance of 1e-8, so on windows longer than a few steps it
      stops before calibration.)

    Returns ``(log_likelihood, posteriors)``, ``posteriors`` of shape (L, card).
    Cost grows as L^2; for short windows only.

    For a model with unknown transitions (rows of ``T`` summing to 0) the
    later actions of the window carry information here (a state with no
    successor under a later action becomes impossible), which our forward
    filter does not use; compare such models on prefixes of the window.

    >>> import numpy as np
    >>> from hmmmerge import ActionHMM
    >>> hmm = ActionHMM(np.full((1, 2, 2), 0.5), np.eye(2), [0.5, 0.5])
    >>> ll, post = pgmpy_filter(*to_factor_graph(hmm, [0, 1, 1]))
    >>> round(ll, 6), round(float(3 * np.log(0.5)), 6), post[-1].tolist()
    (-2.079442, -2.079442, [0.0, 1.0])
    """
    from pgmpy.inference import BeliefPropagation, VariableElimination

    if method not in ("ve", "bp"):
        raise ValueError(f"method must be 've' or 'bp', got {method!r}")
    L = sum(1 for name in evidence if str(name).startswith("O_"))
    if L == 0:
        raise ValueError("evidence holds no observations O_t")
    actions = {k: v for k, v in evidence.items() if str(k).startswith("A_")}
    mm = to_markov_network(factor_graph)
    engine = VariableElimination(mm) if method == "ve" else BeliefPropagation(mm)
    posts, loglik = [], 0.0
    for t in range(L):
        ev = dict(actions)
        ev.update({f"O_{s}": evidence[f"O_{s}"] for s in range(t + (method == "ve"))})
        target = f"{variable}_{t}"
        if method == "ve":
            phi = engine.query([target], evidence=ev, show_progress=False)  # "greedy" einsum contraction
            values = np.asarray(phi.values, dtype=np.float64)
            total = values.sum()
            if t == L - 1:
                loglik = float(np.log(total)) if total > 0 else -np.inf
        else:
            phi = engine.query([target, f"O_{t}"], evidence=ev, joint=True, show_progress=False)
            joint = np.asarray(phi.values, dtype=np.float64)
            if list(phi.variables) != [target, f"O_{t}"]:
                joint = joint.T
            values = joint[:, evidence[f"O_{t}"]]
            total = values.sum()
            loglik += float(np.log(total)) if total > 0 else -np.inf
        if not total > 0:
            raise ValueError(
                f"the evidence up to step {t} has probability 0 (or underflowed) under the exported model"
            )
        posts.append(values / total)
    return loglik, np.array(posts)


# --------------------------------------------------------------------------- drawing
_ROWS = {"H2": 3.0, "H1": 2.0, "H": 2.0, "O": 1.0, "A": 0.0}
_FACTOR_NAMES = (("H2", "C"), ("A", "T"), ("O", "E"))


def _split(name: str):
    prefix, _, t = str(name).rpartition("_")
    return prefix, int(t)


def _factor_label(variables) -> str:
    prefixes = {_split(v)[0] for v in variables}
    for p, label in _FACTOR_NAMES:
        if p in prefixes:
            return "T1" if label == "T" and "H1" in prefixes else label
    return "B"


def draw_factor_graph(factor_graph, path=None, *, ax=None, title: str | None = None, evidence=None):
    """Draw a factor graph from this module with matplotlib / networkx; save a PNG if ``path`` is given.

    Time runs left to right; rows from top: ``H2``, ``H1`` (or ``H``), ``O``,
    ``A``.  Variables are circles (shaded when in ``evidence``), factors
    small black squares labelled ``B``, ``T``/``T1``, ``E``, ``C``.  Returns
    the matplotlib Axes.

    >>> import numpy as np, tempfile, os
    >>> from hmmmerge import ActionHMM
    >>> level1 = ActionHMM.from_deterministic([[1, 2, -1]], [0, 1, 1], n_obs=2)
    >>> fg, ev = two_level_factor_graph(level1, np.array([[1, 0], [0, 1], [0, 1]]), [0, 1], [-1, 0])
    >>> out = os.path.join(tempfile.mkdtemp(), "two_level.png")
    >>> _ = draw_factor_graph(fg, out, evidence=ev)
    >>> os.path.getsize(out) > 1000
    True
    """
    import matplotlib

    if ax is None:
        matplotlib.use("Agg")
    import io

    import matplotlib.pyplot as plt
    import networkx as nx

    from ._io import atomic_write_bytes

    evidence = evidence or {}
    variables = _variables(factor_graph)
    factors = list(factor_graph.factors)
    pos, labels = {}, {}
    for v in variables:
        prefix, t = _split(v)
        pos[v] = (2.0 * t - (prefix == "A"), _ROWS.get(prefix, 2.0))  # a move sits under its transition
        labels[v] = f"${prefix[0].lower()}^{{{prefix[1:]}}}_{{{t}}}$" if len(prefix) > 1 else f"${prefix.lower()}_{{{t}}}$"
    flabels = {}
    for f in factors:
        pts = np.array([pos[v] for v in f.variables])
        x, y = pts.mean(axis=0)
        if len(f.variables) == 1:  # the prior: left of its variable
            x -= 0.9
        elif len(f.variables) == 3:  # transition: between the two states, level with them
            hs = [pos[v] for v in f.variables if not v.startswith("A_")]
            x, y = np.mean([p[0] for p in hs]), hs[0][1]
        pos[f] = (x, y)
        flabels[f] = _factor_label(f.variables)
    g = nx.Graph()
    g.add_nodes_from(variables)
    g.add_nodes_from(factors)
    for f in factors:
        g.add_edges_from((f, v) for v in f.variables)

    own = ax is None
    if own:
        L = 1 + max(_split(v)[1] for v in variables)
        fig, ax = plt.subplots(figsize=(2.2 * L + 1.5, 4.2))
    else:
        fig = ax.figure
    nx.draw_networkx_edges(g, pos, ax=ax, edge_color="0.4", width=1.2)
    shaded = [v for v in variables if v in evidence]
    free = [v for v in variables if v not in evidence]
    nx.draw_networkx_nodes(g, pos, nodelist=free, node_color="white", edgecolors="black", node_size=900, ax=ax)
    nx.draw_networkx_nodes(g, pos, nodelist=shaded, node_color="0.8", edgecolors="black", node_size=900, ax=ax)
    nx.draw_networkx_nodes(g, pos, nodelist=factors, node_shape="s", node_color="black", node_size=130, ax=ax)
    nx.draw_networkx_labels(g, pos, labels=labels, font_size=11, ax=ax)
    for f in factors:
        x, y = pos[f]
        ax.annotate(flabels[f], (x, y), xytext=(0, 9), textcoords="offset points", ha="center", fontsize=9)
    ax.set_title(title or "factor graph (shaded: observed)")
    ax.axis("off")
    if path is not None:
        buf = io.BytesIO()
        fig.tight_layout()
        fig.savefig(buf, format="png", dpi=130)
        atomic_write_bytes(path, buf.getvalue())
    if own:
        plt.close(fig)
    return ax

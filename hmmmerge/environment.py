"""Partially observable environments as networkx graphs.

An :class:`Environment` is the paper's discrete POE (Definitions 2.1 and 2.4):
a directed multigraph whose nodes are the true states ``S`` and carry an
observation ``obs`` (the map ``X: S -> O``), and whose edges carry an
``action``; every node has exactly one out-edge per action (the deterministic
transition ``P: S x A -> S``).  Nodes keep their networkx labels; everything
numeric works on state *indices* ``0..n_states-1`` in the order of
``env.nodes``.

Stochastic worlds (the world as it is: slipping moves, noisy views) use the
same graph:

* **Transitions.**  A (node, action) may have several out-edges, each with a
  probability in the edge attribute ``p``; a (node, action) with a single
  edge and no ``p`` moves with probability 1.  The ``p`` of the out-edges of
  one (node, action) must be finite, >= 0 and sum to 1 within
  :data:`PROB_ATOL` (they are then rescaled to sum to 1 exactly).  Edges with
  ``p = 0`` are kept in the graph but are no transition.
* **Observations.**  A node's ``obs`` is an int (deterministic) or a
  distribution over colours: a dict ``{colour: probability}``, a sequence of
  probabilities indexed by colour, or either as JSON text (how GraphML files
  store it); checked like ``p``.  On top, an environment-wide ``obs_noise =
  q`` (graph attribute ``obs_noise``): each emitted observation is, with
  probability ``q``, replaced by a colour drawn uniformly from all
  ``n_obs`` colours (possibly the same one), so
  ``P(o | s) = (1 - q) P_node(o | s) + q / n_obs``.

``env.next_state`` (A x S) and ``env.obs`` (S) stay int arrays: for a
stochastic world they hold the *most likely* successor and colour (ties: the
smallest index); the exact process is :attr:`Environment.transitions`
(CSR arrays over rows ``a * S + s``), :attr:`Environment.emission` and
:meth:`Environment.to_hmm` (the oracle).  A deterministic world (one edge of
positive probability per (node, action), int ``obs``, no noise) behaves
exactly as before.  :meth:`Environment.with_noise` makes moves slip and views
noisy in any world.
"""

from __future__ import annotations

import ast
import json
import math
import warnings
from numbers import Integral, Real
from typing import NamedTuple

import numpy as np

__all__ = ["Environment", "NoStartWarning", "PROB_ATOL", "Transitions", "match_node"]

PROB_ATOL = 1e-6
"""Tolerance on the sum of the probabilities of one (node, action) or one node's observation: |sum - 1| <= 1e-6."""

MAX_N_OBS = 2**31 - 1
"""The largest alphabet (``n_obs``) a world may have: observations are integers in ``0..MAX_N_OBS - 1`` (agent
files hold alphabets below 2**31); larger values are refused before anything is allocated."""


def _is_int(x) -> bool:
    return isinstance(x, Integral) and not isinstance(x, bool)


class Transitions(NamedTuple):
    """The transition probabilities as CSR arrays over rows ``a * n_states + s`` (zero probabilities left out).

    Row ``r = a * S + s`` holds the successors ``indices[indptr[r]:indptr[r + 1]]`` (increasing) of state
    ``s`` under action ``a`` with probabilities ``probs[indptr[r]:indptr[r + 1]]`` (summing to 1).
    """

    indptr: np.ndarray
    indices: np.ndarray
    probs: np.ndarray


_COUNT_WORDS = {2: "two", 3: "three"}


class Environment:
    """A partially observable world over a ``networkx.MultiDiGraph``: deterministic or stochastic.

    Parameters
    ----------
    graph : networkx.MultiDiGraph (or DiGraph / MultiGraph convertible to one)
        Nodes carry ``obs`` (int >= 0, or a distribution over colours); edges
        carry ``action`` (int >= 0) and, where a (node, action) has several
        out-edges, ``p`` (see the module docstring).  Every node needs an
        out-edge for every action ``0..A-1``.
    start : node label, optional
        The start state of every episode.  Defaults to ``graph.graph["start"]``;
        with neither, the first node, with a :class:`NoStartWarning`.  The
        label is matched after the conversions file formats apply (see
        :func:`match_node`), so ``"(5, 0)"`` names the node ``(5, 0)``.
        The chosen start is stored in ``env.graph.graph["start"]`` (as text
        when it is a tuple, so ``nx.write_graphml(env.graph)`` keeps it).
    n_obs : int, optional
        Size of the observation alphabet; defaults to ``max(obs) + 1``.
    obs_noise : float in [0, 1], optional
        Probability that an observation is replaced by a uniformly random
        colour; defaults to ``graph.graph["obs_noise"]``, else 0.

    Examples
    --------
    >>> import networkx as nx
    >>> g = nx.MultiDiGraph()
    >>> g.add_node("a", obs=0); g.add_node("b", obs=1)
    >>> _ = g.add_edge("a", "b", action=0); _ = g.add_edge("b", "a", action=0)
    >>> env = Environment(g, start="a")
    >>> env.n_states, env.n_actions, env.n_obs, env.is_deterministic
    (2, 1, 2, True)
    >>> env.next_state.tolist()
    [[1, 0]]

    A slippery version: from ``b`` the move reaches ``a`` with probability 0.9 only.

    >>> g.remove_edge("b", "a"); _ = g.add_edge("b", "a", action=0, p=0.9); _ = g.add_edge("b", "b", action=0, p=0.1)
    >>> env = Environment(g, start="a")
    >>> env.is_deterministic, env.next_state.tolist(), env.to_hmm().T[0].toarray().tolist()
    (False, [[1, 0]], [[0.0, 1.0], [0.9, 0.1]])
    """

    def __init__(self, graph, start=None, n_obs: int | None = None, obs_noise=None):
        import networkx as nx

        if not isinstance(graph, nx.Graph):
            raise TypeError(f"graph must be a networkx graph, got {type(graph).__name__}")
        if graph.number_of_nodes() == 0:
            raise ValueError("graph is empty: an environment needs at least one state")
        if not graph.is_directed():
            raise ValueError(
                "graph is undirected: transitions need a direction; build a MultiDiGraph "
                "with one out-edge per (node, action)"
            )
        g = nx.MultiDiGraph(graph)  # a copy: later edits of the caller's graph cannot desynchronise us
        nodes = list(g.nodes)
        index = {node: i for i, node in enumerate(nodes)}
        S = len(nodes)

        obs = np.empty(S, dtype=np.int64)
        dists = {}  # state index -> (colours, probabilities) for nodes whose obs is a distribution
        for i, node in enumerate(nodes):
            data = g.nodes[node]
            if "obs" not in data:
                raise ValueError(f"node {node!r} has no 'obs' attribute")
            o = data["obs"]
            if isinstance(o, str):  # a GraphML file stores a distribution as JSON text (a plain colour too, then)
                o = _parse_obs_text(o, node)
            if _is_int(o):
                o = int(o)  # a numpy unsigned value keeps its sign
                if not 0 <= o < MAX_N_OBS:
                    raise ValueError(f"node {node!r} has obs={o!r}; observations must be integers in "
                                     f"0..{MAX_N_OBS - 1}")
                obs[i] = o
                continue
            colours, probs = _obs_distribution(o, node)
            dists[i] = (colours, probs)
            obs[i] = colours[np.argmax(probs)]  # sorted colours: ties go to the smallest
            data["obs"] = {int(c): float(q) for c, q in zip(colours.tolist(), probs.tolist())}

        src, act, dst, prob = [], [], [], []
        for u, v, data in g.edges(data=True):
            if "action" not in data:
                raise ValueError(f"edge {u!r} -> {v!r} has no 'action' attribute")
            a = data["action"]
            if not _is_int(a) or a < 0:
                raise ValueError(f"edge {u!r} -> {v!r} has action={a!r}; actions must be integers >= 0")
            src.append(index[u])
            act.append(int(a))
            dst.append(index[v])
            prob.append(_edge_probability(data.get("p"), u, v))
        if not src:
            raise ValueError("graph has no edges: every node needs one out-edge per action")
        next_state, transitions = _transition_tables(
            nodes, np.array(src, dtype=np.int64), np.array(act, dtype=np.int64), np.array(dst, dtype=np.int64),
            np.array(prob, dtype=np.float64))

        max_obs = int(obs.max()) + 1
        for colours, _ in dists.values():
            max_obs = max(max_obs, int(colours[-1]) + 1)
        if n_obs is None:
            n_obs = graph.graph.get("n_obs", max_obs)
        if not _is_int(n_obs) or not max_obs <= n_obs <= MAX_N_OBS:
            raise ValueError(f"n_obs={n_obs!r} must be an integer >= max(obs) + 1 = {max_obs} and <= {MAX_N_OBS}")
        noise = _check_noise(graph.graph.get("obs_noise", 0.0) if obs_noise is None else obs_noise, "obs_noise")

        start_index = _resolve_start(start, graph.graph.get("start"), nodes, index)
        g.graph["start"] = _graph_attribute_label(nodes[start_index])
        g.graph["n_obs"] = int(n_obs)
        if noise > 0:
            g.graph["obs_noise"] = noise
        else:
            g.graph.pop("obs_noise", None)

        self._graph = g
        self.nodes = nodes
        self.index = index
        self.obs = obs
        self.next_state = next_state
        self.start = int(start_index)
        self.n_obs = int(n_obs)
        self.obs_noise = noise
        self._transitions = transitions
        self._obs_dist = _obs_csr(dists, obs)
        if self._obs_dist is not None and len(self._obs_dist[1]) == S:  # every distribution is one colour
            self._obs_dist = None
        self._emission = None
        for arr in (self.obs, self.next_state):
            arr.flags.writeable = False

    @classmethod
    def _from_tables(cls, nodes: list, obs: np.ndarray, next_state: np.ndarray, start: int, n_obs: int,
                     name: str, *, transitions: "Transitions | None" = None, obs_dist=None,
                     obs_noise: float = 0.0, template=None) -> "Environment":
        """An environment from checked tables, its graph built on first use of :attr:`graph`.

        For builders that make valid tables themselves (:func:`~hmmmerge.worlds.gridworld`,
        :meth:`with_noise`): a run on them never imports networkx.  ``nodes`` are distinct labels,
        ``obs`` (S) ints in ``0..n_obs-1``, ``next_state`` (A x S) state indices,
        ``start`` an index; for a stochastic world ``transitions`` (normalised CSR, ``next_state`` its
        most likely successors), ``obs_dist`` (CSR over states: indptr, colours, probabilities) and
        ``obs_noise``.  The graph is the one ``Environment(graph)`` would hold for a ``MultiDiGraph``
        named ``name`` with the nodes in order and each node's out-edges in action order (with ``p`` on
        every edge of a stochastic world); ``template`` (a graph) lends its graph and node attributes.
        """
        env = cls.__new__(cls)
        env._graph = None
        env._graph_name = name
        env._template = template
        env.nodes = list(nodes)
        env.index = {node: i for i, node in enumerate(env.nodes)}
        env.obs = np.array(obs, dtype=np.int64)
        env.next_state = np.array(next_state, dtype=np.int64)
        env.start = int(start)
        env.n_obs = int(n_obs)
        env.obs_noise = float(obs_noise)
        env._transitions = transitions
        env._obs_dist = obs_dist
        env._emission = None
        for arr in (env.obs, env.next_state):
            arr.flags.writeable = False
        return env

    @property
    def graph(self):
        """The world as a ``networkx.MultiDiGraph``: nodes carry ``obs``, edges ``action`` (and ``p`` in a
        stochastic world); graph attributes ``start`` (the start label, as text when it is a tuple),
        ``n_obs`` and, when positive, ``obs_noise``.

        >>> from hmmmerge import gridworld
        >>> g = gridworld(2, 2, n_colours=2, seed=0).graph
        >>> g.graph, g.number_of_edges(), sorted(g.nodes[(1, 0)])
        ({'name': 'gridworld 2x2', 'start': '(1, 0)', 'n_obs': 2}, 16, ['obs'])
        """
        if self._graph is None:
            import networkx as nx

            template = getattr(self, "_template", None)
            g = nx.MultiDiGraph(name=self._graph_name)
            if template is not None:
                g.graph.update(template.graph)
            for i, (node, o) in enumerate(zip(self.nodes, self.obs.tolist())):
                attrs = {} if template is None else dict(template.nodes[node])
                attrs["obs"] = o
                if self._obs_dist is not None:
                    ptr, colours, probs = self._obs_dist
                    lo, hi = ptr[i], ptr[i + 1]
                    if not (hi - lo == 1 and probs[lo] == 1.0):
                        attrs["obs"] = {int(c): float(q) for c, q in zip(colours[lo:hi].tolist(),
                                                                           probs[lo:hi].tolist())}
                g.add_node(node, **attrs)
            if self._transitions is None:
                for u, targets in zip(self.nodes, self.next_state.T.tolist()):
                    for a, v in enumerate(targets):
                        g.add_edge(u, self.nodes[v], action=a)
            else:
                indptr, indices, probs = self._transitions
                S, A = self.n_states, self.n_actions
                for s, u in enumerate(self.nodes):
                    for a in range(A):
                        r = a * S + s
                        for v, q in zip(indices[indptr[r]:indptr[r + 1]].tolist(),
                                        probs[indptr[r]:indptr[r + 1]].tolist()):
                            g.add_edge(u, self.nodes[v], action=a, p=q)
            g.graph["start"] = _graph_attribute_label(self.nodes[self.start])
            g.graph["n_obs"] = self.n_obs
            if self.obs_noise > 0:
                g.graph["obs_noise"] = self.obs_noise
            else:
                g.graph.pop("obs_noise", None)
            self._graph = g
            self._template = None
        return self._graph

    # ------------------------------------------------------------------ sizes
    @property
    def n_states(self) -> int:
        return len(self.nodes)

    @property
    def n_actions(self) -> int:
        return self.next_state.shape[0]

    @property
    def start_node(self):
        """The label of the start state."""
        return self.nodes[self.start]

    def __repr__(self) -> str:
        extra = ""
        if self._transitions is not None:
            extra += ", stochastic moves"
        if self._obs_dist is not None:
            extra += ", stochastic views"
        if self.obs_noise > 0:
            extra += f", obs_noise={self.obs_noise:g}"
        return (
            f"Environment(n_states={self.n_states}, n_actions={self.n_actions}, "
            f"n_obs={self.n_obs}, start={self.start_node!r}{extra})"
        )

    # ------------------------------------------------------------ the process
    @property
    def is_deterministic(self) -> bool:
        """Whether every move has one outcome and every state one observation (no noise).

        >>> from hmmmerge import gridworld
        >>> gridworld(3, 3).is_deterministic, gridworld(3, 3, slip=0.1).is_deterministic
        (True, False)
        """
        return self._transitions is None and self._obs_dist is None and self.obs_noise == 0

    @property
    def deterministic_moves(self) -> bool:
        """Whether every (state, action) has a single successor (``next_state`` is then the whole story).

        >>> from hmmmerge import gridworld
        >>> env = gridworld(3, 3, obs_noise=0.1)
        >>> env.deterministic_moves, env.is_deterministic
        (True, False)
        """
        return self._transitions is None

    @property
    def transitions(self) -> Transitions:
        """The transition probabilities, :class:`Transitions` CSR arrays over rows ``a * n_states + s``.

        >>> env = Environment.from_arrays([[1, 0]], [0, 1]).with_noise(slip=0.5)
        >>> t = env.transitions
        >>> t.indptr.tolist(), t.indices.tolist(), t.probs.tolist()   # one action: slipping changes nothing
        ([0, 1, 2], [1, 0], [1.0, 1.0])
        """
        if self._transitions is not None:
            return self._transitions
        S, A = self.n_states, self.n_actions
        return Transitions(np.arange(A * S + 1, dtype=np.int64), self.next_state.ravel().copy(),
                           np.ones(A * S))

    @property
    def emission(self) -> np.ndarray:
        """``P(o | s)``, an (n_states, n_obs) float array, observation noise included.

        >>> Environment.from_arrays([[0]], [1], n_obs=2).with_noise(obs_noise=0.2).emission.tolist()
        [[0.1, 0.9]]
        """
        if self._emission is None:
            from ._limits import check_memory

            S, O = self.n_states, self.n_obs
            check_memory(f"the emission table of {S} states x {O} observations", 8 * S * O)
            E = np.zeros((S, O))
            if self._obs_dist is None:
                E[np.arange(S), self.obs] = 1.0
            else:
                ptr, colours, probs = self._obs_dist
                E[np.repeat(np.arange(S), np.diff(ptr)), colours] = probs
            if self.obs_noise > 0:
                E = (1.0 - self.obs_noise) * E + self.obs_noise / O
            E.flags.writeable = False
            self._emission = E
        return self._emission

    def start_distribution(self, start=None) -> np.ndarray:
        """The distribution of the first state of an episode, an (n_states,) float array.

        ``start``: ``None`` (the environment's start), a node label, ``"random"``
        (uniform over the states), or a distribution over the states: a dict
        ``{node: probability}`` or a 1-D numpy array indexed like ``env.nodes``
        (non-negative, summing to 1 within :data:`PROB_ATOL`).  ``"random"`` always
        means uniform; a node called ``"random"`` is named by ``{"random": 1.0}``.

        >>> env = Environment.from_arrays([[1, 2, 0]], [0, 1, 0])
        >>> env.start_distribution().tolist(), env.start_distribution(2).tolist()
        ([1.0, 0.0, 0.0], [0.0, 0.0, 1.0])
        >>> env.start_distribution("random").round(3).tolist(), env.start_distribution({0: 0.5, 1: 0.5}).tolist()
        ([0.333, 0.333, 0.333], [0.5, 0.5, 0.0])
        """
        S = self.n_states
        out = np.zeros(S)
        if start is None:
            out[self.start] = 1.0
            return out
        if isinstance(start, str) and start == "random":
            return np.full(S, 1.0 / S)
        if isinstance(start, dict):
            for node, q in start.items():
                i = match_node(node, self.index)
                if i is None:
                    raise ValueError(f"start distribution names {node!r}, which is not a node of the world")
                out[i] += _probability(q, f"start distribution entry for {node!r}")
            return _normalised(out, "start distribution")
        if isinstance(start, np.ndarray) and start.ndim == 1 and start.dtype.kind == "f":
            if start.size != S:
                raise ValueError(f"start distribution has {start.size} entries for {S} states")
            for i, q in enumerate(start.tolist()):
                out[i] = _probability(q, f"start distribution entry {i}")
            return _normalised(out, "start distribution")
        i = match_node(start, self.index)
        if i is None:
            sample = ", ".join(repr(n) for n in self.nodes[:3]) + (", ..." if S > 3 else "")
            raise ValueError(f"start={start!r} is not a node, 'random', a dict {{node: p}} or a float array of "
                             f"{S} probabilities (nodes: {sample})")
        out[i] = 1.0
        return out

    def with_noise(self, slip: float = 0.0, obs_noise: float = 0.0) -> "Environment":
        """This world with slipping moves and noisy views: a new :class:`Environment`.

        ``slip = p``: with probability ``p`` the move executed is a uniformly random
        action (possibly the intended one) while the agent records the intended one,
        ``T'[a] = (1 - p) T[a] + p * mean_b T[b]``.  ``obs_noise = q``: each
        observation is replaced with probability ``q`` by a uniformly random colour;
        on a world that already has noise ``q0`` the result has ``1 - (1 - q0)(1 - q)``.
        Node labels, start and colours are kept; ``next_state`` stays the intended
        successor for ``p < A / (2A - 2)``.

        >>> from hmmmerge import gridworld
        >>> env = gridworld(3, 3, n_colours=3, seed=0).with_noise(slip=0.2, obs_noise=0.1)
        >>> T = env.to_hmm().T[1].toarray()          # action 1 (right) from the start (2, 0)
        >>> {env.nodes[j]: round(float(T[env.start, j]), 3) for j in T[env.start].nonzero()[0]}
        {(1, 0): 0.05, (2, 0): 0.1, (2, 1): 0.85}
        >>> env.obs_noise, round(float(env.emission[0].max()), 4)
        (0.1, 0.9333)
        """
        p = _check_noise(slip, "slip")
        q = _check_noise(obs_noise, "obs_noise")
        transitions = self._transitions
        next_state = self.next_state
        if p > 0 and self.n_actions > 1:
            transitions = _slipped(self.transitions, self.n_states, self.n_actions, p)
            next_state = _most_likely(transitions, self.n_states, self.n_actions)
        noise = self.obs_noise + q - self.obs_noise * q  # 1 - (1 - q0)(1 - q), exact when either is 0
        template = self._graph if self._graph is not None else getattr(self, "_template", None)
        name = template.graph.get("name", "") if template is not None else self._graph_name
        return Environment._from_tables(self.nodes, self.obs, next_state, self.start, self.n_obs, name,
                                        transitions=transitions, obs_dist=self._obs_dist, obs_noise=noise,
                                        template=template)

    # ------------------------------------------------------------ builders
    @classmethod
    def from_arrays(cls, next_state, obs, start: int = 0, n_obs: int | None = None, nodes=None):
        """Build an environment from ``next_state`` (A x S) and ``obs`` (S).

        Node labels are ``0..S-1`` unless ``nodes`` gives them.

        >>> env = Environment.from_arrays([[1, 0], [0, 1]], [0, 1])
        >>> env.n_actions, env.n_states, env.start
        (2, 2, 0)
        """
        ns = np.asarray(next_state)
        ob = np.asarray(obs)
        if ns.ndim != 2:
            raise ValueError(f"next_state must be 2-D (n_actions x n_states), got shape {ns.shape}")
        if ob.ndim != 1 or ob.shape[0] != ns.shape[1]:
            raise ValueError(
                f"obs must have shape ({ns.shape[1]},) to match next_state {ns.shape}, got {ob.shape}"
            )
        if ns.size and not np.issubdtype(ns.dtype, np.integer):
            raise ValueError(f"next_state must hold integers, got dtype {ns.dtype}")
        if ob.size and not np.issubdtype(ob.dtype, np.integer):
            raise ValueError(f"obs must hold integers, got dtype {ob.dtype}")
        n = ns.shape[1]
        if n == 0:
            raise ValueError("next_state has no states: an environment needs at least one state")
        if ns.size and (ns.min() < 0 or ns.max() >= n):
            a, u = np.argwhere((ns < 0) | (ns >= n))[0]
            raise ValueError(f"next_state[{a}, {u}] = {ns[a, u]} is not a state index in 0..{n - 1}")
        labels = list(range(n)) if nodes is None else list(nodes)
        if len(labels) != n:
            raise ValueError(f"nodes has {len(labels)} labels for {n} states")
        if len(set(labels)) != n:
            raise ValueError("nodes holds a label twice; state labels must be distinct")
        if not _is_int(start) or not 0 <= start < n:
            raise ValueError(f"start={start!r} is not a state index in 0..{n - 1}")
        import networkx as nx

        g = nx.MultiDiGraph()
        for i, label in enumerate(labels):
            g.add_node(label, obs=int(ob[i]))
        for a in range(ns.shape[0]):
            for u in range(n):
                g.add_edge(labels[u], labels[int(ns[a, u])], action=a)
        return cls(g, start=labels[start], n_obs=n_obs)

    # ------------------------------------------------------------ views
    def clones(self) -> dict[int, list[int]]:
        """Observation -> state indices that emit it (the paper's clones).

        >>> env = Environment.from_arrays([[1, 2, 0]], [0, 1, 0])
        >>> env.clones()
        {0: [0, 2], 1: [1]}
        """
        out: dict[int, list[int]] = {}
        for s, o in enumerate(self.obs.tolist()):
            out.setdefault(o, []).append(s)
        return dict(sorted(out.items()))

    def clone_counts(self) -> np.ndarray:
        """Number of states per observation, an int array of length ``n_obs``.

        >>> Environment.from_arrays([[1, 2, 0]], [0, 1, 0], n_obs=3).clone_counts().tolist()
        [2, 1, 0]
        """
        return np.bincount(self.obs, minlength=self.n_obs)

    def to_hmm(self, start=None):
        """The true world as an :class:`~hmmmerge.hmm.ActionHMM` (the oracle): ``T[a]`` the transition
        probabilities, ``E`` the emission with noise, ``B`` the start distribution of the process
        (``start`` as in :meth:`start_distribution`; default the environment's start).

        >>> hmm = Environment.from_arrays([[1, 0]], [0, 1]).to_hmm()
        >>> hmm.n_states, hmm.n_obs
        (2, 2)
        >>> Environment.from_arrays([[1, 0]], [0, 1]).with_noise(obs_noise=0.5).to_hmm(start="random").B.tolist()
        [0.5, 0.5]
        """
        from .hmm import ActionHMM  # scipy.sparse: loaded when a model is needed, not to build a world

        if self.is_deterministic and start is None:
            return ActionHMM.from_deterministic(self.next_state, self.obs, n_obs=self.n_obs, start=self.start)
        import scipy.sparse as sp

        S, A = self.n_states, self.n_actions
        indptr, indices, probs = self.transitions
        T = []
        for a in range(A):
            lo, hi = indptr[a * S], indptr[(a + 1) * S]
            T.append(sp.csr_matrix((probs[lo:hi], indices[lo:hi], indptr[a * S:(a + 1) * S + 1] - lo), shape=(S, S)))
        return ActionHMM(T, np.array(self.emission), self.start_distribution(start))

    def _sample_successors(self, states: np.ndarray, actions: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Successors of ``states`` under ``actions`` drawn with the uniforms ``u`` in [0, 1)."""
        if self._transitions is None:
            return self.next_state[actions, states]
        if getattr(self, "_trans_cum", None) is None:
            self._trans_cum = _row_cumulative(self._transitions.indptr, self._transitions.probs)
        return _draw_rows(self._transitions, self._trans_cum, actions * self.n_states + states, u)

    def _sample_observations(self, states: np.ndarray, rng) -> np.ndarray:
        """Observations of ``states`` (any shape): node distributions, then the environment-wide noise."""
        if self._obs_dist is None:
            obs = self.obs[states]
        else:
            if getattr(self, "_obs_cum", None) is None:
                self._obs_cum = _row_cumulative(self._obs_dist[0], self._obs_dist[2])
            obs = _draw_rows(self._obs_dist, self._obs_cum, states.ravel(), rng.random(states.size))
            obs = obs.reshape(states.shape)
        if self.obs_noise > 0:
            replaced = rng.random(states.shape) < self.obs_noise
            obs = np.where(replaced, rng.integers(0, self.n_obs, size=states.shape), obs)
        return obs

    # ------------------------------------------------------------ files
    def to_json_dict(self) -> dict:
        """The JSON-ready node-link dictionary written by :meth:`save` (see :mod:`hmmmerge.environment_files`).

        >>> d = Environment.from_arrays([[1, 0]], [0, 1]).to_json_dict()
        >>> d["format"], d["version"], d["graph"]["graph"], len(d["graph"]["edges"])
        ('hmmmerge.environment', 1, {'start': 0, 'n_obs': 2}, 2)
        """
        from .environment_files import to_json_dict

        return to_json_dict(self)

    def save(self, path, format: str | None = None) -> None:
        """Write the environment atomically as JSON (node-link) or GraphML.

        ``format`` is ``"json"`` or ``"graphml"``; by default it follows the
        extension (``.graphml`` / ``.xml``: GraphML, anything else: JSON), the
        same rule :meth:`load` applies.  Tuple node labels, such as the grid's
        ``(row, col)``, survive both formats (GraphML stores them as text).

        >>> import os, tempfile
        >>> from hmmmerge import gridworld
        >>> env = gridworld(3, 3, n_colours=3, seed=0)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = os.path.join(d, "env.json"); env.save(path); back = Environment.load(path)
        >>> back.start_node, bool((back.next_state == env.next_state).all())
        ((2, 0), True)
        """
        from .environment_files import save

        save(self, path, format)

    @classmethod
    def load(cls, path, format: str | None = None, start=None) -> "Environment":
        """Read an environment: node-link JSON (ours or networkx's) or GraphML.

        ``format`` defaults to the extension (as in :meth:`save`); ``start``
        overrides the file's ``start`` graph attribute.  See
        :mod:`hmmmerge.environment_files` for what each format keeps.

        >>> import os, tempfile
        >>> import networkx as nx
        >>> g = Environment.from_arrays([[1, 2, 0]], [0, 1, 0], start=1).graph
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = os.path.join(d, "ring.graphml"); nx.write_graphml(g, path); env = Environment.load(path)
        >>> env.nodes, env.start_node, env.clones()
        ([0, 1, 2], 1, {0: [0, 2], 1: [1]})
        """
        from .environment_files import load

        return load(path, format=format, start=start)

    @classmethod
    def from_json_dict(cls, payload, source: str = "<dict>", start=None) -> "Environment":
        """Build from node-link data: :meth:`to_json_dict`'s output or ``networkx.node_link_data``'s.

        >>> env = Environment.from_arrays([[1, 2, 0]], [0, 1, 0], start=1)
        >>> back = Environment.from_json_dict(env.to_json_dict())
        >>> back.start, back.clones(), back.next_state.tolist()
        (1, {0: [0, 2], 1: [1]}, [[1, 2, 0]])
        """
        from .environment_files import from_json_dict

        return from_json_dict(payload, source=source, start=start)


class NoStartWarning(UserWarning):
    """An environment was built without a start: it starts at its first node."""


def _resolve_start(start, attribute, nodes, index) -> int:
    """The index of the start node: ``start`` if given, else the graph attribute, else node 0 (warned)."""
    if start is None and attribute is None:
        warnings.warn(
            f"no start given and the graph has no 'start' attribute: starting at its first node {nodes[0]!r} "
            "(pass start=NODE, --start NODE, or set graph.graph['start'])",
            NoStartWarning,
            stacklevel=3,
        )
        return 0
    value = attribute if start is None else start
    found = match_node(value, index)
    if found is None:
        where = "" if start is not None else " (from the graph attribute 'start')"
        sample = ", ".join(repr(n) for n in nodes[:3]) + (", ..." if len(nodes) > 3 else "")
        raise ValueError(f"start node {value!r}{where} is not in the graph (nodes: {sample})")
    return found


def match_node(value, index: dict):
    """The index of the node ``value`` names, matched after the conversions file formats apply; else ``None``.

    ``value`` matches a node equal to it, or to it converted back from text
    (``"(5, 0)"`` or ``"5,0"`` -> ``(5, 0)``, ``"7"`` -> ``7``), or to its
    text (``7`` -> ``"7"``, as GraphML stores ids), or a JSON list as a tuple.
    Two different nodes matching is an error.

    >>> match_node("(1, 0)", {(1, 0): 0, (0, 0): 1}), match_node(3, {"3": 0}), match_node("x", {"y": 0})
    (0, 0, None)
    """
    candidates = [value]
    if isinstance(value, list):
        candidates.append(_to_label(value))
    elif isinstance(value, str):
        converted = _parse_label(value)
        if converted is not None:
            candidates.append(converted)
    else:
        candidates.append(str(value))
    found = {}
    for c in candidates:
        try:
            i = index.get(c)
        except TypeError:  # unhashable
            continue
        if i is not None:
            found[i] = c
    if len(found) > 1:
        raise ValueError(f"{value!r} names two nodes: {' and '.join(repr(c) for c in found.values())}")
    return next(iter(found), None)


def _parse_label(text: str):
    """``"7"`` -> 7, ``"(5, 0)"`` / ``"5,0"`` -> ``(5, 0)``, ``"1.5"`` -> 1.5; ``None`` if not a number or tuple."""
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, list):
        value = tuple(value)
    if _is_plain_label(value):
        return value
    return None


def _is_plain_label(value) -> bool:
    """A number (not bool) or a tuple of them, the labels text conversion restores."""
    if isinstance(value, tuple):
        return all(_is_plain_label(v) for v in value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _graph_attribute_label(label):
    """The start label in a form every format can store: scalars as they are, anything else as ``str``.

    GraphML writes node ids with ``str``, so ``str`` of a tuple label names the same node after loading.
    """
    if isinstance(label, np.generic):
        label = label.item()
    if isinstance(label, (str, int, float)) and not isinstance(label, bool):
        return label
    return str(label)


def _to_label(value):
    """JSON lists back to tuples, recursively."""
    if isinstance(value, list):
        return tuple(_to_label(x) for x in value)
    return value


# ---------------------------------------------------------------------------- stochastic worlds
def _check_noise(value, name: str) -> float:
    """A probability parameter (slip, obs_noise): a finite number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, Real) or not 0 <= float(value) <= 1:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return float(value)


def _probability(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{what} is {value!r}; a probability must be a number in [0, 1]")
    v = float(value)
    if math.isnan(v) or math.isinf(v):
        raise ValueError(f"{what} is {value!r}; a probability must be a finite number in [0, 1]")
    if v < 0:
        raise ValueError(f"{what} is {value!r}; probabilities must be >= 0")
    return v


def _normalised(probs: np.ndarray, what: str) -> np.ndarray:
    total = float(probs.sum())
    if abs(total - 1.0) > PROB_ATOL:
        raise ValueError(f"{what} sums to {total:.12g}; probabilities must sum to 1 (within {PROB_ATOL:g})")
    return probs / total


def _edge_probability(value, u, v) -> float:
    """An edge's ``p`` (NaN when absent)."""
    if value is None:
        return math.nan
    return _probability(value, f"edge {u!r} -> {v!r} has p which")


def _parse_obs_text(text: str, node):
    """A distribution stored as JSON text (``'{"0": 0.9, "1": 0.1}'``) -> the dict; other text is refused."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, (dict, list)):
        raise ValueError(f"node {node!r} has obs={text!r}; observations must be integers >= 0 or a distribution "
                         "{colour: probability} (as JSON text in GraphML)")
    return value


def _obs_distribution(value, node) -> tuple[np.ndarray, np.ndarray]:
    """A node's ``obs`` distribution: (sorted colours, probabilities summing to 1)."""
    what = f"node {node!r} has obs={value!r}"
    if isinstance(value, dict):
        items = []
        for c, q in value.items():
            if isinstance(c, str) and c.strip().lstrip("-").isdigit():
                c = int(c)
            if not _is_int(c) or not 0 <= c < MAX_N_OBS:
                raise ValueError(f"{what}; colour {c!r} is not an integer in 0..{MAX_N_OBS - 1}")
            items.append((int(c), q))
    elif isinstance(value, (list, tuple, np.ndarray)) and np.ndim(value) == 1:
        if len(value) > MAX_N_OBS:
            raise ValueError(f"node {node!r} has an obs distribution over {len(value)} colours, more than {MAX_N_OBS}")
        items = list(enumerate(np.asarray(value).tolist() if isinstance(value, np.ndarray) else value))
    else:
        raise ValueError(f"{what}; observations must be integers >= 0 or a distribution {{colour: probability}}")
    if not items:
        raise ValueError(f"{what}; an observation distribution needs at least one colour")
    items.sort()
    colours = np.array([c for c, _ in items], dtype=np.int64)
    if len(np.unique(colours)) != len(colours):
        raise ValueError(f"{what}; a colour is listed twice")
    probs = np.array([_probability(q, f"node {node!r}: the probability of colour {c}") for c, q in items])
    return colours, _normalised(probs, f"node {node!r}: the obs distribution")


def _obs_csr(dists: dict, obs: np.ndarray):
    """(indptr, colours, probabilities) over states, zero probabilities left out; ``None`` without ``dists``."""
    if not dists:
        return None
    S = len(obs)
    counts = np.ones(S, dtype=np.int64)
    parts_c, parts_p = [], []
    for i in range(S):
        if i in dists:
            colours, probs = dists[i]
            keep = probs > 0
            counts[i] = int(keep.sum())
            parts_c.append(colours[keep])
            parts_p.append(probs[keep] / probs[keep].sum())
        else:
            parts_c.append(obs[i:i + 1])
            parts_p.append(np.ones(1))
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return indptr, np.concatenate(parts_c).astype(np.int64), np.concatenate(parts_p)


def _transition_tables(nodes: list, src, act, dst, prob) -> tuple[np.ndarray, Transitions | None]:
    """``next_state`` (A x S) and, for a stochastic world, its :class:`Transitions` (else ``None``).

    ``prob`` is NaN for an edge without ``p``.  Checks: an edge for every (node, action); several
    out-edges of a (node, action) each with a ``p``; the ``p`` of a (node, action) sum to 1.
    """
    S = len(nodes)
    A = int(act.max()) + 1
    row = act * S + src
    count = np.bincount(row, minlength=A * S)
    has_p = ~np.isnan(prob)
    unpriced = np.bincount(row[~has_p], minlength=A * S)
    crowded = np.flatnonzero((count > 1) & (unpriced > 0))
    if len(crowded):
        r = crowded[0]
        a, u = divmod(int(r), S)
        targets = [nodes[v] for v in dst[row == r]]
        shown = " and ".join(repr(t) for t in targets[:3]) + (" ..." if len(targets) > 3 else "")
        raise ValueError(
            f"node {nodes[u]!r} has {_COUNT_WORDS.get(len(targets), len(targets))} edges for action {a} "
            f"(to {shown}) without a probability 'p': a deterministic world has one edge per (node, action); "
            "a stochastic one gives each out-edge an edge attribute p (summing to 1)"
        )
    missing = np.flatnonzero(count == 0)
    if len(missing):
        a, u = divmod(int(missing[0]), S)
        raise ValueError(
            f"node {nodes[u]!r} has no edge for action {a} "
            f"({len(missing)} (node, action) transitions missing in all)"
        )
    p = np.where(has_p, prob, 1.0)
    sums = np.bincount(row, weights=p, minlength=A * S)
    bad = np.flatnonzero(np.abs(sums - 1.0) > PROB_ATOL)
    if len(bad):
        a, u = divmod(int(bad[0]), S)
        raise ValueError(
            f"node {nodes[u]!r}: the probabilities p of its edges for action {a} sum to {sums[bad[0]]:.12g}; "
            f"they must sum to 1 (within {PROB_ATOL:g})"
        )
    live = p > 0
    if (np.bincount(row[live], minlength=A * S) == 1).all():
        next_state = np.empty((A, S), dtype=np.int64)
        next_state[act[live], src[live]] = dst[live]
        return next_state, None
    transitions = _csr_from_entries(row[live], dst[live], p[live] / sums[row[live]], A * S, S)
    return _most_likely(transitions, S, A), transitions


def _csr_from_entries(rows, cols, vals, n_rows: int, n_cols: int) -> Transitions:
    """Row-normalised CSR arrays from (row, col, value) entries; duplicates summed, columns sorted per row."""
    key, inverse = np.unique(rows.astype(np.int64) * n_cols + cols, return_inverse=True)
    summed = np.bincount(inverse.ravel(), weights=vals)
    r = key // n_cols
    indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=n_rows))]).astype(np.int64)
    totals = np.bincount(r, weights=summed, minlength=n_rows)
    return Transitions(indptr, (key % n_cols).astype(np.int64), summed / totals[r])


def _slipped(t: Transitions, S: int, A: int, p: float) -> Transitions:
    """``(1 - p) T[a] + (p / A) sum_b T[b]`` as CSR arrays."""
    rows = np.repeat(np.arange(A * S, dtype=np.int64), np.diff(t.indptr))
    s = rows % S
    own = (rows, t.indices, (1.0 - p) * t.probs)
    mixed_rows = (np.arange(A, dtype=np.int64)[:, None] * S + s[None, :]).ravel()
    mixed = (mixed_rows, np.tile(t.indices, A), np.tile(t.probs * (p / A), A))
    return _csr_from_entries(np.concatenate([own[0], mixed[0]]), np.concatenate([own[1], mixed[1]]),
                             np.concatenate([own[2], mixed[2]]), A * S, S)


def _most_likely(t: Transitions, S: int, A: int) -> np.ndarray:
    """The most probable successor of each (action, state), ties to the smallest state index: (A x S)."""
    starts = t.indptr[:-1]
    top = np.maximum.reduceat(t.probs, starts)
    rows = np.repeat(np.arange(A * S), np.diff(t.indptr))
    position = np.where(t.probs == top[rows], np.arange(len(t.probs)), len(t.probs))
    first = np.minimum.reduceat(position, starts)
    return t.indices[first].reshape(A, S).astype(np.int64)


def _row_cumulative(indptr: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """``row + cumulative probability within the row`` per entry, each row's last entry exactly ``row + 1``."""
    n_rows = len(indptr) - 1
    rows = np.repeat(np.arange(n_rows, dtype=np.float64), np.diff(indptr))
    cum = np.cumsum(probs)
    before = np.concatenate([[0.0], cum])[indptr[:-1]]
    within = cum - np.repeat(before, np.diff(indptr))
    within[indptr[1:] - 1] = 1.0
    return rows + within


def _draw_rows(csr, cumulative: np.ndarray, rows: np.ndarray, u: np.ndarray) -> np.ndarray:
    """One column per row of a CSR distribution table, drawn by inverting its cumulative with ``u``."""
    indptr, indices = csr[0], csr[1]
    k = np.searchsorted(cumulative, rows + u, side="right")
    k = np.clip(k, indptr[rows], indptr[rows + 1] - 1)  # guards ``rows + u`` rounding up to the next row
    return indices[k]

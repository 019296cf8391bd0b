"""Level 1: the episodic memory of Algorithm 1.

A deterministic HMM that stores every episode exactly: from the current state
``h`` and action ``a`` the predicted state is ``T(h, a)``; if there is none, or
it emits another observation than the one seen, a new state ``N + 1`` is
created, ``T(h, a)`` is set to it (replacing the old link, as the algorithm
writes it) and ``E(N + 1) = o``.  Each episode starts from a fixed start state
whose one transition ``T(start, -1)`` leads to the state of the first
observation.

Storage is array-backed (``next_state`` A x capacity, grown geometrically), so
50,000 or 500,000 states cost a few megabytes and no Python dict walk.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._estimator import Estimator
from ._io import atomic_savez
from .hmm import ActionHMM
from ._validation import Int, as_trajectories, check_int, check_symbols

__all__ = ["EpisodicMemory"]


def _read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (``a`` itself stays writable)."""
    view = a.view()
    view.flags.writeable = False
    return view


class EpisodicMemory(Estimator):
    """Algorithm 1: an online, perfectly storing episodic memory.

    Parameters
    ----------
    n_obs, n_actions : sizes of the observation and action alphabets.

    Attributes
    ----------
    n_states : number of states created so far.
    next_state : (n_actions, n_states) int array, -1 where ``T(h, a)`` is unknown.
    emission : (n_states,) observation of each state.
    labels : (n_states,) true environment state when each state was created
        (-1 if the caller gave none); for analysis only, never read by learning.
    start_state : the state ``T(start, -1)`` of the first observation, or -1.

    ``next_state``, ``emission``, ``labels`` and :meth:`kernel_arrays` are
    read-only views of the memory's buffers (no copy): only the memory writes
    level 1 (and the agent's step kernel, through :meth:`buffers`).

    Examples
    --------
    >>> mem = EpisodicMemory(n_obs=2, n_actions=1)
    >>> for o, a in [(0, -1), (1, 0), (0, 0)]:
    ...     _ = mem.observe(o, a)
    >>> mem.n_states, mem.emission.tolist()
    (3, [0, 1, 0])
    >>> mem.reset(); _ = mem.observe(0, -1); _ = mem.observe(1, 0)   # a repeated prefix reuses states
    >>> mem.n_states
    3
    >>> mem.emission[0] = 1
    Traceback (most recent call last):
    ValueError: assignment destination is read-only
    """

    _parameter_constraints = {"n_obs": Int(1), "n_actions": Int(1), "capacity": Int(0)}

    def __init__(self, n_obs: int, n_actions: int, capacity: int = 1024):
        # checked here, not at fit: the buffers are allocated now (their sizes are these parameters)
        check = self._parameter_constraints
        self.n_obs = check["n_obs"](n_obs, "n_obs")
        self.n_actions = check["n_actions"](n_actions, "n_actions")
        capacity = max(check["capacity"](capacity, "capacity"), 16)
        self._next = np.full((self.n_actions, capacity), -1, dtype=np.int64)
        self._emission = np.full(capacity, -1, dtype=np.int64)
        self._labels = np.full(capacity, -1, dtype=np.int64)
        self._scal = np.array([0, -1, -1], dtype=np.int64)  # n_states, current state, T(start, -1)

    # ------------------------------------------------------------------ views
    @property
    def n_states(self) -> int:
        return int(self._scal[0])

    @property
    def current_state(self) -> int:
        """The state after the last observation; -1 at the start of an episode."""
        return int(self._scal[1])

    @property
    def start_state(self) -> int:
        return int(self._scal[2])

    @property
    def next_state(self) -> np.ndarray:
        """``T(h, a)`` as an (n_actions, n_states) read-only view, -1 where unknown."""
        return _read_only(self._next[:, : self.n_states])

    @property
    def emission(self) -> np.ndarray:
        """The observation of each state, a read-only view."""
        return _read_only(self._emission[: self.n_states])

    @property
    def labels(self) -> np.ndarray:
        """The true state at each state's creation (-1 unknown), a read-only view."""
        return _read_only(self._labels[: self.n_states])

    @property
    def capacity(self) -> int:
        return self._emission.shape[0]

    def __repr__(self) -> str:
        return f"EpisodicMemory(n_states={self.n_states}, n_obs={self.n_obs}, n_actions={self.n_actions})"

    def fit(self, traj) -> "EpisodicMemory":
        """Forget every state, then store the episodes of ``traj`` (Algorithm 1); returns ``self``.

        >>> from hmmmerge import gridworld, random_walk
        >>> traj = random_walk(gridworld(), 5, seed=0)
        >>> mem = EpisodicMemory(10, 4).fit(traj)
        >>> mem.fit(traj).n_states == EpisodicMemory(10, 4).partial_fit(traj).n_states   # fit starts afresh
        True
        """
        self._next.fill(-1)
        self._emission.fill(-1)
        self._labels.fill(-1)
        self._scal[:] = (0, -1, -1)
        return self.partial_fit(traj)

    def partial_fit(self, traj) -> "EpisodicMemory":
        """Store the episodes of ``traj`` after those stored so far (:meth:`observe_trajectories`); returns ``self``."""
        self.observe_trajectories(traj)
        return self

    def kernel_arrays(self) -> tuple[np.ndarray, np.ndarray, int]:
        """``(next_state, emission, n_obs)``: read-only views of the whole buffers for numba kernels, no copy.

        The buffers are longer than ``n_states`` (their capacity) and contiguous;
        entries past ``n_states`` are never reached from existing states.

        >>> nxt, emission, n_obs = EpisodicMemory(2, 3).kernel_arrays()
        >>> nxt.shape[0], nxt.flags.writeable, nxt.flags.c_contiguous
        (3, False, True)
        """
        return _read_only(self._next), _read_only(self._emission), self.n_obs

    def buffers(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(next_state, emission, labels, scalars)``: the whole state, for a kernel that runs Algorithm 1
        in place (the agent's step kernel); ``scalars`` is ``[n_states, current state, T(start, -1)]``.

        These are the writable buffers themselves: call :meth:`reserve` first
        for the states the kernel may create; no other code writes them (everyone
        else reads the read-only views).

        >>> mem = EpisodicMemory(2, 1); _ = mem.observe(0, -1)
        >>> mem.buffers()[3].tolist()
        [1, 0, 0]
        """
        return self._next, self._emission, self._labels, self._scal

    def states_emitting(self, obs: int) -> np.ndarray:
        """The states (increasing) that emit ``obs``, a read-only array kept up to date as states are added.

        >>> mem = EpisodicMemory(n_obs=2, n_actions=1)
        >>> for o, a in [(0, -1), (1, 0), (0, 0)]:
        ...     _ = mem.observe(o, a)
        >>> mem.states_emitting(0).tolist(), mem.states_emitting(1).tolist()
        ([0, 2], [1])
        """
        n = self.n_states
        if getattr(self, "_by_obs_upto", 0) < n:
            start = getattr(self, "_by_obs_upto", 0)
            new = np.arange(start, n)
            em = self._emission[start:n]
            if start == 0:
                self._by_obs = [np.zeros(0, dtype=np.int64) for _ in range(self.n_obs)]
                self._by_obs_len = np.zeros(self.n_obs, dtype=np.int64)
            for o in np.unique(em).tolist():
                add = new[em == o]
                have, size = self._by_obs_len[o], len(self._by_obs[o])
                if have + len(add) > size:  # grow geometrically
                    grown = np.empty(max(2 * size, have + len(add)), dtype=np.int64)
                    grown[:have] = self._by_obs[o][:have]
                    self._by_obs[o] = grown
                self._by_obs[o][have:have + len(add)] = add
                self._by_obs_len[o] = have + len(add)
            self._by_obs_upto = n
        return _read_only(self._by_obs[obs][:self._by_obs_len[obs]] if n else np.zeros(0, dtype=np.int64))

    def reserve(self, extra: int) -> None:
        """Make room for ``extra`` more states (capacity at least doubles when it grows).

        >>> mem = EpisodicMemory(2, 1); mem.reserve(5000)
        >>> mem.capacity >= 5000, mem.n_states
        (True, 0)
        """
        need = self.n_states + int(extra)
        if need <= self.capacity:
            return
        cap = max(need, 2 * self.capacity)
        grow = cap - self.capacity
        self._next = np.concatenate([self._next, np.full((self.n_actions, grow), -1, np.int64)], axis=1)
        self._emission = np.concatenate([self._emission, np.full(grow, -1, np.int64)])
        self._labels = np.concatenate([self._labels, np.full(grow, -1, np.int64)])

    # ------------------------------------------------------------ learning
    def reset(self) -> None:
        """Begin a new episode: the next observation comes from the start state.

        >>> mem = EpisodicMemory(2, 1); _ = mem.observe(0, -1); _ = mem.observe(1, 0)
        >>> mem.current_state
        1
        >>> mem.reset(); mem.current_state
        -1
        """
        self._scal[1] = -1

    def observe(self, obs: int, action: int, label: int = -1) -> int:
        """Algorithm 1 for one step; returns the current state afterwards.

        See Also
        --------
        observe_trajectories : the same over a batch of episodes (compiled).

        ``action == -1`` marks the first observation of an episode (and implies :meth:`reset`).

        >>> mem = EpisodicMemory(2, 1)
        >>> mem.observe(0, -1), mem.observe(1, 0), mem.observe(1, 0)
        (0, 1, 2)
        >>> mem.observe(0, -1), mem.observe(1, 0), mem.observe(0, 0)   # 1 -> 2 contradicted: new state 3
        (0, 1, 3)
        """
        from ._episodic_kernels import l1_observe

        obs, action = check_int(obs, "obs"), check_int(action, "action")
        self._check_symbols(obs, action)
        if action == -1:
            self.reset()
        elif self.current_state < 0:
            raise ValueError("the first observation of an episode must come with action -1")
        self.reserve(1)
        return int(l1_observe(self._next, self._emission, self._labels, self._scal, action, obs, int(label)))

    def observe_trajectories(self, traj) -> tuple[np.ndarray, np.ndarray]:
        """Algorithm 1 over a batch of episodes, in order.

        ``traj``: a :class:`~hmmmerge.trajectories.Trajectories` or a pair
        ``(obs, actions)`` (see :func:`hmmmerge._validation.as_trajectories`);
        true labels are kept when ``traj.states`` is given.

        Returns
        -------
        states : the level-1 state after each observation, shaped like ``traj.obs``.
        predicted : the observation level 1 predicted before each one (-1: no prediction).

        >>> from hmmmerge import gridworld, random_walk
        >>> env = gridworld()
        >>> mem = EpisodicMemory(env.n_obs, env.n_actions)
        >>> states, predicted = mem.observe_trajectories(random_walk(env, 20, seed=0))
        >>> int(states.max()) + 1 == mem.n_states
        True
        """
        from ._episodic_kernels import observe_batch

        traj = as_trajectories(traj)
        self._check_symbols(traj.obs, traj.actions)
        self.reserve(traj.n_steps)
        out_states = np.empty_like(traj.obs)
        out_pred = np.empty_like(traj.obs)
        labels = traj.states if traj.states is not None else np.empty((0, 0), dtype=np.int64)
        observe_batch(traj.obs, traj.actions, labels, self._next, self._emission, self._labels, self._scal,
                      out_states, out_pred)
        return out_states, out_pred

    def _check_symbols(self, obs, actions) -> None:
        if np.size(obs) == 0:
            raise ValueError("the trajectories hold no episodes: nothing to learn from")
        check_symbols(obs, actions, self.n_obs, self.n_actions)

    # ------------------------------------------------------------ models
    def to_hmm(self):
        """Level 1 as a sparse deterministic :class:`~hmmmerge.hmm.ActionHMM` (B = the first state).

        Returns
        -------
        ActionHMM

        See Also
        --------
        hmmmerge.clusters.level2_hmm : level 2 from level 1 and the clusters.

        >>> mem = EpisodicMemory(2, 1); _ = mem.observe(0, -1); _ = mem.observe(1, 0)
        >>> mem.to_hmm().log_likelihood([0, 1])
        0.0
        """
        if self.n_states == 0:
            raise ValueError("the memory is empty: observe something first")
        return ActionHMM.from_deterministic(self.next_state, self.emission, self.n_obs, start=self.start_state)

    def transition_matrices(self):
        """``T1[a]`` as binary CSR matrices (n_states x n_states), one per action.

        >>> mem = EpisodicMemory(2, 1)
        >>> for o, a in [(0, -1), (1, 0), (0, 0)]:
        ...     _ = mem.observe(o, a)
        >>> mem.transition_matrices()[0].toarray().tolist()
        [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
        """
        n = self.n_states
        mats = []
        for a in range(self.n_actions):
            src = np.flatnonzero(self.next_state[a] >= 0)
            mats.append(sp.csr_matrix((np.ones(len(src)), (src, self.next_state[a, src])), shape=(n, n)))
        return mats

    # ------------------------------------------------------------ files
    def state_dict(self) -> dict:
        """Arrays that fully describe the memory (for ``.npz`` files).

        >>> mem = EpisodicMemory(2, 1); _ = mem.observe(0, -1); _ = mem.observe(1, 0)
        >>> d = mem.state_dict(); sorted(d), d["l1_next_state"].tolist()
        (['l1_emission', 'l1_labels', 'l1_n_actions', 'l1_n_obs', 'l1_next_state', 'l1_scalars'], [[1, -1]])
        """
        return {
            "l1_n_obs": np.int64(self.n_obs),
            "l1_n_actions": np.int64(self.n_actions),
            "l1_next_state": self.next_state.copy(),
            "l1_emission": self.emission.copy(),
            "l1_labels": self.labels.copy(),
            "l1_scalars": self._scal.copy(),
        }

    @classmethod
    def from_state_dict(cls, d, source: str = "<dict>") -> "EpisodicMemory":
        """Rebuild a memory from :meth:`state_dict` arrays; errors name ``source``.

        >>> mem = EpisodicMemory(2, 1); _ = mem.observe(0, -1); _ = mem.observe(1, 0)
        >>> back = EpisodicMemory.from_state_dict(mem.state_dict())
        >>> back.n_states, back.emission.tolist(), back.current_state
        (2, [0, 1], 1)
        """
        try:
            mem = cls(int(d["l1_n_obs"]), int(d["l1_n_actions"]))
            ns, em, lab, scal = (np.asarray(d[k], dtype=np.int64) for k in
                                 ("l1_next_state", "l1_emission", "l1_labels", "l1_scalars"))
        except KeyError as e:
            raise ValueError(f"{source}: missing array {e.args[0]!r}") from None
        n = em.shape[0]
        if ns.shape != (mem.n_actions, n) or lab.shape != (n,) or scal.shape != (3,) or scal[0] != n:
            raise ValueError(f"{source}: level-1 arrays have inconsistent shapes")
        if n and (ns.max() >= n or ns.min() < -1 or em.min() < 0 or em.max() >= mem.n_obs
                  or scal[1] >= n or scal[2] >= n):
            raise ValueError(f"{source}: level-1 arrays hold out-of-range entries")
        src = np.broadcast_to(np.arange(n), ns.shape)
        linked = ns >= 0
        if (ns[linked] <= src[linked]).any() or (np.bincount(ns[linked], minlength=n) > 1).any():
            raise ValueError(f"{source}: level-1 links are not those of Algorithm 1 (each state has at most "
                             "one incoming link, from an older state)")
        mem.reserve(n)
        mem._next[:, :n] = ns
        mem._emission[:n] = em
        mem._labels[:n] = lab
        mem._scal[:] = scal
        return mem

    def save(self, path) -> None:
        """Write the memory to ``path`` (``.npz``, no pickle), atomically.

        >>> import os, tempfile
        >>> mem = EpisodicMemory(2, 1); _ = mem.observe(0, -1); _ = mem.observe(1, 0)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     mem.save(os.path.join(d, "mem.npz")); sorted(os.listdir(d))
        ['mem.npz']
        """
        atomic_savez(path, **self.state_dict())

    @classmethod
    def load(cls, path) -> "EpisodicMemory":
        """Read a memory written by :meth:`save`; learning continues where it stopped.

        >>> import os, tempfile
        >>> mem = EpisodicMemory(2, 1); _ = mem.observe(0, -1); _ = mem.observe(1, 0)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = os.path.join(d, "mem.npz"); mem.save(path); back = EpisodicMemory.load(path)
        >>> back.next_state.tolist(), back.observe(0, 0)   # continues the episode: 1 -> new state 2
        ([[1, -1]], 2)
        """
        from ._io import open_regular

        with open_regular(path, "rb", what="level-1 memory file") as raw, np.load(raw, allow_pickle=False) as d:
            return cls.from_state_dict(dict(d), source=str(path))

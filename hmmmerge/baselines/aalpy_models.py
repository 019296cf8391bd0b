"""AALpy's passive automaton learners on our trajectories, converted to :class:`~hmmmerge.hmm.ActionHMM`.

`AALpy <https://github.com/DES-Lab/AALpy>`_ (optional: the ``test`` / ``bench``
extras) implements the classic state-merging learners the fold consolidation
is compared with:

* **RPNI** for Moore machines (``run_RPNI(data, "moore")``): inputs are
  actions, the output of a state is its colour; the data are the labelled
  prefixes of every episode (``(a_1 .. a_t) -> o_t``).  Exact: it refuses
  data where one prefix has two colours (noise, or episodes without a
  common start), and then this wrapper raises ``ValueError``.
* **ALERGIA** for MDPs (``run_Alergia(data, "mdp", eps)``, IOALERGIA):
  episodes as ``[o_0, (a_1, o_1), ...]``; merges are accepted by a
  Hoeffding test on the next-colour frequencies at confidence ``eps``.

Every episode is fed behind a synthetic start: a root state with output
``-1`` and a synthetic input ``-1`` (reset) whose successors are the first
observations.  With a common start this changes nothing (the root has one
successor); without one it lets ALERGIA learn the start distribution (RPNI
still refuses: a Moore machine has one start colour).  The
converted ``ActionHMM`` drops the root: ``B`` is its reset transition.
States emit their output; a missing transition is a zero row (no prediction,
counted wrong by the evaluator).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._estimator import Estimator
from .._validation import Float, Options, alphabet_sizes
from ..trajectories import Trajectories

__all__ = ["RPNIModel", "AlergiaModel", "rpni_data", "alergia_data", "moore_to_hmm", "mdp_to_hmm", "RESET"]

RESET = -1
"""The synthetic input (and the root's output) put before every episode."""


def _check_fit_args(traj, n_obs, n_actions) -> tuple[int, int]:
    if not isinstance(traj, Trajectories):
        raise TypeError(f"traj must be a Trajectories, got {type(traj).__name__}")
    if traj.n_episodes == 0:
        raise ValueError("traj holds no episodes: nothing to fit")
    return alphabet_sizes(traj.obs, traj.actions, n_obs, n_actions)


def rpni_data(traj: Trajectories) -> list:
    """Labelled prefixes for Moore-machine RPNI: ``[[(RESET, a_1, .., a_t), o_t], ...]`` plus the root.

    Each distinct prefix appears once (the prefix tree of the episodes).

    >>> from hmmmerge import Trajectories
    >>> rpni_data(Trajectories([[0, 1], [0, 2]], [[-1, 0], [-1, 1]]))
    [[(), -1], [(-1,), 0], [(-1, 0), 1], [(-1, 1), 2]]
    """
    seen = {(): RESET}
    for a, o in zip(traj.actions.tolist(), traj.obs.tolist()):
        prefix = (RESET,)
        seen.setdefault(prefix, o[0])
        for t in range(1, len(o)):
            prefix = prefix + (a[t],)
            seen.setdefault(prefix, o[t])
    return [[p, label] for p, label in sorted(seen.items(), key=lambda kv: (len(kv[0]), kv[0]))]


def _rpni_consistent(traj: Trajectories) -> str | None:
    """A message naming the first prefix with two colours, or ``None`` if the data are deterministic."""
    seen = {}
    for n, (a, o) in enumerate(zip(traj.actions.tolist(), traj.obs.tolist())):
        prefix = ()
        for t in range(len(o)):
            prefix = prefix + ((a[t],) if t else (RESET,))
            if seen.setdefault(prefix, o[t]) != o[t]:
                return (f"episode {n}, step {t}: the action sequence {list(prefix[1:])} was followed by colours "
                        f"{seen[prefix]} and {o[t]}; RPNI needs deterministic data with a common start "
                        "(no noise): use ALERGIA")
    return None


def alergia_data(traj: Trajectories) -> list:
    """Episodes for IOALERGIA: ``[[RESET, (RESET, o_0), (a_1, o_1), ...], ...]``.

    >>> from hmmmerge import Trajectories
    >>> alergia_data(Trajectories([[0, 1, 1]], [[-1, 0, 1]]))
    [[-1, (-1, 0), (0, 1), (1, 1)]]
    """
    out = []
    for a, o in zip(traj.actions.tolist(), traj.obs.tolist()):
        out.append([RESET, (RESET, o[0])] + [(a[t], o[t]) for t in range(1, len(o))])
    return out


def _states_and_root(automaton):
    root = automaton.initial_state
    if root.output != RESET:
        raise ValueError("the automaton was not learned behind the synthetic start (root output must be -1)")
    states = [s for s in automaton.states if s is not root]
    if not states:
        raise ValueError("the automaton has no state besides the synthetic root")
    bad = [s for s in states if isinstance(s.output, bool) or not isinstance(s.output, (int, np.integer))]
    if bad:
        raise ValueError(f"state {bad[0].state_id} has output {bad[0].output!r}; outputs must be colours (int)")
    return root, states, {id(s): i for i, s in enumerate(states)}


def _emissions(states, n_obs):
    out = np.array([s.output for s in states], dtype=np.int64)
    if out.size and (out.min() < 0 or out.max() >= n_obs):
        raise ValueError(f"an automaton state outputs {int(out.max() if out.max() >= n_obs else out.min())}, "
                         f"outside the colours 0..{n_obs - 1}")
    E = np.zeros((len(states), n_obs))
    E[np.arange(len(states)), out] = 1.0
    return E


def moore_to_hmm(machine, n_obs: int, n_actions: int):
    """A Moore machine learned behind the synthetic start as a deterministic ``ActionHMM``.

    >>> from aalpy.learning_algs import run_RPNI
    >>> from hmmmerge import Trajectories
    >>> t = Trajectories([[0, 1, 0, 1]], [[-1, 0, 0, 0]])
    >>> hmm = moore_to_hmm(run_RPNI(rpni_data(t), "moore", print_info=False), n_obs=2, n_actions=1)
    >>> hmm.n_states, hmm.log_likelihood(t)
    (2, 0.0)
    """
    from ..hmm import ActionHMM

    root, states, index = _states_and_root(machine)
    H = len(states)
    T = []
    for a in range(n_actions):
        src = [i for i, s in enumerate(states) if a in s.transitions]
        dst = [index[id(states[i].transitions[a])] for i in src]
        T.append(sp.csr_matrix((np.ones(len(src)), (src, dst)), shape=(H, H)))
    B = np.zeros(H)
    B[index[id(root.transitions[RESET])]] = 1.0
    return ActionHMM(T, _emissions(states, n_obs), B)


def mdp_to_hmm(mdp, n_obs: int, n_actions: int):
    """An MDP learned behind the synthetic start as an ``ActionHMM`` (transition probabilities kept).

    >>> from aalpy.learning_algs import run_Alergia
    >>> from hmmmerge import Trajectories
    >>> t = Trajectories([[0, 1, 0, 1]], [[-1, 0, 0, 0]])
    >>> hmm = mdp_to_hmm(run_Alergia(alergia_data(t), "mdp"), n_obs=2, n_actions=1)
    >>> hmm.log_likelihood(t)
    0.0
    """
    from ..hmm import ActionHMM

    root, states, index = _states_and_root(mdp)
    H = len(states)
    T = []
    for a in range(n_actions):
        rows, cols, vals = [], [], []
        for i, s in enumerate(states):
            for nxt, p in s.transitions.get(a, []):
                rows.append(i)
                cols.append(index[id(nxt)])
                vals.append(p)
        M = sp.csr_matrix((vals, (rows, cols)), shape=(H, H))
        sums = np.asarray(M.sum(axis=1)).ravel()  # AALpy rounds probabilities: renormalise exactly
        T.append(sp.diags(np.divide(1.0, sums, out=np.zeros(H), where=sums > 0)) @ M)
    B = np.zeros(H)
    for nxt, p in root.transitions.get(RESET, []):
        B[index[id(nxt)]] += p
    return ActionHMM(T, _emissions(states, n_obs), B / B.sum())


class RPNIModel(Estimator):
    """AALpy's RPNI (generalised state merging) for Moore machines, fitted on trajectories.

    Parameters
    ----------
    algorithm : ``"gsm"`` (AALpy's default, faster) or ``"classic"``.

    Attributes (after :meth:`fit`): ``automaton_`` (the AALpy ``MooreMachine``),
    ``n_obs_``, ``n_actions_``.

    >>> from hmmmerge import gridworld, random_walk
    >>> env = gridworld(3, 3, n_colours=3, seed=0)
    >>> hmm = RPNIModel().fit(random_walk(env, 30, 10, seed=0), 3, 4).to_hmm()
    >>> hmm.n_obs, hmm.n_actions
    (3, 4)
    """

    _parameter_constraints = {"algorithm": Options("gsm", "classic")}

    def __init__(self, algorithm: str = "gsm"):
        self.algorithm = algorithm

    def fit(self, traj: Trajectories, n_obs: int | None = None, n_actions: int | None = None) -> "RPNIModel":
        """Learn a Moore machine from the labelled prefixes of ``traj`` (ValueError if they conflict)."""
        from aalpy.learning_algs import run_RPNI

        self._validate_params()
        self.n_obs_, self.n_actions_ = _check_fit_args(traj, n_obs, n_actions)
        problem = _rpni_consistent(traj)
        if problem:
            raise ValueError(problem)
        self.automaton_ = run_RPNI(rpni_data(traj), "moore", algorithm=self.algorithm, print_info=False)
        return self

    def to_hmm(self):
        """The learned machine as an ``ActionHMM`` (see :func:`moore_to_hmm`)."""
        self._check_fitted("automaton_")
        return moore_to_hmm(self.automaton_, self.n_obs_, self.n_actions_)


class AlergiaModel(Estimator):
    """AALpy's IOALERGIA for MDPs, fitted on trajectories.

    Parameters
    ----------
    eps : confidence of the Hoeffding compatibility test, in (0, 1]
        (AALpy's default 0.05; larger values split more states).

    >>> from hmmmerge import gridworld, random_walk
    >>> env = gridworld(3, 3, n_colours=3, seed=0)
    >>> hmm = AlergiaModel().fit(random_walk(env, 30, 10, seed=0), 3, 4).to_hmm()
    >>> hmm.n_obs, hmm.n_actions
    (3, 4)
    """

    _parameter_constraints = {"eps": Float(0, 1, low_open=True)}

    def __init__(self, eps: float = 0.05):
        self.eps = eps

    def fit(self, traj: Trajectories, n_obs: int | None = None, n_actions: int | None = None) -> "AlergiaModel":
        """Learn an MDP from the episodes of ``traj``."""
        from aalpy.learning_algs import run_Alergia

        self._validate_params()
        self.n_obs_, self.n_actions_ = _check_fit_args(traj, n_obs, n_actions)
        self.automaton_ = run_Alergia(alergia_data(traj), "mdp", eps=float(self.eps), print_info=False)
        return self

    def to_hmm(self):
        """The learned MDP as an ``ActionHMM`` (see :func:`mdp_to_hmm`)."""
        self._check_fitted("automaton_")
        return mdp_to_hmm(self.automaton_, self.n_obs_, self.n_actions_)

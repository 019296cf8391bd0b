"""Every world model of the project, built by one registry; each becomes an :class:`~hmmmerge.hmm.ActionHMM`.

:func:`build_model` trains the model of a given name and returns its
``ActionHMM``, which :func:`hmmmerge.evaluate.score_trajectories` scores;
:func:`fit_model` returns the trained learner itself (its fitted attributes,
e.g. ``CloneHMM.n_iter_``).  The CLI (``hmmmerge evaluate``, ``hmmmerge
baseline``), the demo, ``hmmmerge reproduce``, the analysis scripts and the
notebooks all build their models here, so a name means one model with one set
of defaults everywhere.

**Names** are the CLI's (lower case, words joined by ``-``): ``oracle``,
``first-order``, ``context``, ``level1``, ``level2-sf``, ``level2-random``,
``level2-none``, ``em``, ``bfmm``.

**Defaults** are the learners' own constructor defaults, except where the
registry states otherwise, for the protocol of the README's model table
(``hmmmerge evaluate``: 1,000 training episodes on the paper's world): EM with
30 clones per observation and 150 iterations, which recovers that world
almost exactly (accuracy 0.998); best-first merging's ``incremental`` follows
its ``search`` (incremental for ``pairs``, batch for ``fold``) unless given.  A caller with another budget passes its
parameters explicitly (the demo: EM with 20 clones and 100 iterations, to stay
within two minutes).

**Adding a model** is one :class:`ModelEntry` in :data:`MODELS`: a function
that trains the learner, its defaults, and which parameters are CLI flags of
``hmmmerge evaluate`` / ``hmmmerge baseline``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable

from .._validation import alphabet_sizes, as_trajectories
from ..agent import TwoLevelMemory
from ..episodic import EpisodicMemory
from .bfmm import BestFirstMerging
from .context import ContextModel
from .em import CloneHMM
from .first_order import FirstOrderModel

__all__ = [
    "MODELS",
    "BestFirstMerging",
    "CloneHMM",
    "ContextModel",
    "FirstOrderModel",
    "ModelEntry",
    "Option",
    "build_model",
    "fit_model",
]


@dataclass(frozen=True)
class Option:
    """A model parameter exposed as a CLI flag (its default is the entry's)."""

    param: str
    flag: str
    help: str
    type: type | None = None  # int or float (checked >= 1 / >= 0); default: the type of the entry's default
    choices: tuple | None = None  # for a string option


@dataclass(frozen=True)
class ModelEntry:
    """A named model.

    ``fit(train, n_obs, n_actions, *, env, seed, **params)`` returns the
    trained learner; ``to_hmm(learner)`` its :class:`~hmmmerge.hmm.ActionHMM`;
    ``defaults`` every parameter ``fit`` takes; ``options`` those that are CLI flags.
    """

    name: str
    fit: Callable
    summary: str
    defaults: dict = field(default_factory=dict)
    options: tuple[Option, ...] = ()
    to_hmm: Callable = field(default=lambda learner: learner.to_hmm())
    needs_data: bool = True


def constructor_defaults(cls, *, exclude=("seed",), **overrides) -> dict:
    """The keyword defaults of ``cls(...)`` minus ``exclude``, updated by ``overrides``.

    >>> constructor_defaults(CloneHMM, n_clones=30)["n_clones"], "seed" in constructor_defaults(CloneHMM)
    (30, False)
    """
    params = inspect.signature(cls).parameters.values()
    out = {p.name: p.default for p in params if p.default is not p.empty and p.name not in exclude}
    unknown = set(overrides) - set(out)
    if unknown:
        raise ValueError(f"{cls.__name__} has no parameter {sorted(unknown)[0]!r}")
    return {**out, **overrides}


# --------------------------------------------------------------------------- learners
def _oracle(train, n_obs, n_actions, *, env, seed):
    if env is None:
        raise ValueError("the oracle is the true world: pass env=")
    return env


def _first_order(train, n_obs, n_actions, *, env, seed, **params):
    return FirstOrderModel(**params).fit(train, n_obs, n_actions)


def _context(train, n_obs, n_actions, *, env, seed, **params):
    return ContextModel(**params).fit(train, n_obs, n_actions)


def _level1(train, n_obs, n_actions, *, env, seed):
    mem = EpisodicMemory(n_obs, n_actions)
    mem.observe_trajectories(train)
    return mem


def _level2(merge: str) -> Callable:
    def fit(train, n_obs, n_actions, *, env, seed, **params):
        return TwoLevelMemory(n_obs, n_actions, merge=merge, seed=seed, **params).fit(train)

    return fit


def _em(train, n_obs, n_actions, *, env, seed, **params):
    return CloneHMM(seed=seed, **params).fit(train, n_obs, n_actions)


def _bfmm(train, n_obs, n_actions, *, env, seed, n_episodes, incremental, **params):
    data = train if n_episodes is None else train[:n_episodes]
    if incremental is None:  # the fold search works on the batch prefix tree
        incremental = params["search"] == "pairs"
    return BestFirstMerging(seed=seed, incremental=incremental, **params).fit(data, n_obs, n_actions)


_LEVEL2 = constructor_defaults(TwoLevelMemory, exclude=("n_obs", "n_actions", "merge", "seed"))
_SIZE = (Option("initial_size", "--size", "level 2: initial cluster size"),)
_PSEUDOCOUNT = Option("pseudocount", "--pseudocount", "first-order and context models: pseudocount")

#: name -> entry, in table order.
MODELS: dict[str, ModelEntry] = {e.name: e for e in (
    ModelEntry("oracle", _oracle, "the true world (env.to_hmm()); ignores the training data", needs_data=False),
    ModelEntry("first-order", _first_order, "observations as hidden states, action-conditioned counts",
               constructor_defaults(FirstOrderModel), (_PSEUDOCOUNT,)),
    ModelEntry("context", _context, "longest matching context of (action, observation) pairs",
               constructor_defaults(ContextModel),
               (Option("order", "--context-order", "context model: longest context in (action, observation) pairs"),
                _PSEUDOCOUNT)),
    ModelEntry("level1", _level1, "level 1: the episodic memory of Algorithm 1"),
    *(ModelEntry(f"level2-{m}", _level2(m), f"level 2 of the paper's agent, merge={m!r}", _LEVEL2, _SIZE,
                 to_hmm=lambda agent: agent.level2_hmm()) for m in ("sf", "random", "none")),
    ModelEntry("em", _em, "EM (Baum-Welch) on an action-conditioned clone HMM",
               constructor_defaults(CloneHMM, n_clones=30, n_iter=150),
               (Option("n_clones", "--clones", "EM: clones per observation"),
                Option("n_iter", "--em-iter", "EM: iterations"))),
    ModelEntry("bfmm", _bfmm, "best-first model merging (Stolcke & Omohundro) on the first training episodes",
               {**constructor_defaults(BestFirstMerging, incremental=None), "n_episodes": None},
               (Option("n_episodes", "--bfmm-episodes", "best-first merging: use only the first N training "
                                                        "episodes (None: all)", int),
                Option("search", "--bfmm-search", "best-first merging: 'pairs' (Stolcke & Omohundro, incremental) "
                                                  "or 'fold' (evidence-driven determinising folds of the prefix tree)",
                       choices=("pairs", "fold")),
                Option("structure_prior", "--bfmm-structure-prior", "best-first merging: weight of the structure "
                                                                    "prior"))),
)}


def fit_model(name: str, train=None, n_obs: int | None = None, n_actions: int | None = None, *,
              env=None, seed=0, **params):
    """Train the model called ``name`` and return the trained learner.

    Parameters
    ----------
    name : a key of :data:`MODELS`.
    train : the training data, a :class:`~hmmmerge.trajectories.Trajectories`
        or a pair ``(obs, actions)`` (ignored by ``oracle``).
    n_obs, n_actions : alphabet sizes; default ``env``'s, else the data's.
    env : the world (required by ``oracle``; supplies ``n_obs`` / ``n_actions``).
    seed : int, sequence of ints or Generator, for the models that draw at random.
    **params : any of ``MODELS[name].defaults``; the others keep their defaults.

    Returns
    -------
    The learner: ``Environment`` (oracle), ``FirstOrderModel``,
    ``EpisodicMemory``, ``TwoLevelMemory``, ``CloneHMM`` or ``BestFirstMerging``.

    See Also
    --------
    build_model : the learner's ActionHMM.

    Examples
    --------
    >>> from hmmmerge import gridworld, random_walk
    >>> env = gridworld(4, 4, n_colours=4, seed=0)
    >>> em = fit_model("em", random_walk(env, 50, 20, seed=1), env=env, n_clones=2, n_iter=5)
    >>> em.n_iter, em.n_states_
    (5, 8)
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    entry = MODELS[name]
    unknown = set(params) - set(entry.defaults)
    if unknown:
        raise ValueError(f"model {name!r} has no parameter {sorted(unknown)[0]!r}; its parameters: "
                         f"{', '.join(entry.defaults) or 'none'}")
    if env is not None:
        n_obs = env.n_obs if n_obs is None else n_obs
        n_actions = env.n_actions if n_actions is None else n_actions
    if entry.needs_data:
        train = as_trajectories(train)
        n_obs, n_actions = alphabet_sizes(train.obs, train.actions, n_obs, n_actions)
    return entry.fit(train, n_obs, n_actions, env=env, seed=seed, **{**entry.defaults, **params})


def build_model(name: str, train=None, n_obs: int | None = None, n_actions: int | None = None, *,
                env=None, seed=0, **params):
    """Train the model called ``name`` and return it as an :class:`~hmmmerge.hmm.ActionHMM`.

    Takes the arguments of :func:`fit_model`.

    Returns
    -------
    ActionHMM

    See Also
    --------
    fit_model : the trained learner itself.
    hmmmerge.evaluate.score_trajectories : scores the returned model.

    Examples
    --------
    >>> from hmmmerge import gridworld, random_walk
    >>> from hmmmerge.evaluate import score_trajectories
    >>> env = gridworld(4, 4, n_colours=4, seed=0)
    >>> train, test = random_walk(env, 50, 20, seed=1), random_walk(env, 10, 20, seed=2)
    >>> build_model("first-order", train, env=env).n_states
    4
    >>> score_trajectories(build_model("oracle", env=env), test).accuracy
    1.0
    """
    learner = fit_model(name, train, n_obs, n_actions, env=env, seed=seed, **params)
    return MODELS[name].to_hmm(learner)

"""The model catalogue: every learner of the project by one name, with its constructor and defaults.

A name means one model with one set of defaults everywhere: :func:`build_model`
trains the model of a given name and returns its
:class:`~hmmmerge.hmm.ActionHMM` (which :func:`hmmmerge.evaluate.score_trajectories`
scores); :func:`fit_model` returns the trained learner itself (its fitted
attributes, e.g. ``CloneHMM.n_iter_``).  The CLI (``hmmmerge run --merge``,
``evaluate``, ``baseline``), the demo, ``hmmmerge reproduce``, the analysis
scripts and the notebooks take their names and defaults from here.

**Names** are lower case, words joined by ``-``:

* ``oracle`` (the true world), ``first-order``, ``context``, ``level1`` (the
  episodic memory), ``em``, ``em-split`` (EM with ``split_rounds=3`` and
  ``merge_rounds=3``: the EM map for planning, ``hmmmerge plan --learner em-split``), ``bfmm``;
* ``level2-NAME`` for every merger ``NAME`` of :data:`MERGERS` (``sf``,
  ``random``, ``none``, ``fold``, ``fold-noisy``, ``replay``): level 2 of the paper's agent,
  :class:`~hmmmerge.agent.TwoLevelMemory` with ``merge=NAME``;
* ``rpni`` and ``alergia`` (AALpy's learners) when ``aalpy`` is installed.

**Defaults** are the learners' own constructor defaults, except where an entry
states otherwise, for the protocol of the README's model table (``hmmmerge
evaluate``: 1,000 training episodes on the paper's world): EM with 30 clones
per observation and 150 iterations, which recovers that world almost exactly
(accuracy 0.998); best-first merging's ``incremental`` follows its ``search``
(incremental for ``pairs``, batch for ``fold``) unless given.  A caller with
another budget passes its parameters explicitly (the demo: EM with 20 clones
and 100 iterations, to stay within two minutes).

**Adding a learner** is one :class:`ModelEntry` in :data:`MODELS` (its class
needs ``fit(traj)`` and ``to_hmm()``); **adding a merge mode** of the agent is
one :class:`MergerEntry` in :data:`MERGERS`, which also makes ``level2-NAME``
and ``hmmmerge run --merge NAME``.

The catalogue imports nothing heavy: classes are named ``"module:Class"`` and
imported when a model is built, so ``hmmmerge --help`` and ``import hmmmerge``
stay quick.

>>> list(MERGERS)
['sf', 'random', 'none', 'fold', 'fold-noisy', 'replay']
>>> [name for name in MODELS if name.startswith("level2-")]
['level2-sf', 'level2-random', 'level2-none', 'level2-fold', 'level2-fold-noisy', 'level2-replay']
>>> MODELS["em"].defaults["n_clones"], MODELS["level2-sf"].defaults["initial_size"]
(30, 10)
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

__all__ = ["MERGERS", "MODELS", "MergerEntry", "ModelEntry", "Option", "build_model", "fit_model",
           "make_learner", "merger_class", "merger_with", "select"]


def _load(path):
    """``"module:Name"`` (module under :mod:`hmmmerge`) -> the object; a class given as such is returned."""
    if not isinstance(path, str):
        return path
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(f"hmmmerge.{module}"), name)


def constructor_defaults(cls, *, exclude=(), **overrides) -> dict:
    """The keyword defaults of ``cls(...)`` minus ``exclude``, updated by ``overrides``.

    >>> from hmmmerge.baselines import CloneHMM
    >>> constructor_defaults(CloneHMM, exclude=("seed",), n_clones=30)["n_clones"]
    30
    """
    params = inspect.signature(cls).parameters.values()
    out = {p.name: p.default for p in params if p.default is not p.empty and p.name not in exclude
           and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    unknown = set(overrides) - set(out)
    if unknown:
        raise ValueError(f"{cls.__name__} has no parameter {sorted(unknown)[0]!r}")
    return {**out, **overrides}


# --------------------------------------------------------------------------- mergers
@dataclass(frozen=True)
class MergerEntry:
    """A merge mode of :class:`~hmmmerge.agent.TwoLevelMemory` (``merge=name``).

    ``cls``: ``"module:Class"`` of the merger under :mod:`hmmmerge` (imported on use), or the
    class itself (an :class:`~hmmmerge._estimator.Estimator` following the
    :class:`~hmmmerge.merging.Merger` protocol); ``paper``: one of the
    paper's three modes; ``label`` / ``colour``: how figures show it; ``tags``: the
    selections it belongs to (``"demo"``: a row of ``hmmmerge demo``; ``"beyond"``: a
    curve of ``fig:beyond_paper``), see :func:`select`.
    """

    name: str
    cls: str
    summary: str
    paper: bool = False
    label: str = ""
    colour: str | None = None
    tags: tuple[str, ...] = ()


#: merge name -> entry, in the order the paper's tables use (its three modes first).
MERGERS: dict[str, MergerEntry] = {e.name: e for e in (
    MergerEntry("sf", "merging:SFMerger", "the paper's Algorithm 3: successor-feature guided merges",
                paper=True, label="sf", colour="tab:blue", tags=("demo", "beyond")),
    MergerEntry("random", "merging:RandomMerger", "random merges (the paper's control)",
                paper=True, label="random", colour="tab:orange", tags=("demo", "beyond")),
    MergerEntry("none", "merging:NoMerger", "no merges: sleeps only partition new states",
                paper=True, label="no merge", colour="tab:green", tags=("demo",)),
    MergerEntry("fold", "fold:FoldMerger", "evidence-driven determinising folds (beyond the paper)",
                label="fold", colour="tab:red", tags=("demo", "beyond")),
    MergerEntry("fold-noisy", "fold_noisy:StatisticalFoldMerger",
                "fold with a likelihood-ratio test, for noisy observations (beyond the paper)",
                label="fold-noisy", colour="tab:purple"),
    MergerEntry("replay", "replay:ReplayMerger",
                "level 2 a clone HMM re-estimated at sleeps by stepwise EM over replayed episodes, clones lumped "
                "by a Hoeffding test: for a world of unknown kind (slipping moves, noisy views, random starts)",
                label="replay", colour="tab:brown"),
)}


def merger_class(name: str):
    """The merger class of merge mode ``name`` (ValueError naming the modes for another name).

    >>> merger_class("sf").__name__
    'SFMerger'
    """
    if name not in MERGERS:
        raise ValueError(f"merge must be one of {', '.join(map(repr, MERGERS))}, got {name!r}")
    return _load(MERGERS[name].cls)


def merger_with(name: str, **params):
    """The merger of mode ``name`` with those of ``params`` it takes that differ from its defaults, or
    ``None`` when none does (``merge=name`` then means the same merger).

    For settings that apply to several modes, e.g. the authors' successor features
    (``sf_scale``, ``min_depth``: the random merger takes only ``min_depth``).

    >>> merger_with("random", sf_scale=0.8, min_depth=4), merger_with("fold", min_depth=4)
    (RandomMerger(min_depth=4), None)
    """
    cls = merger_class(name)
    defaults = {p.name: p.default for p in inspect.signature(cls).parameters.values()}
    kept = {k: v for k, v in params.items() if k in defaults and v is not None and v != defaults[k]}
    return cls(**kept) if kept else None


def select(tag: str) -> tuple[str, ...]:
    """The merge modes carrying ``tag``: mergers beyond the paper first, then the paper's, each in catalogue order.

    >>> select("beyond"), select("demo")
    (('fold', 'sf', 'random'), ('fold', 'sf', 'random', 'none'))
    """
    names = [m for m, e in MERGERS.items() if tag in e.tags]
    return tuple(sorted(names, key=lambda m: MERGERS[m].paper))


# --------------------------------------------------------------------------- models
@dataclass(frozen=True)
class Option:
    """A model parameter exposed as a CLI flag (its default is the entry's)."""

    param: str
    flag: str
    help: str
    type: type | None = None  # int or float (checked >= 1 / >= 0); default: the type of the entry's default
    choices: tuple | None = None  # for a string option


@dataclass(frozen=True, eq=False)
class ModelEntry:
    """A named learner.

    ``cls``: ``"module:Class"`` under :mod:`hmmmerge`, or the class itself; the learner is built as ``Class(**context, **fixed, **params)``,
    where ``context`` holds those of ``n_obs``, ``n_actions``, ``env``, ``seed`` named in
    ``takes``, and trained by ``fit(train)`` (``fit(train, n_obs, n_actions)`` unless the
    constructor takes the alphabet).  ``overrides``: defaults of this entry that differ from
    the constructor's; ``extra``: parameters of the entry that are not the constructor's
    (their defaults), handled by ``prepare(train, params) -> (train, params)``; ``resolve(params) -> params``
    turns an entry's default that depends on other parameters into a constructor value;
    ``options``: the parameters that are CLI flags of ``hmmmerge evaluate`` / ``baseline``;
    ``requires``: an optional package the learner needs (the entry is left out of
    :data:`MODELS` without it); ``table``: a row of ``hmmmerge evaluate``'s default table.
    """

    name: str
    cls: str
    summary: str
    takes: tuple[str, ...] = ()
    fixed: dict = field(default_factory=dict)
    overrides: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    options: tuple[Option, ...] = ()
    prepare: Callable | None = None
    resolve: Callable | None = None
    needs_data: bool = True
    requires: str | None = None
    table: bool = True

    @property
    def learner_class(self):
        return _load(self.cls)

    @cached_property
    def defaults(self) -> dict:
        """Every parameter :func:`fit_model` takes for this entry, with its default."""
        skip = ("n_obs", "n_actions", "env", "seed", "merger", *self.fixed)
        return {**constructor_defaults(self.learner_class, exclude=skip, **self.overrides), **self.extra}


def _bfmm_prepare(train, params):
    n = params.pop("n_episodes")
    return (train if n is None else train[:n]), params


def _bfmm_resolve(params):
    if params.get("incremental", None) is None:  # the fold search works on the batch prefix tree
        params["incremental"] = params.get("search", "pairs") == "pairs"
    return params


_SIZE = (Option("initial_size", "--size", "level 2: initial cluster size"),)
_PSEUDOCOUNT = Option("pseudocount", "--pseudocount", "first-order and context models: pseudocount")
_ALPHABET = ("n_obs", "n_actions")


def _entries():
    yield ModelEntry("oracle", "baselines.oracle:Oracle", "the true world (env.to_hmm()); ignores the training data",
                     takes=("env",), needs_data=False)
    yield ModelEntry("first-order", "baselines.first_order:FirstOrderModel",
                     "observations as hidden states, action-conditioned counts", options=(_PSEUDOCOUNT,))
    yield ModelEntry("context", "baselines.context:ContextModel",
                     "longest matching context of (action, observation) pairs",
                     options=(Option("order", "--context-order",
                                     "context model: longest context in (action, observation) pairs"), _PSEUDOCOUNT))
    yield ModelEntry("level1", "episodic:EpisodicMemory", "level 1: the episodic memory of Algorithm 1",
                     takes=_ALPHABET)
    for m, e in MERGERS.items():
        yield ModelEntry(f"level2-{m}", "agent:TwoLevelMemory", f"level 2 of the paper's agent, merge={m!r}",
                         takes=(*_ALPHABET, "seed"), fixed={"merge": m}, options=_SIZE,
                         table=e.paper)
    yield ModelEntry("em", "baselines.em:CloneHMM", "EM (Baum-Welch) on an action-conditioned clone HMM",
                     takes=("seed",), overrides={"n_clones": 30, "n_iter": 150},
                     options=(Option("n_clones", "--clones", "EM: clones per observation"),
                              Option("n_iter", "--em-iter", "EM: iterations")))
    yield ModelEntry("em-split", "baselines.em:CloneHMM",
                     "EM whose clones standing for two places are split and whose duplicate clones are merged "
                     "(split_rounds=3, merge_rounds=3): the EM map to plan with",
                     takes=("seed",), overrides={"n_clones": 30, "n_iter": 150, "split_rounds": 3,
                                                 "merge_rounds": 3},
                     options=(Option("n_clones", "--clones", "EM: clones per observation"),
                              Option("n_iter", "--em-iter", "EM: iterations")), table=False)
    yield ModelEntry("bfmm", "baselines.bfmm:BestFirstMerging",
                     "best-first model merging (Stolcke & Omohundro) on the first training episodes",
                     takes=("seed",), overrides={"incremental": None}, extra={"n_episodes": None},
                     prepare=_bfmm_prepare, resolve=_bfmm_resolve,
                     options=(Option("n_episodes", "--bfmm-episodes", "best-first merging: use only the first N "
                                                                      "training episodes (None: all)", int),
                              Option("search", "--bfmm-search", "best-first merging: 'pairs' (Stolcke & Omohundro, "
                                                                "incremental) or 'fold' (evidence-driven "
                                                                "determinising folds of the prefix tree)",
                                     choices=("pairs", "fold")),
                              Option("structure_prior", "--bfmm-structure-prior",
                                     "best-first merging: weight of the structure prior")))
    yield ModelEntry("rpni", "baselines.aalpy_models:RPNIModel", "AALpy's RPNI (Moore machine; refuses noisy data)",
                     requires="aalpy", table=False)
    yield ModelEntry("alergia", "baselines.aalpy_models:AlergiaModel", "AALpy's IOALERGIA (an MDP)",
                     requires="aalpy", table=False)


def _installed(package: str | None) -> bool:
    return package is None or importlib.util.find_spec(package) is not None


#: name -> entry, in table order (entries whose optional package is missing are left out).
MODELS: dict[str, ModelEntry] = {e.name: e for e in _entries() if _installed(e.requires)}


def _check_name(name: str) -> ModelEntry:
    if name not in MODELS:
        missing = [e for e in _entries() if e.name == name]
        if missing:
            raise ValueError(f"model {name!r} needs the package {missing[0].requires!r} (not installed)")
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    return MODELS[name]


def make_learner(name: str, n_obs: int | None = None, n_actions: int | None = None, *, env=None, seed=0,
                 **params):
    """The unfitted learner called ``name`` with the catalogue's defaults updated by ``params``.

    ``n_obs`` / ``n_actions`` are needed by the learners that take the alphabet in their
    constructor (``level1``, ``level2-*``); ``params`` may not hold an entry's ``extra``
    parameters (those act on the data: :func:`fit_model`).

    >>> make_learner("em", n_clones=2)
    CloneHMM(n_clones=2, n_iter=150)
    >>> make_learner("level2-fold", 10, 4)
    TwoLevelMemory(n_obs=10, n_actions=4, merge='fold')
    """
    entry = _check_name(name)
    params = _params(entry, params, data=False)
    if entry.resolve is not None:
        params = entry.resolve(dict(params))
    context = {"n_obs": n_obs, "n_actions": n_actions, "env": env, "seed": seed}
    return entry.learner_class(**{k: context[k] for k in entry.takes}, **entry.fixed, **params)


def _params(entry: ModelEntry, params: dict, data: bool) -> dict:
    allowed = entry.defaults if data else {k: v for k, v in entry.defaults.items() if k not in entry.extra}
    unknown = set(params) - set(allowed)
    if unknown:
        raise ValueError(f"model {entry.name!r} has no parameter {sorted(unknown)[0]!r}; its parameters: "
                         f"{', '.join(allowed) or 'none'}")
    return {**{k: v for k, v in allowed.items() if k in entry.overrides or k in entry.extra}, **params}


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
    The learner (an estimator with ``to_hmm()``): ``Oracle``, ``FirstOrderModel``,
    ``ContextModel``, ``EpisodicMemory``, ``TwoLevelMemory``, ``CloneHMM``,
    ``BestFirstMerging``, ``RPNIModel`` or ``AlergiaModel``.

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
    from ._validation import alphabet_sizes, as_trajectories

    entry = _check_name(name)
    params = _params(entry, params, data=True)
    if env is not None:
        n_obs = env.n_obs if n_obs is None else n_obs
        n_actions = env.n_actions if n_actions is None else n_actions
    if not entry.needs_data:
        return make_learner(name, n_obs, n_actions, env=env, seed=seed, **params).fit(None)
    train = as_trajectories(train)
    n_obs, n_actions = alphabet_sizes(train.obs, train.actions, n_obs, n_actions)
    if entry.prepare is not None:
        train, params = entry.prepare(train, {**entry.defaults, **params})
    learner = make_learner(name, n_obs, n_actions, env=env, seed=seed, **params)
    if "n_obs" in entry.takes:
        return learner.fit(train)
    return learner.fit(train, n_obs, n_actions)


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
    return fit_model(name, train, n_obs, n_actions, env=env, seed=seed, **params).to_hmm()

"""Scoring world models: surprise, likelihood, accuracy, cluster purity.

The paper measures a model ``M`` of an environment ``E`` by its expected
surprise (Section 2)::

    sur(E, M) = E_{o, a} [ -log sum_h P(o_{1:T}, h_{1:T} | a_{1:T}) ]

estimated here by Monte Carlo on fresh random-walk episodes, scored by the
scaled forward filter of :class:`~hmmmerge.hmm.ActionHMM`.  Every model of
the project (oracle, level 1, level 2, first-order, EM, best-first merging)
is an ``ActionHMM`` and is scored the same way.

Conventions (the same in every function here):

* **Scored steps.**  An episode has ``L + 1`` observations; the first one is
  predicted from ``B`` with no move.  The paper's agent scores its predictions
  of the ``L`` moves only, so by default the first observation is *not*
  scored (``score_first=False``); ``score_first=True`` scores all ``L + 1``
  (then ``nats_per_episode`` is exactly the paper's ``-log P(o_{1:T} | a)``).
  The per-step curve always covers all ``L + 1`` positions.
* **Zero probability.**  A scored observation the model gave probability 0
  (including a step where it made no prediction at all) has infinite
  surprise.  Such steps are counted (``zero_prob_steps``) and the surprise is
  ``inf`` unless an explicit ``smoothing=epsilon`` is given: each step's
  predictive probability becomes ``(1 - epsilon) * p + epsilon / n_obs`` (a
  mixture with the uniform distribution; the belief itself is propagated by
  the unsmoothed model).  The epsilon applied is reported; nothing is ever
  clipped silently.
* **Accuracy.**  The predicted observation is the argmax of the predictive
  distribution, ties broken towards the *smallest* observation index; a step
  with no prediction counts as wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from numbers import Integral

import numpy as np

from ._validation import as_trajectories, check_float, check_symbols
from .environment import Environment
from .rollouts import random_walk
from .trajectories import Trajectories

__all__ = [
    "ModelScore",
    "SurpriseResult",
    "cluster_labels",
    "evaluate_model",
    "position_transition_matrix",
    "score_trajectories",
    "surprise",
    "weighted_purity",
]


# --------------------------------------------------------------------------- results
@dataclass(frozen=True)
class SurpriseResult:
    """Monte-Carlo estimate of the paper's ``sur(E, M)``; returned by :func:`surprise`.

    Attributes
    ----------
    nats_per_step : mean surprise per scored step (``inf`` if a scored step had
        probability 0 and no smoothing was given).
    ci95 : 95% confidence interval of ``nats_per_step`` over episodes
        (Student t on the per-episode means); ``None`` with a single episode.
    nats_per_episode : mean over episodes of the summed surprise of the scored steps.
    curve : (L + 1,) mean surprise at each position of the episode (position 0
        is the first observation, predicted from ``B``; included even when not scored).
    per_episode : (N,) mean surprise per scored step of each episode.
    zero_prob_steps : scored steps whose observation had probability 0 under the model.
    no_prediction_share : share of scored steps where the model made no prediction.
    n_scored_steps, n_episodes, episode_length, score_first : what was scored.
    smoothing : the epsilon applied (``None``: no smoothing).

    Examples
    --------
    A model that ignores its input pays ``log 4`` nats on every step of a 4-colour world:

    >>> from hmmmerge import ActionHMM, gridworld
    >>> uniform = ActionHMM(np.ones((4, 1, 1)), np.full((1, 4), 0.25), [1.0])
    >>> r = surprise(gridworld(4, 4, n_colours=4, seed=0), uniform, n_episodes=5, episode_length=10)
    >>> round(r.nats_per_step, 4), round(float(np.log(4)), 4), r.n_scored_steps, r.zero_prob_steps
    (1.3863, 1.3863, 50, 0)
    """

    nats_per_step: float
    ci95: tuple[float, float] | None
    nats_per_episode: float
    curve: np.ndarray = field(repr=False)
    per_episode: np.ndarray = field(repr=False)
    zero_prob_steps: int
    no_prediction_share: float
    n_scored_steps: int
    n_episodes: int
    episode_length: int
    score_first: bool
    smoothing: float | None

    def as_dict(self) -> dict:
        """Plain Python values (lists for arrays), ready for JSON.

        >>> import json
        >>> from hmmmerge import gridworld
        >>> env = gridworld(4, 4, n_colours=4, seed=0)
        >>> d = json.loads(json.dumps(surprise(env, env.to_hmm(), n_episodes=3, episode_length=5).as_dict()))
        >>> d["nats_per_step"], d["curve"], d["n_episodes"], d["smoothing"]
        (0.0, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 3, None)
        """
        return {
            "nats_per_step": self.nats_per_step,
            "ci95": None if self.ci95 is None else [self.ci95[0], self.ci95[1]],
            "nats_per_episode": self.nats_per_episode,
            "curve": self.curve.tolist(),
            "zero_prob_steps": self.zero_prob_steps,
            "no_prediction_share": self.no_prediction_share,
            "n_scored_steps": self.n_scored_steps,
            "n_episodes": self.n_episodes,
            "episode_length": self.episode_length,
            "score_first": self.score_first,
            "smoothing": self.smoothing,
        }


@dataclass(frozen=True)
class ModelScore:
    """Every model-quality number for one model on one set of episodes.

    Returned by :func:`score_trajectories` and :func:`evaluate_model`; the
    field names are the JSON keys of ``hmmmerge evaluate --json`` and
    ``hmmmerge baseline --json``.

    Attributes
    ----------
    accuracy : share of scored steps whose argmax prediction (ties to the
        smallest observation) was right; a step without prediction is wrong.
    surprise : mean surprise in nats per scored step (``SurpriseResult.nats_per_step``).
    surprise_ci : 95% interval of ``surprise`` over episodes, or ``None``.
    nats_per_episode : mean over episodes of the summed surprise of the scored steps.
    surprise_curve : (L + 1,) mean surprise at each position of the episode.
    mean_true_prob : mean predicted probability of the observation that came.
    no_prediction_share, zero_prob_steps, n_scored_steps : as in :class:`SurpriseResult`.
    log_likelihood : total ``log P(o | a)`` in nats of all episodes, first
        observations included, unsmoothed.
    n_states : the model's hidden states.
    smoothing, score_first : the scoring settings.
    n_episodes, episode_length : the episodes scored.
    seed : the int seed of the fresh walks (``None``: given trajectories or a Generator).
    oracle_accuracy, oracle_surprise : the same numbers for the true stochastic model of the
        process (``env.to_hmm(start=start)``) on the same episodes, from :func:`evaluate_model`
        (``None`` from :func:`score_trajectories`, or with ``oracle=False``): the best any
        model can do, so ``oracle_accuracy - accuracy`` is the gap that matters.

    See Also
    --------
    SurpriseResult, score_trajectories, evaluate_model

    Examples
    --------
    >>> from hmmmerge import gridworld
    >>> env = gridworld(4, 4, n_colours=4, seed=0)
    >>> r = evaluate_model(env, env.to_hmm(), n_episodes=3, episode_length=5)
    >>> r.accuracy, r.as_dict()["surprise_curve"], r.seed
    (1.0, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 0)
    """

    accuracy: float
    surprise: float
    surprise_ci: tuple[float, float] | None
    nats_per_episode: float
    surprise_curve: np.ndarray = field(repr=False)
    mean_true_prob: float
    no_prediction_share: float
    zero_prob_steps: int
    n_scored_steps: int
    log_likelihood: float
    n_states: int
    smoothing: float | None
    score_first: bool
    n_episodes: int
    episode_length: int
    seed: int | None = None
    oracle_accuracy: float | None = None
    oracle_surprise: float | None = None

    def as_dict(self) -> dict:
        """Plain Python values (lists for arrays and the interval), ready for JSON.

        >>> import json
        >>> from hmmmerge import gridworld
        >>> env = gridworld(4, 4, n_colours=4, seed=0)
        >>> d = json.loads(json.dumps(evaluate_model(env, env.to_hmm(), n_episodes=3, episode_length=5).as_dict()))
        >>> d["accuracy"], d["surprise_ci"], d["n_states"]
        (1.0, [0.0, 0.0], 16)
        """
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["surprise_ci"] = None if self.surprise_ci is None else [self.surprise_ci[0], self.surprise_ci[1]]
        out["surprise_curve"] = self.surprise_curve.tolist()
        return out


# --------------------------------------------------------------------------- checks
def _check_model(model) -> None:
    if not all(hasattr(model, name) for name in ("run_filter", "n_obs", "n_actions", "n_states")):
        raise TypeError(f"model must be an ActionHMM (or offer run_filter/n_obs/n_actions), got {type(model).__name__}")


def _check_env_model(env, model) -> None:
    if not isinstance(env, Environment):
        raise TypeError(f"env must be an Environment, got {type(env).__name__}")
    _check_model(model)
    if model.n_obs != env.n_obs:
        raise ValueError(f"model has n_obs={model.n_obs} but the environment has n_obs={env.n_obs}")
    if model.n_actions != env.n_actions:
        raise ValueError(f"model has n_actions={model.n_actions} but the environment has n_actions={env.n_actions}")


def _check_trajectories(model, traj) -> Trajectories:
    traj = as_trajectories(traj)
    check_symbols(traj.obs, traj.actions, model.n_obs, model.n_actions)
    return traj


# --------------------------------------------------------------------------- core
def _score(model, traj: Trajectories, smoothing, score_first: bool, predictions: bool) -> dict:
    """Run the filter once and derive every per-step quantity."""
    eps = check_float(smoothing, "smoothing", low=0, high=1, low_open=True, allow_none=True)
    traj = _check_trajectories(model, traj)
    first = 0 if score_first else 1
    N, L1 = traj.obs.shape
    if L1 - first < 1:
        raise ValueError("episodes have no moves and score_first=False: nothing to score")
    res = model.run_filter(traj, predictions=predictions)
    logp = res.log_probs
    prob = np.exp(logp)
    with np.errstate(divide="ignore"):
        if eps is None:
            step_sur = -logp
        else:
            step_sur = -np.log((1.0 - eps) * prob + eps / model.n_obs)
    scored = slice(first, None)
    s = step_sur[:, scored]
    per_episode = s.mean(axis=1)
    mean = float(per_episode.mean())
    ci = None
    if N > 1:
        if np.isfinite(per_episode).all():
            from scipy.special import stdtrit  # Student t quantile (scipy.stats is slow to import)

            half = float(stdtrit(N - 1, 0.975) * per_episode.std(ddof=1) / np.sqrt(N))
            ci = (mean - half, mean + half)
        else:
            ci = (float("inf"), float("inf"))
    out = {
        "traj": traj,
        "prob": prob,
        "res": res,
        "first": first,
        "result": SurpriseResult(
            nats_per_step=mean,
            ci95=ci,
            nats_per_episode=float(s.sum(axis=1).mean()),
            curve=step_sur.mean(axis=0),
            per_episode=per_episode,
            zero_prob_steps=int((logp[:, scored] == -np.inf).sum()),
            no_prediction_share=float(res.no_prediction[:, scored].mean()),
            n_scored_steps=int(s.size),
            n_episodes=N,
            episode_length=L1 - 1,
            score_first=bool(score_first),
            smoothing=eps,
        ),
    }
    return out


def score_trajectories(model, traj, *, smoothing=None, score_first: bool = False) -> ModelScore:
    """Score ``model`` on given trajectories: accuracy, surprise, likelihood.

    ``traj``: a :class:`~hmmmerge.trajectories.Trajectories` or a pair
    ``(obs, actions)``.  See the module docstring for the conventions.  This
    is the one scoring path of the project: the CLI, the demo, the
    reproduction, the analysis scripts and the notebooks all score here.

    Returns
    -------
    ModelScore

    See Also
    --------
    evaluate_model : the same on fresh random walks of an environment.
    surprise : the surprise alone, with its curve.

    Examples
    --------
    >>> import numpy as np
    >>> from hmmmerge import ActionHMM, Trajectories
    >>> hmm = ActionHMM(np.ones((1, 2, 2)) / 2, np.eye(2), [1.0, 0.0])
    >>> r = score_trajectories(hmm, Trajectories([[0, 0, 1]], [[-1, 0, 0]]))
    >>> r.accuracy, round(r.surprise, 4), r.mean_true_prob   # tie 0.5/0.5 -> predicts 0
    (0.5, 0.6931, 0.5)
    """
    _check_model(model)
    sc = _score(model, traj, smoothing, score_first, predictions=True)
    traj, res, first, sr = sc["traj"], sc["res"], sc["first"], sc["result"]
    pred = res.predictions[:, first:]
    guess = pred.argmax(axis=2)  # ties -> smallest index
    correct = (guess == traj.obs[:, first:]) & ~res.no_prediction[:, first:]
    return ModelScore(
        accuracy=float(correct.mean()),
        surprise=sr.nats_per_step,
        surprise_ci=sr.ci95,
        nats_per_episode=sr.nats_per_episode,
        surprise_curve=sr.curve,
        mean_true_prob=float(sc["prob"][:, first:].mean()),
        no_prediction_share=sr.no_prediction_share,
        zero_prob_steps=sr.zero_prob_steps,
        n_scored_steps=sr.n_scored_steps,
        log_likelihood=res.log_likelihood,
        n_states=int(model.n_states),
        smoothing=sr.smoothing,
        score_first=sr.score_first,
        n_episodes=sr.n_episodes,
        episode_length=sr.episode_length,
    )


def surprise(
    env: Environment,
    model,
    n_episodes: int = 100,
    episode_length: int = 50,
    seed=0,
    policy=None,
    smoothing=None,
    *,
    score_first: bool = False,
    start=None,
) -> SurpriseResult:
    """Monte-Carlo estimate of ``sur(env, model)`` on fresh random walks.

    Parameters
    ----------
    env : the world the episodes come from (``random_walk`` from ``env.start``, or ``start``).
    model : an :class:`~hmmmerge.hmm.ActionHMM` with the environment's ``n_obs``
        and ``n_actions``.
    n_episodes, episode_length, seed, policy : the walks (see :func:`~hmmmerge.rollouts.random_walk`).
    smoothing : ``None`` (default: a zero-probability step makes the surprise
        ``inf``) or ``epsilon`` in (0, 1]: score ``(1 - epsilon) p + epsilon / n_obs``.
    score_first : also score the first observation of each episode (predicted from ``B``).
    start : where the episodes start (see :func:`~hmmmerge.rollouts.random_walk`).

    Returns
    -------
    SurpriseResult

    See Also
    --------
    evaluate_model : accuracy and the other numbers as well.

    Examples
    --------
    >>> from hmmmerge import gridworld
    >>> env = gridworld(4, 4, n_colours=4, seed=0)
    >>> r = surprise(env, env.to_hmm(), n_episodes=20, episode_length=10)
    >>> r.nats_per_step, r.zero_prob_steps, len(r.curve)
    (0.0, 0, 11)
    """
    _check_env_model(env, model)
    traj = random_walk(env, n_episodes, episode_length, seed=seed, policy=policy, start=start)
    return _score(model, traj, smoothing, score_first, predictions=False)["result"]


def evaluate_model(
    env: Environment,
    model,
    n_episodes: int = 100,
    episode_length: int = 50,
    seed=0,
    policy=None,
    smoothing=None,
    *,
    score_first: bool = False,
    trajectories: Trajectories | None = None,
    start=None,
    oracle: bool = True,
) -> ModelScore:
    """Score a model on fresh random walks of ``env`` (or on given ``trajectories``), beside the oracle.

    Parameters
    ----------
    env : the world; the model must share its ``n_obs`` and ``n_actions``.
    model : an :class:`~hmmmerge.hmm.ActionHMM`.
    n_episodes, episode_length, seed, policy : the walks (see :func:`~hmmmerge.rollouts.random_walk`).
    smoothing, score_first : as in :func:`surprise`.
    trajectories : replaces the fresh walks (then ``n_episodes``,
        ``episode_length``, ``seed`` and ``policy`` are ignored; they should
        come from the process ``(env, start)``).
    start : where the episodes start (see :func:`~hmmmerge.rollouts.random_walk`):
        the process scored is ``env`` from ``start``, slipping moves and noisy
        views included.
    oracle : also score the oracle of that process, ``env.to_hmm(start=start)``,
        on the same episodes with the same settings (``oracle_accuracy``,
        ``oracle_surprise``).

    Returns
    -------
    ModelScore
        accuracy, surprise with its interval and curve, likelihood,
        no-prediction share, zero-probability steps, states, what was scored,
        and the oracle's accuracy and surprise.

    See Also
    --------
    score_trajectories, surprise, hmmmerge.models.build_model

    Examples
    --------
    >>> from hmmmerge import gridworld
    >>> env = gridworld(4, 4, n_colours=4, seed=0)
    >>> r = evaluate_model(env, env.to_hmm(), n_episodes=10, episode_length=20)
    >>> r.accuracy, r.surprise, r.no_prediction_share, r.n_states
    (1.0, 0.0, 0.0, 16)

    The clean map on slipping moves from random starts, next to the true model of that process:

    >>> slippery = gridworld(4, 4, n_colours=4, seed=0, slip=0.1)
    >>> r = evaluate_model(slippery, env.to_hmm(start="random"), n_episodes=50, start="random", smoothing=1e-3)
    >>> round(r.accuracy, 3), round(r.oracle_accuracy, 3), round(r.surprise, 3), round(r.oracle_surprise, 3)
    (0.886, 0.915, 0.603, 0.313)
    """
    _check_env_model(env, model)
    walk_seed = None
    if trajectories is None:
        trajectories = random_walk(env, n_episodes, episode_length, seed=seed, policy=policy, start=start)
        walk_seed = int(seed) if isinstance(seed, Integral) else None
    score = score_trajectories(model, trajectories, smoothing=smoothing, score_first=score_first)
    best = {}
    if oracle:
        truth = score_trajectories(env.to_hmm(start=start), trajectories, smoothing=smoothing,
                                   score_first=score_first)
        best = {"oracle_accuracy": truth.accuracy, "oracle_surprise": truth.surprise}
    return replace(score, seed=walk_seed, **best)


# --------------------------------------------------------------------------- clusters
def _check_assignment(assignment, labels) -> tuple[np.ndarray, np.ndarray]:
    asg = np.asarray(assignment)
    lab = np.asarray(labels)
    for name, arr in (("assignment", asg), ("labels", lab)):
        if arr.ndim != 1:
            raise ValueError(f"{name} must be 1-D (one entry per first-level state), got shape {arr.shape}")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    if asg.shape != lab.shape:
        raise ValueError(f"assignment has {asg.shape[0]} entries but labels has {lab.shape[0]}")
    asg = asg.astype(np.int64)
    lab = lab.astype(np.int64)
    if asg.size and asg.min() < -1:
        raise ValueError("assignment entries must be cluster ids >= 0, or -1 for unassigned")
    if (lab[asg >= 0] < 0).any():
        raise ValueError("labels of assigned states must be >= 0")
    return asg, lab


def _cluster_label_counts(asg: np.ndarray, lab: np.ndarray, n_clusters: int):
    import scipy.sparse as sp

    keep = asg >= 0
    values, lc = np.unique(lab[keep], return_inverse=True)  # labels relabelled 0..: any int64 works
    counts = sp.coo_matrix(
        (np.ones(int(keep.sum())), (asg[keep], lc.ravel())), shape=(n_clusters, max(len(values), 1))
    ).tocsr()
    return counts, values


def cluster_labels(assignment, labels, n_clusters: int | None = None) -> np.ndarray:
    """Label of each cluster: the mode of its members' labels (ties: smallest label).

    ``assignment[i]`` is the cluster of first-level state ``i`` (``-1``:
    unassigned), ``labels[i]`` its true label.  Clusters with no member get
    ``-1``.

    Returns
    -------
    (k,) int array

    See Also
    --------
    weighted_purity, position_transition_matrix

    >>> cluster_labels([0, 0, 0, 1, -1], [5, 5, 2, 3, 9]).tolist()
    [5, 3]
    """
    asg, lab = _check_assignment(assignment, labels)
    k = int(asg.max()) + 1 if asg.size else 0
    if n_clusters is not None:
        if asg.size and asg.max() >= n_clusters:
            raise ValueError(f"assignment holds cluster {int(asg.max())}, but n_clusters={n_clusters}")
        k = int(n_clusters)
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    counts, values = _cluster_label_counts(asg, lab, k)
    counts = counts.toarray()
    empty = counts.sum(axis=1) == 0
    out = np.full(k, -1, dtype=np.int64)
    out[~empty] = values[counts[~empty].argmax(axis=1)]
    return out


def weighted_purity(assignment, labels, *, include_singletons: bool = False) -> float:
    """Size-weighted mean purity of the clusters: ``sum(purity * size) / sum(size)``.

    The purity of a cluster is the share of its most common label.
    Unassigned states (``-1``) are ignored.  By default clusters of size 1 are
    skipped, as the paper's authors do (a singleton is trivially pure); pass
    ``include_singletons=True`` to count them.

    Returns
    -------
    float in [0, 1], ``nan`` when no cluster qualifies.

    See Also
    --------
    cluster_labels, hmmmerge.purity : the exact law of a random cluster's purity.

    >>> weighted_purity([0, 0, 0, 0, 1, 1, 2], [1, 1, 1, 2, 3, 4, 7])
    0.6666666666666666
    >>> weighted_purity([0, 0, 0, 0, 1, 1, 2], [1, 1, 1, 2, 3, 4, 7], include_singletons=True)
    0.7142857142857143
    """
    asg, lab = _check_assignment(assignment, labels)
    keep = asg >= 0
    if not keep.any():
        return float("nan")
    sizes, top, _ = _present_top_counts(asg[keep], lab[keep])
    keep = sizes >= (1 if include_singletons else 2)
    if not keep.any():
        return float("nan")
    return float(top[keep].sum() / sizes[keep].sum())


#: largest (clusters x labels) table counted densely (160 MB of int64); larger ones are counted by sorting
_DENSE_CELLS = 20_000_000


def _present_top_counts(a: np.ndarray, lab: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Size and top label count of each cluster present in ``a`` (sorted ids), and those ids.

    Clusters and labels are relabelled ``0..`` first (``np.unique``), so any int64 ids work
    and the combined key ``cluster * n_labels + label`` stays below ``len(a)**2``.
    """
    ids, ac = np.unique(a, return_inverse=True)
    _, lc = np.unique(lab, return_inverse=True)
    k, n_labels = len(ids), int(lc.max()) + 1 if lc.size else 1
    ac, lc = ac.astype(np.int64).ravel(), lc.astype(np.int64).ravel()
    sizes = np.bincount(ac, minlength=k)
    if k * n_labels <= _DENSE_CELLS:  # dense table: one O(n) pass
        table = np.bincount(ac * n_labels + lc, minlength=k * n_labels).reshape(k, n_labels)
        return sizes, table.max(axis=1), ids
    pairs, counts = np.unique(ac * n_labels + lc, return_counts=True)
    top = np.zeros(k, dtype=np.int64)
    np.maximum.at(top, pairs // n_labels, counts)
    return sizes, top, ids


def cluster_top_counts(assignment: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster: its size and the count of its most common label (arrays over cluster ids).

    Unassigned states (``-1``) are ignored; labels must be >= 0 for assigned states.

    >>> sizes, top = cluster_top_counts(np.array([0, 0, 0, 1, -1]), np.array([4, 4, 2, 3, 9]))
    >>> sizes.tolist(), top.tolist()
    ([3, 1], [2, 1])
    """
    keep = assignment >= 0
    a, lab = assignment[keep], labels[keep]
    k = int(a.max()) + 1 if a.size else 0
    if a.size and lab.min() >= 0 and k * (int(lab.max()) + 1) <= _DENSE_CELLS:
        # ids and labels index a dense table directly: no sort (the agent calls this at every sleep)
        n_labels = int(lab.max()) + 1
        a = a.astype(np.int64)
        table = np.bincount(a * n_labels + lab.astype(np.int64), minlength=k * n_labels).reshape(k, n_labels)
        return np.bincount(a, minlength=k).astype(np.int64), table.max(axis=1).astype(np.int64)
    sizes, top = np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64)
    if a.size:
        s, t, ids = _present_top_counts(a, lab)
        sizes[ids], top[ids] = s, t
    return sizes, top


def position_transition_matrix(
    level2, assignment, labels, n_positions: int | None = None, *, per_action: bool = False
) -> np.ndarray:
    """Position-to-position transitions implied by a level-2 model (the paper's Figure sf_gw_structure).

    Each cluster (level-2 state) is labelled by the mode of its members'
    labels (:func:`cluster_labels`); with ``L`` the (k x P) one-hot matrix of
    cluster labels, ``T_pos[a] = L^T T2[a] L``, averaged over actions
    (``per_action=True`` keeps them apart: (A, P, P)), then each row is
    normalised.  Clusters without members drop out; a row of a position with
    no labelled cluster (or no known transition) stays zero.

    Parameters
    ----------
    level2 : ActionHMM whose states are the clusters ``0..k-1``.
    assignment : (n,) cluster of each first-level state, -1 unassigned.
    labels : (n,) true label (position index) of each first-level state.
    n_positions : number of positions P (default: largest label + 1).

    Returns
    -------
    (P, P) array, or (A, P, P) with ``per_action=True``; rows sum to 1 or 0.

    See Also
    --------
    cluster_labels

    >>> import numpy as np
    >>> from hmmmerge import ActionHMM
    >>> T2 = np.array([[[0., 1., 0.], [0., 0., 1.], [1., 0., 0.]]])   # 0 -> 1 -> 2 -> 0
    >>> level2 = ActionHMM(T2, np.eye(3), [1., 0., 0.])
    >>> position_transition_matrix(level2, [0, 0, 1, 2], [0, 0, 1, 1]).tolist()
    [[0.0, 1.0], [0.5, 0.5]]
    """
    import scipy.sparse as sp

    _check_model(level2)
    asg, lab = _check_assignment(assignment, labels)
    k = level2.n_states
    cl = cluster_labels(asg, lab, n_clusters=k)
    P = int(cl.max()) + 1 if (cl >= 0).any() else 0
    if n_positions is not None:
        if n_positions < P:
            raise ValueError(f"n_positions={n_positions} but labels go up to {P - 1}")
        P = int(n_positions)
    rows = np.flatnonzero(cl >= 0)
    Lm = sp.csr_matrix((np.ones(len(rows)), (rows, cl[rows])), shape=(k, P))
    mats = []
    for a in range(level2.n_actions):
        T = level2.T[a]
        T = T if sp.issparse(T) else sp.csr_matrix(T)
        mats.append(np.asarray((Lm.T @ T @ Lm).todense()))
    M = np.stack(mats)
    if not per_action:
        M = M.mean(axis=0)
    sums = M.sum(axis=-1, keepdims=True)
    return np.divide(M, sums, out=np.zeros_like(M), where=sums > 0)

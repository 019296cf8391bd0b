"""Why random clusters can be pure: the exact purity distribution of a random cluster.

The setting of the paper's Figure ``purity_random``: the first-level states of
one colour were created in ``clones`` different cells (their true labels); a
random partition cuts them into clusters of ``size`` states.  The purity of a
cluster is the share of its most common label.  Two models of the draw:

* ``counts`` given (``counts[i]`` states carry label ``i``): a cluster of a
  random partition is a uniform draw of ``size`` states without replacement,
  so its label counts are multivariate hypergeometric;
* ``counts=None``: an unlimited pool with every label equally likely, so the
  label counts are multinomial (``size`` draws, ``clones`` equal cells) -- the
  limit of many states per cell.

Both distributions of the largest count ``M`` come from one identity: the
label counts are independent variables ``Y_i`` (Poisson, or Binomial(counts[i], p))
conditioned on ``sum Y_i = size``, so ``P(M <= m)`` is the ``size``-th
coefficient of the product of the truncated pmfs of the ``Y_i`` divided by
``P(sum Y_i = size)``: a dynamic programme of polynomial products, no
enumeration and no sampling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._random import as_generator
from ._validation import check_int

__all__ = ["PurityDistribution", "random_cluster_purity_distribution", "random_partition_purities"]


@dataclass(frozen=True)
class PurityDistribution:
    """The law of a random cluster's purity.

    ``purity[j] = (j + 1) / size`` are the possible values (the largest label
    count is ``j + 1``) and ``pmf[j]`` their probabilities.

    Examples
    --------
    Three states over two equally likely labels: the largest count is 2 or 3.

    >>> d = random_cluster_purity_distribution(3, 2)
    >>> d.purity.round(3).tolist(), d.pmf.round(3).tolist(), d.cdf.round(3).tolist(), round(d.mean, 3)
    ([0.333, 0.667, 1.0], [0.0, 0.75, 0.25], [0.0, 0.75, 1.0], 0.75)
    """

    size: int
    clones: int
    purity: np.ndarray
    pmf: np.ndarray

    @property
    def mean(self) -> float:
        """Expected purity."""
        return float(self.purity @ self.pmf)

    @property
    def cdf(self) -> np.ndarray:
        """``P(purity <= purity[j])``."""
        return np.minimum(np.cumsum(self.pmf), 1.0)

    def prob_pure(self) -> float:
        """Probability that the cluster is pure (one label only).

        >>> round(random_cluster_purity_distribution(3, 3).prob_pure(), 6)   # 3 * (1/3)**3
        0.111111
        """
        return float(self.pmf[-1])


def _component_pmfs(size, clones, counts):
    """The pmfs of the independent counts Y_i (rows, length size + 1) and P(sum Y = size)."""
    from scipy.special import gammaln, xlog1py, xlogy

    j = np.arange(size + 1, dtype=float)
    if counts is None:  # Y_i ~ Poisson(size / clones), sum ~ Poisson(size)
        lam = size / clones
        row = np.exp(xlogy(j, lam) - lam - gammaln(j + 1))
        total = np.exp(xlogy(size, size) - size - gammaln(size + 1))
        return np.tile(row, (clones, 1)), float(total)

    def binom_pmf(k, n, p):  # k may exceed n: probability 0
        k, n = np.broadcast_arrays(np.asarray(k, dtype=float), np.asarray(n, dtype=float))
        ok = k <= n
        kk, nn = np.where(ok, k, 0.0), np.where(ok, n, 0.0)
        log = gammaln(nn + 1) - gammaln(kk + 1) - gammaln(nn - kk + 1) + xlogy(kk, p) + xlog1py(nn - kk, -p)
        return np.where(ok, np.exp(log), 0.0)

    total = int(counts.sum())
    p = size / total  # Y_i ~ Binomial(counts[i], p), sum ~ Binomial(total, p)
    return binom_pmf(j[None, :], counts[:, None], p), float(binom_pmf(size, total, p))


def _coefficient(rows, size):
    """The ``size``-th coefficient of the product of the polynomials in ``rows``."""
    acc = np.zeros(size + 1)
    acc[0] = 1.0
    for row in rows:
        acc = np.convolve(acc, row)[: size + 1]
    return acc[size]


def random_cluster_purity_distribution(size: int, clones: int, counts=None) -> PurityDistribution:
    """Exact distribution of the purity of a random cluster of ``size`` states.

    Parameters
    ----------
    size : states per cluster (>= 1).
    clones : number of true labels (cells of the colour) the states spread over (>= 1).
    counts : optional int array of length ``clones``, the number of states
        per label; the cluster is then drawn without replacement from these
        ``sum(counts)`` states (as in a random partition).  ``None``: every
        state's label is uniform and independent (an unlimited pool).

    Returns
    -------
    PurityDistribution with ``purity``, ``pmf``, ``mean``, ``cdf``.

    Examples
    --------
    Two states, two equally likely labels: pure with probability 1/2.

    >>> d = random_cluster_purity_distribution(2, 2)
    >>> d.purity.tolist(), d.pmf.round(6).tolist(), round(d.mean, 6)
    ([0.5, 1.0], [0.5, 0.5], 0.75)

    Drawing 2 of the 4 states labelled (a, a, b, b) without replacement: pure w.p. 2/6.

    >>> round(random_cluster_purity_distribution(2, 2, counts=[2, 2]).prob_pure(), 6)
    0.333333
    """
    size = check_int(size, "size", low=1)
    clones = check_int(clones, "clones", low=1)
    if counts is not None:
        counts = np.asarray(counts)
        if counts.ndim != 1 or counts.shape[0] != clones:
            raise ValueError(f"counts must be a 1-D array of length clones={clones}, got shape {counts.shape}")
        if counts.size and (not np.issubdtype(counts.dtype, np.integer) or counts.min() < 0):
            raise ValueError("counts must hold integers >= 0")
        counts = counts.astype(np.int64)
        if counts.sum() < size:
            raise ValueError(f"counts sum to {int(counts.sum())}, fewer than size={size} states")
    rows, total = _component_pmfs(size, clones, counts)
    # P(M <= m) for m = 0..size, by truncating every component at m
    below = np.empty(size + 1)
    for m in range(size + 1):
        below[m] = _coefficient(rows[:, : m + 1], size) / total
    below = np.clip(below, 0.0, 1.0)
    below[-1] = 1.0
    pmf = np.clip(np.diff(below), 0.0, None)  # P(M = m) for m = 1..size
    pmf /= pmf.sum()
    purity = np.arange(1, size + 1) / size
    return PurityDistribution(size=size, clones=clones, purity=purity, pmf=pmf)


def random_partition_purities(counts, size: int, n_partitions: int = 1000, seed=0) -> np.ndarray:
    """Purities of the clusters of ``n_partitions`` random partitions (simulation).

    The states (``counts[i]`` with label ``i``) are shuffled and cut into
    ``len(states) // size`` clusters of exactly ``size``; the remainder is
    left out, as in the paper's initial partition.  Returns an array
    ``(n_partitions, n_clusters)`` of purities.

    >>> p = random_partition_purities([5, 5], size=5, n_partitions=3, seed=0)
    >>> p.shape, bool(((p >= 0.6) & (p <= 1)).all())
    ((3, 2), True)
    """
    counts = np.asarray(counts)
    if counts.ndim != 1 or counts.size == 0 or not np.issubdtype(counts.dtype, np.integer) or counts.min() < 0:
        raise ValueError("counts must be a non-empty 1-D array of integers >= 0")
    size = check_int(size, "size", low=1)
    n_partitions = check_int(n_partitions, "n_partitions", low=1)
    n_states = int(counts.sum())
    n_clusters = n_states // size
    if n_clusters == 0:
        raise ValueError(f"counts sum to {n_states}, fewer than size={size}: no cluster fits")
    rng = as_generator(seed)
    labels = np.repeat(np.arange(counts.size), counts)
    shuffled = rng.permuted(np.tile(labels, (n_partitions, 1)), axis=1)[:, : n_clusters * size]
    cluster = np.repeat(np.arange(n_partitions * n_clusters), size)
    tally = np.bincount(cluster * counts.size + shuffled.ravel(), minlength=n_partitions * n_clusters * counts.size)
    return tally.reshape(n_partitions, n_clusters, counts.size).max(axis=2) / size

"""Exact purity of a random cluster against enumeration and Monte-Carlo."""

from fractions import Fraction
from itertools import combinations, product
from math import factorial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmmerge.purity import random_cluster_purity_distribution, random_partition_purities


def enumerate_multinomial(size, clones):
    """Sum the multinomial probabilities of every vector of label counts, exactly."""
    pmf = [Fraction(0)] * size
    for n in product(range(size + 1), repeat=clones):
        if sum(n) == size:
            ways = factorial(size)
            for k in n:
                ways //= factorial(k)
            pmf[max(n) - 1] += Fraction(ways, clones**size)
    return np.array([float(p) for p in pmf])


def enumerate_hypergeometric(size, counts):
    states = [label for label, c in enumerate(counts) for _ in range(c)]
    draws = list(combinations(range(len(states)), size))
    pmf = [Fraction(0)] * size
    for draw in draws:
        labels = [states[i] for i in draw]
        pmf[max(labels.count(c) for c in set(labels)) - 1] += Fraction(1, len(draws))
    return np.array([float(p) for p in pmf])


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 8), st.integers(1, 4))
def test_multinomial_matches_enumeration(size, clones):
    d = random_cluster_purity_distribution(size, clones)
    np.testing.assert_allclose(d.pmf, enumerate_multinomial(size, clones), atol=1e-12)
    np.testing.assert_allclose(d.purity, np.arange(1, size + 1) / size)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=4), st.data())
def test_hypergeometric_matches_enumeration(counts, data):
    total = sum(counts)
    if total == 0:
        counts = counts[:-1] + [1]
        total = 1
    size = data.draw(st.integers(1, total))
    d = random_cluster_purity_distribution(size, len(counts), counts=counts)
    np.testing.assert_allclose(d.pmf, enumerate_hypergeometric(size, counts), atol=1e-12)


@pytest.mark.parametrize("size,counts", [(10, [50] * 10), (5, [30, 10, 5]), (20, [40] * 4), (100, [150] * 10)])
def test_partition_simulation_agrees(size, counts):
    d = random_cluster_purity_distribution(size, len(counts), counts=counts)
    sim = random_partition_purities(counts, size, n_partitions=1000, seed=7)
    per_partition = sim.mean(axis=1)  # partitions are independent, clusters within one are not
    se = per_partition.std(ddof=1) / np.sqrt(len(per_partition))
    assert abs(per_partition.mean() - d.mean) < 5 * se + 1e-12
    # every cluster of a random partition has the analytic law (exchangeability)
    values = np.rint(sim.ravel() * size).astype(int)
    empirical = np.bincount(values, minlength=size + 1)[1:] / values.size
    assert 0.5 * np.abs(empirical - d.pmf).sum() < 0.03


def test_multinomial_simulation_agrees():
    rng = np.random.default_rng(3)
    size, clones = 10, 10
    labels = rng.integers(clones, size=(20000, size))
    tally = (labels[:, :, None] == np.arange(clones)).sum(axis=1).max(axis=1)
    d = random_cluster_purity_distribution(size, clones)
    empirical = np.bincount(tally, minlength=size + 1)[1:] / len(tally)
    assert 0.5 * np.abs(empirical - d.pmf).sum() < 0.02


def test_edge_cases_and_limits():
    assert random_cluster_purity_distribution(1, 7).pmf.tolist() == [1.0]
    assert random_cluster_purity_distribution(9, 1).prob_pure() == pytest.approx(1.0)
    assert random_cluster_purity_distribution(4, 3, counts=[0, 6, 0]).prob_pure() == pytest.approx(1.0)
    a = random_cluster_purity_distribution(6, 3, counts=[2, 5, 9])
    b = random_cluster_purity_distribution(6, 3, counts=[9, 2, 5])
    np.testing.assert_allclose(a.pmf, b.pmf, atol=1e-12)
    # many states per cell: the hypergeometric law tends to the multinomial one
    big = random_cluster_purity_distribution(10, 5, counts=[20000] * 5)
    np.testing.assert_allclose(big.pmf, random_cluster_purity_distribution(10, 5).pmf, atol=1e-3)
    # the whole colour in one cluster: the purity is the largest share, surely
    whole = random_cluster_purity_distribution(12, 3, counts=[6, 4, 2])
    assert whole.prob_pure() == 0 and whole.pmf[5] == pytest.approx(1.0)
    # purity falls with more clones and larger clusters, and never below 1 / clones on average
    means = [[random_cluster_purity_distribution(s, c).mean for s in (2, 5, 10, 20)] for c in (2, 5, 10)]
    assert all(np.diff(row).max() < 0 for row in means)
    assert all(np.diff(col).max() < 0 for col in np.array(means).T)
    assert all(m >= 1 / c for row, c in zip(means, (2, 5, 10)) for m in row)


def test_validation():
    with pytest.raises(ValueError, match="size"):
        random_cluster_purity_distribution(0, 3)
    with pytest.raises(ValueError, match="clones"):
        random_cluster_purity_distribution(3, 0)
    with pytest.raises(ValueError, match="counts"):
        random_cluster_purity_distribution(3, 2, counts=[1, 1, 1])
    with pytest.raises(ValueError, match="fewer than size"):
        random_cluster_purity_distribution(5, 2, counts=[1, 1])
    with pytest.raises(ValueError, match="no cluster fits"):
        random_partition_purities([1, 1], 3)
    with pytest.raises(TypeError, match="seed"):
        random_partition_purities([3, 3], 2, seed=-1)

"""The 95 % intervals of threshold figures (loadgate.analysis.intervals) against the binomial written
out by hand (tests/stats_truth.py), a t quantile from the tables, closed forms, and their coverage
over repeated samples of a known distribution."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from loadgate.analysis import intervals
from tests.stats_truth import binom_cdf, quantile_ranks


@pytest.mark.parametrize("n,q", [(20, 50.0), (24, 50.0), (100, 90.0), (200, 95.0), (1000, 99.0)])
def test_a_quantiles_interval_is_the_order_statistics_at_the_binomial_ranks(n: int, q: float) -> None:
    samples = [float(k) for k in range(1, n + 1)]  # x_(k) = k
    random.Random(n).shuffle(samples)
    ci = intervals.quantile(samples, q)
    lo, hi, coverage = quantile_ranks(n, q)
    assert (ci.low, ci.high) == (float(lo), float(hi))
    assert ci.coverage == pytest.approx(coverage, abs=1e-9) and coverage >= 0.95
    assert ci.method == "order statistics (binomial)" and ci.reason is None


def test_a_quantile_with_too_few_samples_above_it_has_no_upper_end() -> None:
    ci = intervals.quantile([float(k) for k in range(100)], 99.0)  # 1 sample above p99: cannot bound it
    assert ci.high is None and ci.low is not None
    assert ci.reason == "100 samples cannot bound p(99) above at 95%"


def test_a_quantiles_interval_holds_the_true_quantile_in_95_percent_of_repeated_samples() -> None:
    rng = np.random.default_rng(3)
    true_p90 = math.log(10)  # exponential(1): P(X <= ln 10) = 0.9
    held = 0
    for _ in range(400):
        ci = intervals.quantile(list(rng.exponential(1.0, 100)), 90.0)
        assert ci.low is not None and ci.high is not None
        held += ci.low <= true_p90 <= ci.high
    assert held / 400 >= 0.93  # the interval's coverage is at least 95 % (sd of the estimate 1.1 %)


def test_a_means_interval_is_the_t_interval() -> None:
    x = [float(k) for k in range(1, 11)]
    ci = intervals.mean(x)
    half = 2.2621571628 * float(np.std(x, ddof=1)) / math.sqrt(10)  # t(0.975, 9), from the tables
    assert ci.low == pytest.approx(5.5 - half, rel=1e-9) and ci.high == pytest.approx(5.5 + half, rel=1e-9)
    assert ci.method == "t-interval"


def test_a_mean_with_an_infinite_sample_or_one_sample_has_no_interval() -> None:
    assert intervals.mean([1.0, math.inf]).low is None
    assert intervals.mean([1.0, math.inf]).reason == "infinite samples (failed requests count as +inf): the mean is +inf"
    assert intervals.mean([1.0]).reason == "fewer than 2 samples"


@pytest.mark.parametrize("k,n", [(3, 24), (1, 100), (50, 100)])
def test_a_proportions_interval_is_clopper_pearson(k: int, n: int) -> None:
    ci = intervals.proportion(k, n)
    assert ci.low is not None and ci.high is not None and ci.method == "Clopper-Pearson"
    # its ends are where k or more (k or fewer) successes have probability 2.5 %
    assert 1 - binom_cdf(k - 1, n, ci.low) == pytest.approx(0.025, abs=1e-9)
    assert binom_cdf(k, n, ci.high) == pytest.approx(0.025, abs=1e-9)


def test_no_failures_in_n_requests_bound_the_error_rate_by_one_minus_the_nth_root_of_2_5_percent() -> None:
    ci = intervals.proportion(0, 24)
    assert ci.low == 0.0 and ci.high == pytest.approx(1 - 0.025 ** (1 / 24), rel=1e-9)  # 14.25 %

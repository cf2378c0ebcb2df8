"""The single-run comparison's bootstrap interval (`abstats.request_level`) never divides by a zero
percentile: a baseline whose TPOT is 0 (every token of a request in one read, as on a fast
simulator) gave numpy's divide-by-zero warning, an internal error of `loadgate compare`."""

from __future__ import annotations

import warnings

from loadgate.analysis.abstats import request_level
from tests.recs import make_record


def one_read(i: int) -> object:  # four tokens that arrived together: TPOT 0
    return make_record(i=i, end_ns=5_000_000, output_tokens_planned=4, chunk_ns=[3_000_000] * 4,
                       chunk_tokens=[1, 1, 1, 1])


def spread(i: int, gap_ms: float) -> object:
    return make_record(i=i, end_ns=20_000_000, output_tokens_planned=4,
                       chunk_ns=[int(1e6 + k * gap_ms * 1e6) for k in range(4)], chunk_tokens=[1, 1, 1, 1])


def test_a_baseline_of_zero_tpot_gives_no_interval_and_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert request_level("tpot.p50", [one_read(i) for i in range(12)], [spread(i, 2.0) for i in range(12)]) is None


def test_a_ratio_where_both_sides_have_a_figure_is_still_given():
    got = request_level("tpot.p50", [spread(i, 2.0) for i in range(12)], [spread(i, 3.0) for i in range(12)])
    assert got is not None and got[0] == got[1] == 1.5

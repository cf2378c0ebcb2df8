"""Metric formulas on hand-built records whose right answers are known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgate.analysis.metrics import stats, summarize, throughput
from loadgate.core.figures import figure
from loadgate.records import Record

MS = 1_000_000


def rec(start_ms, chunk_ms, tokens, *, end_ms=None, error=None, intended_ms=None, ready_ms=None, i=0, status=200):
    return Record.from_json({"v": 2, "i": i, "warmup": False, "level": 1,
            "intended_ns": None if intended_ms is None else int(intended_ms * MS),
            "ready_ns": int((ready_ms if ready_ms is not None else start_ms) * MS), "start_ns": int(start_ms * MS),
            "headers_ns": None, "end_ns": int((end_ms if end_ms is not None else start_ms + (chunk_ms[-1] if chunk_ms else 0)) * MS),
            "status": status, "error": error, "prompt_tokens_planned": 10, "output_tokens_planned": sum(tokens),
            "prompt_tokens": 10, "completion_tokens": sum(tokens), "chunk_ns": [int(c * MS) for c in chunk_ms],
            "chunk_tokens": list(tokens), "token_source": "ids", "finish_reason": "length", "spec": None})


def test_itl_spreads_a_multi_token_chunk_gap_over_its_tokens():
    r = rec(0, [100, 110, 150], [1, 1, 4])
    assert figure("itl").samples(r) == [10.0, 10.0, 10.0, 10.0, 10.0]
    assert figure("inter_chunk").samples(r) == [10.0, 40.0]
    assert figure("tpot").samples(r) == [50.0 / 5]
    assert figure("ttft").samples(r) == [100.0]
    assert figure("tokens_per_chunk").samples(r) == [1.0, 1.0, 4.0]


def test_open_loop_latency_counts_from_the_intended_start():
    r = rec(50, [100], [1], intended_ms=20)
    assert figure("ttft").samples(r) == [130.0]
    assert figure("client_queue").samples(r) == [30.0]
    assert figure("e2e").samples(r) == [130.0]


def test_closed_loop_client_queue_is_start_minus_ready():
    assert figure("client_queue").samples(rec(7, [1], [1], ready_ms=5)) == [2.0]


def test_stats_match_numpy_and_empty_is_none():
    x = np.arange(1, 1001, dtype=float)
    s = stats(x)
    assert s["p50"] == np.percentile(x, 50) and s["p99"] == np.percentile(x, 99) and s["p99.9"] == np.percentile(x, 99.9)
    assert s["min"] == 1 and s["max"] == 1000 and s["count"] == 1000
    empty = stats([])
    assert empty["count"] == 0 and all(empty[k] is None for k in ("p50", "p99", "mean", "max"))


def test_failures_stay_in_the_population_as_infinity():
    ok = [rec(0, [10 + k], [1], i=k) for k in range(98)]
    bad = [rec(0, [], [], end_ms=5, error={"kind": "http_status", "detail": "HTTP 503"}, i=98 + k, status=503)
           for k in range(2)]
    s = summarize(ok + bad)
    assert s["failed"] == 2 and s["errors"] == {"http_503": 2}
    assert s["metrics"]["ttft"]["count"] == 98 and math.isfinite(s["metrics"]["ttft"]["p99"])
    adj = s["metrics"]["ttft_error_adjusted"]
    assert adj["count"] == 100 and math.isinf(adj["p99"]) and adj["p50"] == pytest.approx(np.percentile(np.arange(10, 108), 50, method="linear"), abs=1)
    assert math.isinf(adj["max"])


def test_throughput_window_and_tokens_of_successes_only():
    a, b = rec(0, [100, 200], [1, 3], end_ms=200), rec(100, [50, 300], [1, 1], end_ms=400)
    c = rec(0, [10], [5], end_ms=50, error={"kind": "disconnect", "detail": "cut"})
    t = throughput([a, b, c])
    assert t["window_s"] == pytest.approx(0.4)
    assert t["output_token_throughput"] == pytest.approx(6 / 0.4)
    assert t["request_throughput"] == pytest.approx(2 / 0.4)
    assert t["input_token_throughput"] == pytest.approx(20 / 0.4)

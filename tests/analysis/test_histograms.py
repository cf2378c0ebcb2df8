"""Server-side latency from the engines' histograms (`loadgate.analysis.histograms`): percentiles
of the window's bucket deltas, interpolated inside the bucket as Prometheus does, checked against
values computed by hand, on a synthetic histogram and on vLLM's and SGLang's recorded pages."""

from __future__ import annotations

import pytest

from loadgate.analysis.histograms import bucket_deltas, quantile, server_latency
from loadgate.engine.adapters import FAMILIES
from loadgate.snapshot import Snapshot, parse_metrics
from tests.fixtures_path import fixture_file


def histogram(name: str, cumulative: dict[str, float], **labels: str) -> dict:
    return {(name + "_bucket", tuple(sorted({**labels, "le": le}.items()))): v for le, v in cumulative.items()}


def test_percentiles_interpolate_inside_the_bucket_over_the_windows_deltas_summed_over_labels():
    name = "vllm:time_to_first_token_seconds"
    # before the window: one observation in each bucket; in it, 10 more, split over two label sets
    # (SGLang's is_streaming): 2 in (0, 0.1], 3 in (0.1, 0.2], 4 in (0.2, 0.5], 1 above 0.5
    before = Snapshot(histogram(name, {"0.1": 1, "0.2": 2, "0.5": 3, "+Inf": 4}, s="a"))
    after = Snapshot({**histogram(name, {"0.1": 2, "0.2": 4, "0.5": 7, "+Inf": 8}, s="a"),
                      **histogram(name, {"0.1": 1, "0.2": 3, "0.5": 5, "+Inf": 6}, s="b")})
    assert bucket_deltas(before, after, name) == [(0.1, 2.0), (0.2, 5.0), (0.5, 9.0), (float("inf"), 10.0)]
    got = server_latency(before, after, FAMILIES["vllm"])["ttft"]
    assert got["histogram"] == name and got["count"] == 10 and got["edges_s"] == [0.1, 0.2, 0.5]
    # p50: rank 5 falls in (0.1, 0.2] (2 below, 3 in it): 0.1 + 0.1 × (5 - 2) / 3 = 0.2 s
    assert got["p50"] == {"ms": pytest.approx(200.0), "lo_ms": 100.0, "hi_ms": 200.0}
    # p90: rank 9 in (0.2, 0.5] (5 below, 4 in it): 0.2 + 0.3 × 4 / 4 = 0.5 s
    assert got["p90"] == {"ms": pytest.approx(500.0), "lo_ms": 200.0, "hi_ms": 500.0}
    # p99: rank 9.9 in (0.5, +Inf]: the highest finite edge, the bucket open above
    assert got["p99"] == {"ms": 500.0, "lo_ms": 500.0, "hi_ms": None}
    # a rank inside a bucket, not on its edge: p30 = rank 3 in (0.1, 0.2]: 0.1 + 0.1 × 1 / 3
    assert quantile(bucket_deltas(before, after, name), 0.3) == (pytest.approx(0.1 + 0.1 / 3), 0.1, 0.2)
    # the first bucket starts at 0: p10 = rank 1 of 2 in (0, 0.1]
    assert quantile(bucket_deltas(before, after, name), 0.1) == (pytest.approx(0.05), 0.0, 0.1)


def test_a_window_without_observations_has_no_percentiles_and_a_server_without_histograms_none():
    name = "vllm:e2e_request_latency_seconds"
    same = Snapshot(histogram(name, {"1.0": 3, "+Inf": 3}))
    got = server_latency(same, same, FAMILIES["vllm"])
    assert got is not None and got["e2e"]["count"] == 0 and got["e2e"]["p50"] is None
    llama = parse_metrics(fixture_file("llama-server", "metrics_after.txt").read_text())
    assert server_latency(llama, llama, FAMILIES["llamacpp"]) is None
    assert server_latency(same, same, None) is None


def test_an_older_vllm_inter_token_histogram_is_read_under_its_old_name():
    old = "vllm:time_per_output_token_seconds"
    after = Snapshot(histogram(old, {"0.01": 4, "0.05": 8, "+Inf": 8}))
    got = server_latency(Snapshot({}), after, FAMILIES["vllm"])
    assert got is not None and set(got) == {"itl"} and got["itl"]["histogram"] == old
    assert got["itl"]["p50"] == {"ms": pytest.approx(10.0), "lo_ms": 0.0, "hi_ms": 10.0}


def test_the_recorded_vllm_window_gives_the_hand_computed_percentiles():
    """vLLM 0.32's pages around five requests: 4 first tokens in (0.01, 0.02] s, one in (10, 20] s."""
    before = parse_metrics(fixture_file("vllm-cpu", "metrics_before.txt").read_text())
    after = parse_metrics(fixture_file("vllm-cpu", "metrics_after.txt").read_text())
    got = server_latency(before, after, FAMILIES["vllm"])
    assert got is not None and set(got) == {"ttft", "itl", "e2e", "queue"}
    ttft = got["ttft"]
    assert ttft["count"] == 5
    assert ttft["p50"] == {"ms": pytest.approx(16.25), "lo_ms": 10.0, "hi_ms": 20.0}  # 10 + 10 × 2.5 / 4 ms
    assert ttft["p90"] == {"ms": pytest.approx(15000.0), "lo_ms": 10000.0, "hi_ms": 20000.0}  # 10 s + 10 s × 0.5
    assert ttft["p99"]["ms"] == pytest.approx(19500.0)
    assert ttft["edges_s"][:4] == [0.001, 0.005, 0.01, 0.02] and len(ttft["edges_s"]) == 22


def test_the_recorded_sglang_page_is_read_under_sglangs_names():
    after = parse_metrics(fixture_file("sglang-cpu", "metrics_after.txt").read_text())
    got = server_latency(Snapshot({}), after, FAMILIES["sglang"])
    assert got is not None and set(got) == {"ttft", "itl", "e2e", "queue"}
    # 13 non-streamed and 1 streamed first token: 3 + 0 in (0, 0.1], 2 + 1 in (0.1, 0.2], 6 in (0.2, 0.4]
    ttft = got["ttft"]
    assert ttft["histogram"] == "sglang:time_to_first_token_seconds" and ttft["count"] == 14
    assert ttft["p50"] == {"ms": pytest.approx(200 + 200 * (7 - 6) / 6), "lo_ms": 200.0, "hi_ms": 400.0}

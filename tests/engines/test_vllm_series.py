"""Issue 31's done-when line against the real vLLM (CPU build, the tiny model), as far as it holds:
the server's TTFT p50 (`vllm:time_to_first_token_seconds`, interpolated in its bucket) ≤ loadgate's
TTFT p50 ≤ the bucket's upper edge + 20 ms.

A timing test (`-m timing`; CI runs it in its timing step, when nothing else runs on the machine):
the upper bound is a measured time. The lower one is compared like with like, not as the issue
writes it: the client's TTFTs are counted in the server's buckets and interpolated as the server's
are, since an interpolated percentile is known only to its bucket (seen twice here: the server's p50 read 12.96 and 14.72 ms in
[10, 20] ms while the client's own p50 was 12.06 and 12.49 ms, though at every bucket edge the server
counted as many requests as the client or more; counted in the same buckets, the client's p50 read
15.13 ms beside the server's 14.72).

Why it failed for weeks on this 2-core machine (client TTFT p50 110-160 ms against the engine's
12-17 ms, most replies arriving whole at their end): vLLM's engine core spin-waits on its worker with
`sched_yield`, and on this machine's kernel that kept the API server and the client off their core
for hundreds of milliseconds (loop lag p99 2.6 s); `scripts/engines/vllm.py` now puts the engine core
on SCHED_IDLE (`common.idle_policy_for`), and the client's TTFT p50 reads 9-13 ms. The literal
comparison (the server's interpolated p50 against the client's raw p50) is kept in the facts file,
not asserted: it failed twice above with every bucket count dominated.
Run with `LOADGATE_CACHE=... python -m pytest -q -m "engine and timing" tests/engines/test_vllm_series.py`."""

from __future__ import annotations

import pytest

from .test_vllm import OneServer, note, series_run, ttft_p50_through_the_servers_buckets

pytestmark = [pytest.mark.engine, pytest.mark.timing]


def test_vllm_server_ttft_p50_in_its_buckets_lies_below_the_clients_whose_p50_is_within_its_bucket_plus_20_ms(
        models, tmp_path, engine_logs):
    one = OneServer(models, engine_logs)
    try:
        srv = one.get("plain")
        assert srv.info["idle_pids"], "vLLM's engine core was not found to put on SCHED_IDLE"
        got = series_run(srv, tmp_path)
    finally:
        one.close()
    p50, client = got["server"]["p50"], got["client"]["p50"]
    server_p50, client_in_buckets = ttft_p50_through_the_servers_buckets(got["ttft_buckets"])
    note(engine_logs, test="metrics_series_timing", server_ttft_p50=p50, client_ttft_p50=client,
         client_ttft_p50_in_server_buckets=client_in_buckets, ttft_buckets=got["ttft_buckets"])
    assert got["code"] == 11, got["verdict"]
    assert server_p50 == pytest.approx(p50["ms"])  # the summary's figure is the interpolated one
    assert server_p50 <= client_in_buckets, (p50, client_in_buckets, got["ttft_buckets"])
    assert p50["lo_ms"] <= client <= p50["hi_ms"] + 20, (p50, client)

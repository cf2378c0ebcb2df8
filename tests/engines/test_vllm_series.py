"""Issue 31's done-when line against the real vLLM (CPU build, the tiny model): the server's TTFT p50
(`vllm:time_to_first_token_seconds`, interpolated in its bucket) ≤ loadgate's TTFT p50 ≤ the
bucket's upper edge + 20 ms.

A timing test (`-m timing`, CI's last step, with the machine to itself): the upper bound is a
measured time. vLLM observes TTFT in its engine process; its API server, another process, streams
the token to the client. On this 2-core machine beside other work the tokens waited there ~110 ms
a request (client TTFT p50 110-160 ms beside the engine's 12-17 ms, the first chunk ~10 ms before
the last; the same with scrapes 30 s apart: not the scraper's doing), where an earlier run read
19-20 ms beside 16 ms, within the bound. Seen again by the lead (2026-12-04, 3 helpers' work beside
it): client TTFT p50 160 ms against the engine's 16.5 ms; with vLLM's OpenMP threads bound to CPU 0
(VLLM_CPU_OMP_THREADS_BIND=0, the other core left to its API server and the client) 137 ms against
16.25 ms: not the engine's threads crowding the API server out, cause not established. So CI leaves
it out (it is marked `engine` as well, and CI's timing step runs `-m "timing and not engine"`); it
is the reproducer of issue 31's unmet line, run by hand.
The size, the counts and the scraper's CPU are the engine test's (test_vllm.py, which holds on any
machine). Run with `LOADGATE_CACHE=... python -m pytest -q -m timing tests/engines/test_vllm_series.py`."""

from __future__ import annotations

import pytest

from .test_vllm import OneServer, note, series_run

pytestmark = [pytest.mark.engine, pytest.mark.timing]


def test_vllm_server_ttft_p50_lies_below_the_clients_and_within_its_bucket_plus_20_ms(models, tmp_path, engine_logs):
    one = OneServer(models, engine_logs)
    try:
        got = series_run(one.get("plain"), tmp_path)
    finally:
        one.close()
    p50, client = got["server"]["p50"], got["client"]["p50"]
    note(engine_logs, test="metrics_series_timing", server_ttft_p50=p50, client_ttft_p50=client)
    assert got["code"] == 11, got["verdict"]
    assert p50["ms"] <= client <= p50["hi_ms"] + 20, (p50, client)

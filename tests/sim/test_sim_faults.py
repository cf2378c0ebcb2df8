"""Each fault knob at rate 1 produces its fault (and records it in the truth log); at 0, none."""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import pytest

from loadgate.config.simconfig import FaultConfig
from loadgate.sim.faults import plan_faults
from loadgate.sim.server import RunningSim
from tests.sim.helpers import completion_ids, fast_cfg, serve, sse_payloads

URL = "/v1/completions"
BODY = {"prompt": "fault injection", "max_tokens": 12, "temperature": 0, "ignore_eos": True, "stream": True,
        "return_token_ids": True}


async def raw_stream(s: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """Events with their arrival times, the status, and the error that cut the stream, if any."""
    t0 = time.perf_counter()
    out: dict[str, Any] = {"events": [], "times": [], "error": None}
    try:
        async with s.post(url, json=body) as r:
            out["status"] = r.status
            out["headers_s"] = time.perf_counter() - t0
            buf = b""
            async for data in r.content.iter_any():
                buf += data
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    out["events"].extend(sse_payloads(event + b"\n\n"))
                    out["times"].append(time.perf_counter() - t0)
    except aiohttp.ClientPayloadError as e:
        out["error"] = e
    return out


def one(faults: FaultConfig, body: dict[str, Any] = BODY) -> tuple[dict[str, Any], Any]:
    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> tuple[dict[str, Any], Any]:
        got = await raw_stream(s, sim.url + URL, body)
        return got, sim.truth.records[-1]

    return serve(fast_cfg(fixed_step_us=2000, faults=faults), go)


@pytest.mark.parametrize("status", [429, 500, 503])
def test_http_error_faults_answer_with_the_status_and_a_vllm_error_body(status: int) -> None:
    got, rec = one(FaultConfig(**{f"http_{status}": 1.0}))
    assert got["status"] == status and rec.status == status and rec.faults == [f"http_{status}"]

    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> Any:
        async with s.post(sim.url + URL, json=BODY) as r:
            return await r.json()

    err = serve(fast_cfg(faults=FaultConfig(**{f"http_{status}": 1.0})), go)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == status


def test_no_fault_at_rate_zero() -> None:
    got, rec = one(FaultConfig())
    assert got["status"] == 200 and got["error"] is None and got["events"][-1] == "[DONE]"
    assert len(completion_ids(got["events"])) == 12 and rec.faults == []
    assert max(b - a for a, b in zip(got["times"], got["times"][1:], strict=False)) < 0.2


def test_disconnect_cuts_the_stream_after_a_few_chunks() -> None:
    got, rec = one(FaultConfig(disconnect=1.0))
    assert got["status"] == 200 and got["error"] is not None
    assert 1 <= len(got["events"]) <= 3 and "[DONE]" not in got["events"]
    assert rec.faults == ["disconnect"] and rec.finish_reason == "abort"
    assert len(rec.chunks) == len(got["events"])


def test_malformed_line_then_the_stream_continues() -> None:
    got, rec = one(FaultConfig(malformed=1.0))
    bad = [e for e in got["events"] if isinstance(e, str) and e != "[DONE]"]
    assert bad == ['{"id": broken'] and got["events"][-1] == "[DONE]"
    assert len(completion_ids([e for e in got["events"] if isinstance(e, dict)])) == 12
    assert rec.faults == ["malformed"] and [c.kind for c in rec.chunks].count("malformed") == 1


def test_error_event_after_http_200_ends_the_stream() -> None:
    got, rec = one(FaultConfig(error_event=1.0))
    assert got["status"] == 200 and got["error"] is None
    errors = [e for e in got["events"] if isinstance(e, dict) and "error" in e]
    assert len(errors) == 1 and errors[0]["error"]["code"] == 500
    assert got["events"][-2] is errors[0] and got["events"][-1] == "[DONE]"
    assert len(completion_ids(got["events"][:-2])) < 12 and rec.faults == ["error_event"]


def test_stall_pauses_the_stream_for_stall_s() -> None:
    got, rec = one(FaultConfig(stall=1.0, stall_s=0.3))
    gaps = [b - a for a, b in zip(got["times"], got["times"][1:], strict=False)]
    assert max(gaps) >= 0.29 and got["events"][-1] == "[DONE]"
    assert len(completion_ids(got["events"])) == 12 and rec.faults == ["stall"]


@pytest.mark.timing
def test_slow_first_byte_delays_the_headers() -> None:
    got, rec = one(FaultConfig(slow_first_byte=1.0, slow_first_byte_s=0.3))
    assert got["headers_s"] >= 0.29 and got["events"][-1] == "[DONE]" and rec.faults == ["slow_first_byte"]
    fast, _ = one(FaultConfig(slow_first_byte=0.0, slow_first_byte_s=0.3))
    assert fast["headers_s"] < 0.2


def test_non_stream_requests_get_disconnects_and_stalls() -> None:
    async def go(sim: RunningSim, s: aiohttp.ClientSession) -> str:
        try:
            async with s.post(sim.url + URL, json={**BODY, "stream": False}) as r:
                await r.read()
                return f"status {r.status}"
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError) as e:
            return type(e).__name__

    assert not serve(fast_cfg(faults=FaultConfig(disconnect=1.0)), go).startswith("status")
    t = time.perf_counter()
    assert serve(fast_cfg(faults=FaultConfig(stall=1.0, stall_s=0.3)), go) == "status 200"
    assert time.perf_counter() - t >= 0.3


def test_fault_draws_are_seeded_by_seed_and_request_index() -> None:
    cfg = FaultConfig(http_500=0.3, disconnect=0.3, stall=0.2)
    a = [plan_faults(cfg, 1, i, True) for i in range(400)]
    assert a == [plan_faults(cfg, 1, i, True) for i in range(400)]
    assert a != [plan_faults(cfg, 2, i, True) for i in range(400)]
    share = sum(p.http_status == 500 for p in a) / len(a)
    assert 0.22 < share < 0.38

"""Protocol checks (`exactness.protocol`) against the simulator, and against it broken on purpose.

The simulator streams and answers whole alike, honours stop strings and max_tokens, aborts a
request whose client went away, and refuses a named tool_choice (it generates no tool calls), so
on it every check passes except tools, which does not apply. Its broken knobs
(`faults.ignore_stop`, `faults.ignore_disconnect`) make the stop, timeout and cancel checks fail
with the reason, and the exactness check with them (exit 10).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgate.cli import main
from loadgate.jsonutil import load_json
from tests.loopback import json_routes
from tests.profiles import LAX_HEALTH

SIM = {"decode_step_us": 1000, "decode_us_per_seq": 5, "prefill_us_per_token": 0.5}


def _check(tmp: Path, faults: dict[str, Any] | None = None, protocol: dict[str, Any] | None = None
           ) -> tuple[int, dict[str, Any], dict[str, dict[str, Any]]]:
    doc = {"name": "proto", "target": {"endpoint": "embedded", "sim": {**SIM, "faults": faults or {}}},
           "workload": {"requests": 4, "input_len": {"dist": "fixed", "value": 8},
                        "output_len": {"dist": "fixed", "value": 4}},
           "load": {"concurrency": 1},
           "exactness": {"baseline": "sim-reference", "scenarios": {"solo": True}, "protocol": protocol or {}},
           "health": LAX_HEALTH, "output": {"dir": str(tmp / "out"), "run_id": "p"}}
    p = tmp / "p.yaml"
    p.write_text(yaml.safe_dump(doc))
    code = main(["check", str(p)])
    ex = load_json(tmp / "out" / "p" / "exactness.json")
    return code, ex, {c["name"]: c for c in ex["protocol"]}


def test_every_protocol_check_passes_on_the_simulator_and_tools_do_not_apply(tmp_path, capsys):
    code, ex, checks = _check(tmp_path)
    assert code == 0 and ex["passed"], ex["reasons"]
    assert list(checks) == ["stream", "max_tokens", "stop", "tools", "timeout", "cancel"]
    assert {n: c["status"] for n, c in checks.items()} == {
        "stream": "passed", "max_tokens": "passed", "stop": "passed", "tools": "not applicable",
        "timeout": "passed", "cancel": "passed"}
    assert "refused a named tool_choice (HTTP 400)" in checks["tools"]["detail"]
    assert "the same 32 ids, finish reason 'length'" in checks["stream"]["detail"]
    # the slot was freed long before the 2,048 tokens asked for (1 ms a token here)
    got, asked = (int(x) for x in re.search(r"(\d+) of the (\d+) tokens asked", checks["cancel"]["detail"]).groups())
    assert asked == 2048 and got < 200, checks["cancel"]
    att = load_json(tmp_path / "out" / "p" / "attestation.json")
    assert att["protocol"]["cancel"]["status"] == "passed" and att["protocol"]["tools"]["status"] == "not applicable"
    out = capsys.readouterr().out
    assert "protocol: 5 of 6 passed" in out and "n/a    tools: not applicable" in out


def test_an_engine_that_keeps_generating_for_a_client_that_left_fails_timeout_and_cancel(tmp_path, capsys):
    code, ex, checks = _check(tmp_path, {"ignore_disconnect": True},
                              {"stream": False, "stop": False, "max_tokens": False, "tools": False,
                               "free_within_s": 0.3})
    assert code == 10 and not ex["passed"]
    assert set(checks) == {"timeout", "cancel"}
    for name in ("timeout", "cancel"):
        assert checks[name]["status"] == "failed", checks[name]
        assert "the slot was not freed" in checks[name]["detail"]
        assert any(r.startswith(f"protocol {name}: ") for r in ex["reasons"])
    assert not (tmp_path / "out" / "p" / "attestation.json").exists()


def test_an_engine_that_ignores_stop_strings_fails_the_stop_check(tmp_path):
    code, ex, checks = _check(tmp_path, {"ignore_stop": True}, {"tools": False, "timeout": False, "cancel": False})
    assert code == 10
    assert checks["stop"]["status"] == "failed" and "finish reason 'length', not 'stop'" in checks["stop"]["detail"]
    assert "(it holds the stop string)" in checks["stop"]["detail"]
    assert checks["stream"]["status"] == "passed" and checks["max_tokens"]["status"] == "passed"


@pytest.mark.parametrize("what", ["stream", "cancel"])
def test_a_protocol_request_that_fails_in_transport_leaves_the_check_not_established(tmp_path, what):
    """Every request failing (HTTP 503 after the scenarios' retries ran out would too): nothing shown."""
    only = {k: k == what for k in ("stream", "stop", "max_tokens", "tools", "timeout", "cancel")}
    code, ex, checks = _check(tmp_path, {"http_503": 1.0}, only)
    assert code == 11 and checks[what]["status"] == "not established", checks


def test_protocol_results_join_the_verdict_as_failed_or_not_established():
    """`add_protocol`: a failed check is a reason (exit 10), one not established an item that is
    not a lost request (exit 11, worded apart), passed and not-applicable ones change nothing."""
    from loadgate.config.contract import Contract
    from loadgate.exactness.check import CheckResult
    from loadgate.exactness.outcome import lost_requests

    def result(statuses: list[str]) -> CheckResult:
        r = CheckResult(Contract(), {}, [], {}, [])
        r.add_protocol([{"name": f"c{k}", "status": s, "proved": "", "detail": "seen"} for k, s in enumerate(statuses)])
        return r

    ok = result(["passed", "not applicable"])
    assert ok.passed and not ok.reasons and not ok.not_established
    bad = result(["passed", "failed"])
    assert not bad.passed and bad.reasons == ["protocol c1: seen"]
    lost = result(["not established", "passed"])
    assert not lost.passed and not lost.reasons and lost.not_established == ["protocol/c0"]
    assert lost_requests(lost.not_established + ["solo/a"]) == ["solo/a"]


@pytest.mark.parametrize(("status", "answer", "want", "says"), [
    (200, {"name": "get_weather", "arguments": '{"city": "Rome", "unit": "celsius"}'}, "passed", "1 call(s)"),
    (200, {"name": "get_weather", "arguments": {"city": "Rome", "unit": "celsius"}}, "failed", "are a dict"),
    (200, {"name": "get_weather", "arguments": '{"city": "Rome"'}, "failed", "not JSON"),
    (200, {"name": "get_weather", "arguments": '{"city": "Lima", "unit": "celsius"}'}, "failed", "break the schema"),
    (200, {"name": "other", "arguments": "{}"}, "failed", "names 'other'"),
    (200, "not a dict", "failed", "without a function"),
    (400, None, "not applicable", "refused a named tool_choice (HTTP 400)"),
    (500, None, "failed", "HTTP 500"),
    (503, None, "not established", "HTTP 503"),
])
def test_the_tools_check_judges_each_shape_of_answer_in_one_line(status, answer, want, says):
    """Against a loopback server answering the named tool_choice in each way an engine might."""
    import asyncio
    from types import SimpleNamespace

    import aiohttp
    from aiohttp import web

    from loadgate.gate.protocol import _Probe, check_tools

    async def chat(request: web.Request) -> web.Response:
        if status != 200:
            return web.json_response({"error": {"message": "no"}}, status=status)
        call = answer if not isinstance(answer, dict) else {"type": "function", "function": answer}
        return web.json_response({"choices": [{"message": {"role": "assistant", "tool_calls": [call]}}]})

    async def go() -> Any:
        async with json_routes({"/v1/chat/completions": chat}) as base:
            spec = SimpleNamespace(model="m", timeout_s=10.0, headers={}, extra_body={})
            sender = SimpleNamespace(targets={"chat": SimpleNamespace(url=f"{base}/v1/chat/completions",
                                                                       spec=spec)}, sampling=SimpleNamespace(seed=0))
            async with aiohttp.ClientSession() as session:
                return await check_tools(_Probe(sender, session, lambda: None, "t"))  # type: ignore[arg-type]

    c = asyncio.run(go())
    assert c.status == want and says in c.detail, c

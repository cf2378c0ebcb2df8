"""Token counts no server can mean (a bool, a negative, a fraction, a string, 10**30): one named
kind whatever the value. The run gets its ordinary verdict, every record stays readable with the
value kept as received (`counts_received`), the count comes from the ids where the stream has them,
and the report warns once, with the number of requests."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
import yaml

from loadgate.cli import main
from loadgate.engine.adapters import adapter_for
from loadgate.load.target import Raw, decode
from loadgate.records import Damage, read_records
from tests.hostile import COMPLETION, COMPLETION_END, SSE_HEAD, HostileServer, sse
from tests.profiles import LAX_HEALTH

IMPOSSIBLE = {"true": True, "-5": -5, "1" + "0" * 30: 1e30, "2.5": 2.5, '"7"': "7"}


def _profile(tmp: Path, url: str) -> Path:
    p = tmp / "counts.yaml"
    p.write_text(yaml.safe_dump({
        "name": "counts", "target": {"endpoint": url, "model": "m", "timeout_s": 30},
        "workload": {"requests": 6, "tokenizer": "none", "input_len": {"dist": "fixed", "value": 4},
                     "output_len": {"dist": "fixed", "value": 2}},
        "load": {"concurrency": 2}, "health": LAX_HEALTH, "output": {"dir": str(tmp / "out"), "run_id": "r"}}))
    return p


@pytest.mark.parametrize("text", list(IMPOSSIBLE))
def test_an_impossible_completion_count_gives_the_ordinary_verdict_and_readable_records(tmp_path, capsys, text):
    end = COMPLETION_END.replace('"completion_tokens":2', f'"completion_tokens":{text}')
    assert end != COMPLETION_END

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> None:
        writer.write(SSE_HEAD + sse(COMPLETION) + sse(end) + sse("[DONE]") + b"0\r\n\r\n")
        await writer.drain()

    with HostileServer(answer) as srv:
        assert main(["run", "-q", "--unverified", str(_profile(tmp_path, srv.url))]) == 11  # never 5 or 30
    capsys.readouterr()
    run = tmp_path / "out" / "r"
    damage = Damage()
    recs = list(read_records(run / "records.jsonl", damage=damage))
    assert not damage.any and len(recs) == 6
    for r in recs:
        assert r.error is None and r.completion_tokens is None and r.chunk_tokens == [1, 1]  # no ids: unverified
        assert r.counts_received == {"completion_tokens": IMPOSSIBLE[text]}
    assert main(["report", str(run)]) == 11
    out = capsys.readouterr().out
    assert out.count("warning: 6 request(s) carried token counts no server can mean") == 1, out
    assert "6 completion(s) had no ids to count, so they are unverified" in out
    assert "0 prompt and 0 completion mismatches in 6 requests" in out


def test_an_impossible_count_is_taken_from_the_ids_where_the_stream_has_them():
    def event(obj: dict) -> bytes:
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    body = (event({"choices": [{"index": 0, "text": " a", "token_ids": [5, 6], "finish_reason": None}]})
            + event({"choices": [{"index": 0, "text": " b", "token_ids": [7], "finish_reason": "length"}],
                     "usage": {"prompt_tokens": -3, "completion_tokens": True, "total_tokens": 5}})
            + b"data: [DONE]\n\n")
    raw = Raw(start_ns=0, end_ns=2, status=200, reads=[(1, body)])
    d = decode(adapter_for("openai-completions"), True, raw)
    assert d.error is None and d.output_ids == [5, 6, 7]
    assert d.completion_tokens == 3 and d.prompt_tokens is None  # from the ids; the prompt unverified
    assert d.counts_received == {"prompt_tokens": -3, "completion_tokens": True}
    assert [c.n_tokens for c in d.chunks] == [2, 1]

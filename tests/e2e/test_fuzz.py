"""Fuzzing the three ways bytes reach loadgate: profiles, engine responses, saved run folders.

The invariant in every case: no traceback, no exception out of `main`, an exit code from the
documented table, and bounded time (and, for responses, bounded memory by the transport limits).

  profiles     every shipped profile, mutated (values replaced by other types, keys dropped or
               invented, strings made long or given control characters) -> `loadgate validate`
  responses    random HTTP/1.1 framing from a raw server: status lines, header blocks, chunk
               sizes right and wrong, chunk extensions, 1xx interim answers, SSE framing, early
               closes, garbage -> loadgate's transport and decoding
  run folders  a saved run whose records.jsonl is truncated, flipped or given garbage lines
               -> `loadgate report` in every format

`LOADGATE_FUZZ_SCALE=N` multiplies every example count (the CI default, 1, runs 2,100 cases; the
longer run quoted in docs/hardening.md used N=25, 52,500 cases).
"""

from __future__ import annotations

import asyncio
import copy
import os
import shutil
import threading
import time
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadgate.cli import main
from loadgate.engine.adapters.base import ErrorKind
from loadgate.errors import EXIT_CODES
from loadgate.load.target import LiveTarget, TargetSpec, decode, fetch
from loadgate.net.http import make_session
from tests.fixtures_path import REPO

SCALE = int(os.environ.get("LOADGATE_FUZZ_SCALE", "1"))
PROFILES = sorted((REPO / "profiles").glob("*.yaml"))
def fuzz(examples: int) -> settings:
    """Each test's settings: `examples` x LOADGATE_FUZZ_SCALE, no deadline, the same examples in
    CI every time (derandomized) unless the scale asks for a longer, random run."""
    return settings(max_examples=examples * SCALE, deadline=None, suppress_health_check=list(HealthCheck),
                    derandomize=SCALE == 1, database=None)
KINDS = set(ErrorKind.__args__)  # type: ignore[attr-defined]


def check_exit(code: int, err: str) -> None:
    assert code in EXIT_CODES, (code, err)
    assert "Traceback" not in err and "internal error" not in err, err


# --- profiles ---------------------------------------------------------------------------------

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                    st.text(max_size=40), st.text(alphabet="\x00\n\t\r\x7f./\\$", max_size=8), st.just("${NOPE}"),
                    st.text(min_size=2000, max_size=3000), st.lists(st.integers(), max_size=3),
                    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


def paths(tree: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += paths(v, prefix + (k,))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out += paths(v, prefix + (i,))
    return out


# Each shipped profile parsed once (libyaml): an example mutates a deep copy, and is written back
# by libyaml's emitter (PyYAML's pure-Python loader and dumper were nine tenths of this test's time).
TREES = {p: yaml.load(p.read_text(), Loader=yaml.CSafeLoader) for p in PROFILES}


@st.composite
def mutated_profile(draw: Any) -> str:
    source = draw(st.sampled_from(PROFILES))
    tree = copy.deepcopy(TREES[source])
    for _ in range(draw(st.integers(1, 4))):
        spots = paths(tree)
        where = draw(st.sampled_from(spots))
        op = draw(st.sampled_from(["replace", "delete", "add", "wrap"]))
        if not where:
            continue
        parent = tree
        for k in where[:-1]:
            parent = parent[k]
        key = where[-1]
        if op == "replace":
            parent[key] = draw(SCALARS)
        elif op == "delete" and isinstance(parent, dict):
            del parent[key]
        elif op == "add" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=12))] = draw(SCALARS)
        elif op == "wrap":
            parent[key] = {"x": copy.deepcopy(parent[key])} if draw(st.booleans()) else [parent[key]]
    return yaml.dump(tree, Dumper=yaml.CSafeDumper, allow_unicode=True)


@fuzz(1000)
@given(mutated_profile())
def test_a_mutated_profile_is_valid_or_a_one_line_error(tmp_path_factory: Any, text: str) -> None:
    d = tmp_path_factory.mktemp("prof")
    shutil.copytree(REPO / "workloads", d / "workloads", dirs_exist_ok=True)
    p = d / "p.yaml"
    p.write_text(text)
    err = _run_main(["validate", str(p)])
    code, msg = err
    check_exit(code, msg)
    assert code in (0, 2), (code, msg)
    if code == 2:
        assert msg.startswith("loadgate: ") and msg.count("\n") == 1, msg


def _run_main(args: list[str]) -> tuple[int, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, err.getvalue()


# --- responses ----------------------------------------------------------------------------------

class ScriptedServer:
    """Answers each POST with the bytes scripted for its x-request-id, then closes."""

    def __init__(self) -> None:
        self.scripts: dict[str, bytes] = {}
        self.loop = asyncio.new_event_loop()
        self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            rid = length = None
            for line in head.split(b"\r\n"):
                low = line.lower()
                if low.startswith(b"x-request-id:"):
                    rid = line.split(b":", 1)[1].strip().decode()
                elif low.startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length or 0)
            data = self.scripts.pop(rid or "", b"")
            for k in range(0, len(data), 997):  # in pieces, so framing is split across reads
                writer.write(data[k:k + 997])
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


@pytest.fixture(scope="module")
def scripted() -> ScriptedServer:
    return ScriptedServer()


TEXT_EVENT = b'{"choices":[{"index":0,"text":" a","finish_reason":null}]}'
END_EVENT = b'{"choices":[{"index":0,"text":" b","finish_reason":"length"}],"usage":{"completion_tokens":2}}'


@st.composite
def response(draw: Any) -> bytes:
    parts = []
    for _ in range(draw(st.integers(0, 2))):  # interim answers
        parts.append(b"HTTP/1.1 1%02d Info\r\n%s\r\n" % (draw(st.integers(0, 99)),
                                                        b"X-I: 1\r\n" if draw(st.booleans()) else b""))
    status = draw(st.sampled_from([b"200 OK", b"503 Busy", b"404 No", b"abc", b"200", b"999 X", b"101 Up"]))
    proto = draw(st.sampled_from([b"HTTP/1.1 ", b"HTTP/1.0 ", b"HTTP/9 ", b""]))
    events = [b"data: " + draw(st.sampled_from([TEXT_EVENT, END_EVENT, b"[DONE]", b"{bad json", b"", b"\xff\xfe"]))
              + draw(st.sampled_from([b"\n\n", b"\r\n\r\n", b"\n", b"\r\r", b""]))
              for _ in range(draw(st.integers(0, 6)))]
    if draw(st.booleans()):
        events.insert(draw(st.integers(0, len(events))), draw(st.binary(max_size=64)))
    payload = b"".join(events)
    framing = draw(st.sampled_from(["chunked", "length", "length-wrong", "close", "chunked-bad"]))
    headers = b"Content-Type: text/event-stream\r\n"
    if framing.startswith("chunked"):
        headers += b"Transfer-Encoding: chunked\r\n"
        body = b""
        for k in range(0, len(payload), draw(st.integers(1, 64))):
            piece = payload[k:k + 64]
            ext = draw(st.sampled_from([b"", b";name=value", b"; x"]))
            size = b"%x" % len(piece) if framing == "chunked" else draw(st.sampled_from([b"zz", b"-1", b"", b"1" * 20]))
            body += size + ext + b"\r\n" + piece + b"\r\n"
        if draw(st.booleans()):
            body += b"0\r\n\r\n"
    elif framing.startswith("length"):
        n = len(payload) + (draw(st.integers(-5, 50)) if framing == "length-wrong" else 0)
        headers += b"Content-Length: %d\r\n" % n
        body = payload
    else:
        body = payload
    if draw(st.booleans()):
        body = body[: draw(st.integers(0, len(body)))]  # an early close
    parts.append(proto + status + b"\r\n" + headers + b"\r\n" + body)
    return b"".join(parts)


@fuzz(700)
@given(data=response())
def test_any_response_ends_in_a_record_with_a_known_outcome(scripted: ScriptedServer, data: bytes) -> None:
    rid = f"f{time.perf_counter_ns()}"
    scripted.scripts[rid] = data

    async def go() -> Any:
        async with make_session() as session:
            t = LiveTarget(TargetSpec(scripted.url, "openai-completions", "m", 5.0), session)
            raw = await fetch(t, b"{}", rid)
            d = decode(t.adapter, True, raw)
            assert t.pool is not None
            t.pool.close()
            return d

    t0 = time.perf_counter()
    d = asyncio.run(go())
    assert time.perf_counter() - t0 < 6
    assert d.error is None or d.error.kind in KINDS, d.error


# --- saved run folders --------------------------------------------------------------------------

RUN = REPO / "tests" / "data" / "runs-v1" / "single"


@st.composite
def damaged_records(draw: Any) -> bytes:
    data = bytearray((RUN / "records.jsonl").read_bytes())
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["truncate", "flip", "insert", "garbage-line"]))
        if op == "truncate" and data:
            del data[draw(st.integers(0, len(data) - 1)):]
        elif op == "flip" and data:
            k = draw(st.integers(0, len(data) - 1))
            data[k] = draw(st.integers(0, 255))
        elif op == "insert":
            k = draw(st.integers(0, len(data)))
            data[k:k] = draw(st.binary(max_size=40))
        else:
            data += draw(st.sampled_from([b"{}\n", b"[1,2]\n", b'{"v": 2}\n', b'{"v": 1, "i": null}\n', b"\n"]))
    return bytes(data)


@fuzz(400)
@given(data=damaged_records(), fmt=st.sampled_from(["table", "json", "csv", "markdown"]))
def test_a_damaged_run_folder_is_reported_with_a_documented_exit_code(tmp_path_factory: Any, data: bytes,
                                                                      fmt: str) -> None:
    d = tmp_path_factory.mktemp("run") / "single"
    shutil.copytree(RUN, d)
    (d / "records.jsonl").write_bytes(data)
    code, err = _run_main(["report", "--format", fmt, str(d)])
    check_exit(code, err)
    assert code in (0, 2, 5, 20, 30), (code, err)


"""Per-request records: the source of truth for every figure loadgate prints.

`records.jsonl` holds one JSON object per request, written (append + flush) as each request
finishes, so a crash loses at most the requests in flight and memory stays flat however long the
run. All times are integer nanoseconds of `time.perf_counter_ns()` relative to the run's origin
`t0_ns` (kept in `meta.json`). In memory a record is a `Record`; on disk it is that dataclass's
fields as JSON, in order.

Schema version 10 — fields of one record:
  v                  schema version (10)
  i                  index in the request plan (warmup requests first)
  warmup             true for warmup requests (excluded from every figure)
  level              the load level this request belongs to: concurrency (closed loop) or rate
  intended_ns        intended start (open loop) or null (closed loop)
  ready_ns           when the client was ready to send it (closed loop: a worker was free;
                     open loop: the schedule said go and a slot under max_in_flight was free)
  start_ns           when the POST began
  headers_ns         when the response headers arrived (null if none)
  end_ns             when the last byte arrived or the request failed
  status             HTTP status or null
  error              null or {"kind": ..., "detail": ...}; kinds: http_status, timeout,
                     disconnect, malformed, error_event, connect, empty, and (new in v3) the
                     limits: header_too_large, response_too_large, event_too_large,
                     memory_budget, bad_response, idle_timeout
  prompt_tokens_planned, output_tokens_planned   what the plan asked for (prompt: null when the
                     plan did not count it in tokens)
  prompt_tokens, completion_tokens               what the server reported (null if it did not)
  chunk_ns           arrival time of each content-bearing chunk, relative to start_ns
  chunk_tokens       tokens carried by each of those chunks
  chunk_early_ns     per chunk, how much earlier than its stamp it may truly have arrived (0: the
                     stamp is its arrival; more when one read carried several chunks: the bound
                     between the read before and this one; new in v3); empty in records
                     without it (v1, v2)
  chunk_busy         indices of the chunks whose bound was set while the client was behind: its
                     loop busy (the read's turn followed the last one without sleeping) or its
                     wake held up (woken from an idle poll later than its CPU and run-queue time
                     explain); their bound reaches back to the loop's poll two turns back. The
                     other bounded chunks were read in a turn that woke from an idle poll, bounded
                     by its measured wake latency (`loadgate.load.turns`)
                     (new in v4; null when read from an older record: the cause is unknown)
  token_source       where chunk token counts came from: ids, usage, meta_info, logprobs,
                     one_per_chunk
  finish_reason      as the engine said it (normalized to "length" / "stop" where possible)
  stamp              "kernel" (socket receive timestamps, SO_TIMESTAMPNS) or "user" (time the
                     client's loop read the data)
  read_lag_max_ns    kernel stamps only: the longest wait between data reaching the socket and
                     the client's loop reading it (how busy the client was)
  new_connection     true when the request opened a TCP connection first (its TTFT includes the
                     connect), false on a kept-alive one, null where unknown (aiohttp transport)
  spec               null or {source, verify_steps, draft_tokens, accepted,
                     reported_acceptance_length}
  counts_received    null, or the token counts the server sent that no server can mean (a bool,
                     a negative, a fraction, a string, a number beyond any context), by field
                     (prompt_tokens, completion_tokens), as received; the record's own count then
                     comes from the output ids where the stream had them, else it is null and
                     the request unverified (new in v5)
  category           the request's group (a dataset row's category field) or null (new in v6)
  reasoning_tokens   tokens the engine streamed as reasoning (`reasoning_content` / `reasoning`
                     deltas) before or between answer tokens; null where the response carried
                     none, or the API has no reasoning field (new in v7)
  answer_chunk       index in chunk_ns of the first chunk carrying answer text (a chunk of ids
                     with no text, such as a reasoning parser's <think> markers, is neither); 0
                     where no chunk carried text of either kind; null when every chunk was
                     reasoning or markers, or there were none (new in v7)
  conversation       a conversation's request (`workload.sessions`): the conversation's index among
                     the level's measured conversations (0-based), else null (new in v8)
  turn               the turn within it, 1-based (turn 1 has no history), else null (new in v8)
  turns              how many turns the conversation was planned to send (turns after a failed
                     one are not sent: they have no record), else null (new in v8)
  cached_tokens      prompt tokens the engine said its prefix cache served, from the response
                     (vLLM `usage.prompt_tokens_details.cached_tokens` with
                     --enable-prompt-tokens-details, SGLang `meta_info.cached_tokens`); null where
                     it did not say (new in v8)
  ramp               true for the requests of a level's ramp (`load.ramp`: after the warmup, before the
                     measured phase; excluded from every figure like warmup), false otherwise (new in v9)
  endpoint           the replica the request went to: its index in `target.endpoints` (routes
                     round_robin, sticky, least_in_flight), null for one endpoint or a router
                     (route via_router) (new in v9)
  actor              the Ray actor that sent it (`load.distributed`: 0 to actors - 1), null when
                     this host sent it (new in v10)
  node               the Ray node that actor ran on (its node id), null when this host sent it
                     (new in v10)

Version 9 had the same fields less `actor` and `node` (read as null).

Version 8 had the same fields less `ramp` (read as false) and `endpoint` (read as null).

Version 7 had the same fields less `conversation`, `turn`, `turns` and `cached_tokens` (read as null).

Version 6 had the same fields less `reasoning_tokens` and `answer_chunk` (read as null and, where
the record has chunks, 0: every chunk counted as answer; the chat adapter read only `content`).
Version 5 had the same fields less `category` (read as null).
Version 4 had the same fields less `counts_received` (read as null).
Version 3 had the same fields less `chunk_busy` (read as null: the cause is unknown).
Version 2 had the same fields as 3 less `chunk_early_ns` and the limit error kinds (read as no bound).
Version 1 as version 2, except that `new_connection` was absent from files written before it was
added (read as null). `read_records` reads all ten.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from loadgate.errors import ResultsNotWritten, UsageError
from loadgate.secrets import redact_bytes

SCHEMA_VERSION = 10
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)


# The host took at most this share of the machine's CPU time during a phase (health.json's
# host_steal_fraction): a quiet loop turn's wake is timed. Read as records are made and as runs are judged.
STEAL_TRUSTED = 0.02

@dataclass(frozen=True, slots=True)
class RecordError:
    kind: str
    detail: str


@dataclass(frozen=True, slots=True)
class SpecStats:
    """What one response said about speculative decoding (None where it did not say)."""

    source: str
    verify_steps: int | None = None
    draft_tokens: int | None = None
    accepted: int | None = None
    reported_acceptance_length: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """One request, as written to records.jsonl (see the module docstring for each field)."""

    v: int = SCHEMA_VERSION
    i: int
    warmup: bool
    level: int | float
    intended_ns: int | None
    ready_ns: int
    start_ns: int
    headers_ns: int | None
    end_ns: int
    status: int | None
    error: RecordError | None
    prompt_tokens_planned: int | None
    output_tokens_planned: int
    prompt_tokens: int | None
    completion_tokens: int | None
    chunk_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    chunk_early_ns: list[int] = field(default_factory=list)
    chunk_busy: list[int] | None = None  # None: a record older than v4 (the cause is unknown)
    token_source: str = "one_per_chunk"
    finish_reason: str | None = None
    stamp: str = "user"
    read_lag_max_ns: int = 0
    new_connection: bool | None = None
    spec: SpecStats | None = None
    counts_received: dict[str, Any] | None = None  # impossible server counts, as received (new in v5)
    category: str | None = None  # the request's group (new in v6)
    reasoning_tokens: int | None = None  # tokens streamed as reasoning (new in v7)
    answer_chunk: int | None = None  # index of the first chunk carrying answer tokens (new in v7)
    conversation: int | None = None  # a conversation's index (new in v8)
    turn: int | None = None  # its turn, 1-based (new in v8)
    turns: int | None = None  # the turns the conversation was planned to send (new in v8)
    cached_tokens: int | None = None  # prompt tokens the engine's prefix cache served, as it said (new in v8)
    ramp: bool = False  # a request of a level's ramp, outside every figure (new in v9)
    endpoint: int | None = None  # its replica: the index in target.endpoints, None for one endpoint (new in v9)
    actor: int | None = None  # the Ray actor that sent it, None for this host (new in v10)
    node: str | None = None  # that actor's Ray node id (new in v10)

    @property
    def succeeded(self) -> bool:
        return self.error is None

    @property
    def excluded(self) -> bool:
        """Outside every figure: a warmup or a ramp request."""
        return self.warmup or self.ramp

    @property
    def origin_ns(self) -> int:
        """Where latency counts from: the intended start (open loop), else the actual start."""
        return self.intended_ns if self.intended_ns is not None else self.start_ns

    @property
    def first_answer(self) -> int | None:
        """Index of the first chunk with answer tokens (0 for a record older than v7 with chunks)."""
        if self.answer_chunk is not None:
            return self.answer_chunk
        return 0 if self.chunk_ns and not self.reasoning_tokens else None

    @property
    def output_tokens(self) -> int:
        """The server's completion count, else the tokens the chunks carried."""
        return self.completion_tokens if self.completion_tokens is not None else sum(self.chunk_tokens)

    def to_json(self) -> bytes:
        """One line of records.jsonl (with its newline)."""
        return orjson.dumps(self, option=orjson.OPT_APPEND_NEWLINE)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Record:
        """A record from its JSON object (schema v1 to v10); KeyError/TypeError on a wrong shape."""
        err, spec = d.get("error"), d.get("spec")
        fields = {k: d[k] for k in _FIELDS if k in d}
        fields["v"] = SCHEMA_VERSION
        fields["error"] = None if err is None else RecordError(str(err["kind"]), str(err.get("detail", "")))
        fields["spec"] = None if spec is None else SpecStats(**{k: spec.get(k) for k in _SPEC_FIELDS})
        _check_types(fields)
        return cls(**fields)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


_INTS = ("i", "ready_ns", "start_ns", "end_ns", "output_tokens_planned")
_OPTIONAL_INTS = ("intended_ns", "headers_ns", "status", "prompt_tokens_planned", "prompt_tokens", "completion_tokens",
                  "reasoning_tokens", "answer_chunk", "conversation", "turn", "turns", "cached_tokens", "endpoint",
                  "actor")


def _check_types(f: dict[str, Any]) -> None:
    """ValueError naming the first field whose JSON type is wrong (a damaged or foreign file)."""
    bad = [k for k in _INTS if not _is_int(f.get(k))]
    bad += [k for k in _OPTIONAL_INTS if f.get(k) is not None and not _is_int(f[k])]
    if not isinstance(f.get("warmup"), bool):
        bad.append("warmup")
    if not isinstance(f.get("ramp", False), bool):
        bad.append("ramp")
    if f.get("node") is not None and not isinstance(f["node"], str):
        bad.append("node")
    if not isinstance(f.get("level"), int | float) or isinstance(f.get("level"), bool):
        bad.append("level")
    for k in ("chunk_ns", "chunk_tokens", "chunk_early_ns", "chunk_busy"):
        v = f.get(k, [])
        if v is None and k == "chunk_busy":
            continue  # written as unknown
        if not isinstance(v, list) or not all(_is_int(x) for x in v):
            bad.append(k)
    if not bad and len(f.get("chunk_ns", [])) != len(f.get("chunk_tokens", [])):
        bad.append("chunk_tokens (not one per chunk)")
    if not bad and f.get("chunk_early_ns") and len(f["chunk_early_ns"]) != len(f.get("chunk_ns", [])):
        bad.append("chunk_early_ns (not one per chunk)")
    if f.get("counts_received") is not None and not isinstance(f["counts_received"], dict):
        bad.append("counts_received")
    if f.get("category") is not None and not isinstance(f["category"], str):
        bad.append("category")
    if not bad and f.get("answer_chunk") is not None and not 0 <= f["answer_chunk"] < len(f.get("chunk_ns", [])):
        bad.append("answer_chunk (an index past the chunks)")
    if not bad and any(not 0 <= j < len(f.get("chunk_ns", [])) for j in f.get("chunk_busy") or []):
        bad.append("chunk_busy (an index past the chunks)")
    if bad:
        raise ValueError(f"wrong type for {bad[0]}")


_FIELDS = tuple(f for f in Record.__dataclass_fields__ if f not in ("v", "error", "spec"))
_SPEC_FIELDS = tuple(SpecStats.__dataclass_fields__)


class RecordWriter:
    """Appends records to a JSONL file, one whole line per write, so nothing finished is ever lost.

    Each line goes to the kernel at once (no buffer in the process: a crash loses no finished
    request). A write that fails (disk full, I/O error) is undone back to the last complete line,
    and `ResultsNotWritten` (exit 4) names the file: the file never holds half a line. Registered
    secrets are masked (`loadgate.secrets`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._size = os.fstat(self._fd).st_size
        except OSError as e:
            raise ResultsNotWritten(f"{path}: cannot open for writing: {e.strerror or e}") from None
        self.count = 0

    def _append(self, data: bytes) -> None:
        data = redact_bytes(data)
        view = memoryview(data)
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)  # back to the last complete line
            raise ResultsNotWritten(f"{self.path}: cannot write a record: {e.strerror or e}; "
                                    f"{self.count} complete record(s) kept") from None
        self._size += len(data)

    def write(self, record: Record) -> None:
        self._append(record.to_json())
        self.count += 1

    def append_file(self, part: Path) -> int:
        """Append the whole lines of another records file (a worker's part); returns how many."""
        n = 0
        with open(part, "rb") as src:
            for line in src:
                if line.endswith(b"\n"):
                    self._append(line)
                    n += 1
        self.count += n
        return n

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.fsync(self._fd)
        with contextlib.suppress(OSError):
            os.close(self._fd)

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Damage:
    """What `read_records` could not read: corrupt lines (not JSON, another schema, missing
    fields) and a last line cut short (a crash mid-write). Counted, with the first line numbers."""

    corrupt: int = 0
    lines: list[int] = field(default_factory=list)  # the first 20 corrupt line numbers
    truncated_line: int | None = None  # the last line, when it has no newline

    KEEP = 20

    @property
    def any(self) -> bool:
        return bool(self.corrupt or self.truncated_line)

    def add(self, lineno: int) -> None:
        self.corrupt += 1
        if len(self.lines) < self.KEEP:
            self.lines.append(lineno)

    def words(self, name: str = "records.jsonl") -> str:
        parts = []
        if self.corrupt:
            more = f" and {self.corrupt - len(self.lines)} more" if self.corrupt > len(self.lines) else ""
            parts.append(f"{self.corrupt} corrupt line(s) in {name} (line {', '.join(map(str, self.lines))}{more})")
        if self.truncated_line:
            parts.append(f"{name} line {self.truncated_line} cut short (a crash or a full disk mid-write)")
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"corrupt": self.corrupt, "lines": self.lines, "truncated_line": self.truncated_line}


def read_records(path: Path, *, include_warmup: bool = False, damage: Damage | None = None) -> Iterator[Record]:
    """Yield records from a records.jsonl (schema v1 to v9), skipping those outside every figure (warmup
    and ramp requests, `Record.excluded`) unless `include_warmup`.

    With `damage`, a line that cannot be read is counted there and skipped, and so is a last line
    cut short; without, such a line is a UsageError naming it (a cut last line still ends the
    file quietly: the reader of a live file may meet one)."""
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.endswith(b"\n"):
                if damage is not None and line.strip():
                    damage.truncated_line = lineno
                break
            try:
                rec = _parse_line(path, lineno, line)
            except UsageError:
                if damage is None:
                    raise
                damage.add(lineno)
                continue
            if include_warmup or not rec.excluded:
                yield rec


def _parse_line(path: Path, lineno: int, line: bytes) -> Record:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise UsageError(f"{path}:{lineno}: not a JSON record ({e})") from None
    if not isinstance(obj, dict) or obj.get("v") not in READABLE_VERSIONS:
        got = obj.get("v") if isinstance(obj, dict) else None
        raise UsageError(f"{path}:{lineno}: record schema v{got} is not supported "
                         f"(this loadgate reads v{', v'.join(map(str, READABLE_VERSIONS))})")
    try:
        return Record.from_json(obj)
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise UsageError(f"{path}:{lineno}: not a complete v{obj['v']} record ({type(e).__name__}: {e})") \
            from None

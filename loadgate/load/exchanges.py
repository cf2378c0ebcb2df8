"""Exchange logs: every finished exchange of a phase, on disk within about a second.

The receive loop keeps a finished exchange as it came (its stamps, its reads' bytes, what the
transport noted) and decodes nothing; `ExchangeLog.add` frames it at once and appends the frame to
a small buffer that goes to the file in the run folder once it holds `BATCH_BYTES` or is
`BATCH_S` old. After the phase the log is read back, decoded into records and removed; when the
process dies first (SIGKILL, the OOM killer), the log stays, and `loadgate report` decodes it: all
but the last unwritten batch is kept. A full disk shows at the batch that did not fit (the file is
cut back to its last whole frame; `ResultsNotWritten`, exit 4).

The format is loadgate's own, written by hand because it sits on the receive loop's path (one
`orjson` header and a join per exchange, ~5 µs) and must survive being cut anywhere; it is not
pickle, so a folder is read safely on another machine. Any later collection of exchanges from
several processes or hosts reuses it: a Ray actor relays its workers' logs to the run folder as
they grow (`ByteTail`), whole frames only. A file is a sequence of frames:

    magic  b"LGX1"
    u32    header length (little-endian)
    u64    payload length
    header orjson object
    payload the exchange's read bytes, concatenated (their lengths are in the header)

The first frame is the file's own: {"format": "loadgate-exchanges", "version": 1, ...} with what
decoding needs (the API, stream or not, the event limit, the prompt overhead). Each later one is
one exchange (`encode`). A reader stops at the first frame that is not whole.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter_ns
from typing import Any, BinaryIO

import orjson

from loadgate.engine.adapters.base import ErrorInfo
from loadgate.errors import ResultsNotWritten
from loadgate.load.target import Raw
from loadgate.load.turns import LOOP_TURNS

MAGIC = b"LGX1"
HEAD = struct.Struct("<4sIQ")
FORMAT, VERSION = "loadgate-exchanges", 1
BATCH_BYTES = 256 * 1024  # a batch goes to disk once it holds this much ...
BATCH_S = 1.0  # ... or is this old (checked as exchanges finish)
MAX_HEADER = 64 * 2**20  # a header length beyond this is damage, not a header


@dataclass(frozen=True, slots=True)
class Exchange:
    """One finished exchange as the log keeps it: what its record needs of the plan and the phase,
    and the raw exchange."""

    i: int
    warmup: bool
    prompt_len: int | None
    output_len: int
    t0_ns: int
    level: float | int
    ready_ns: int
    intended_ns: int | None
    raw: Raw
    counted: bool = False  # prompt_len is the whole count the server reports (a dataset prompt's)
    category: str | None = None
    session: tuple[int, int, int] | None = None  # a conversation's turn: (conversation, turn, turns)
    ramp: bool = False  # a request of the level's ramp (`load.ramp`)


def _frame(header: dict[str, Any], payload: bytes) -> bytes:
    h = orjson.dumps(header)
    return HEAD.pack(MAGIC, len(h), len(payload)) + h + payload


def encode(x: Exchange) -> bytes:
    """The frame of one exchange (on the receive loop: no decoding, one join of the bytes)."""
    raw = x.raw
    socket = raw.socket_reads is not None
    reads = raw.socket_reads if raw.socket_reads is not None else raw.reads
    header = {
        "i": x.i, "w": x.warmup, "pl": x.prompt_len, "ol": x.output_len, "t0": x.t0_ns, "lv": x.level,
        "rd": x.ready_ns, "in": x.intended_ns, "pc": x.counted, "cg": x.category, "cv": x.session, "rp": x.ramp,
        "st": raw.start_ns, "hd": raw.headers_ns, "en": raw.end_ns, "ss": raw.status,
        "er": None if raw.error is None else [raw.error.kind, raw.error.detail],
        "sk": socket, "ts": [t for t, _ in reads], "ln": [len(b) for _, b in reads],
        "src": raw.stamp_source, "lag": raw.read_lag_max_ns, "nc": raw.new_connection,
        "rb": raw.read_begin, "sn": raw.sent_ns, "ep": raw.endpoint,
        # the aiohttp path notes each read's floor as it receives (the socket path works them out
        # from `rb` when decoding)
        "pr": list(raw.prev_read_of.items()) if raw.socket_reads is None else [],
    }
    return _frame(header, b"".join(b for _, b in reads))


def _exchange(h: dict[str, Any], payload: bytes) -> Exchange:
    reads, k = [], 0
    for t, n in zip(h["ts"], h["ln"], strict=True):
        reads.append((t, payload[k:k + n]))
        k += n
    raw = Raw(start_ns=h["st"], headers_ns=h["hd"], end_ns=h["en"], status=h["ss"],
              error=None if h["er"] is None else ErrorInfo(h["er"][0], h["er"][1]),
              stamp_source=h["src"], read_lag_max_ns=h["lag"], new_connection=h["nc"],
              read_begin=[tuple(b) for b in h["rb"]], sent_ns=h["sn"], endpoint=h.get("ep"))
    if h["sk"]:
        raw.socket_reads = reads
    else:
        raw.reads = reads
        raw.prev_read_of = {int(t): int(f) for t, f in h.get("pr") or []}
    return Exchange(h["i"], h["w"], h["pl"], h["ol"], h["t0"], h["lv"], h["rd"], h["in"], raw,
                    bool(h.get("pc", False)), h.get("cg"), None if h.get("cv") is None else tuple(h["cv"]),
                    bool(h.get("rp", False)))


class ExchangeLog:
    """Appends exchange frames to `path` in batches (see the module docstring). `meta`: what
    decoding needs, kept in the file's first frame."""

    def __init__(self, path: Path, meta: dict[str, Any], batch_bytes: int = BATCH_BYTES,
                 batch_s: float = BATCH_S) -> None:
        self.path = path
        self.batch_bytes, self.batch_ns = batch_bytes, int(batch_s * 1e9)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        except OSError as e:
            raise ResultsNotWritten(f"{path}: cannot open for writing: {e.strerror or e}") from None
        self._size = 0
        self._buf = bytearray(_frame({"format": FORMAT, "version": VERSION, **meta}, b""))
        self._ends = [len(self._buf)]  # where each frame in the batch ends
        self._since = perf_counter_ns()
        self.count = 0  # exchanges added
        self.failed = False  # a write failed: nothing more is taken (the run is stopping)
        self.flush()

    def add(self, x: Exchange) -> None:
        """Keep one finished exchange; the batch goes to disk when it is full or old enough."""
        if self.failed:
            return  # after a failed write: the slots still finishing while the run stops are not kept
        self._buf += encode(x)
        self._ends.append(len(self._buf))
        self.count += 1
        if len(self._buf) >= self.batch_bytes or perf_counter_ns() - self._since >= self.batch_ns:
            self.flush()

    def flush(self) -> None:
        """Write the batch. A write that fails (disk full) cuts the file back to its last whole
        frame and raises `ResultsNotWritten` (exit 4)."""
        self._since = perf_counter_ns()
        if not self._buf or self._fd is None or self.failed:
            return
        view = memoryview(self._buf)
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        except OSError as e:
            done = len(self._buf) - len(view)
            view.release()
            keep = max((end for end in self._ends if end <= done), default=0)  # the whole frames that went
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size + keep)
            self._size += keep
            self._buf.clear()
            self._ends.clear()
            self.failed = True
            raise ResultsNotWritten(f"{self.path}: cannot write finished exchanges: {e.strerror or e}") from None
        finally:
            LOOP_TURNS.after_blocking()  # a file write may sleep: not the poll's sleep
        view.release()
        self._size += len(self._buf)
        self._buf.clear()
        self._ends.clear()

    def close(self) -> None:
        """Write what is left and close the file (it stays, for `read`)."""
        try:
            self.flush()
        finally:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = None


@dataclass
class LogContents:
    """What `read` found: the file's own header and its whole exchanges (a batch cut by a crash or a
    full disk ends them)."""

    meta: dict[str, Any]
    exchanges: Iterator[Exchange]
    path: Path
    file: BinaryIO | None = None  # the open log (closed when `exchanges` ends, or by `close`)

    def close(self) -> None:
        """Close the log without reading its exchanges (a log the caller skips)."""
        if self.file is not None:
            self.file.close()


def _frames(f: BinaryIO) -> Iterator[tuple[dict[str, Any], bytes]]:
    """The whole frames of an open log, one at a time (a phase's log can be larger than memory)."""
    while len(head := f.read(HEAD.size)) == HEAD.size:
        magic, hl, pl = HEAD.unpack(head)
        if magic != MAGIC or hl > MAX_HEADER:
            return
        h = f.read(hl)
        payload = f.read(pl)
        if len(h) < hl or len(payload) < pl:
            return  # cut by a crash or a full disk: what came before is kept
        try:
            header = orjson.loads(h)
        except orjson.JSONDecodeError:
            return
        yield header, payload


def read(path: Path) -> LogContents | None:
    """The log at `path`, read frame by frame as its exchanges are taken; None when it is not one
    (no whole first frame of this format). OSError when it cannot be opened."""
    f = open(path, "rb")  # noqa: SIM115 - closed when its exchanges are exhausted
    frames = _frames(f)
    first = next(frames, None)
    if first is None or not isinstance(first[0], dict) or first[0].get("format") != FORMAT:
        f.close()
        return None
    meta = first[0]

    def exchanges() -> Iterator[Exchange]:
        try:
            for h, payload in frames:
                try:
                    yield _exchange(h, payload)
                except (KeyError, TypeError, ValueError, IndexError):
                    return  # a frame of another shape: what came before is kept
        finally:
            f.close()
    return LogContents(meta, exchanges(), path, f)


class Tail:
    """A log another process is writing, read as it grows: `new` gives the whole exchanges appended
    since its last call (a batch still being written waits for the next call); `meta` is the file's
    own header once read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0  # where the first frame not read yet begins
        self.meta: dict[str, Any] | None = None
        self.file: BinaryIO | None = None

    def new(self) -> list[Exchange]:
        if self.file is None:
            try:
                self.file = open(self.path, "rb")  # noqa: SIM115 - kept open across calls, closed by `close`
            except OSError:
                return []
        out: list[Exchange] = []
        self.file.seek(self.offset)
        for h, payload in _frames(self.file):
            if self.meta is None:
                if not isinstance(h, dict) or h.get("format") != FORMAT:
                    break  # not an exchange log: nothing is read from it
                self.meta = h
            else:
                try:
                    out.append(_exchange(h, payload))
                except (KeyError, TypeError, ValueError, IndexError):
                    break  # a frame of another shape: read no further
            self.offset = self.file.tell()
        return out

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def whole_frames(data: bytes) -> int:
    """How many leading bytes of `data` are whole frames (a batch being written ends it, or damage)."""
    k = 0
    while k + HEAD.size <= len(data):
        magic, hl, pl = HEAD.unpack_from(data, k)
        if magic != MAGIC or hl > MAX_HEADER:
            break
        end = k + HEAD.size + hl + pl
        if end > len(data):
            break
        k = end
    return k


class ByteTail:
    """A log another process is writing, relayed as it grows (`loadgate.load.ray_actor`): `new` gives
    the bytes of the whole frames appended since its last call, as they are on disk (they are
    appended to a copy elsewhere, which is then a log of the same format)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def new(self, limit: int = 64 * 2**20) -> bytes:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(limit)
        except OSError:
            return b""
        n = whole_frames(data)
        if n == 0 and len(data) == limit:  # one frame larger than the limit: take it whole
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
            n = whole_frames(data)
        self.offset += n
        return data[:n]


def log_path(run_dir: Path, run_tag: str, part: str) -> Path:
    """Where a phase's log goes in the run folder (`part`: the writer's, so workers keep apart)."""
    return run_dir / "exchanges" / f"{run_tag}-{part.lstrip('.')}.lgx"

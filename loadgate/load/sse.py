"""Incremental Server-Sent Events framer (WHATWG HTML "event stream" interpretation).

Fed the raw reads of one response, each with the `perf_counter_ns()` stamp taken when the read
returned, it yields one `SSEEvent` per dispatched event. An event's time is the stamp of the read
that carried the blank line dispatching it, i.e. the moment the client could first act on it.

Rules implemented (spec section 9.2.6):
- lines end in CRLF, LF or CR; a CR at the end of one read followed by LF at the start of the
  next is one line ending, not two;
- a line starting with ':' is a comment (keep-alive) and is ignored;
- `field: value` strips one space after the colon; a line without a colon is a field with an
  empty value; fields other than `data` and `event` (`id`, `retry`, unknown) are ignored;
- several `data` lines are joined with '\\n'; a blank line dispatches the event if it has data;
- a final event not terminated by a blank line is discarded (the spec's rule) but counted in
  `SSEFramer.truncated` so callers can flag a cut stream;
- a leading UTF-8 BOM is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEEvent:
    t_ns: int
    data: bytes
    event: str = "message"


class SSEFramer:
    """Stateful framer: call `feed(read_bytes, t_ns)` per read, in order; `events` accumulates."""

    __slots__ = ("events", "_partial", "_data", "_event", "_skip_lf", "_started", "truncated")

    def __init__(self) -> None:
        self.events: list[SSEEvent] = []
        self._partial = b""  # an incomplete line carried to the next read
        self._data: list[bytes] = []
        self._event = ""
        self._skip_lf = False  # previous read ended with CR: a leading LF belongs to it
        self._started = False
        self.truncated = False

    def feed(self, chunk: bytes, t_ns: int) -> None:
        if not chunk:
            return
        if not self._started:
            self._started = True
            if chunk.startswith(b"\xef\xbb\xbf"):
                chunk = chunk[3:]
        if self._skip_lf:
            self._skip_lf = False
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]
        if chunk.endswith(b"\r"):
            self._skip_lf = True
        buf = self._partial + chunk
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._partial = lines.pop()  # text after the last line ending (maybe b"")
        for line in lines:
            self._line(line, t_ns)

    def _line(self, line: bytes, t_ns: int) -> None:
        if not line:
            if self._data:
                self.events.append(SSEEvent(t_ns, b"\n".join(self._data), self._event or "message"))
            self._data = []
            self._event = ""
            return
        if line[:1] == b":":
            return
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")

    def close(self) -> list[SSEEvent]:
        """End of stream: flag an unterminated final event; return all events."""
        if self._partial or self._data:
            self.truncated = True
        return self.events


def frame_sse(reads: list[tuple[int, bytes]]) -> tuple[list[SSEEvent], bool]:
    """Frame a whole response given as (t_ns, bytes) reads; returns (events, truncated)."""
    f = SSEFramer()
    for t, b in reads:
        f.feed(b, t)
    return f.close(), f.truncated

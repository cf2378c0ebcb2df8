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

Bounded whatever the server sends: an event (its data lines, or one line without an end) longer
than `max_event_bytes` raises `EventTooLarge`, and a line split over many reads is joined once,
when it ends, not at every read.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_EVENT = 8 * 1024 * 1024


class EventTooLarge(ValueError):
    """One event (or one line) of the stream is longer than the limit."""


@dataclass(frozen=True, slots=True)
class SSEEvent:
    t_ns: int
    data: bytes
    event: str = "message"


class SSEFramer:
    """Stateful framer: call `feed(read_bytes, t_ns)` per read, in order; `events` accumulates."""

    __slots__ = ("events", "_partial", "_partial_len", "_data", "_data_len", "_event", "_skip_lf", "_started",
                 "truncated", "max_event")

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT) -> None:
        self.events: list[SSEEvent] = []
        self._partial: list[bytes] = []  # an incomplete line carried to the next read(s)
        self._partial_len = 0
        self._data: list[bytes] = []
        self._data_len = 0
        self.max_event = max_event_bytes
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
        if b"\r" in chunk:  # (a CR ending the previous read already ended its line: see _skip_lf)
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if (not self._partial and not self._data and not self._event and chunk.startswith(b"data:")
                and chunk.find(b"\n") == len(chunk) - 2 and chunk.endswith(b"\n\n")):
            # the usual read of a stream, one whole `data:` event: what `_line` makes of its two lines
            value = chunk[6:-2] if chunk[5:6] == b" " else chunk[5:-2]
            if len(value) + 1 > self.max_event:
                raise EventTooLarge(f"an SSE event longer than {self.max_event:,} bytes (target.limits.max_event_mb)")
            self.events.append(SSEEvent(t_ns, value, "message"))
            return
        if b"\n" not in chunk:  # no line ends here: keep the piece, join it once the line ends
            self._partial.append(chunk)
            self._partial_len += len(chunk)
            self._check()
            return
        lines = chunk.split(b"\n")
        if self._partial:
            lines[0] = b"".join(self._partial) + lines[0]
        rest = lines.pop()  # text after the last line ending (maybe b"")
        self._partial, self._partial_len = ([rest], len(rest)) if rest else ([], 0)
        for line in lines:
            self._line(line, t_ns)
        self._check()

    def _check(self) -> None:
        if self._data_len + self._partial_len > self.max_event:
            raise EventTooLarge(f"an SSE event longer than {self.max_event:,} bytes (target.limits.max_event_mb)")

    def _line(self, line: bytes, t_ns: int) -> None:
        if not line:
            if self._data:
                self.events.append(SSEEvent(t_ns, b"\n".join(self._data), self._event or "message"))
            self._data = []
            self._data_len = 0
            self._event = ""
            return
        if line[:1] == b":":
            return
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
            self._data_len += len(value) + 1
            self._check()
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")

    def close(self) -> list[SSEEvent]:
        """End of stream: flag an unterminated final event; return all events."""
        if self._partial or self._data:
            self.truncated = True
        return self.events


def frame_sse(reads: list[tuple[int, bytes]], max_event_bytes: int = DEFAULT_MAX_EVENT,
              cut: set[int] | None = None) -> tuple[list[SSEEvent], bool]:
    """Frame a whole response given as (t_ns, bytes) reads; returns (events, truncated).
    EventTooLarge for an event over `max_event_bytes`. `cut` receives the stamps of reads that
    ended inside an event (the next event's first bytes came with them)."""
    f = SSEFramer(max_event_bytes)
    for k, (t, b) in enumerate(reads):
        f.feed(b, t)
        if cut is not None and (f._partial or f._data) and (k + 1 == len(reads) or reads[k + 1][0] != t):
            cut.add(t)
    return f.close(), f.truncated

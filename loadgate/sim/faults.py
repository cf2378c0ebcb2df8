"""Seeded fault injection: which faults a request gets, drawn from (seed, request index).

For request index i and each fault kind f, `u = unit(hash(seed, i, f))`; the fault applies when
`u < rate`. Precedence and scope:
  * HTTP errors (`http_429`, then `http_500`, then `http_503`; the first drawn wins): the request
    is answered at once with that status and a vLLM-style body `{"error": {"message", "type",
    "param", "code"}}`; no other fault applies and nothing is generated.
  * `slow_first_byte`: the request waits `slow_first_byte_s` before it is queued in the engine,
    so the headers and first chunk come that much later. Combines with the stream faults.
  * Stream faults, at most one (the first drawn of `disconnect`, `error_event`, `malformed`,
    `stall`). Each fires once `at_chunk` SSE data events (1, 2 or 3, also drawn) have been
    written, before the next event; a stream with fewer events fires it before `data: [DONE]`.
      disconnect   the connection is closed (no further bytes, no terminating chunk)
      error_event  `data: {"error": {...,"code": 500}}` then `data: [DONE]`, as vLLM does when
                   generation fails after the 200 (the request is aborted in the engine)
      malformed    the line `data: {"id": broken` (an invalid JSON event), then the stream continues
      stall        the stream pauses `stall_s` seconds (the engine keeps generating; what piled up
                   is sent merged into the next chunk)
    Non-stream requests draw only `disconnect` (closed before any response byte) and `stall`
    (the body is delayed by `stall_s`).
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgate.config.simconfig import FaultConfig
from loadgate.sim.hashing import hash_ints, unit

FAULT_NAMES = ("http_429", "http_500", "http_503", "slow_first_byte", "disconnect", "error_event",
               "malformed", "stall")
_HTTP = (("http_429", 429), ("http_500", 500), ("http_503", 503))
_STREAM_ONLY = ("error_event", "malformed")


@dataclass(frozen=True)
class FaultPlan:
    """The faults drawn for one request (see the module docstring)."""

    http_status: int | None = None
    slow_first_byte_s: float = 0.0
    stream_fault: str | None = None
    at_chunk: int = 1
    stall_s: float = 0.0

    @property
    def names(self) -> list[str]:
        """The injected faults, for the ground-truth log."""
        out: list[str] = []
        if self.http_status is not None:
            out.append(f"http_{self.http_status}")
        if self.slow_first_byte_s > 0:
            out.append("slow_first_byte")
        if self.stream_fault:
            out.append(self.stream_fault)
        return out


def plan_faults(cfg: FaultConfig, seed: int, index: int, stream: bool) -> FaultPlan:
    """Draw the faults of request `index` (0-based server counter): none before `after_requests`."""
    if index < cfg.after_requests:
        return FaultPlan()

    def drawn(name: str) -> bool:
        rate = getattr(cfg, name)
        return bool(rate > 0 and unit(hash_ints(0xFA17, seed, index, FAULT_NAMES.index(name))) < rate)

    for name, status in _HTTP:
        if drawn(name):
            return FaultPlan(http_status=status)
    slow = cfg.slow_first_byte_s if drawn("slow_first_byte") else 0.0
    fault = None
    for name in ("disconnect", "error_event", "malformed", "stall"):
        if (stream or name not in _STREAM_ONLY) and drawn(name):
            fault = name
            break
    at_chunk = 1 + hash_ints(0xFA18, seed, index) % 3
    return FaultPlan(None, slow, fault, at_chunk, cfg.stall_s if fault == "stall" else 0.0)

"""The run's stop flag: set by a signal or the circuit breaker (`load.abort`); the executors look at
it before each new request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class StopFlag:
    """Set when the run must stop starting requests (a signal); the executors look at it before
    each new request. Worker processes get one backed by shared memory (`multiprocessing.Value`)."""

    def __init__(self, shared: Any = None) -> None:
        self._shared = shared
        self._set = False
        self.why: str | None = None  # set by `abort`: the circuit breaker's words
        self.hook: Callable[[str], None] | None = None  # the run's own (`runs.Interruption.on_abort`)

    def set(self) -> None:
        self._set = True
        if self._shared is not None:
            self._shared.value = 1

    def abort(self, why: str, now: bool = True) -> None:
        """The circuit breaker tripped (`load.abort`): no new request; `now`: the run's hook cuts the
        requests in flight after its grace (else they finish, as after a phase that already ended)."""
        if self.why is None:
            self.why = why
        self.set()
        if now and self.hook is not None:
            self.hook(why)

    def is_set(self) -> bool:
        # the flag's byte is read without its lock (one byte is read whole): taking a lock shared
        # with other processes could sleep, which the load loop would take for an idle poll
        return self._set or (self._shared is not None and bool(self._shared.get_obj().value))


NEVER = StopFlag()

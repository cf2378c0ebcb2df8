"""The scraper process: every `target.metrics_interval_s` it scrapes each source (the engine's
`/metrics`, and each of `target.extra_metrics_urls`) and writes the whole of every scrape to the run
folder's series file (`loadgate.core.series`), off the measuring process: no thread may run there
during a phase (`loadgate.load.turns`), and the scraping's work (HTTP, parsing, compressing) is
not the measuring loop's to do.

The parent talks to it over one pipe (no queue: a queue starts a feeder thread in the parent):
("begin", LEVEL) and ("end", LEVEL) around a level's measured window, answered at "end" with that
window's `ScrapeReport` (the gauges' min/mean/max from every scrape of the engine's source, the
process's own CPU seconds over the window, its warnings); ("stop",) ends it, answered with the
file's size and the process's CPU seconds since it started.

A source is anything with a `name`, a `url` (what the header records) and `sample(session)`
returning a `Snapshot` or raising `SourceFailure`: `PrometheusSource` here; another sampler (GPU
telemetry read from NVML, say) joins the series by being one more source in the list given to
`Scraper`, its values under names of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import resource
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from time import perf_counter_ns
from typing import Any, Protocol

import aiohttp

from loadgate.core.series import SERIES_FILE, SeriesWriter
from loadgate.engine.adapters import gauge_names
from loadgate.engine.adapters.base import GAUGE_KEYS
from loadgate.net.http import TlsFiles, make_session
from loadgate.net.scrape import fetch_text
from loadgate.snapshot import Snapshot, first_name, parse_metrics

ENGINE_SOURCE = "server"
ANSWER_TIMEOUT_S = 15.0  # the parent waits this long for an answer (a scrape in flight does not delay it)


class SourceFailure(Exception):
    """A scrape that gave nothing: `why` is `unreachable` or `not_prometheus`."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


WHY_WORDS = {"unreachable": "did not answer (or answered with an error status)",
             "not_prometheus": "did not answer with Prometheus text"}


class Source(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def url(self) -> str: ...

    async def sample(self, session: aiohttp.ClientSession) -> Snapshot: ...


@dataclass(frozen=True)
class PrometheusSource:
    name: str
    url: str
    timeout_s: float = 5.0

    async def sample(self, session: aiohttp.ClientSession) -> Snapshot:
        text = await fetch_text(session, self.url, self.timeout_s)
        if text is None:
            raise SourceFailure("unreachable")
        try:
            snap = parse_metrics(text)
        except ValueError:
            raise SourceFailure("not_prometheus") from None
        if not snap.values:  # an empty page, or text with no sample line (an HTML page parses as none)
            raise SourceFailure("not_prometheus")
        return snap


def sources_for(metrics_url: str, extra_urls: Sequence[str]) -> list[Source]:
    """The engine's metrics (`server`) and each extra URL (`extra-1`, `extra-2`, …)."""
    return [PrometheusSource(ENGINE_SOURCE, metrics_url),
            *(PrometheusSource(f"extra-{k}", u) for k, u in enumerate(extra_urls, 1))]


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@dataclass
class _Window:
    """One level's measured window: the scrapes that began inside it and ended before it did."""

    cpu0: float
    begin_ns: int = 0
    gauges: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in GAUGE_KEYS})
    scrapes: int = 0
    failures: dict[tuple[str, str], int] = field(default_factory=dict)


def _gauges(snap: Snapshot, into: dict[str, list[float]]) -> None:
    for key in GAUGE_KEYS:
        name = first_name(snap, gauge_names(key))
        if name is not None and (v := snap.total(name)) is not None:
            into[key].append(v)


@dataclass(frozen=True)
class EngineAccess:
    """What the engine's source is scraped with: the session's headers (secrets expanded: the
    spawned process receives them as the worker processes do) and TLS. Other sources get neither."""

    headers: dict[str, str] = field(default_factory=dict)
    tls: TlsFiles = TlsFiles()


class _Child:
    def __init__(self, conn: Connection, sources: list[Source], path: Path, interval_s: float,
                 max_bytes: int, access: EngineAccess) -> None:
        self.conn, self.sources, self.interval_s, self.access = conn, sources, interval_s, access
        self.writer = SeriesWriter(path, {s.name: s.url for s in sources}, interval_s, max_bytes)
        self.window: _Window | None = None
        self.level = ""
        self.done = asyncio.Event()
        self.wake = asyncio.Event()  # scrape now: a level's window began
        self.cpu0 = _cpu_s()
        self.cap_told = False  # the cap's warning goes to the first window that ends after it

    def _message(self) -> None:
        try:
            msg = self.conn.recv()
        except EOFError:  # the parent is gone
            self.done.set()
            return
        now = perf_counter_ns()
        if msg[0] == "begin":
            self.level = str(msg[1])
            self.window = _Window(_cpu_s(), now)
            self.writer.mark(now, "begin", self.level)
            self.wake.set()  # a scrape at the window's start, so a level shorter than the interval has one
        elif msg[0] == "end":
            self.writer.mark(now, "end", str(msg[1]))
            self.conn.send(("level", self._report()))
            self.window = None
        else:
            self.done.set()

    def _report(self) -> dict[str, Any]:
        w = self.window or _Window(_cpu_s())
        warnings = [f"metrics {kind}: {url} {WHY_WORDS[kind]} in {n} scrape(s) of this level"
                    for (url, kind), n in w.failures.items()]
        if self.writer.capped is not None and not self.cap_told:
            self.cap_told = True
            warnings.append(f"metrics series capped: {SERIES_FILE} reached target.metrics_series_max_mb "
                            f"({self.writer.capped / 2**20:.3g} MiB); the series was not kept from then on")
        return {"scrapes": w.scrapes, "cpu_s": round(_cpu_s() - w.cpu0, 4), "interval_s": self.interval_s,
                "gauges": {k: ({"samples": len(v), "min": min(v), "mean": sum(v) / len(v), "max": max(v)}
                               if v else None) for k, v in w.gauges.items()},
                "warnings": warnings}

    async def _one(self, session: aiohttp.ClientSession, src: Source) -> None:
        t = perf_counter_ns()
        try:
            snap = await src.sample(session)
        except SourceFailure as e:
            self.writer.failure(t, src.name, e.why)
            if self.window is not None and t >= self.window.begin_ns:
                key = (src.url, e.why)
                self.window.failures[key] = self.window.failures.get(key, 0) + 1
            return
        self.writer.scrape(t, src.name, snap)
        if self.window is not None and t >= self.window.begin_ns:
            self.window.scrapes += 1
            if src.name == ENGINE_SOURCE:
                _gauges(snap, self.window.gauges)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_reader(self.conn.fileno(), self._message)
        engine_url = next((s.url for s in self.sources if s.name == ENGINE_SOURCE), "")
        tls = self.access.tls.context() if engine_url.startswith("https:") else None
        async with make_session(self.access.headers, tls) as engine, make_session() as plain:
            self.conn.send(("ready", True))
            while not self.done.is_set():
                start = loop.time()
                self.wake.clear()  # (a window that begins during this round's scrapes gets the next at once)
                await asyncio.gather(*(self._one(engine if s.name == ENGINE_SOURCE else plain, s)
                                       for s in self.sources))
                waits = [asyncio.ensure_future(e.wait()) for e in (self.done, self.wake)]
                _, pending = await asyncio.wait(waits, timeout=max(0.0, self.interval_s - (loop.time() - start)),
                                                return_when=asyncio.FIRST_COMPLETED)
                for w in pending:
                    w.cancel()
        loop.remove_reader(self.conn.fileno())
        size = self.writer.close()
        self.conn.send(("done", {"bytes": size, "capped": self.writer.capped, "cpu_s": round(_cpu_s() - self.cpu0, 4)}))


def _main(conn: Connection, sources: list[Source], path: Path, interval_s: float, max_bytes: int,
          access: EngineAccess) -> None:
    # the parent handles signals and stops this process (or kills it): a Ctrl-C reaching the whole
    # process group must not end the series before the parent's last window does
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        asyncio.run(_Child(conn, sources, path, interval_s, max_bytes, access).run())
    except Exception as e:  # told to the parent, which warns (this process prints nothing)
        with contextlib.suppress(OSError):
            conn.send(("failed", f"{type(e).__name__}: {e}"))


class Scraper:
    """The scraper process of one run (see the module docstring), started at construction."""

    def __init__(self, sources: list[Source], run_dir: Path, interval_s: float, max_mb: float,
                 access: EngineAccess | None = None) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.path = run_dir / SERIES_FILE
        self.proc = ctx.Process(target=_main, args=(child, sources, self.path, interval_s, int(max_mb * 2**20),
                                                    access or EngineAccess()),
                                daemon=True, name="loadgate-scraper")
        self.failed: str | None = None  # why the process ended early, as it said
        self.proc.start()
        child.close()
        # it is running before the first window begins (a spawn on a busy machine takes seconds); one
        # that never says so gives each level the warning of `end`
        self.ready = self._answer(ANSWER_TIMEOUT_S * 4) is True

    def _answer(self, timeout_s: float = ANSWER_TIMEOUT_S) -> Any:
        """The process's next answer; None when it gave none (its failure is kept in `failed`)."""
        try:
            if not self.conn.poll(timeout_s if self.proc.is_alive() else 0):
                return None
            kind, got = self.conn.recv()
        except (EOFError, OSError):  # it ended (with what was sent to it unread: a reset)
            return None
        if kind == "failed":
            self.failed = str(got)
            return None
        return got

    def _send(self, msg: tuple[Any, ...]) -> None:
        if self.proc.is_alive():
            with contextlib.suppress(OSError):  # it ended meanwhile: the answer's absence says so
                self.conn.send(msg)

    def begin(self, level: int | float) -> None:
        self._send(("begin", level))

    def end(self, level: int | float) -> dict[str, Any]:
        """The window's report; one warning and nothing else when the process did not answer."""
        self._send(("end", level))
        got = self._answer()
        if got is None:
            why = f" ({self.failed})" if self.failed else ""
            return {"scrapes": 0, "cpu_s": None, "interval_s": None, "gauges": None,
                    "warnings": [f"metrics scraper: its process did not answer{why}; no series or gauges for this level"]}
        return dict(got)

    def __enter__(self) -> Scraper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> dict[str, Any] | None:
        """End the process; the file's size and its CPU seconds (None when it did not answer)."""
        self._send(("stop",))
        got = self._answer()
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()
        return None if got is None else dict(got)

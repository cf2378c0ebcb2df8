"""Prometheus `/metrics` over the network: scrape a `loadgate.snapshot.Snapshot`, and sample the
gauges (KV-cache usage, running and waiting requests: min/mean/max) during the run. The snapshot
format itself, its parsing and deltas, are `loadgate.snapshot` (pure: the analysis reads them
without importing the network)."""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from loadgate.engine.adapters import gauge_names
from loadgate.engine.adapters.base import GAUGE_KEYS, GaugeKey
from loadgate.errors import EngineError
from loadgate.net.http import MAX_JSON_BYTES, read_bounded
from loadgate.snapshot import Snapshot, first_name, parse_metrics


def _inflate(body: bytes) -> bytes:
    """A gzip or deflate body, decompressed to at most `MAX_JSON_BYTES` (a bomb is refused)."""
    d = zlib.decompressobj(wbits=47)  # a gzip or a zlib header, whichever it has
    out = d.decompress(body, MAX_JSON_BYTES + 1)
    if len(out) > MAX_JSON_BYTES:
        raise ValueError(f"/metrics inflates to more than {MAX_JSON_BYTES // 2**20} MiB")
    return out


async def fetch_text(session: aiohttp.ClientSession, url: str, timeout_s: float = 10.0) -> str | None:
    """The text of `url` (a /metrics page); None when it is not there or fails.

    Asks for the plain text (`Accept-Encoding: identity`): the sessions do not decompress (the
    hot path keeps raw bytes) and SGLang gzips /metrics for any client that accepts gzip, so
    without it every counter would silently read as absent. A server that compresses anyway is
    decompressed here; an encoding that is neither is treated as no answer."""
    try:
        async with session.get(url, headers={"Accept-Encoding": "identity"},
                               timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            if r.status != 200:
                return None
            body = await read_bounded(r, url)
            encoding = r.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding in ("gzip", "x-gzip", "deflate"):
                body = _inflate(body)
            elif encoding != "identity":
                return None
            try:
                return body.decode(r.charset or "utf-8", "replace")
            except LookupError:  # a charset Python does not know: Prometheus text is UTF-8
                return body.decode("utf-8", "replace")
    except (aiohttp.ClientError, TimeoutError, ValueError, zlib.error, EngineError):
        return None


async def scrape(session: aiohttp.ClientSession, url: str, timeout_s: float = 10.0) -> Snapshot | None:
    """Fetch (`fetch_text`) and parse `url`; None when the server has no metrics endpoint or it fails."""
    text = await fetch_text(session, url, timeout_s)
    if text is None:
        return None
    try:
        return parse_metrics(text)
    except ValueError:
        return None


@dataclass
class GaugeSampler:
    """Polls `/metrics` every `interval_s` while running and keeps the gauges (`GAUGE_KEYS`) of every
    registered engine family.

    While the load runs it only fetches the text and keeps the lines of those gauges (string
    prefix tests); parsing waits until `stop()`, so the measuring loop is not blocked by the
    Prometheus parser."""

    session: aiohttp.ClientSession
    url: str
    interval_s: float = 0.5
    texts: list[str] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    def names(self, key: GaugeKey | None = None) -> tuple[str, ...]:
        keys = GAUGE_KEYS if key is None else (key,)
        return tuple(n for k in keys for n in gauge_names(k))

    async def _loop(self) -> None:
        wanted = self.names()
        while True:
            text = await fetch_text(self.session, self.url, timeout_s=5)
            if text is not None:
                self.texts.append("\n".join(ln for ln in text.splitlines() if ln.startswith(wanted)))
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> dict[str, Any]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        samples: dict[str, list[float]] = {k: [] for k in GAUGE_KEYS}
        for text in self.texts:
            try:
                snap = parse_metrics(text + "\n")
            except ValueError:
                continue
            for key in GAUGE_KEYS:
                name = first_name(snap, self.names(key))
                if name is not None and (v := snap.total(name)) is not None:
                    samples[key].append(v)
        return {k: ({"samples": len(v), "min": min(v), "mean": sum(v) / len(v), "max": max(v)} if v else None)
                for k, v in samples.items()}

"""Prometheus `/metrics` over the network: fetch its text, scrape a `loadgate.snapshot.Snapshot`.
The snapshot format itself, its parsing and deltas, are `loadgate.snapshot` (pure: the analysis
reads them without importing the network); the series kept during a run, and the gauges sampled
from it, are the scraper process's (`loadgate.net.scraper`)."""

from __future__ import annotations

import zlib

import aiohttp

from loadgate.errors import EngineError
from loadgate.net.http import MAX_JSON_BYTES, read_bounded
from loadgate.snapshot import Snapshot, parse_metrics


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

"""The server's counters over several replicas (`target.endpoints` without a router): each
replica's `/metrics` scraped, and the samples summed by name and labels.

Summing is what the figures need: a counter's delta over the window summed over the replicas is
the fleet's delta (requests, tokens, prefix-cache hits, speculative steps), so the contamination
check (the server's successful requests against the client's) still catches traffic the client
did not send on any replica, though not which replica it reached. A replica that does not answer
makes the whole snapshot None, as one engine's missing metrics do: a partial sum would read as
traffic that was never counted.
"""

from __future__ import annotations

from collections.abc import Sequence

import aiohttp

from loadgate.net.scrape import scrape
from loadgate.snapshot import LabelKey, Snapshot


def summed(snaps: Sequence[Snapshot]) -> Snapshot:
    """One snapshot whose every sample is the sum of that sample over `snaps`."""
    out: dict[tuple[str, LabelKey], float] = {}
    for s in snaps:
        for k, v in s.values.items():
            out[k] = out.get(k, 0.0) + v
    return Snapshot(out)


async def scrape_all(session: aiohttp.ClientSession, urls: Sequence[str]) -> Snapshot | None:
    """`scrape` of one URL, or of each replica's, summed (None when any of them gives none)."""
    snaps = [await scrape(session, u) for u in urls]
    if any(s is None for s in snaps):
        return None
    return snaps[0] if len(snaps) == 1 else summed([s for s in snaps if s is not None])

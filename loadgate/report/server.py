"""The server's own view of a level, as text: its latency histograms' percentiles beside the
client's figures (`analysis.histograms`), and what the scraper process reports of the window
(`net.scraper`: its scrapes, its own CPU, its warnings)."""

from __future__ import annotations

from typing import Any

from tabulate import tabulate

from loadgate.analysis.summary import LevelSummary

COLUMNS = ("p50", "p90", "p99")
TITLES = {"ttft": "ttft", "itl": "itl", "e2e": "e2e", "queue": "queue (server only)"}


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.2f}"


def _server_cell(p: dict[str, Any] | None) -> str:
    if p is None:
        return "n/a"
    hi = "+inf" if p["hi_ms"] is None else f"{p['hi_ms']:g}"
    return f"{_ms(p['ms'])} [{p['lo_ms']:g}, {hi}]"


def latency_table(s: LevelSummary) -> str:
    """Per histogram the engine serves: the client's p50/p90/p99 (ms) and the server's, each with
    its bucket [lo, hi] in ms. Empty without histograms."""
    if not s.server_latency:
        return ""
    rows = []
    for key, h in s.server_latency.items():
        client = s.metrics.get(key)
        if client is not None:
            rows.append([TITLES.get(key, key), "client", client["count"], *(_ms(client[c]) for c in COLUMNS)])
        rows.append([TITLES.get(key, key), f"server ({h['histogram']})", f"{h['count']:g}",
                     *(_server_cell(h[c]) for c in COLUMNS)])
    return ("server-side latency (the engine's histograms over the window, interpolated inside the bucket "
            "[lo, hi] ms that holds each percentile):\n"
            + tabulate(rows, headers=["metric", "measured by", "n", *COLUMNS], tablefmt="simple",
                       disable_numparse=True, colalign=("left", "left", "right", "right", "right", "right")))


def scrape_lines(s: LevelSummary) -> list[str]:
    sc = s.server_scrape
    if not sc:
        return []
    out = []
    if sc.get("cpu_s") is not None:
        out.append(f"metrics scraper: {sc['scrapes']} scrapes every {sc['interval_s']:g} s in the window, "
                   f"{sc['cpu_s']:.3f} s of CPU in its own process (series: server-metrics.jsonl.gz)")
    return out + [f"warning: {w}" for w in sc.get("warnings") or ()]


def server_lines(s: LevelSummary) -> list[str]:
    table = latency_table(s)
    return ([table] if table else []) + scrape_lines(s)

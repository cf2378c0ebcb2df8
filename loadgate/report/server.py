"""The server's own view of a level, for people: the gauges the scraper process sampled (with its
scrapes and its own CPU), its warnings, and the engine's latency histograms' percentiles
(`analysis.histograms`) beside the client's figures: two lines of text for the console report,
a table for the HTML one."""

from __future__ import annotations

from html import escape
from typing import Any

from loadgate.analysis.summary import LevelSummary

COLUMNS = ("p50", "p90", "p99")


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.2f}"


def bucketed(p: dict[str, Any] | None) -> str:
    """A server percentile and its bucket: "12.86 [10, 20]" (ms; "+inf" for the open bucket)."""
    if p is None:
        return "n/a"
    hi = "+inf" if p["hi_ms"] is None else f"{p['hi_ms']:g}"
    return f"{_ms(p['ms'])} [{p['lo_ms']:g}, {hi}]"


def gauge_line(s: LevelSummary, parts: list[str]) -> str | None:
    """The gauges' min/mean/max, said with the scrapes they came from and the scraper's CPU."""
    sc = s.server_scrape
    how = ""
    if sc and sc.get("cpu_s") is not None:
        how = f"{sc['scrapes']} scrapes {sc['interval_s']:g} s apart; the scraper's own CPU {sc['cpu_s']:.3f} s"
    if parts:
        return f"server (min/mean/max{' of ' + how if how else ''}): " + " · ".join(parts)
    return f"server metrics: {how}" if how else None


def latency_line(s: LevelSummary) -> str | None:
    """The engine's percentiles of each histogram it serves, in ms, each with its bucket."""
    if not s.server_latency:
        return None
    parts = [f"{key} " + ", ".join(f"{c} {bucketed(h[c])}" for c in COLUMNS) for key, h in s.server_latency.items()]
    return "server's own latency (its histograms, ms, each percentile in its bucket [lo, hi]): " + " · ".join(parts)


def server_lines(s: LevelSummary, gauge_parts: list[str]) -> list[str]:
    lines = [x for x in (gauge_line(s, gauge_parts), latency_line(s)) if x]
    return lines + [f"warning: {w}" for w in (s.server_scrape or {}).get("warnings") or ()]


def latency_table_html(s: LevelSummary) -> str:
    """Per histogram: the client's p50/p90/p99 (ms) in one row, the server's with their buckets in
    the next. Empty without histograms."""
    if not s.server_latency:
        return ""
    rows = []
    for key, h in s.server_latency.items():
        client = s.metrics.get(key)
        if client is not None:
            rows.append(f"<tr><td>{escape(key)}</td><td>client</td><td class=\"num\">{client['count']}</td>"
                        + "".join(f'<td class="num">{_ms(client[c])}</td>' for c in COLUMNS) + "</tr>")
        rows.append(f"<tr><td>{escape(key)}</td><td>server ({escape(h['histogram'])})</td>"
                    f"<td class=\"num\">{h['count']:g}</td>"
                    + "".join(f'<td class="num">{escape(bucketed(h[c]))}</td>' for c in COLUMNS) + "</tr>")
    head = "".join(f"<th>{c}</th>" for c in ("metric", "measured by", "n", *COLUMNS))
    return ("<h4>Server-side latency (ms; the server's interpolated in the bucket [lo, hi] that holds it)</h4>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")

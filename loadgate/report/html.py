"""Self-contained HTML reports: every plot embedded as a base64 PNG data URI, the summary tables
rendered as HTML tables, no external resources (no CDN, no web fonts, no scripts).

    write_html(run_dir)                                  -> run_dir/report.html (+ run_dir/plots/*.png)
    write_comparison_html({"baseline": a, "candidate": b}, out)
                                                         -> out (+ <out stem>-plots/*.png next to it)
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from loadgate.analysis.capacity import SearchSection
from loadgate.analysis.summary import GROUP_FIELDS, LevelSummary, Summary, build_summary
from loadgate.core.figures import ADJUSTED, figure, table_rows
from loadgate.core.series import SERIES_FILE, read_series
from loadgate.engine.adapters import family_for
from loadgate.jsonutil import load_json
from loadgate.records import Record, read_records
from loadgate.report import capacity, plots, timeline
from loadgate.report.search_plot import search_plot
from loadgate.report.server import latency_table_html, server_lines
from loadgate.report.table import conversation_lines, fmt, trace_line

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 1.5em auto;
       max-width: 1700px; padding: 0 1em; color: #1b1b1b; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
h3 { font-size: 1.05em; margin: 1em 0 0.3em; }
.meta { color: #555; margin: 0 0 1em; }
table { border-collapse: collapse; margin: 0.4em 0 0.8em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
th { background: #f1f3f5; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.cols { display: flex; flex-wrap: wrap; gap: 2em; align-items: flex-start; }
.bad { color: #b00020; font-weight: 600; } .good { color: #1b7a2f; font-weight: 600; }
figure { margin: 1em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #e3e3e3; }
figcaption { color: #555; font-size: 0.9em; }
"""
_CAPTIONS = {
    "latency_cdfs": "Empirical CDFs of time to first token, end-to-end latency and inter-token latency over "
                    "successful requests; circles mark p50, triangles p99.",
    "itl_by_position": "Inter-token latency against output token position: median (solid) and p90 (dashed) "
                       "per bucket of positions.",
    "tokens_per_chunk": "Tokens carried by each content chunk, as a fraction of the chunks (speculative "
                        "decoding or batching of the stream puts several tokens in one chunk).",
    "sweep": "Output token throughput and p99 latencies against the load level.",
    "slices": "Each level's figures by time slice (report.slice_s): output tokens per second by when they "
              "arrived, and p50 (solid) and p99 (dashed) of the requests that started in the slice; a hollow "
              "point is a partial last slice.",
    "capacity_search": "The capacity search: each threshold's figure on every probe against its load, with its "
                       "95 % confidence interval (an end the samples cannot bound left off) and the limit "
                       "(dashed); green circles passed every threshold, red crosses failed one; the dotted "
                       "line is the answer.",
    "server_timeline": "The engine's own metrics over the run (scraped every target.metrics_interval_s into "
                       "server-metrics.jsonl.gz): queue depth, running requests, KV-cache use, preemptions and "
                       "prefix-cache hits per second, beside the output tokens per second the client received; "
                       "the levels' measured windows shaded.",
}


def level_table_html(s: LevelSummary) -> str:
    """One level's metrics as an HTML table: metric, unit, n, p50, p90, p99, mean."""
    rows = []
    for name in table_rows(s.metrics):
        m = s.metrics.get(name)
        if m is None:
            continue
        base = name.removesuffix(ADJUSTED)
        label = base + (" (errors as +inf)" if name.endswith(ADJUSTED) else "")
        cells = [m.get("count"), *(m.get(c) for c in ("p50", "p90", "p99", "mean"))]
        rows.append(f"<tr><td>{escape(label)}</td><td>{escape(figure(base).unit)}</td>"
                    + "".join(f'<td class="num">{fmt(v)}</td>' for v in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("metric", "unit", "n", "p50", "p90", "p99", "mean"))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def group_table_html(s: LevelSummary, field: str = "category") -> str:
    """The level's figures by `field`, as the console's `group_table`; "" without groups."""
    g = (s.groups or {}).get(field)
    if not g:
        return ""
    head = "".join(f"<th>{escape(h)}</th>" for h in (field, "n", "failed", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms",
                                                     "ITL p99 ms", "tok/s of window", "acceptance length"))
    rows = []
    for value, f in g["by"].items():
        m, acc = f["metrics"], (f["acceptance"]["per_request"] or {}).get("acceptance_length")
        ttft, itl = m.get("ttft") or {}, m.get("itl") or {}  # none in an unstreamed run
        cells = [f["requests"], f["failed"], fmt(ttft.get("p50")), fmt(ttft.get("p99")), fmt(itl.get("p50")),
                 fmt(itl.get("p99")), fmt(f["throughput"]["output_token_throughput"], 1), fmt(acc, 3)]
        rows.append(f"<tr><td>{escape(value)}</td>" + "".join(f'<td class="num">{c}</td>' for c in cells) + "</tr>")
    au = g.get("acceptance_adds_up")
    note = ""
    if au:
        verb = "add up" if au["agree"] else '<span class="bad">do NOT add up</span>'
        note = (f"<p>The {escape(field)} acceptance figures {verb} to the level's /metrics counters (relative "
                f"difference {au['relative_difference']:.2%}).</p>")
    return (f"<h4>By {escape(field)}</h4><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
            + note)


def _level_facts(s: LevelSummary, trace: dict[str, Any] | None = None) -> str:
    """Requests, errors, throughput, goodput, acceptance and validity of one level, as a list (a
    timed trace's replay and prefix sharing first, with the server's hit rate)."""
    t = s.throughput
    errs = ", ".join(f"{k} {v}" for k, v in sorted(s.errors.items())) or "none"
    items = [f"{s.requests} requests, {s.succeeded} succeeded, {s.failed} failed "
             f"(errors: {escape(errs)})",
             f"output throughput {fmt(t.output_token_throughput, 1)} tok/s · input "
             f"{fmt(t.input_token_throughput, 1)} tok/s · requests "
             f"{fmt(t.request_throughput)} /s · window {fmt(t.window_s)} s"]
    g = s.goodput
    if g:
        slo = ", ".join(f"{k} ≤ {v:g}" for k, v in g.slo_ms.items())
        items.append(f"goodput {fmt(g.goodput_rps)} req/s ({g.fraction:.1%} of requests met "
                     f"{escape(slo)})" + ("" if g.good_output_tokens is None else
                                          f"; token goodput {fmt(g.token_goodput, 1)} tok/s"))
    pr = s.acceptance.per_request
    if pr and pr.get("acceptance_length") is not None:
        items.append(f"acceptance length {fmt(pr['acceptance_length'], 3)} ({escape(str(pr.get('source')))})")
    if trace:
        hits = (s.prefix_cache or {}).get("hit_rate")
        items.insert(0, escape(trace_line(trace)) + (f"; the server's prefix-cache hit rate {hits:.1%}"
                                                     if hits is not None else ""))
    items += [escape(line) for line in conversation_lines(s)]
    items += [escape(line) for line in server_lines(s, [])]
    for msg in s.invalid:
        items.append(f'<span class="bad">INVALID: {escape(msg)}</span>')
    return "<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"


def _exactness_html(path: Path) -> str:
    """Verdict counts and contract words of an exactness.json, or "" when there is none."""
    if not path.exists():
        return ""
    e = load_json(path)
    passed = e.get("passed")
    verdict = ('<span class="good">passed</span>' if passed else '<span class="bad">FAILED</span>'
               if passed is not None else "n/a")
    contract = e.get("contract") or {}
    rows = "".join(f'<tr><td>{escape(str(k))}</td><td class="num">{v}</td></tr>'
                   for k, v in sorted((e.get("verdicts") or {}).items()))
    reasons = "".join(f"<li>{escape(str(r))}</li>" for r in e.get("reasons") or [])
    return ("<h2>Exactness</h2>"
            f"<p>Exactness check {verdict}; contract: "
            f"{escape(str(contract.get('words') or contract.get('tier') or 'n/a'))}</p>"
            f"<table><thead><tr><th>verdict</th><th>sequences</th></tr></thead><tbody>{rows}</tbody></table>"
            + (f"<ul>{reasons}</ul>" if reasons else ""))


def _search_html(section: SearchSection) -> str:
    """The capacity search's answer and its probes' table (the console's cells: `report.capacity`)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in ("probe", section.over, "verdict", *capacity.heads(section)))
    body = "".join("<tr>" + "".join(f'<td class="num">{escape(c)}</td>' if k != 2 else f"<td>{escape(c)}</td>"
                                    for k, c in enumerate(row)) + "</tr>" for row in capacity.rows(section))
    return (f"<h2>Capacity</h2><p><b>{escape(capacity.answer_line(section))}</b></p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            f"<p class=\"meta\">{escape(capacity.interval_note(section))}</p>")


def _img(path: Path, name: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (f'<figure><img alt="{escape(name)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{escape(_CAPTIONS.get(name, ''))}</figcaption></figure>")


def _host(url: Any) -> str:
    """The engine's address without its scheme: the page links to nothing, not even the engine."""
    return "n/a" if not url else str(url).split("://", 1)[-1]


def _axis_label(load: str) -> str:
    return {"rate": "request rate (req/s)", "trace": "trace speed (×)"}.get(load, "concurrency")


def _level_label(load: str, level: str) -> str:
    return {"rate": f"rate {level}/s", "trace": f"trace ×{level}"}.get(load, f"concurrency {level}")


def _by_level(run_dir: Path, summary: Summary) -> dict[str, list[Record]]:
    groups: dict[str, list[Record]] = {lv: [] for lv in summary.levels}
    for r in read_records(run_dir / "records.jsonl"):
        groups.setdefault(str(r.level), []).append(r)
    return groups


def _make_plots(series: Mapping[str, Sequence[Record]],
                sweeps: Mapping[str, list[tuple[float, LevelSummary]]], slo: Mapping[str, Any] | None,
                x_label: str, plot_dir: Path, streamed: bool = True,
                timed: Mapping[str, Mapping[str, Any]] | None = None) -> list[tuple[str, Path]]:
    """Write every applicable plot into `plot_dir`; (name, path) in display order. Unstreamed runs
    (`streamed` false) have no chunks to time: the e2e CDF alone, no sweep of ttft and itl. `timed`:
    the levels' time slices by label, drawn when any has one."""
    made = []
    if streamed and any(len(p) > 1 for p in sweeps.values()):
        data: Any = next(iter(sweeps.values())) if len(sweeps) == 1 else sweeps
        made.append(("sweep", plots.sweep(data, plot_dir / "sweep.png", slo, x_label=x_label)))
    if not streamed:
        made.append(("latency_cdfs", plots.latency_cdfs(series, plot_dir / "latency_cdfs.png", metrics=("e2e",))))
    else:
        made.append(("latency_cdfs", plots.latency_cdfs(series, plot_dir / "latency_cdfs.png")))
        made.append(("itl_by_position", plots.itl_by_position(series, plot_dir / "itl_by_position.png")))
        made.append(("tokens_per_chunk", plots.tokens_per_chunk(series, plot_dir / "tokens_per_chunk.png")))
    if timed and any(sl["slices"] for sl in timed.values()):
        made.append(("slices", plots.slices(timed, plot_dir / "slices.png")))
    return made


def _timeline(run_dir: Path, meta: dict[str, Any], groups: Mapping[str, Sequence[Record]]) -> Path:
    s = read_series(run_dir / SERIES_FILE)
    last = next((snap for _, snap in reversed(s.of("server"))), None)
    family = family_for(meta.get("api"), last)
    records = [r for recs in groups.values() for r in recs]
    return timeline.server_timeline(timeline.server_panels(s, records, int(meta["t0_ns"]), family),
                                    timeline.windows(s, int(meta["t0_ns"])), run_dir / "plots" / "server_timeline.png")


def streamed(summary: Summary) -> bool:
    """Whether the run's responses were streamed (summaries before v7 say nothing: they were, or had chunks)."""
    return bool((summary.request or {}).get("stream", True))


def _page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>{body}</body></html>\n")


def _tables(summary: Summary, *, side_by_side: bool = False) -> str:
    """Each level's facts and metric table; levels side by side (wrapping) when asked."""
    load = summary.load
    blocks = [f"<div><h3>{escape(_level_label(load, lv))}</h3>{_level_facts(s, summary.trace)}{level_table_html(s)}{latency_table_html(s)}{''.join(group_table_html(s, f) for f in GROUP_FIELDS)}</div>"
              for lv, s in summary.levels.items()]
    return f'<div class="cols">{"".join(blocks)}</div>' if side_by_side else "".join(blocks)


def _sweep_pairs(summary: Summary) -> list[tuple[float, LevelSummary]]:
    return [(float(lv), s) for lv, s in summary.levels.items()]


def _timed(summary: Summary, prefix: str = "") -> dict[str, dict[str, Any]]:
    """The levels' time slices by label (levels with slices only)."""
    return {prefix + _level_label(summary.load, lv): s.slices for lv, s in summary.levels.items() if s.slices}


def write_html(run_dir: Path, out: Path | None = None) -> Path:
    """Write one run's report: every applicable plot into `run_dir/plots/` and a self-contained
    HTML page (default `run_dir/report.html`) with the plots embedded, run id, model, level tables
    and, when `run_dir/exactness.json` exists, its verdict counts and contract. Returns its path."""
    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir / "report.html"
    summary = build_summary(run_dir)
    meta = load_json(run_dir / "meta.json")
    load = summary.load
    groups = _by_level(run_dir, summary)
    series = {_level_label(load, lv): recs for lv, recs in groups.items()}
    made = _make_plots(series, {"": _sweep_pairs(summary)}, (meta.get("profile") or {}).get("slo"), _axis_label(load),
                       run_dir / "plots", streamed(summary), _timed(summary))
    if summary.search is not None:
        made.insert(0, ("capacity_search", search_plot(summary.search, run_dir / "plots" / "capacity_search.png")))
    if (run_dir / SERIES_FILE).exists():
        made.append(("server_timeline", _timeline(run_dir, meta, groups)))
    status = ('<span class="good">valid</span>' if summary.valid else '<span class="bad">INVALID</span>')
    if summary.tls_insecure:
        status += ' · <span class="bad">TLS certificate not checked (target.tls.insecure)</span>'
    if summary.interrupted:
        status += ' · <span class="bad">INTERRUPTED</span>'
    if summary.damage:
        status += ' · <span class="bad">DAMAGED records</span>'
    if summary.attestation:
        att = summary.attestation
        backing = f"attested configuration (fingerprint {escape(str(att.get('fingerprint_hash', ''))[:16])})"
    else:
        backing = ('<span class="bad">UNVERIFIED: no exactness check backs these figures</span>'
                   if summary.unverified else "")
    body = (f"<h1>loadgate run {escape(summary.run_id)}</h1>"
            f"<p class=\"meta\">model <b>{escape(str(summary.model))}</b> · api {escape(str(summary.api))}"
            f" · engine {escape(_host(meta.get('engine_url')))} · loadgate {escape(str(summary.loadgate))}"
            f" · measurement {status}{' · ' + backing if backing else ''}</p>"
            + _exactness_html(run_dir / "exactness.json")
            + ("" if summary.search is None else _search_html(summary.search))
            + "<h2>Plots</h2>" + "".join(_img(p, name) for name, p in made)
            + "<h2>Summary</h2>" + _tables(summary, side_by_side=True))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(_page(f"loadgate {summary.run_id}", body), encoding="utf-8")
    return out


def write_comparison_html(labelled: Mapping[str, Path], out: Path, lead: str = "") -> Path:
    """Write an A-vs-B report for labelled run folders (e.g. {"baseline": a, "candidate": b}): the
    same plots with one series per run (per run and level when a run has several levels), PNGs in
    `<out stem>-plots/` beside `out`, and the runs' level tables side by side; `lead`, preformatted
    text under the title (an A/B of searches: its capacity line). Returns `out`."""
    out = Path(out)
    series: dict[str, list[Record]] = {}
    sweeps: dict[str, list[tuple[float, LevelSummary]]] = {}
    columns, loads, slo = [], set(), None
    timed: dict[str, dict[str, Any]] = {}
    every_streamed = True
    for label, run_dir in labelled.items():
        run_dir = Path(run_dir)
        summary = build_summary(run_dir)
        meta = load_json(run_dir / "meta.json")
        slo = slo or (meta.get("profile") or {}).get("slo")
        load = summary.load
        loads.add(load)
        groups = _by_level(run_dir, summary)
        for lv, recs in groups.items():
            series[label if len(groups) == 1 else f"{label} · {_level_label(load, lv)}"] = recs
        sweeps[label] = _sweep_pairs(summary)
        timed.update(_timed(summary, f"{label} · "))
        every_streamed = every_streamed and streamed(summary)
        columns.append(f"<div><h3>{escape(label)}</h3><p class=\"meta\">run {escape(summary.run_id)} · model "
                       f"{escape(str(summary.model))}</p>{_tables(summary)}"
                       f"{_exactness_html(run_dir / 'exactness.json')}</div>")
    x_label = _axis_label(loads.pop()) if len(loads) == 1 else "load level"
    made = _make_plots(series, sweeps, slo, x_label, out.parent / f"{out.stem}-plots", every_streamed, timed)
    title = " vs ".join(labelled)
    body = (f"<h1>loadgate comparison: {escape(title)}</h1><p class=\"meta\">"
            + " · ".join(f"{escape(k)}: {escape(Path(v).name)}" for k, v in labelled.items()) + "</p>"
            + (f"<pre>{escape(lead)}</pre>" if lead else "")
            + "<h2>Plots</h2>" + "".join(_img(p, name) for name, p in made)
            + f"<h2>Summaries</h2><div class=\"cols\">{''.join(columns)}</div>")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(_page(f"loadgate {title}", body), encoding="utf-8")
    return out

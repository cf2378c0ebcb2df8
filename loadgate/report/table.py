"""Console tables of a run summary (tabulate). Pure: a `Summary` in, text out."""

from __future__ import annotations

import math
from typing import Any

from tabulate import tabulate

from loadgate.analysis.summary import GROUP_FIELDS, Acceptance, LevelSummary, Summary, TokenCounts
from loadgate.config.profile import MAX_SLICES
from loadgate.core.figures import ADJUSTED, figure, table_rows
from loadgate.records import Damage
from loadgate.report.server import server_lines

COLUMNS = ("p50", "p90", "p99")


def fmt(v: Any, digits: int = 2) -> str:
    """A figure for people: None is "n/a", infinity "+inf"."""
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    if isinstance(v, float) and math.isinf(v):
        return "+inf" if v > 0 else "-inf"
    if isinstance(v, int):
        return str(v)
    return f"{v:,.{digits}f}"


def level_table(s: LevelSummary) -> str:
    rows = []
    for name in table_rows(s.metrics):
        m = s.metrics.get(name)
        if m is None:
            continue
        base = name.removesuffix(ADJUSTED)
        label = base + (" (errors as +inf)" if name.endswith(ADJUSTED) else "")
        rows.append([label, figure(base).unit, m["count"], *(fmt(m[c]) for c in COLUMNS), fmt(m["mean"])])
    return tabulate(rows, headers=["metric", "unit", "n", *COLUMNS, "mean"], tablefmt="simple",
                    disable_numparse=True, colalign=("left", "left", "right", "right", "right", "right", "right"))


def group_table(s: LevelSummary, field: str = "category") -> str:
    """The level's figures by `field` (`LevelSummary.groups`), one row per value; empty without."""
    g = (s.groups or {}).get(field)
    if not g:
        return ""
    rows = []
    for value, f in g["by"].items():
        m, acc = f["metrics"], (f["acceptance"]["per_request"] or {}).get("acceptance_length")
        ttft, itl = m.get("ttft") or {}, m.get("itl") or {}  # none in an unstreamed run
        rows.append([value, f["requests"], f["failed"], fmt(ttft.get("p50")), fmt(ttft.get("p99")),
                     fmt(itl.get("p50")), fmt(itl.get("p99")), fmt(m["request_output_rate"]["p50"], 1),
                     fmt(f["throughput"]["output_token_throughput"], 1), fmt(acc, 3)])
    table = tabulate(rows, headers=[field, "n", "failed", "ttft p50 ms", "ttft p99 ms", "itl p50 ms", "itl p99 ms",
                                    "tok/s per req p50", "tok/s of window", "acceptance"],
                     tablefmt="simple", disable_numparse=True, colalign=("left",) + ("right",) * 9)
    out = [f"by {field}:", table]
    au = g.get("acceptance_adds_up")
    if au:
        vals = ", ".join(f"{k.replace('_', ' ')} {fmt(float(a), 0)} vs {fmt(float(b), 0)}" for k, (a, b) in au["values"].items())
        out.append(("the " + field + " figures add up to the level's /metrics counters" if au["agree"] else
                    "THE " + field.upper() + " FIGURES DO NOT ADD UP to the level's /metrics counters")
                   + f": {vals} (relative difference {au['relative_difference']:.2%}, tolerance {au['tolerance']:.0%}; "
                   "counters cannot be split by " + field + ", so acceptance by " + field + " is from per-request fields)")
    cached = [(value, c) for value, f in g["by"].items() if (c := f.get("cached_tokens"))]
    if cached:
        out.append(f"cached prompt tokens per request by {field} (the engine's per-request usage; /metrics counters "
                   "cannot be split by " + field + "): " + " · ".join(
                       f"{field + ' ' if field == 'turn' else ''}{value} {fmt(c['mean'], 1)} of "
                       f"{fmt(c['prompt_tokens_mean'], 1)}" for value, c in cached))
    return "\n".join(out)


def slice_rows(sl: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of a level's time slices (`LevelSummary.slices`): the slice's seconds into the
    window (to the millisecond; a partial last slice marked *), requests started in it, failed, output tok/s by arrival, and
    p50 / p99 of each figure it keeps."""
    names = list(sl["slices"][0]["metrics"]) if sl["slices"] else []
    heads = ["seconds", "n", "failed", "out tok/s", *(f"{m} {q} {figure(m).unit}" for m in names for q in ("p50", "p99"))]
    rows = [[f"{round(x['start_s'], 3):g}–{round(x['end_s'], 3):g}" + ("*" if x["partial"] else ""),
             str(x["requests"]), str(x["failed"]),
             fmt(x["output_throughput"], 1), *(fmt(x["metrics"][m][q]) for m in names for q in ("p50", "p99"))]
            for x in sl["slices"]]
    return heads, rows


def slice_table(s: LevelSummary) -> str:
    """The level's time slices as a compact table, with a line saying how they are cut; "" when off."""
    sl = s.slices
    if not sl:
        return ""
    if sl.get("too_many"):
        return (f"by time: slices of {sl['slice_s']:g} s would cut the level's {sl['window_s']:.3g} s window into "
                f"{sl['too_many']:,}, more than {MAX_SLICES:,}: none kept (raise report.slice_s)")
    heads, rows = slice_rows(sl)
    words = (f"by time, slices of {sl['slice_s']:g} s of the window: a request counts in the slice it started in, "
             "output tokens in the slice they arrived in")
    if len(sl["slices"]) == 1:
        words += f" (the window, {sl['window_s']:.3g} s, is not longer than one slice)"
    if any(x["partial"] for x in sl["slices"]):
        words += "; * the last slice is partial (shorter than the others: its tok/s is over its own length)"
    if not rows:
        return words + ": no requests"
    return words + ":\n" + tabulate(rows, headers=heads, tablefmt="simple", disable_numparse=True,
                                     colalign=("left",) + ("right",) * (len(heads) - 1))


def conversation_lines(s: LevelSummary) -> list[str]:
    """The level's conversations: counts, then each one that ended early (its failed turn and the turns
    not sent); [] without conversations."""
    c = s.conversations
    if not c:
        return []
    out = [f"conversations: {c['conversations']} begun, {c['complete']} with every turn sent, {c['turns_sent']} turns "
           f"sent, {c['not_sent']} not sent"]
    for b in c["broken"]:
        a, z = b["not_sent"]
        why = f"turn {b['turn']} failed ({b['error']})" if b["error"] else f"the run stopped after turn {b['turn']}"
        left = f"turn {a}" if a == z else f"turns {a}–{z}"
        out.append(f"conversation {b['conversation']}: {why}, {left} not sent")
    if c["ended_early"] > len(c["broken"]):
        out.append(f"… and {c['ended_early'] - len(c['broken'])} more conversations that ended early")
    return out


def _acceptance_lines(a: Acceptance) -> list[str]:
    out = []
    pr, ct, rc = a.per_request, a.counters, a.reconciliation
    if pr:
        out.append(f"acceptance length {fmt(pr['acceptance_length'], 3)} from per-request fields ({pr['source']}): "
                   f"{pr['formula']}; {pr['accepted']} accepted / {pr['verify_steps']} verify steps")
    if ct and ct.get("drafts"):
        rate = "" if ct["acceptance_rate"] is None else f", draft acceptance rate {ct['acceptance_rate']:.1%}"
        out.append(f"acceptance length {fmt(ct['acceptance_length'], 3)} from /metrics: {ct['formula']}{rate}")
    if rc:
        on = " and ".join(k.replace("_", " ") for k in rc.get("compared", ["acceptance_length"]))
        out.append(("sources agree" if rc["agree"] else "SOURCES DISAGREE")
                   + f" on {on} (relative difference {rc['relative_difference']:.2%}, tolerance {rc['tolerance']:.0%})")
    return out


def _unverified_words(tc: TokenCounts, summary: Summary) -> str:
    """Why some prompt counts could not be checked against the plan, in words."""
    if not tc.prompt_unverified:
        return ""
    why = []
    if tc.prompt_no_server_count:
        why.append(f"{tc.prompt_no_server_count} without a server count")
    if tc.prompt_not_planned:
        pool = summary.token_pool or {}
        reason = ("no tokenizer: planned in words" if pool.get("exact") is False else
                  "the chat template's token count is unknown" if summary.chat_template_tokens is None
                  and summary.api.endswith("chat") else "not planned in tokens")
        why.append(f"{tc.prompt_not_planned} not planned in tokens ({reason})")
    return f" (prompts unverified: {'; '.join(why)})"


def _count_sources(tc: TokenCounts, summary: Summary) -> str:
    """Where each token count came from: the plan's tokenizer, the server's usage, the chunks."""
    planned = (summary.token_pool or {}).get("source", "unknown")
    completion = ", ".join(f"{k} {v}" for k, v in sorted(tc.completion_counts_from.items()))
    return (f"token count sources: prompts planned with {planned}; measured prompt counts: server usage"
            + (f"; completion counts: {completion}" if completion else ""))


def dataset_line(d: dict[str, Any], levels: int = 1) -> str:
    """Where the measured prompts came from and where their lengths did (the summary's `dataset`);
    with several levels, that each level sends the same prompts (a dataset's text cannot be drawn
    afresh per level as token ids are)."""
    lengths = ("prompts as written" if d["lengths"] == "dataset" else
               "prompts cut or extended to workload.input_len")
    return (f"workload: dataset {d['path']} ({d['format']}, {d['distinct_rows']} of {d['rows']} rows drawn, "
            f"order {d['order']}); {lengths}; output lengths from {d['output_lengths']}; prompt counts from "
            f"{d['prompt_counts']}" + (f"; {d['skipped_by_filters']} rows skipped by the length filters"
                                       if d.get("skipped_by_filters") else "")
            + ("; every level sends these same prompts, so a level after the first may meet them in the "
               "engine's prefix cache (see each level's prefix cache line; load.reset_prefix_cache empties it)"
               if levels > 1 else ""))


def render_summary(summary: Summary) -> str:
    out: list[str] = []
    if summary.dataset:
        out.append(dataset_line(summary.dataset, len(summary.levels)))
    att = summary.attestation
    if att:
        out.append(f"performance of the attested configuration (fingerprint {att['fingerprint_hash'][:16]}, "
                   f"{att['contract']['tier']} against baseline {att['baseline_sha256'][:12]})")
    elif summary.unverified:
        out.append("UNVERIFIED configuration: no exactness check backs these figures")
    if summary.tls_insecure:
        out.append("WARNING: the server's TLS certificate was not checked (target.tls.insecure): whoever answered "
                   "may not be the engine")
    if summary.interrupted:
        out.append("INTERRUPTED: a signal stopped the run; these figures cover only the requests that finished")
    if summary.damage:
        out.append("DAMAGED: " + Damage(**summary.damage).words() + "; these figures cover the readable lines only")
    req = summary.request or {}
    if req and not req.get("stream", True):
        out.append("not streamed (load.stream: false): each response arrives whole, so there is no time to first "
                   "token, inter-token latency or time per output token; e2e is the latency")
    if req.get("temperature"):
        out.append(f"requests sampled: temperature {req['temperature']:g}, top_p {req['top_p']:g}, top_k {req['top_k']}, "
                   f"min_p {req['min_p']:g}, seed {req['seed']}")
    if req.get("extra_body_keys"):
        out.append("extra body keys in every request: " + ", ".join(req["extra_body_keys"]))
    for level, s in summary.levels.items():
        t = s.throughput
        errs = ", ".join(f"{k} {v}" for k, v in sorted(s.errors.items())) or "none"
        name = f"trace ×{level}" if summary.load == "trace" else f"{summary.load} {level}"
        out.append(f"\n{name}: {s.requests} requests, {s.succeeded} "
                   f"succeeded, {s.failed} failed (errors: {errs})")
        if summary.trace:
            out.append(trace_line(summary.trace))
        out.append(level_table(s))
        out.append(f"output throughput {fmt(t.output_token_throughput, 1)} tok/s · "
                   f"input {fmt(t.input_token_throughput, 1)} tok/s · "
                   f"requests {fmt(t.request_throughput, 2)} /s · window {fmt(t.window_s, 2)} s")
        if s.goodput:
            g = s.goodput
            out.append(f"goodput {fmt(g.goodput_rps, 2)} req/s ({g.fraction:.1%} of requests met "
                       + ", ".join(f"{k} <= {v:g}" for k, v in g.slo_ms.items()) + ")")
            if g.good_output_tokens is not None:  # (summaries before v9 have no token goodput)
                out.append(f"token goodput {fmt(g.token_goodput, 1)} tok/s ({g.good_output_tokens:,} output tokens of "
                           f"the requests that met every SLO, over the window)")
        out += _acceptance_lines(s.acceptance)
        for field in GROUP_FIELDS:
            if (s.groups or {}).get(field):
                out.append(group_table(s, field))
        if s.slices:
            out.append(slice_table(s))
        out += conversation_lines(s)
        cc = s.contamination
        if cc:
            out.append(("contamination check passed" if cc["clean"] else "CONTAMINATION") +
                       f": server counted {fmt(cc['server_requests'], 0)} requests / "
                       f"{fmt(cc['server_generation_tokens'], 0)} generated tokens in the window, the client "
                       f"{cc['client_requests']} / {cc['client_generation_tokens']}"
                       + (f", and {cc['client_failed_after_accept']} requests that failed after the server took them"
                          if cc.get("client_failed_after_accept") else ""))
        pc = s.prefix_cache
        sharing = (summary.trace or {}).get("sharing") or {}
        if pc and pc.get("hit_rate") is not None:
            beside = (f"; the trace's own sharing {sharing['ratio']:.1%}" if sharing.get("ratio") is not None else "")
            if beside and summary.chat_template_tokens:
                beside += (f" (of its own tokens: the server also counts the chat template's "
                           f"{summary.chat_template_tokens} a request, which the sharing leaves out)")
            out.append(f"prefix cache: {pc['hit_rate']:.1%} of {fmt(pc['queries'], 0)} prompt tokens were served from the "
                       f"server's cache in the window ({pc['counters'][0]}){beside}")
        elif sharing.get("ratio") is not None:
            out.append(f"prefix cache: the server exposes no prefix-cache counters; the trace's own sharing "
                       f"{sharing['ratio']:.1%}")
        tc = s.token_counts
        out.append(f"token counts vs plan: {tc.prompt_mismatches} prompt and {tc.completion_mismatches} "
                   f"completion mismatches in {tc.checked} requests" + _unverified_words(tc, summary))
        out.append(_count_sources(tc, summary))
        if tc.natural_lengths and tc.output_lengths:
            ol = tc.output_lengths
            reasons = ", ".join(f"{k} {v}" for k, v in (tc.finish_reasons or {}).items())
            out.append(f"output lengths the model chose (ignore_eos off or stop strings): min {ol['min']:g}, p50 "
                       f"{ol['p50']:g}, p90 {ol['p90']:g}, max {ol['max']:g}, {ol['distinct']:g} distinct; "
                       f"finish reasons: {reasons}")
        if tc.impossible_counts:
            left = (f"; {tc.completion_unverified} completion(s) had no ids to count, so they are unverified"
                    if tc.completion_unverified else "")
            out.append(f"warning: {tc.impossible_counts} request(s) carried token counts no server can mean (a bool, "
                       f"a negative, a fraction, a string or a number beyond any context), kept as received in their "
                       f"records (counts_received); their counts came from the output ids where the stream had "
                       f"them{left}")
        if s.new_connections:
            out.append(f"connections: {s.new_connections} of {s.requests} requests opened one first "
                       "(their TTFT includes the connect: the server closed kept-alive connections, or the "
                       "warmup had fewer requests than slots)")
        if s.ramp_requests is not None:
            out.append(f"ramp: {s.ramp_requests} requests before the measured window, finished before it began "
                       "(load.ramp; outside every figure)")
        gauges = s.server_gauges or {}
        parts = [f"KV cache {v['min']:.2%}/{v['mean']:.2%}/{v['max']:.2%}" if k == "kv_cache_usage" else
                 f"{k} {fmt(v['min'], 1)}/{fmt(v['mean'], 1)}/{fmt(v['max'], 1)}" for k, v in gauges.items() if v]
        out += server_lines(s, parts)
        out += gpu_lines(s.gpu)
        h = s.client_health
        if h.loop_lag_ms["p99"] is not None:
            cpu = h.client_cpu_fraction
            out.append(f"client: loop lag p99 {fmt(h.loop_lag_ms['p99'])} ms, GC pause max "
                       f"{fmt(h.gc_pause_max_ms)} ms, CPU {'n/a' if cpu is None else f'{cpu:.0%}'} "
                       f"of a core, {h.workers} worker(s)")
        sb = h.stamp_bound
        if sb:
            how = "kernel receive stamps" if not sb["user_stamped_requests"] else "user-space stamps, loop lag included"
            bounded = "" if sb.get("bounded_fraction") is None else \
                f", {sb['bounded_fraction']:.1%} given a bound"
            busy = "" if sb.get("busy_fraction") is None else \
                f", {sb['busy_fraction']:.1%} while the client was behind"
            out.append(f"stamps: 99% of chunks are stamped within {sb['stated_p99_ms']:.3f} ms of their arrival, "
                       f"every chunk within {sb['max_ms']:.2f} ms ({how}; {sb['shared_read_fraction']:.1%} of chunks "
                       f"shared a read{bounded}{busy})")
        for w in h.warnings:
            out.append(f"warning: {w}")
        for msg in s.invalid:
            out.append(f"INVALID: {msg}")
    return "\n".join(out)


def capacity_table(summary: Summary, slo: dict[str, Any]) -> str:
    """For a sweep (several load levels): level -> output throughput, TTFT p99, ITL p99, and whether
    the level meets the profile's SLOs (p99 of each, failures counted as +inf), then the highest
    level that does. Empty for a single level."""
    levels = summary.levels
    if len(levels) < 2:
        return ""
    limits = {k: v for k, v in slo.items() if v is not None}
    names = {"ttft_ms": "ttft_error_adjusted", "tpot_ms": "tpot_error_adjusted", "e2e_ms": "e2e_error_adjusted"}
    rows, best = [], None
    for lv, s in levels.items():
        meets = None
        if limits:  # a figure the level has not (ttft of an unstreamed run) meets no level
            meets = all(((s.metrics.get(names[k]) or {}).get("p99") or float("inf")) <= v for k, v in limits.items())
            if meets:
                best = lv
        rows.append([lv, fmt(s.throughput.output_token_throughput, 1), fmt((s.metrics.get("ttft") or {}).get("p99")),
                     fmt((s.metrics.get("itl") or {}).get("p99")), "n/a" if meets is None else ("yes" if meets else "no")])
    kind = summary.load
    out = "capacity:\n" + tabulate(rows, headers=[kind, "output tok/s", "ttft p99 ms", "itl p99 ms", "meets SLOs"],
                                    tablefmt="simple", disable_numparse=True)
    if limits:
        slo_words = ", ".join(f"{k.removesuffix('_ms')} p99 <= {v:g} ms" for k, v in limits.items())
        out += (f"\nhighest {kind} meeting the SLOs ({slo_words}): {best}" if best is not None
                else f"\nno {kind} met the SLOs ({slo_words})")
    return out


def trace_line(trace: dict[str, Any]) -> str:
    """What a timed trace's replay was: its requests and span, its lines out of time order, and the
    prefix sharing the trace itself holds (what a cache that keeps every block would find)."""
    rate = trace.get("mean_rate")
    n = trace["requests"]
    words = (f"timed trace: {n:,} request{'s' if n != 1 else ''} over {trace['span_s']:.1f} s"
             + (f" (mean {rate:.1f} req/s)" if rate else "") + ", latency from each line's timestamp")
    if trace.get("out_of_order"):
        words += f"; {trace['out_of_order']:,} of its {trace['lines']:,} lines were out of time order (sent in time order)"
    sh = trace.get("sharing")
    if sh and sh.get("ratio") is not None:
        words += (f"; its own prefix sharing: {sh['ratio']:.1%} of {sh['prompt_tokens']:,} prompt tokens begin an "
                  f"earlier request's prompt too (by the hash ids of {sh['block']}-token blocks)")
    return words


def summary_rows(summary: Summary) -> list[list[Any]]:
    """One row per level and metric: level, metric, unit, n, p50, p90, p95, p99, p99.9, mean, min, max
    (a throughput's value, and token goodput's, under p50)."""
    rows = []
    for lv, s in summary.levels.items():
        for name, m in s.metrics.items():
            rows.append([lv, name, m["unit"], m["count"], m["p50"], m["p90"], m["p95"], m["p99"], m["p99.9"],
                         m["mean"], m["min"], m["max"]])
        t = s.throughput
        for k, v in (("output_token_throughput", t.output_token_throughput),
                     ("input_token_throughput", t.input_token_throughput),
                     ("request_throughput", t.request_throughput)):
            rows.append([lv, k, "tok/s" if "token" in k else "req/s", s.succeeded, v, None, None, None, None,
                         None, None, None])
        g = s.goodput
        if g is not None and g.good_output_tokens is not None:  # n: the requests that met every SLO
            rows.append([lv, "token_goodput", "tok/s", g.good_requests, g.token_goodput, *[None] * 7])
    return rows


SUMMARY_HEADERS = ["level", "metric", "unit", "n", "p50", "p90", "p95", "p99", "p99.9", "mean", "min", "max"]


def summary_markdown(summary: Summary) -> str:
    rows = [[*r[:4], *(fmt(v) for v in r[4:])] for r in summary_rows(summary)]
    head = f"**{summary.run_id}** ({summary.model}, {summary.api})"
    if summary.tls_insecure:
        head += "\n\n**WARNING**: the server's TLS certificate was not checked (target.tls.insecure)"
    return head + "\n\n" + tabulate(rows, headers=SUMMARY_HEADERS, tablefmt="github", disable_numparse=True)


def summary_csv(summary: Summary) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(SUMMARY_HEADERS)
    for r in summary_rows(summary):
        w.writerow(["inf" if isinstance(v, float) and math.isinf(v) else v for v in r])
    return buf.getvalue()


def gpu_lines(gpu: dict[str, Any] | None) -> list[str]:
    """The level's GPU figures (`analysis.gpu.level_gpu`): a line per GPU, the energy per output
    token, and why there are none or fewer than asked for."""
    if gpu is None:
        return []
    if gpu.get("absent"):
        return [f"GPU: no readings ({gpu['absent']})"]
    win = gpu.get("window")
    if not win:
        return ["GPU: no readings inside the window"]
    out = []
    for k, g in win["gpus"].items():
        parts = []
        if g["util_pct"]:
            parts.append(f"utilisation {g['util_pct']['mean']:.0f}% (max {g['util_pct']['max']:.0f}%)")
        if g["power_w"]:
            parts.append(f"power {g['power_w']['mean']:.0f} W (max {g['power_w']['max']:.0f} W)")
        if g["mem_used_bytes_max"] is not None:
            total = "" if g["mem_total_bytes"] is None else f" of {g['mem_total_bytes'] / 2**30:.1f}"
            parts.append(f"memory {g['mem_used_bytes_max'] / 2**30:.2f}{total} GiB")
        if g["energy_j"] is not None:
            how = "energy counter" if g["energy_source"] == "counter" else "power x time"
            parts.append(f"energy {fmt(g['energy_j'], 1)} J ({how})")
        parts += [f"{field}: {why}" for field, why in g["absent"].items()]
        out.append(f"GPU {k} ({g['name'] or 'unnamed'}, {g['readings']} readings): " + " · ".join(parts))
    if win.get("joules_per_output_token") is not None:
        out.append(f"GPU energy per output token: {win['joules_per_output_token']:.4f} J "
                   f"({fmt(win['energy_j'], 1)} J over the window, every GPU of this host)")
    if gpu.get("capped"):
        out.append("warning: GPU readings stopped at target.gpu.max_mb; the later part of the run has none")
    if gpu.get("reader_cpu_s") is not None:
        out.append(f"GPU reader: {gpu['reader_cpu_s']:.2f} CPU s over the run (its own process)")
    return out


def gpu_totals(gpu: dict[str, Any] | None) -> dict[str, float | None] | None:
    """One side's GPU figures over a level's window, summed over the host's GPUs (None: no readings):
    energy per output token, energy, mean power, the peak memory in use, and the peak GPU memory of
    the processes it saw (summed per process, so one server holding a target and a draft counts both)."""
    win = (gpu or {}).get("window")
    if not win or not win.get("gpus"):
        return None
    gs = list(win["gpus"].values())

    def total(values: list[float | None]) -> float | None:
        return None if any(v is None for v in values) else sum(v for v in values if v is not None)

    return {"joules_per_output_token": win.get("joules_per_output_token"), "energy_j": win.get("energy_j"),
            "power_w": total([(g["power_w"] or {}).get("mean") for g in gs]),
            "mem_used_bytes": total([g["mem_used_bytes_max"] for g in gs]),
            "process_mem_bytes": float(sum(sum(g["process_mem_bytes_max"].values()) for g in gs))
            if any(g["process_mem_bytes_max"] for g in gs) else None}


GPU_ROWS = (("joules_per_output_token", "energy per output token", "J", 1.0),
            ("energy_j", "energy over the window", "J", 1.0), ("power_w", "power, mean", "W", 1.0),
            ("mem_used_bytes", "GPU memory in use, peak", "GiB", 2.0 ** -30),
            ("process_mem_bytes", "the processes' GPU memory, peak", "GiB", 2.0 ** -30))


def gpu_comparison(base: dict[str, Any] | None, cand: dict[str, Any] | None) -> str | None:
    """The GPU figures of two runs at one level side by side, with the candidate's ratio and, for
    memory, the difference (a draft's cost where the candidate is the same server with a draft);
    None where neither side read a GPU."""
    a, b = gpu_totals(base), gpu_totals(cand)
    if a is None and b is None:
        return None
    rows = []
    for key, words, unit, scale in GPU_ROWS:
        x, y = (a or {}).get(key), (b or {}).get(key)
        if x is None and y is None:
            continue
        ratio = f"{y / x:.3f}x" if x and y is not None else "n/a"
        diff = f"{(y - x) * scale:+.3f}" if x is not None and y is not None and unit == "GiB" else ""
        rows.append([f"{words} ({unit})", "n/a" if x is None else f"{x * scale:.4g}",
                     "n/a" if y is None else f"{y * scale:.4g}", ratio, diff])
    return "GPU (this host's, over each side's window):\n" + tabulate(
        rows, headers=["figure", "baseline", "candidate", "candidate/baseline", "difference"], disable_numparse=True)

"""Build a run's summary from its files alone: records.jsonl, meta.json, server.json, health.json.

`loadgate run` writes those files and then calls `build_summary`; `loadgate report` calls it on
an old run with the engine long gone. Nothing here reads live state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadgate.analysis.figures import figure
from loadgate.analysis.metrics import summarize
from loadgate.analysis.specdec import contamination, from_counters, from_records, reconcile
from loadgate.analysis.validity import schedule_lag, verdict
from loadgate.config.profile import HealthBudgets
from loadgate.engine.servermetrics import Snapshot
from loadgate.jsonutil import load_json
from loadgate.records import Record, read_records


def snapshot_from_json(values: list[list[Any]]) -> Snapshot:
    return Snapshot({(name, tuple((k, v) for k, v in labels)): float(val) for name, labels, val in values})


def snapshot_to_json(s: Snapshot, prefixes: tuple[str, ...] = ("vllm:", "sglang:", "llamacpp:")) -> list[list[Any]]:
    return [[n, [list(kv) for kv in labels], v] for (n, labels), v in s.values.items() if n.startswith(prefixes)]


def token_check(records: list[Record], limit: float) -> dict[str, Any]:
    """Per request, the server's prompt and completion counts against the plan."""
    checked = [r for r in records if r.succeeded]
    prompt_bad = [r.i for r in checked if r.prompt_tokens is not None
                  and r.prompt_tokens_planned is not None and r.prompt_tokens != r.prompt_tokens_planned]
    out_bad = [r.i for r in checked if r.output_tokens != r.output_tokens_planned]
    no_count = sum(1 for r in checked if r.prompt_tokens is None)
    unplanned = sum(1 for r in checked if r.prompt_tokens is not None and r.prompt_tokens_planned is None)
    bad = set(prompt_bad) | set(out_bad)
    frac = len(bad) / len(checked) if checked else 0.0
    completion_from: dict[str, int] = {}
    for r in checked:
        k = "server usage" if r.completion_tokens is not None else f"chunks ({r.token_source})"
        completion_from[k] = completion_from.get(k, 0) + 1
    return {"checked": len(checked), "prompt_mismatches": len(prompt_bad), "completion_mismatches": len(out_bad),
            "prompt_unverified": no_count + unplanned, "prompt_no_server_count": no_count,
            "prompt_not_planned": unplanned, "completion_counts_from": completion_from,
            "mismatch_fraction": frac, "limit": limit, "examples": sorted(bad)[:10], "ok": frac <= limit}


def goodput(records: list[Record], slo: dict[str, float | None], window_s: float | None) -> dict[str, Any] | None:
    """Requests that succeeded and met every SLO given (a request's own TTFT, TPOT and E2E)."""
    active = {k: v for k, v in slo.items() if v is not None}
    if not active or not records:
        return None
    good = 0
    for r in records:
        if not r.succeeded:
            continue
        okay = True
        for name, limit in active.items():
            fn = figure(name.removesuffix("_ms")).samples
            assert fn is not None
            vals = fn(r)
            if vals and vals[0] > limit:
                okay = False
        good += okay
    return {"slo_ms": active, "good_requests": good, "fraction": good / len(records),
            "goodput_rps": good / window_s if window_s else None}


def level_summary(records: list[Record], server: dict[str, Any] | None, health: list[dict[str, Any]],
                  profile: dict[str, Any]) -> dict[str, Any]:
    s = summarize(records)
    s["token_counts"] = token_check(records, profile["workload"]["token_mismatch_limit"])
    s["goodput"] = goodput(records, profile.get("slo") or {}, s["throughput"]["window_s"])
    s["acceptance"] = {"per_request": from_records(records)}
    s["new_connections"] = sum(1 for r in records if r.new_connection)  # requests that paid a connect
    invalid: list[str] = []
    if server and server.get("before") is not None and server.get("after") is not None:
        before, after = snapshot_from_json(server["before"]), snapshot_from_json(server["after"])
        s["acceptance"]["counters"] = from_counters(before, after)
        s["acceptance"]["reconciliation"] = reconcile(s["acceptance"]["per_request"], s["acceptance"]["counters"])
        s["contamination"] = contamination(before, after, records)
        s["server_gauges"] = server.get("gauges")
        if s["contamination"] and not s["contamination"]["clean"]:
            invalid += ["contamination: " + p + " (other traffic reached the server, or it counts differently)"
                        for p in s["contamination"]["problems"]]
    if not s["token_counts"]["ok"]:
        tc = s["token_counts"]
        invalid.append(f"{tc['mismatch_fraction']:.1%} of requests had token counts off the plan "
                       f"(limit {tc['limit']:.1%}): check the tokenizer and that ignore_eos is honoured")
    h = merge_health(health)
    h["schedule_lag_ms"] = schedule_lag(records)
    s["client_health"] = h
    budgets = profile.get("health")
    if budgets:
        invalid += verdict(h, HealthBudgets(**budgets))
    s["invalid"] = invalid
    return s


def merge_health(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Worst case over worker processes (each measured its own loop)."""
    parts = [p for p in parts if p]
    if not parts:
        return {"loop_lag_ms": {"p50": None, "p99": None, "max": None, "samples": 0}, "gc_pauses": 0,
                "gc_pause_max_ms": 0.0, "gc_pause_total_ms": 0.0, "client_cpu_fraction": None, "workers": 0}

    def worst(get: Any) -> Any:
        vals = [v for p in parts if (v := get(p)) is not None]
        return max(vals) if vals else None

    return {"loop_lag_ms": {k: worst(lambda p, k=k: p["loop_lag_ms"][k]) for k in ("p50", "p99", "max")}
            | {"samples": sum(p["loop_lag_ms"]["samples"] for p in parts)},
            "gc_pauses": sum(p["gc_pauses"] for p in parts), "gc_pause_max_ms": worst(lambda p: p["gc_pause_max_ms"]),
            "gc_pause_total_ms": sum(p["gc_pause_total_ms"] for p in parts),
            "client_cpu_fraction": worst(lambda p: p["client_cpu_fraction"]), "workers": len(parts)}


def build_summary(run_dir: Path) -> dict[str, Any]:
    meta = load_json(run_dir / "meta.json")
    server = load_json(run_dir / "server.json") if (run_dir / "server.json").exists() else {}
    health = load_json(run_dir / "health.json") if (run_dir / "health.json").exists() else {}
    by_level: dict[str, list[Record]] = {str(lv): [] for lv in meta["levels"]}
    for r in read_records(run_dir / "records.jsonl"):
        by_level.setdefault(str(r.level), []).append(r)
    levels = {lv: level_summary(recs, server.get(lv), health.get(lv, []), meta["profile"])
              for lv, recs in by_level.items()}
    return {"run_id": meta["run_id"], "loadgate": meta["loadgate"], "model": meta["model"],
            "api": meta["api"], "load": "rate" if meta["profile"]["load"]["rate"] is not None else "concurrency",
            "levels": levels, "valid": not any(s["invalid"] for s in levels.values()),
            "attestation": meta.get("attestation"), "unverified": bool(meta.get("unverified")),
            "token_pool": meta.get("token_pool"), "chat_template_tokens": meta.get("chat_template_tokens")}

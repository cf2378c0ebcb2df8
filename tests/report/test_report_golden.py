"""`loadgate report` and `compare` on run folders written by the previous version (record schema
v1, no verdict.json): the tables they print are the ones that version printed (its output, kept
in tests/data/runs-v1/golden/), apart from lines added since, which are listed here by pattern."""

from __future__ import annotations

import re

import pytest

from loadgate.cli import main
from loadgate.records import SCHEMA_VERSION, read_records
from tests.fixtures_path import DATA

RUNS = DATA / "runs-v1"
GOLDEN = RUNS / "golden"
# Lines a newer loadgate prints that the previous version did not (each a regex, whole line): the
# exactness block, capacity and thresholds tables, and the verdict (the verdict stage).
ADDED: tuple[str, ...] = (
    "",
    # the exactness check, from exactness.json (A/B: each side's)
    r"== (baseline|candidate)", r"candidate fingerprint \S+ · baseline .* · corpus .*", r"exactness check: (PASSED|FAILED)",
    r"contract: .*", r"scenarios: .*", r"verdicts: .*", r"positions compared before each first divergence: .*",
    r"speculation: .*",
    # capacity (sweeps) and thresholds, as `loadgate run` printed them
    r"capacity:", r"concurrency\s+output tok/s\s+ttft p99 ms\s+itl p99 ms\s+meets SLOs", r"[-\s]+",
    r"\d+(\.\d+)?\s+[\d,.]+\s+[\d,.]+\s+[\d,.n/a]+\s+(yes|no|n/a)", r"(highest|no) (concurrency|rate) .*SLOs.*",
    r"thresholds \(.*\):", r"threshold\s+measured\s+limit\s+result", r"\S.* (pass|FAIL)( \(.*\))?",
    r"thresholds: \d+ passed, \d+ failed",
    # token goodput beside goodput (summary v9)
    r"token goodput [\d,.]+ tok/s \([\d,]+ output tokens of the requests that met every SLO, over the window\)",
    r"\| \d+\s+\| token_goodput\s+\| tok/s\s+\| \d+\s+\| [\d,.]+\s+(\| n/a\s+){7}\|", r"\d+,token_goodput,tok/s,\d+,[\d.]+,,,,,,,",
 r"```text", r"```",
    # the verdict
    r"UNVERIFIED: no exactness check ran for this configuration; these figures are not a result\.",
    r"decided on .*; practical change .*, alpha .*", r"outcome: .*", r"\*\*outcome\*\*: .*", r"all,verdict,.*",
    r'  "summary_version": \d+,', r'      "prefix_cache": .*', r'  "interrupted": false,', r'  "damage": null,', r'  "tls_insecure": false,', r'  "dataset": null,', r'  "trace": null,', r'  "search": null,', r'  "request": \{', r'        "token_goodput": .*', r'        "good_output_tokens": .*', r'      "groups": null,', r'      "conversations": null,', r'      "cached_tokens": null,', r'      "gpu": null,', r'      "ramp_requests": null,', r'      "slices": null,', r'      "server_latency": null,', r'      "server_scrape": null,', r'  "outcome": \{', r'    "[a-z_]+": .*', r"      \{", r'        "[a-z_]+": .*', r"      \},?", r"    \],?", r"  \},?",
)


def assert_golden_plus_added(new: str, golden: str) -> None:
    """Every golden line appears in order in the new output; every other new line is an ADDED one."""
    want = golden.splitlines()
    k = 0
    extra = []
    for line in new.splitlines():
        if k < len(want) and line == want[k]:
            k += 1
        else:
            extra.append(line)
    assert k == len(want), f"golden line {k + 1} missing or changed: {want[k]!r}"
    unexplained = [x for x in extra if not any(re.fullmatch(p, x) for p in ADDED)]
    assert not unexplained, f"lines the previous version did not print: {unexplained[:5]}"


def test_the_fixtures_are_schema_v1_runs():
    line = (RUNS / "single" / "records.jsonl").read_bytes().split(b"\n", 1)[0]
    assert line.startswith(b'{"v":1,')
    recs = list(read_records(RUNS / "single" / "records.jsonl", include_warmup=True))
    assert len(recs) == 34 and all(r.v == SCHEMA_VERSION for r in recs)  # read into today's Record


@pytest.mark.parametrize("run", ["single", "failing", "sweep", "openloop", "ab"])
@pytest.mark.parametrize("fmt", ["table", "markdown", "csv", "json"])
def test_report_prints_what_the_previous_version_printed(run, fmt, capsys, monkeypatch):
    monkeypatch.chdir(RUNS)
    main(["report", "--format", fmt, run])
    assert_golden_plus_added(capsys.readouterr().out, (GOLDEN / f"{run}.{fmt}.txt").read_text())


@pytest.mark.parametrize("args,golden", [(["single", "failing"], "compare-single-failing"), (["ab"], "compare-ab")])
def test_compare_prints_what_the_previous_version_printed(args, golden, capsys, monkeypatch):
    monkeypatch.chdir(RUNS)
    main(["compare", *args])
    assert_golden_plus_added(capsys.readouterr().out, (GOLDEN / f"{golden}.table.txt").read_text())


def test_a_version_1_summary_json_is_read_into_todays_summary():
    """summary.json of the previous version (no summary_version, token counts without the reasons)
    reads into today's typed Summary, with the same figures as rebuilding it from the records."""
    from loadgate.analysis.summary import SUMMARY_VERSION, Summary, build_summary
    from loadgate.jsonutil import load_json

    old = load_json(RUNS / "single" / "summary.json")
    assert "summary_version" not in old
    s = Summary.from_json(old)
    again = build_summary(RUNS / "single")
    # the version the file was written at is kept (compare tells definitions that changed since)
    assert s.summary_version == 1 and again.summary_version == SUMMARY_VERSION == 9
    assert s.levels["4"].metrics == again.levels["4"].metrics
    assert s.levels["4"].token_counts.prompt_mismatches == again.levels["4"].token_counts.prompt_mismatches == 0
    assert Summary.from_json(again.to_json()) == again  # today's round-trips
    # older still: a real llama-server run's summary, before token counts kept their reasons apart
    real = load_json(RUNS.parents[2] / "docs" / "validation" / "engines" / "llamacpp" / "draft-run" / "summary.json")
    assert "prompt_not_planned" not in real["levels"]["1"]["token_counts"]
    lv = Summary.from_json(real).levels["1"]
    assert lv.token_counts.prompt_not_planned == 0 and lv.token_counts.completion_counts_from == {}
    assert lv.acceptance.per_request is not None and lv.acceptance.per_request["source"] == "llama.cpp timings"


def test_a_version_2_run_folder_is_read_and_reported(capsys):
    """A run folder written by the previous version (records v2 without per-chunk stamp bounds,
    summary v2 without the stated bound): its summary reads into today's Summary, its records read
    with no bound, and `report` judges it as that version did (PASSED, exit 0)."""
    from loadgate.analysis.summary import Summary, build_summary
    from loadgate.jsonutil import load_json
    from loadgate.records import read_records

    run = RUNS.parent / "runs-v2" / "single"
    old = load_json(run / "summary.json")
    assert old["summary_version"] == 2 and "stamp_bound" not in old["levels"]["16"]["client_health"]
    s = Summary.from_json(old)
    again = build_summary(run)
    assert s.levels["16"].metrics == again.levels["16"].metrics and s.levels["16"].succeeded == 40
    assert again.levels["16"].client_health.stamp_bound is None  # v2 records carry no bound
    assert (run / "records.jsonl").read_bytes().startswith(b'{"v":2,')
    recs = list(read_records(run / "records.jsonl", include_warmup=True))
    assert len(recs) == 56 and all(r.v == SCHEMA_VERSION and r.chunk_early_ns == [] for r in recs)
    assert main(["report", str(run)]) == 0
    assert "outcome: PASSED (exit 0)" in capsys.readouterr().out


def test_a_version_3_run_folder_is_read_and_reported_with_the_cause_of_its_bounds_unknown(capsys):
    """A run folder written by record v3 / summary v3 (per-chunk bounds without their cause): its
    summary reads into today's, its records read with `chunk_busy` unknown (None), the rebuilt stamp
    bound has no cause fields, and `report` judges it PASSED (exit 0) as that version did."""
    from loadgate.analysis.summary import Summary, build_summary
    from loadgate.jsonutil import load_json

    run = RUNS.parent / "runs-v3" / "single"
    old = load_json(run / "summary.json")
    assert old["summary_version"] == 3 and "busy_fraction" not in old["levels"]["16"]["client_health"]["stamp_bound"]
    s = Summary.from_json(old)
    again = build_summary(run)
    assert s.levels["16"].metrics == again.levels["16"].metrics and again.levels["16"].succeeded == 40
    sb = again.levels["16"].client_health.stamp_bound
    assert sb is not None and sb["busy_fraction"] is None and sb["quiet_p99_ms"] is None
    assert (run / "records.jsonl").read_bytes().startswith(b'{"v":3,')
    recs = list(read_records(run / "records.jsonl", include_warmup=True))
    assert len(recs) == 56 and all(r.chunk_busy is None and len(r.chunk_early_ns) == len(r.chunk_ns) for r in recs)
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "outcome: PASSED (exit 0)" in out and "while the client was behind" not in out


def test_a_version_4_run_folder_is_read_with_the_host_unknown_and_reported_as_then(capsys):
    """A run folder written by summary v4 (no host steal): it reads into today's summary with
    `host_steal_fraction` null, rebuilds with it null (its health.json has none), and `report`
    judges it PASSED (exit 0) as that version did."""
    from loadgate.analysis.summary import Summary, build_summary
    from loadgate.jsonutil import load_json

    run = RUNS.parent / "runs-v4" / "single"
    old = load_json(run / "summary.json")
    assert old["summary_version"] == 4 and "host_steal_fraction" not in old["levels"]["16"]["client_health"]
    s = Summary.from_json(old)
    assert s.levels["16"].client_health.host_steal_fraction is None
    again = build_summary(run)
    assert s.levels["16"].metrics == again.levels["16"].metrics and again.levels["16"].succeeded == 40
    assert again.levels["16"].client_health.host_steal_fraction is None
    assert main(["report", str(run)]) == 0
    assert "outcome: PASSED (exit 0)" in capsys.readouterr().out


def test_a_version_5_run_folder_is_read_with_no_category_and_judged_as_then(capsys):
    """Records of schema v5 (no `category`) and a summary of version 5: every record reads with
    the category null, the summary rebuilds with the same figures, and `report` gives the code
    that run's verdict.json holds (it was judged invalid: the machine was busy when it was written)."""
    from loadgate.analysis.summary import Summary, build_summary
    from loadgate.jsonutil import load_json

    run = RUNS.parent / "runs-v5" / "single"
    assert (run / "records.jsonl").read_bytes().startswith(b'{"v":5,')
    recs = list(read_records(run / "records.jsonl", include_warmup=True))
    assert len(recs) == 48 and all(r.category is None for r in recs)
    old = load_json(run / "summary.json")
    assert old["summary_version"] == 5
    s, again = Summary.from_json(old), build_summary(run)
    assert s.levels["8"].metrics == again.levels["8"].metrics and again.levels["8"].succeeded == 40
    code = load_json(run / "verdict.json")["code"]
    assert main(["report", str(run)]) == code == 30


def test_a_version_6_run_folder_is_read_without_reasoning_and_judged_as_then(capsys):
    """Records of schema v6 (no `reasoning_tokens`, `answer_chunk`) and a summary of version 6 (a
    chat run): every record reads with no reasoning and its first chunk as the first answer, the
    summary rebuilds with the same figures (and none of a reasoning phase), and `report` gives the code that
    run's verdict.json holds."""
    from loadgate.analysis.summary import Summary, build_summary
    from loadgate.jsonutil import load_json

    run = RUNS.parent / "runs-v6" / "single"
    assert (run / "records.jsonl").read_bytes().startswith(b'{"v":6,')
    recs = list(read_records(run / "records.jsonl", include_warmup=True))
    assert len(recs) == 48 and all(r.reasoning_tokens is None and r.first_answer == 0 for r in recs)
    old = load_json(run / "summary.json")
    assert old["summary_version"] == 6 and "request" not in old
    s, again = Summary.from_json(old), build_summary(run)
    assert s.summary_version == 6 and s.request is None
    for name, m in s.levels["8"].metrics.items():
        assert again.levels["8"].metrics[name] == m, name
    assert not {"ttfa", "reasoning_tokens", "answer_tokens", "itl_answer"} & again.levels["8"].metrics.keys()
    assert again.request is not None and again.request["temperature"] == 0.0 and again.request["ignore_eos"] is True
    code = load_json(run / "verdict.json")["code"]
    assert main(["report", str(run)]) == code


def test_a_version_7_run_folder_is_read_without_a_trace_and_judged_as_then(capsys):
    """A summary of version 7 (records v7, before timed traces): it reads with `trace` null and its
    load kind as written, rebuilds with the same figures at version 8, and `report` gives the code
    that run's verdict.json holds."""
    from loadgate.analysis.summary import SUMMARY_VERSION, Summary, build_summary
    from loadgate.jsonutil import load_json

    run = RUNS.parent / "runs-v7" / "single"
    old = load_json(run / "summary.json")
    assert old["summary_version"] == 7 and "trace" not in old
    s, again = Summary.from_json(old), build_summary(run)
    assert s.summary_version == 7 and s.trace is None and s.load == "concurrency"
    assert again.summary_version == SUMMARY_VERSION and again.trace is None and again.trace is None and again.load == "concurrency"
    for name, m in s.levels["16"].metrics.items():
        assert again.levels["16"].metrics[name] == m, name
    code = load_json(run / "verdict.json")["code"]
    assert main(["report", str(run)]) == code
    assert "timed trace" not in capsys.readouterr().out


def test_an_invalid_stamp_bound_names_the_host_where_it_took_a_share_of_the_cpu():
    """The INVALID message says the host took the CPU (steal) where it did, and only there."""
    from loadgate.analysis.validity import verdict
    from loadgate.config.profile import HealthBudgets

    sb = {"stated_p99_ms": 6.2, "user_stamped_requests": 0, "shared_read_fraction": 0.4, "bounded_fraction": 0.3,
          "busy_fraction": 0.3, "quiet_p99_ms": 0.1, "p99_ms": 6.2}
    health = {"stamp_bound": sb, "loop_lag_ms": {"p99": 0.5}, "workers": 1}
    for steal, named in ((None, False), (0.01, False), (0.31, True)):
        msgs = verdict({**health, "host_steal_fraction": steal}, HealthBudgets())
        assert len(msgs) == 1 and msgs[0].startswith("TTFT and ITL stamps may be off by up to 6.20 ms")
        assert ("the host took 31% of this machine's CPU time (steal)" in msgs[0]) is named, msgs[0]


def test_a_version_2_run_whose_loop_lagged_stays_invalid(tmp_path, capsys):
    """Records written before per-chunk stamp bounds carry none: such a run is judged by the loop's
    lag, as the version that wrote it judged it (a lagging one is not PASSED now)."""
    import shutil

    from loadgate.jsonutil import dump_json, load_json

    run = tmp_path / "single"
    shutil.copytree(RUNS.parent / "runs-v2" / "single", run)
    health = load_json(run / "health.json")
    health["16"][0]["loop_lag_ms"]["p99"] = 50.0
    dump_json(run / "health.json", health)
    assert main(["report", str(run)]) == 30
    assert "carry no per-chunk stamp bound" in capsys.readouterr().out


def test_compare_says_ttft_changed_definition_between_records_v6_and_v7_of_a_chat_api(tmp_path, capsys):
    """A chat run's folder as records v6 wrote it, and the same records written today (v7 or later): compare names
    the older side and says how ttft's definition moved; two v7 folders, or a completions run, say
    nothing."""
    import shutil

    from loadgate.verdict import finish

    old = RUNS.parent / "runs-v6" / "single"
    new = tmp_path / "again"
    shutil.copytree(old, new)
    recs = list(read_records(old / "records.jsonl", include_warmup=True))
    (new / "records.jsonl").write_bytes(b"".join(r.to_json() for r in recs))
    assert (new / "records.jsonl").read_bytes().startswith(b'{"v":%d,' % SCHEMA_VERSION) and SCHEMA_VERSION >= 7
    finish(new)
    assert main(["compare", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "note: ttft's definition changed with records v7: single was recorded before it" in out
    twin = tmp_path / "twin"
    shutil.copytree(new, twin)
    assert main(["compare", str(new), str(twin)]) == 0
    assert "definition changed" not in capsys.readouterr().out
    v5 = RUNS.parent / "runs-v5" / "single"  # records v5 of a completions API: no reasoning to tell apart
    assert main(["compare", str(v5), str(new)]) == 0
    assert "definition changed" not in capsys.readouterr().out


def test_a_version_7_run_folder_is_read_without_conversations_and_judged_as_then(capsys):
    """Records of schema v7 (no `conversation`, `turn`, `turns`, `cached_tokens`) and a summary of version 7
    (a chat run): every record reads with none of them, the summary rebuilds with the same figures and
    no conversations or turn groups, and `report` gives the code that run's verdict.json holds."""
    from loadgate.analysis.summary import Summary, build_summary
    from loadgate.jsonutil import load_json

    run = RUNS.parent / "runs-v7" / "chat"
    assert (run / "records.jsonl").read_bytes().startswith(b'{"v":7,')
    recs = list(read_records(run / "records.jsonl", include_warmup=True))
    assert len(recs) == 28 and all(r.conversation is r.turn is r.turns is r.cached_tokens is None for r in recs)
    old = load_json(run / "summary.json")
    assert old["summary_version"] == 7 and "conversations" not in old["levels"]["4"]
    s, again = Summary.from_json(old), build_summary(run)
    assert s.summary_version == 7 and s.levels["4"].conversations is None
    for name, m in s.levels["4"].metrics.items():
        assert again.levels["4"].metrics[name] == m, name
    assert again.levels["4"].conversations is None and again.levels["4"].groups is None
    code = load_json(run / "verdict.json")["code"]
    assert main(["report", str(run)]) == code == 0
    out = capsys.readouterr().out
    assert "by turn" not in out and "conversations:" not in out


def test_a_version_8_run_folder_is_read_before_capacity_planning_and_judged_as_then(capsys):
    """A summary of version 8 (records v8, before the capacity search, ramps and time slices): it reads
    with the new fields null, rebuilds with the same figures at today's version, and `report` gives
    the code that run's verdict.json holds."""
    from loadgate.analysis.summary import SUMMARY_VERSION, Summary, build_summary
    from loadgate.jsonutil import load_json

    run = RUNS.parent / "runs-v8" / "single"
    assert (run / "records.jsonl").read_bytes().startswith(b'{"v":8,')
    recs = list(read_records(run / "records.jsonl", include_warmup=True))
    assert len(recs) == 64
    old = load_json(run / "summary.json")
    assert old["summary_version"] == 8
    s, again = Summary.from_json(old), build_summary(run)
    assert s.summary_version == 8 and again.summary_version == SUMMARY_VERSION == 9
    assert s.search is None and again.search is None  # not a search
    swept = Summary.from_json(load_json(RUNS / "sweep" / "summary.json"))  # goodput before token goodput
    g = swept.levels["1"].goodput
    assert g is not None and g.good_requests > 0 and g.token_goodput is g.good_output_tokens is None
    for name, m in s.levels["16"].metrics.items():
        assert again.levels["16"].metrics[name] == m, name
    code = load_json(run / "verdict.json")["code"]
    assert code == 0 and main(["report", str(run)]) == code
    assert "PASSED (exit 0)" in capsys.readouterr().out


def test_the_version_8_records_read_with_the_ramp_flag_off_and_all_in_the_figures_but_the_warmup():
    """Records v8 have no `ramp`: read as false, so every measured record stays in the figures (and
    the summary's `ramp_requests` is null, the run having no ramp)."""
    from loadgate.analysis.summary import build_summary

    run = RUNS.parent / "runs-v8" / "single"
    assert b'"ramp"' not in (run / "records.jsonl").read_bytes()
    recs = list(read_records(run / "records.jsonl", include_warmup=True))
    assert len(recs) == 64 and not any(r.ramp for r in recs) and sum(r.warmup for r in recs) == 16
    assert [r.excluded for r in recs] == [r.warmup for r in recs]
    assert len(list(read_records(run / "records.jsonl"))) == 48
    level = build_summary(run).levels["16"]
    assert level.requests == 48 and level.ramp_requests is None


def test_the_version_9_records_read_with_no_actor_or_node_and_report_gives_the_saved_verdict(capsys):
    """Records v9 (written before `load.distributed`) have no `actor` or `node`: read as null (this
    host sent them), every one readable, and `report` gives the verdict the run saved (this one was
    INVALID: it was written on a busy 2-core machine)."""
    from loadgate.jsonutil import load_json

    run = RUNS.parent / "runs-v9" / "single"
    raw = (run / "records.jsonl").read_bytes()
    assert raw.startswith(b'{"v":9,') and b'"actor"' not in raw and b'"node"' not in raw
    recs = list(read_records(run / "records.jsonl", include_warmup=True))
    assert len(recs) == 52 and all(r.v == SCHEMA_VERSION and r.actor is None and r.node is None for r in recs)
    code = load_json(run / "verdict.json")["code"]
    assert code == 30 and main(["report", str(run)]) == code
    assert "outcome: INVALID (exit 30" in capsys.readouterr().out

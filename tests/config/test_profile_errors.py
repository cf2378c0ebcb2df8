"""Malformed profiles: `loadgate validate` exits 2 with one line naming file, line, key and reason.

Each case is a small YAML text written to a temporary file. The expected message is
`loadgate: FILE:LINE: key.path: reason`; cases without a line (missing or empty file) and without
a key path (YAML syntax errors, top level) drop those parts.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

from loadgate.cli import main


class Case(NamedTuple):
    text: str
    line: int | None
    path: str
    reason: str


CASES: dict[str, Case] = {
    "unknown_top_level_key_suggests_closest": Case(
        "name: x\nsed: 3\n", 2, "sed", "unknown key 'sed' (did you mean 'seed'?)"),
    "unknown_top_level_key_lists_valid_keys_when_none_is_close": Case(
        "colour: red\n", 1, "colour", "unknown key 'colour' (valid keys: name, seed, target, workload, "),
    "unknown_nested_key_suggests_closest": Case(
        "name: x\nload:\n  concurency: 4\n", 3, "load.concurency",
        "unknown key 'concurency' (did you mean 'concurrency'?)"),
    "unknown_deep_key_in_sim_section": Case(
        "target:\n  sim:\n    speculative:\n      methd: ngram\n", 4, "target.sim.speculative.methd",
        "(did you mean 'method'?)"),
    "internal_field_is_not_settable": Case(
        "path: /etc\n", 1, "path", "unknown key 'path'"),
    "string_for_int": Case(
        "workload:\n  requests: lots\n", 2, "workload.requests",
        "expected an integer >= 1, got 'lots'"),
    "fractional_float_for_int": Case(
        "workload:\n  requests: 2.5\n", 2, "workload.requests", "expected an integer >= 1, got 2.5"),
    "yaml11_octal_is_not_a_number": Case(
        "seed: 010\n", 1, "seed", "expected an integer >= 0, got '010'"),
    "list_for_mapping": Case(
        "name: x\nload: [1, 2]\n", 2, "load", "expected a mapping, got a list"),
    "bool_for_int": Case(
        "load:\n  concurrency: true\n", 2, "load.concurrency",
        "expected an integer >= 1 or a list of them, got true"),
    "number_for_string": Case(
        "output:\n  run_id: 2024\n", 2, "output.run_id", "expected a string, got 2024 (put it in quotes)"),
    "negative_concurrency": Case(
        "# comment\nname: x\n\nload:\n  concurrency: -4\n", 5, "load.concurrency",
        "expected an integer >= 1 or a list of them, got -4"),
    "bad_item_in_concurrency_sweep": Case(
        "load:\n  concurrency:\n    - 1\n    - 0\n", 4, "load.concurrency[1]",
        "expected an integer >= 1, got 0"),
    "threshold_mapping_with_an_unknown_key": Case(
        "thresholds:\n  ttft:\n    - {threshold: \"p(99) < 1s\", abortOnFail: true}\n", 3,
        "thresholds.ttft[0].abortOnFail", "unknown key 'abortOnFail' (did you mean 'abort_on_fail'?)"),
    "threshold_mapping_without_its_threshold": Case(
        "thresholds:\n  ttft:\n    - \"p(99) < 1s\"\n    - {abort_on_fail: true}\n", 4,
        "thresholds.ttft[1]", "missing required key 'threshold'"),
    "abort_on_fail_not_a_bool": Case(
        "thresholds:\n  ttft: [{threshold: \"p(99) < 1s\", abort_on_fail: \"yes\"}]\n", 2,
        "thresholds.ttft[0].abort_on_fail", "expected true or false, got 'yes'"),
    "delay_abort_eval_not_a_duration": Case(
        "thresholds:\n  ttft: [{threshold: \"p(99) < 1s\", abort_on_fail: true, delay_abort_eval: 10 parsecs}]\n",
        2, "thresholds.ttft[0].delay_abort_eval",
        "expected seconds or a duration like '10s', '500ms' or '2m', got '10 parsecs'"),
    "delay_abort_eval_negative": Case(
        "thresholds:\n  ttft: [{threshold: \"p(99) < 1s\", abort_on_fail: true, delay_abort_eval: -3}]\n",
        2, "thresholds.ttft[0].delay_abort_eval", "expected a number >= 0 or a string, got -3"),
    "delay_abort_eval_without_abort_on_fail": Case(
        "thresholds:\n  ttft: [{threshold: \"p(99) < 1s\", delay_abort_eval: 10s}]\n", 2,
        "thresholds.ttft[0].delay_abort_eval", "holds the evaluation of abort_on_fail, which is not set"),
    "threshold_mapping_with_a_bad_threshold": Case(
        "thresholds:\n  ttft: [{threshold: \"p(99) < 1xs\", abort_on_fail: true}]\n", 2,
        "thresholds.ttft[0].threshold", "unknown unit 'xs' (expected us, ms or s)"),
    "abort_on_fail_against_baseline": Case(
        "thresholds:\n  ttft: [{threshold: \"p(99) < baseline * 1.1\", abort_on_fail: true}]\n", 2,
        "thresholds.ttft[0].abort_on_fail", "a threshold against baseline cannot abort a level"),
    "abort_on_fail_on_a_whole_level_figure": Case(
        "thresholds:\n  output_throughput: [{threshold: \"> 100 tok/s\", abort_on_fail: true}]\n", 2,
        "thresholds.output_throughput[0].abort_on_fail",
        "output_throughput is a figure of the whole level, not of the requests finished so far"),
    "abort_on_fail_in_a_search": Case(
        "load:\n  search: {over: concurrency, lo: 1, hi: 8, resolution: 0.5}\n"
        "thresholds:\n  ttft: [{threshold: \"p(50) < 1s\", abort_on_fail: true}]\n", 4,
        "thresholds.ttft[0].abort_on_fail", "abort_on_fail is not built for it yet"),
    "abort_on_fail_in_an_ab_run": Case(
        "ab:\n  baseline: {endpoint: embedded}\nthresholds:\n  ttft: [{threshold: \"p(50) < 1s\", abort_on_fail: true}]\n",
        4, "thresholds.ttft[0].abort_on_fail", "abort_on_fail in an A/B run is not built yet"),
    "search_with_a_threshold_relative_to_the_baseline": Case(
        "load:\n  search: {over: rate, lo: 1, hi: 8, resolution: 0.1}\nthresholds: {ttft: [\"p(50) < baseline * 1.1\"]}\n",
        3, "thresholds", "ttft: \"p(50) < baseline * 1.1\" reads the baseline, but a search judges each probe "
        "within its own run, where there is none; give a fixed limit"),
    "search_without_thresholds": Case(
        "load:\n  search: {over: rate, lo: 1, hi: 8, resolution: 0.1}\n", 2, "load.search",
        "a search judges each probe on the profile's thresholds: add some"),
    "search_lo_not_below_hi": Case(
        "load:\n  search: {over: rate, lo: 8, hi: 8, resolution: 0.1}\nthresholds: {ttft: [\"p(50) < 1s\"]}\n",
        2, "load.search.lo", "the search needs lo < hi, got lo 8 and hi 8"),
    "search_over_concurrency_fractional": Case(
        "load:\n  search: {over: concurrency, lo: 1.5, hi: 8, resolution: 0.1}\n", 2, "load.search.lo",
        "a concurrency is a whole number of requests in flight, got 1.5"),
    "search_with_concurrency": Case(
        "load:\n  concurrency: 4\n  search: {lo: 1, hi: 8, resolution: 0.1}\nthresholds: {ttft: [\"p(50) < 1s\"]}\n",
        2, "load.concurrency", "load.search chooses each probe's concurrency: no concurrency"),
    "search_resolution_finer_than_probes_resolve": Case(
        "workload: {requests: 100}\nload:\n  search: {over: rate, lo: 1, hi: 8, resolution: 0.05}\n"
        "thresholds: {ttft: [\"p(90) < 1s\"]}\n", 3, "load.search.resolution",
        "0.05 is finer than probes of 100 requests resolve (1 / sqrt(100) = 0.1): raise workload.requests to 400"),
    "search_probe_too_small_for_p99": Case(
        "workload: {requests: 400}\nload:\n  search: {over: rate, lo: 1, hi: 8, resolution: 0.05}\n"
        "thresholds: {ttft: [\"p(50) < 1s\", \"p(99) < 2s\"]}\n", 1, "workload.requests",
        "each search probe sends workload.requests (400); the threshold ttft \"p(99) < 2s\" reads p(99), which "
        "needs at least 1,000 (10 / (1 - 99%))"),
    "rate_zero": Case(
        "load:\n  rate: 0\n", 2, "load.rate", "expected a number > 0 or a list of them, got 0"),
    "rate_sweep_zero": Case(
        "load:\n  rate:\n    - 5\n    - 0\n", 4, "load.rate[1]", "expected a number > 0, got 0"),
    "slice_s_zero": Case(
        "report:\n  slice_s: 0\n", 2, "report.slice_s", "expected a number > 0, got 0"),
    "slice_s_negative": Case(
        "report: {slice_s: -5}\n", 1, "report.slice_s", "expected a number > 0, got -5"),
    "slice_s_not_shorter_than_the_duration": Case(
        "load:\n  concurrency: 2\n  duration_s: 30\nreport:\n  slice_s: 30\n", 5, "report.slice_s",
        "30 s is not shorter than load.duration_s (30 s): each level would be one slice, its own figures; give a "
        "shorter slice"),
    "slice_s_cuts_the_duration_into_too_many_slices": Case(
        "load:\n  concurrency: 2\n  duration_s: 100\nreport:\n  slice_s: 0.001\n", 5, "report.slice_s",
        "0.001 s cuts load.duration_s (100 s) into more than 10,000 slices; give at least 0.01 s"),
    "slowdown_factor_zero": Case(
        "target:\n  sim:\n    slowdown: {after_s: 5, factor: 0}\n", 3, "target.sim.slowdown.factor",
        "expected a number in (0, 1000], got 0"),
    "rate_nan": Case(
        "load:\n  rate: .nan\n", 2, "load.rate", "expected a number > 0 or a list of them, got nan"),
    "k_above_maximum": Case(
        "target:\n  sim:\n    speculative: {method: ngram, k: 17}\n", 3, "target.sim.speculative.k",
        "expected an integer in [1, 16], got 17"),
    "acceptance_probability_above_one": Case(
        "target:\n  sim:\n    speculative:\n      method: draft_model\n      acceptance:\n"
        "        - 0.9\n        - 0.7\n        - 1.5\n",
        8, "target.sim.speculative.acceptance[2]", "expected a number in [0, 1], got 1.5"),
    "logprob_tier_without_logprobs": Case(
        "exactness:\n  logprobs: 0\n  contract: {tier: logprob-tolerance, tolerance: 0.0}\n", 2, "exactness.logprobs",
        "the 'logprob-tolerance' contract reads logprobs: needs at least 1, got 0"),
    "near_tie_tier_with_one_logprob": Case(
        "exactness:\n  logprobs: 1\n  contract: {tier: near-tie-tolerant, gap: 0.1}\n", 2, "exactness.logprobs",
        "needs at least 2, got 1"),
    "extra_metrics_url_not_http": Case(
        "target:\n  extra_metrics_urls: [http://127.0.0.1:9400/metrics, dcgm:9400]\n", 2,
        "target.extra_metrics_urls[1]", "expected an http:// or https:// URL, got 'dcgm:9400'"),
    "extra_metrics_urls_not_a_list_of_strings": Case(
        "target:\n  extra_metrics_urls: [9400]\n", 2, "target.extra_metrics_urls[0]", "expected a string, got 9400"),
    "metrics_interval_zero": Case(
        "target:\n  metrics_interval_s: 0\n", 2, "target.metrics_interval_s", "expected a number > 0, got 0"),
    "metrics_series_cap_negative": Case(
        "target:\n  metrics_series_max_mb: -1\n", 2, "target.metrics_series_max_mb",
        "expected a number > 0, got -1"),
    "api_not_in_literal": Case(
        "target:\n  api: grpc\n", 2, "target.api",
        "expected one of 'openai-completions', 'openai-chat', 'llamacpp', 'llamacpp-openai-completions', 'llamacpp-openai-chat', 'sglang', got 'grpc'"),
    "api_read_as_a_number": Case(
        "target:\n  api: 1e5\n", 2, "target.api",
        "expected one of 'openai-completions', 'openai-chat', 'llamacpp', 'llamacpp-openai-completions', 'llamacpp-openai-chat', 'sglang', got '1e5'"),
    "literal_typo_gets_suggestion": Case(
        "load:\n  rate: 2\n  arrival: posson\n", 3, "load.arrival", "(did you mean 'poisson'?)"),
    "uniform_without_max": Case(
        "workload:\n  input_len:\n    dist: uniform\n    min: 64\n", 2, "workload.input_len.max",
        "required when dist is 'uniform'"),
    "key_that_the_family_does_not_read": Case(
        "workload:\n  output_len:\n    dist: fixed\n    value: 128\n    max: 512\n", 5,
        "workload.output_len.max", "not used when dist is 'fixed'"),
    "min_greater_than_max": Case(
        "workload:\n  input_len:\n    dist: uniform\n    min: 10\n    max: 5\n", 5,
        "workload.input_len.max", "must be >= min (10), got 5"),
    "both_concurrency_and_rate": Case(
        "load:\n  rate: 5\n  concurrency: 4\n", 3, "load.concurrency",
        "give exactly one of `concurrency` (closed loop) or `rate` (open loop)"),
    "neither_concurrency_nor_rate": Case(
        "name: x\nload:\n  warmup_requests: 3\n", 2, "load.concurrency",
        "give exactly one of `concurrency` (closed loop) or `rate` (open loop)"),
    "max_in_flight_in_closed_loop": Case(
        "load:\n  concurrency: 4\n  max_in_flight: 8\n", 3, "load.max_in_flight",
        "only used with `rate` (open loop)"),
    "endpoint_not_a_url": Case(
        "target:\n  endpoint: localhost:8000\n", 2, "target.endpoint",
        "expected 'embedded' or an http:// or https:// URL, got 'localhost:8000'"),
    "empty_acceptance_while_speculating": Case(
        "target:\n  sim:\n    speculative:\n      method: ngram\n      acceptance: []\n", 5,
        "target.sim.speculative.acceptance", "needs at least one probability"),
    "header_value_not_a_string": Case(
        "target:\n  headers:\n    X-Tenant: 42\n", 3, "target.headers.X-Tenant",
        "expected a string, got 42"),
    "duplicate_key": Case(
        "name: a\nload:\n  rate: 2\n  rate: 3\n", 4, "load.rate",
        "duplicate key 'rate' (first given at line 3)"),
    "non_string_key": Case(
        "load:\n  concurrency: 2\n  7: x\n", 3, "load", "keys must be strings, got 7"),
    "merge_key_refused": Case(
        "load:\n  <<: {rate: 2}\n", 2, "load", "merge keys ('<<') are not supported"),
    "mixture_component_with_bad_distribution": Case(
        "workload:\n  input_len:\n    dist: mixture\n    components:\n      - weight: 1\n"
        "        dist: {dist: fixed, value: 10}\n      - weight: 2\n        dist:\n"
        "          dist: uniform\n          min: 100\n          max: 50\n",
        11, "workload.input_len.components[1].dist.max", "must be >= min (100), got 50"),
    "mixture_component_with_zero_weight": Case(
        "workload:\n  input_len:\n    dist: mixture\n    components:\n"
        "      - {weight: 0, dist: {dist: fixed, value: 3}}\n",
        5, "workload.input_len.components[0].weight", "expected a number > 0, got 0"),
    "mixture_component_without_distribution": Case(
        "workload:\n  input_len:\n    dist: mixture\n    components:\n      - weight: 1\n",
        5, "workload.input_len.components[0].dist.value", "required when dist is 'fixed'"),
    "empty_section": Case(
        "target:\n  sim:\n    # speculative: {method: ngram}\nseed: 1\n", 2, "target.sim",
        "expected a mapping, got null (an empty section: remove it or write {})"),
    "long_string_is_shortened_in_message": Case(
        "target:\n  api: " + "x" * 200 + "\n", 2, "target.api", "got '" + "x" * 57 + "...'"),
    "top_level_is_a_list": Case(
        "- name: x\n- seed: 1\n", 1, "", "the top level must be a mapping of settings, got a list"),
    "yaml_syntax_error": Case(
        "name: x\nload:\n  rate: [1, 2\nseed: 3\n", 4, "", "YAML syntax error"),
    "tab_indentation": Case(
        "load:\n\trate: 2\n", 2, "", "YAML syntax error"),
    "empty_file": Case(
        "", None, "", "the file is empty, expected a mapping of settings"),
    "comments_only": Case(
        "# nothing here yet\n", None, "", "the file is empty"),
}


def _validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["validate", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


def _assert_one_line_error(err: str, file: str, line: int | None, path: str, reason: str) -> None:
    assert err.endswith("\n") and err.count("\n") == 1, repr(err)
    where = f"{file}:{line}:" if line else f"{file}:"
    prefix = f"loadgate: {where} {path}: " if path else f"loadgate: {where} "
    assert err.startswith(prefix), (err, prefix)
    assert reason in err, (err, reason)


@pytest.mark.parametrize("name", list(CASES))
def test_malformed_profile_gives_one_line_error_with_file_line_key_and_reason(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = CASES[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(case.text)
    code, out, err = _validate(path, capsys)
    assert code == 2
    assert out == ""
    _assert_one_line_error(err, str(path), case.line, case.path, case.reason)


def test_missing_file_is_a_profile_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nope.yaml"
    code, _, err = _validate(path, capsys)
    assert code == 2
    _assert_one_line_error(err, str(path), None, "", "file not found")


def test_non_utf8_file_is_a_profile_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    code, _, err = _validate(path, capsys)
    assert code == 2
    _assert_one_line_error(err, str(path), None, "", "not UTF-8 text")


def test_alias_bomb_is_refused_not_expanded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 8)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    code, _, err = _validate(path, capsys)
    assert code == 2
    assert err.count("\n") == 1 and "too large" in err


def test_syntax_error_reports_yaml_line_and_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "colon.yaml"
    path.write_text("name: x\nload:\n  rate: 2\n  concurrency: a: b\n")
    code, _, err = _validate(path, capsys)
    assert code == 2
    _assert_one_line_error(err, str(path), 4, "", "(line 4, column ")


def test_cases_are_distinct_and_numerous() -> None:
    assert len(CASES) >= 20
    assert len({c.text for c in CASES.values()}) == len(CASES)


FILE_CASES = {
    # (profile text, line, key path, reason); `there` is a file and `folder` a directory beside the profile
    "tokenizer": ("workload:\n  tokenizer: nope.json\n", 2, "workload.tokenizer", "file not found: "),
    "trace": ("workload:\n  trace: nope.jsonl\n", 2, "workload.trace", "file not found: "),
    "empirical_in_a_mixture": (
        "workload:\n  input_len:\n    dist: mixture\n    components:\n"
        "      - {dist: {dist: fixed, value: 8}}\n      - dist:\n          dist: empirical\n"
        "          file: folder\n", 8, "workload.input_len.components[1].dist.file",
        "is a directory, expected a file: "),
    "corpus": ("exactness:\n  corpus: nope.jsonl\n", 2, "exactness.corpus", "file not found: "),
    "name_too_long": ("workload:\n  trace: " + "x" * 300 + "\n", 2, "workload.trace",
                      "cannot read (File name too long): "),
    "baseline": ("exactness:\n  corpus: there\n  baseline: base.json\n", 3, "exactness.baseline",
                 "file not found: "),
}


@pytest.mark.parametrize("name", list(FILE_CASES))
def test_a_file_the_profile_names_must_exist_relative_to_the_profile(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`validate` (and `run` before anything is sent) name the key, its line and the path looked at,
    resolved against the profile's folder."""
    text, line, key, reason = FILE_CASES[name]
    (tmp_path / "folder").mkdir()
    (tmp_path / "there").write_text("{}\n")
    path = tmp_path / "p.yaml"
    path.write_text(text)
    code, out, err = _validate(path, capsys)
    assert code == 2 and out == ""
    _assert_one_line_error(err, str(path), line, key, reason)
    written = text.split(key.rsplit(".", 1)[1] + ": ")[1].split("\n")[0]
    assert err.rstrip("\n").endswith(str(tmp_path / written))


def test_files_that_exist_validate_and_a_run_stops_on_a_missing_one_before_sending(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "lens.csv").write_text("length,weight\n8,1\n16,1\n")
    path = tmp_path / "p.yaml"
    path.write_text("workload:\n  input_len: {dist: empirical, file: lens.csv}\n")
    assert _validate(path, capsys)[0] == 0
    path.write_text("target: {endpoint: 'http://127.0.0.1:9'}\n"
                    "workload:\n  input_len: {dist: empirical, file: gone.csv}\n")
    assert main(["run", "-q", "--unverified", str(path)]) == 2  # not 3: the engine was never contacted
    _assert_one_line_error(capsys.readouterr().err, str(path), 3, "workload.input_len.file", "file not found")


@pytest.mark.parametrize("api,line,reason", [
    ("openai-chat", '{"prompt_ids": [1, 2], "output_len": 4}',
     "prompt_ids cannot be sent to target.api 'openai-chat', which takes text"),
    ("openai-completions", '{"prompt_ids": [1, 99999999999], "output_len": 4}',
     "prompt_ids: expected a non-empty list of token ids"),
    ("openai-completions", '{"input_len": 0, "output_len": 4}', "input_len: expected an integer >= 1"),
])
def test_validate_reads_every_trace_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], api: str, line: str,
                                         reason: str) -> None:
    """A trace is checked line by line by `validate` (and by `run` before the exactness check)."""
    (tmp_path / "t.jsonl").write_text('{"input_len": 8, "output_len": 4}\n' + line + "\n")
    path = tmp_path / "p.yaml"
    path.write_text(f"target: {{api: {api}}}\nworkload: {{trace: t.jsonl}}\n")
    code, out, err = _validate(path, capsys)
    assert code == 2 and out == ""
    assert err == f"loadgate: {tmp_path / 't.jsonl'}:2: {reason}" + err.split(reason, 1)[1]
    assert err.count("\n") == 1


def test_a_slice_not_shorter_than_a_timed_traces_window_is_refused() -> None:
    from loadgate.config.profile import Dataset, Load, Profile, Report, Workload

    trace = Workload(dataset=Dataset(path="t.jsonl", format="trace"))
    load = Load(schedule="trace", trace_length_s=10.0, trace_speed=2.0)  # 10 s of trace time in 5 s
    assert Profile(workload=trace, load=load, report=Report(slice_s=5.0)).check() == [(
        "report.slice_s", "5 s is not shorter than the trace's window (load.trace_length_s / load.trace_speed = 5 s): "
        "each level would be one slice, its own figures; give a shorter slice")]
    assert Profile(workload=trace, load=load, report=Report(slice_s=4.9)).check() == []
    assert Profile(load=Load(concurrency=2), report=Report(slice_s=1e6)).check() == []  # a length unknown beforehand


def test_a_search_in_an_ab_profile_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # (refused until each run of an A/B could be a whole search: docs/capacity.md, the A/B capacity line)
    path = tmp_path / "ab-search.yaml"
    path.write_text("target: {endpoint: embedded}\nab: {baseline: {endpoint: embedded}}\n"
                    "load:\n  search: {over: rate, lo: 1, hi: 8, resolution: 0.1}\nthresholds: {ttft: [\"p(50) < 1s\"]}\n")
    code, out, err = _validate(path, capsys)
    assert (code, err) == (0, "")

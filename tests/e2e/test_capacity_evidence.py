"""A capacity search's evidence end to end on the embedded simulator (docs/capacity.md): one search over
concurrency 1–16 whose TTFT threshold fails once requests queue (more in flight than the simulator's
8 slots), judged on five thresholds of every kind; the summary's `search` section, the console's
capacity section and token goodput are checked against arithmetic on the run's own records."""

from __future__ import annotations

import base64
import io
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from loadgate.analysis.summary import Summary, build_summary
from loadgate.cli import main
from loadgate.jsonutil import clean, load_json
from loadgate.records import Record, read_records
from tests.e2e.test_capacity_search import write
from tests.stats_truth import binom_cdf, quantile_ranks

TTFT_SLO_MS = 20.0
THRESHOLDS = {"ttft": ["p(50) < 20ms"], "e2e": ["avg < 2s"], "errors": ["rate < 50%"],
              "output_throughput": ["> 1 tok/s"], "token_goodput": ["> 1 tok/s"]}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("evidence")
    p = write(tmp, "ev", {"over": "concurrency", "lo": 1, "hi": 16, "resolution": 0.25}, THRESHOLDS, 24)
    doc = yaml.safe_load(p.read_text())
    doc["slo"] = {"ttft_ms": TTFT_SLO_MS}
    p.write_text(yaml.safe_dump(doc))
    assert main(["run", "-q", str(p)]) == 0
    return tmp / "out" / "ev"


def _by_level(run: Path) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = {}
    for r in read_records(run / "records.jsonl"):
        out.setdefault(str(r.level), []).append(r)
    return out


def _ttft_ms(r: Record) -> float:
    return (r.start_ns + r.chunk_ns[0] - r.origin_ns) / 1e6


def _window_s(recs: list[Record]) -> float:
    return (max(r.end_ns for r in recs) - min(r.origin_ns for r in recs)) / 1e9


def _evidence(probe: dict[str, Any], metric: str) -> dict[str, Any]:
    return next(t for t in probe["thresholds"] if t["metric"] == metric)


def test_the_search_section_holds_every_probe_in_the_order_it_ran_with_each_figure_and_its_interval(run: Path) -> None:
    meta, summary = load_json(run / "meta.json"), load_json(run / "summary.json")
    section, recs = summary["search"], _by_level(run)
    assert (section["over"], section["lo"], section["hi"], section["resolution"]) == ("concurrency", 1, 16, 0.25)
    assert [p["level"] for p in section["probes"]] == [str(lv) for lv in meta["levels"]]
    for p in section["probes"]:
        rs = recs[p["level"]]
        assert p["load"] == float(p["level"]) and len(rs) == 24 and all(r.succeeded for r in rs)
        ttft = sorted(_ttft_ms(r) for r in rs)
        t = _evidence(p, "ttft")  # p(50): the median, its interval the order statistics at the binomial ranks
        lo, hi, coverage = quantile_ranks(24, 50.0)
        assert t["statistic"] == "p50" and t["unit"] == "ms" and t["limit"] == 20.0
        assert t["observed"] == pytest.approx(float(np.percentile(ttft, 50)), rel=1e-12)
        assert (t["ci"]["low"], t["ci"]["high"]) == pytest.approx((ttft[lo - 1], ttft[hi - 1]), rel=1e-12)
        assert t["ci"]["coverage"] == pytest.approx(coverage) and t["passed"] == (t["observed"] < 20.0)
        e2e = [(r.end_ns - r.origin_ns) / 1e6 for r in rs]
        m = _evidence(p, "e2e")  # avg: a t-interval
        half = m["observed"] - m["ci"]["low"]
        assert m["observed"] == pytest.approx(math.fsum(e2e) / 24, rel=1e-12) and m["ci"]["method"] == "t-interval"
        assert half == pytest.approx(2.0686576 * float(np.std(e2e, ddof=1)) / math.sqrt(24), rel=1e-6)  # t(.975, 23)
        err = _evidence(p, "errors")  # rate 0 of 24: Clopper-Pearson [0, 1 - 0.025^(1/24)]
        assert err["observed"] == 0.0 and err["ci"]["low"] == 0.0
        assert binom_cdf(0, 24, err["ci"]["high"]) == pytest.approx(0.025)
        for name in ("output_throughput", "token_goodput"):  # one value per probe: no interval, and why
            x = _evidence(p, name)
            assert x["ci"]["low"] is x["ci"]["high"] is None
            assert x["ci"]["reason"] == "a throughput over the probe's window: one value, no sampling interval"
        assert p["passed"] == all(x["passed"] for x in p["thresholds"])
    loads = {p["load"]: p["passed"] for p in section["probes"]}
    assert loads[1.0] and not loads[16.0]  # one in flight: no queue; 16 in flight on 8 slots: half of them wait
    failing = min(x for x, ok in loads.items() if not ok)
    passing = max(x for x, ok in loads.items() if ok and x < failing)
    assert section["bracket"] == {"passing": passing, "failing": failing} and section["answer"] == passing
    assert section["ended"] == "answer below hi"
    assert (failing - passing) / passing <= 0.25 or failing - passing == 1  # within the resolution, or adjacent
    assert {t["level"] for t in load_json(run / "verdict.json")["thresholds"]} == {f"{passing:g}"}


def test_report_rebuilds_the_same_search_section_from_the_folder(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    written = load_json(run / "summary.json")["search"]
    again = build_summary(run)
    assert again.search is not None and clean(again.search.to_json()) == written
    assert Summary.from_json(load_json(run / "summary.json")).search == again.search  # and reads back typed
    assert main(["report", "--format", "json", str(run)]) == 0
    import orjson

    assert orjson.loads(capsys.readouterr().out)["search"] == written


def test_token_goodput_is_the_output_tokens_of_the_requests_within_the_slo_per_second_of_the_window(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary, mixed = load_json(run / "summary.json"), 0
    for lv, rs in _by_level(run).items():
        good = [r for r in rs if r.succeeded and _ttft_ms(r) <= TTFT_SLO_MS]
        tokens = sum(sum(r.chunk_tokens) for r in good)
        g = summary["levels"][lv]["goodput"]
        assert g["good_requests"] == len(good) and g["good_output_tokens"] == tokens
        assert g["token_goodput"] == tokens / _window_s(rs)
        mixed += 0 < len(good) < len(rs)
        probe = next(p for p in summary["search"]["probes"] if p["level"] == lv)
        assert _evidence(probe, "token_goodput")["observed"] == g["token_goodput"]  # what a threshold reads
    assert mixed  # at 16 in flight the queued half misses the SLO: token goodput is below output throughput there
    assert main(["report", "--format", "csv", str(run)]) == 0  # a row of the summary table per level
    rows = [line.split(",") for line in capsys.readouterr().out.splitlines() if ",token_goodput," in line]
    assert {r[0]: (int(r[3]), float(r[4])) for r in rows} == {
        lv: (g["good_requests"], g["token_goodput"]) for lv, g in ((lv, x["goodput"]) for lv, x in summary["levels"].items())}


def test_the_console_capacity_section_replaces_the_best_listed_level(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    section = load_json(run / "summary.json")["search"]
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    b = section["bracket"]
    assert (f"highest concurrency within the thresholds: {section['answer']:g} (bracket {b['passing']:g}–"
            f"{b['failing']:g}, resolution 25 %)") in out.splitlines()
    assert "highest concurrency meeting the SLOs" not in out  # capacity_table's pick is not printed
    head = out.splitlines().index("capacity (search over concurrency):")
    table = out.splitlines()[head + 2:head + 4 + len(section["probes"])]
    assert re.fullmatch(r"probe\s+concurrency\s+verdict\s+e2e avg < 2s\s+errors rate < 50%\s+output_throughput > 1 "
                        r"tok/s\s+token_goodput > 1 tok/s\s+ttft p\(50\) < 20ms", table[0])
    for k, (line, p) in enumerate(zip(table[2:], section["probes"], strict=True), 1):
        t = _evidence(p, "ttft")
        verdict = ("pass" if p["passed"] else "FAIL") + (" (answer)" if p["load"] == section["answer"] else "")
        assert line.startswith(f"{k:<9}{p['load']:<15g}{verdict}"), line
        assert f"{t['observed']:.4g} ms ({t['ci']['low']:.4g}–{t['ci']['high']:.4g})" in line
        assert "0% (0%–14.25%)" in line
    assert out.splitlines()[head + 4 + len(section["probes"])].startswith("in brackets: 95% confidence intervals")
    assert f"token goodput {_evidence(section['probes'][0], 'token_goodput')['observed']:,.1f} tok/s" in out
    assert main(["report", "--format", "markdown", str(run)]) == 0  # the same section, as a text block
    md = capsys.readouterr().out
    assert "```text\ncapacity (search over concurrency):\nhighest concurrency within the thresholds: " in md


def test_the_html_report_plots_each_threshold_figure_against_the_load(run: Path) -> None:
    assert main(["report", "--html", str(run)]) == 0
    page = (run / "report.html").read_text()
    m = re.search(r'<img alt="capacity_search" src="data:image/png;base64,([^"]+)">', page)
    assert m is not None
    png = base64.b64decode(m.group(1))
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    from matplotlib import image

    pixels = image.imread(io.BytesIO(png), format="png")
    assert pixels.shape[0] > 300 and pixels.shape[1] > 600  # a real picture, not an empty one
    assert len(np.unique(pixels.reshape(-1, pixels.shape[2]), axis=0)) > 50
    assert "highest concurrency within the thresholds:" in page

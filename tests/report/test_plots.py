"""Plots and the HTML report, on real runs against the simulator: every PNG is a real, non-blank
image of the promised size; the report is self-contained; the data behind the plots matches the
records and the metric definitions."""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("matplotlib")

import matplotlib.image as mpimg  # noqa: E402
import numpy as np  # noqa: E402

from loadgate.analysis.metrics import summarize  # noqa: E402
from loadgate.analysis.summary import (
    build_summary,  # noqa: E402
    level_summary,  # noqa: E402
)
from loadgate.config.simconfig import SimConfig, SpeculativeConfig  # noqa: E402
from loadgate.core.figures import figure  # noqa: E402
from loadgate.errors import UsageError  # noqa: E402
from loadgate.records import (
    Record,  # noqa: E402
    read_records,  # noqa: E402
)
from loadgate.report import plots  # noqa: E402
from loadgate.report.html import level_table_html, write_comparison_html, write_html  # noqa: E402
from loadgate.report.timeline import TIMELINE_SIZE  # noqa: E402
from loadgate.sim.process import SimProcess  # noqa: E402
from tests.recs import make_record  # noqa: E402
from tests.simtruth import profile_for, run  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_self_contained(html: str) -> None:
    """Nothing on the page is fetched from anywhere: no URLs, links, scripts or style imports."""
    low = html.lower()
    for bad in ("http://", "https://", "<script", "<link", "@import", "url(", "href="):
        assert bad not in low, bad


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three real run folders: speculation on, speculation off, and a concurrency sweep (1, 4)."""
    out: dict[str, Path] = {}
    spec = SimConfig(seed=3, speculative=SpeculativeConfig(method="draft_model", k=4), decode_step_us=1000)
    with SimProcess(spec) as sim:
        out["spec"], _, _ = run(profile_for(sim.url, tmp_path_factory.mktemp("spec"), requests=30, concurrency=4))
    with SimProcess(SimConfig(seed=3, decode_step_us=1000)) as sim:
        out["plain"], _, _ = run(profile_for(sim.url, tmp_path_factory.mktemp("plain"), requests=30, concurrency=4))
        out["sweep"], _, _ = run(profile_for(sim.url, tmp_path_factory.mktemp("sweep"), requests=20,
                                             concurrency=(1, 4), osl=24))  # type: ignore[arg-type]
    return out


def recs(run_dir: Path) -> list[dict[str, Any]]:
    return list(read_records(run_dir / "records.jsonl"))


def check_png(path: Path, size_in: tuple[float, float]) -> None:
    """A real PNG of size_in inches at plots.DPI (to the pixel), with more than a handful of colours."""
    assert path.exists()
    assert path.read_bytes()[:8] == PNG_MAGIC
    img = mpimg.imread(path)
    w, h = size_in[0] * plots.DPI, size_in[1] * plots.DPI
    assert abs(img.shape[0] - h) < 1 and abs(img.shape[1] - w) < 1, (img.shape, w, h)
    colours = np.unique((img[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 20, f"{path.name} looks blank ({len(colours)} colours)"


def test_each_plot_is_a_non_blank_png_of_the_expected_size(runs, tmp_path):
    data = {"speculative": recs(runs["spec"]), "plain": recs(runs["plain"])}
    p = plots.latency_cdfs(data, tmp_path / "cdf.png")
    check_png(p, plots.cdf_size(3, 2))
    p = plots.latency_cdfs(data, tmp_path / "cdf2.png", metrics=("tpot", "inter_chunk"))
    check_png(p, plots.cdf_size(2, 2))
    check_png(plots.itl_by_position(data, tmp_path / "itl.png"), plots.ITL_SIZE)
    check_png(plots.tokens_per_chunk(data, tmp_path / "tpc.png"), plots.CHUNK_SIZE)
    levels = [(float(lv), s) for lv, s in build_summary(runs["sweep"]).levels.items()]
    p = plots.sweep(levels, tmp_path / "sweep.png", slo={"ttft_ms": 50.0, "tpot_ms": 5.0, "e2e_ms": None})
    check_png(p, plots.SWEEP_SIZE)
    check_png(plots.sweep({"a": levels, "b": levels[:1]}, tmp_path / "sweep2.png"), plots.SWEEP_SIZE)


def test_plots_of_runs_without_samples_still_render(tmp_path):
    failed = make_record(error={"kind": "timeout", "detail": ""})
    data: dict[str, list[Record]] = {"empty": [], "failed": [failed]}
    for fn, size in ((plots.itl_by_position, plots.ITL_SIZE), (plots.tokens_per_chunk, plots.CHUNK_SIZE)):
        check_png(fn(data, tmp_path / f"{fn.__name__}.png"), size)
    check_png(plots.latency_cdfs(data, tmp_path / "cdf.png", metrics=("ttft",)), plots.cdf_size(1, 2))
    assert plots.chunk_token_fractions([failed]) == {}


def test_a_zero_percentile_on_a_log_axis_renders_without_layout_warnings(tmp_path, recwarn):
    """Events that arrive in one read share a stamp, so ITL can be 0 for most samples (p50 0) while
    the rest spans decades (log axis): the p50 marker has no place there and is left out; drawing
    it collapsed matplotlib's layout (seen on llama-server at 4 slots)."""
    rec = make_record(headers_ns=0, end_ns=80_000_000,
                      chunk_ns=[10_000_000] * 30 + [10_400_000, 15_000_000, 60_000_000], chunk_tokens=[1] * 33)
    x = plots.metric_samples([rec], "itl")
    assert np.median(x) == 0 and x[x > 0].max() / x[x > 0].min() > 100
    out = plots.latency_cdfs({"run": [rec]}, tmp_path / "cdf.png", metrics=("itl",))
    check_png(out, plots.cdf_size(1, 1))
    assert not [w for w in recwarn if "constrained_layout" in str(w.message)]


def test_tokens_per_chunk_fractions_match_the_records(runs):
    for name in ("spec", "plain"):
        rs = recs(runs[name])
        counts = Counter(n for r in rs if r.error is None for n in r.chunk_tokens)
        total = sum(counts.values())
        got = plots.chunk_token_fractions(rs)
        assert got == {k: counts[k] / total for k in sorted(counts)}
        assert sum(got.values()) == pytest.approx(1.0)
    assert plots.chunk_token_fractions(recs(runs["plain"])) == {1: 1.0}
    assert max(plots.chunk_token_fractions(recs(runs["spec"]))) > 1  # speculation packs several tokens


def test_itl_positions_line_up_with_the_itl_metric(runs):
    rs = [r for r in recs(runs["spec"]) if r.error is None]
    pos, val = plots.itl_position_samples(rs)
    assert val.tolist() == [s for r in rs for s in figure("itl").samples(r)]
    assert pos.size == sum(sum(r.chunk_tokens) - r.chunk_tokens[0] for r in rs)
    r = rs[0]
    p1, v1 = plots.itl_position_samples([r])
    n, c = r.chunk_tokens, r.chunk_ns
    # the tokens of chunk 2 sit right after those of chunk 1, each with chunk 2's gap spread over them
    assert p1[: n[1]].tolist() == list(range(n[0] + 1, n[0] + n[1] + 1))
    assert v1[0] == pytest.approx((c[1] - c[0]) / 1e6 / n[1])
    assert p1.max() == sum(n)
    b = plots.bucket_stats(pos, val)
    assert b["center"].size > 3 and np.all(b["p90"] >= b["p50"]) and int(b["count"].sum()) <= pos.size


def test_html_report_is_self_contained_with_every_plot_embedded(runs):
    run_dir = runs["sweep"]
    (run_dir / "exactness.json").write_bytes(orjson.dumps({
        "passed": True, "reasons": [], "verdicts": {"identical": 40, "within_tolerance": 2},
        "contract": {"tier": "bit-exact", "words": "bit-exact: every token id equal to the baseline's"}}))
    out = write_html(run_dir)
    assert out == run_dir / "report.html"
    html = out.read_text()
    pngs = sorted(p.name for p in (run_dir / "plots").glob("*.png"))
    assert pngs == ["itl_by_position.png", "latency_cdfs.png", "server_timeline.png", "sweep.png",
                    "tokens_per_chunk.png"]  # the server's series over time: the run kept its /metrics
    assert html.count("data:image/png;base64,") == len(pngs)
    assert_self_contained(html)
    assert run_dir.name in html and "<table>" in html and "sim-tiny" in html
    assert "concurrency 1" in html and "concurrency 4" in html
    assert "within_tolerance" in html and "every token id equal" in html
    check_png(run_dir / "plots" / "sweep.png", plots.SWEEP_SIZE)
    check_png(run_dir / "plots" / "server_timeline.png", TIMELINE_SIZE)


def test_single_level_report_has_no_sweep_and_renders_missing_figures_as_na(runs, tmp_path):
    out = write_html(runs["plain"], tmp_path / "r.html")
    html = out.read_text()
    assert html.count("data:image/png;base64,") == 4 and not (runs["plain"] / "plots" / "sweep.png").exists()
    assert "Exactness" not in html


PROFILE = {"workload": {"token_mismatch_limit": 0.0}}


def test_level_table_html_writes_na_and_inf():
    s = summarize([])  # no requests: every figure n/a
    metrics = {"ttft": {"count": 0, "p50": None, "p90": None, "p99": None, "mean": None},
               "e2e_error_adjusted": {"count": 3, "p50": 1.5, "p90": 2.0, "p99": float("inf"), "mean": float("inf")}}
    html = level_table_html(dataclasses.replace(level_summary([], None, [], PROFILE), metrics=metrics))
    assert s["metrics"]["ttft"]["count"] == 0
    assert html.startswith("<table>") and html.count("<tr>") == 3
    assert html.count(">n/a<") == 4 and html.count(">+inf<") == 2 and "e2e (errors as +inf)" in html


def test_comparison_report_overlays_the_runs_and_puts_their_tables_side_by_side(runs, tmp_path):
    out = write_comparison_html({"baseline": runs["plain"], "candidate": runs["spec"]}, tmp_path / "ab.html")
    html = out.read_text()
    assert html.count("data:image/png;base64,") == 3
    assert_self_contained(html)
    assert runs["plain"].name in html and runs["spec"].name in html and html.count("<table>") >= 2
    assert sorted(p.name for p in (tmp_path / "ab-plots").glob("*.png")) == [
        "itl_by_position.png", "latency_cdfs.png", "tokens_per_chunk.png"]
    out2 = write_comparison_html({"a": runs["sweep"], "b": runs["plain"]}, tmp_path / "sw.html")
    assert out2.read_text().count("data:image/png;base64,") == 4


def test_missing_matplotlib_is_a_usage_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UsageError, match=r"pip install 'loadgate\[plot\]'"):
        plots.tokens_per_chunk({"a": []}, tmp_path / "x.png")

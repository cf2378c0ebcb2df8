"""The time-slice plot (`plots.slices`): a panel for throughput and one per figure the slices keep, a
real non-blank PNG of that size; the console's slice table marks a partial last slice."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loadgate.analysis.slices import time_slices
from loadgate.analysis.summary import STREAM_ONLY, level_summary
from loadgate.report.table import slice_table
from tests.analysis.test_slices import RECORDS

mpimg = pytest.importorskip("matplotlib.image")

from loadgate.report import plots  # noqa: E402


@pytest.mark.parametrize(("drop", "panels"), [((), 4), (STREAM_ONLY, 2)])
def test_the_slice_plot_has_a_panel_for_throughput_and_each_figure_kept(
        tmp_path: Path, drop: tuple[str, ...], panels: int) -> None:
    sl = time_slices(RECORDS, 0.5, drop)
    assert sl is not None
    out = plots.slices({"concurrency 1": sl, "concurrency 2": time_slices(RECORDS[:2], 0.5, drop) or {}},
                       tmp_path / "slices.png")
    img = mpimg.imread(out)
    w, h = plots.SLICES_PANEL[0] * panels * plots.DPI, plots.SLICES_PANEL[1] * plots.DPI
    assert abs(img.shape[1] - w) < 1 and abs(img.shape[0] - h) < 1, img.shape
    assert len(np.unique((img[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 20


def test_the_console_table_has_a_row_per_slice_and_marks_the_partial_one() -> None:
    s = level_summary(RECORDS, None, [], {"workload": {"token_mismatch_limit": 0.0}, "report": {"slice_s": 1.0}})
    lines = slice_table(s).splitlines()
    assert lines[0].endswith("; * the last slice is partial (shorter than the others: its tok/s is over its own "
                             "length):")
    assert lines[1].split()[:6] == ["seconds", "n", "failed", "out", "tok/s", "ttft"]
    assert [line.split()[:4] for line in lines[3:]] == [["0–1", "2", "0", "2.0"], ["1–2", "2", "1", "9.0"],
                                                       ["2–2.5*", "0", "0", "0.0"]]
    assert lines[4].split()[4:] == ["200.00", "200.00", "n/a", "n/a", "1,500.00", "1,500.00"]
    assert slice_table(level_summary(RECORDS, None, [], {"workload": {"token_mismatch_limit": 0.0}})) == ""


def test_a_window_no_longer_than_one_slice_says_so() -> None:
    s = level_summary(RECORDS, None, [], {"workload": {"token_mismatch_limit": 0.0}, "report": {"slice_s": 5.0}})
    first, *rows = slice_table(s).splitlines()
    assert "slices of 5 s of the window" in first and "(the window, 2.5 s, is not longer than one slice)" in first
    assert rows[2].split()[:4] == ["0–2.5*", "4", "1", "4.4"]  # the level's own 11 tokens over 2.5 s


def test_a_window_cut_into_too_many_slices_says_so_in_one_line() -> None:
    s = level_summary(RECORDS, None, [], {"workload": {"token_mismatch_limit": 0.0}, "report": {"slice_s": 0.0002}})
    assert slice_table(s) == ("by time: slices of 0.0002 s would cut the level's 2.5 s window into 12,500, more than "
                              "10,000: none kept (raise report.slice_s)")

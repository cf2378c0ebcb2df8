"""The server-over-time plot's curves (`loadgate.report.timeline`), computed from a series written
with known values: gauges as scraped, counters as their increase per second, the client's output
tokens per second from the records' chunk times, the measured windows from the series' marks; and
the HTML report of a simulator run embeds the plot."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from loadgate.core.series import SERIES_FILE, SeriesWriter, read_series
from loadgate.engine.adapters import FAMILIES
from loadgate.report.html import write_html
from loadgate.report.timeline import client_tokens_per_s, server_panels, server_timeline, windows
from loadgate.sim.process import SimProcess
from loadgate.snapshot import Snapshot
from tests.recs import make_record
from tests.simtruth import profile_for, run

T0 = 5_000_000_000


def snap(waiting: float, running: float, kv: float, preempted: float, hits: float) -> Snapshot:
    lab = (("engine", "0"),)
    return Snapshot({("vllm:num_requests_waiting", lab): waiting, ("vllm:num_requests_running", lab): running,
                     ("vllm:kv_cache_usage_perc", lab): kv, ("vllm:num_preemptions_total", lab): preempted,
                     ("vllm:prefix_cache_hits_total", lab): hits})


def test_the_panels_are_the_gauges_as_scraped_and_the_counters_per_second(tmp_path):
    w = SeriesWriter(tmp_path / SERIES_FILE, {"server": "u"}, 0.5, 2**20)
    w.mark(T0 + 400_000_000, "begin", "4")
    for k, (wait, run_, kv, pre, hits) in enumerate([(0, 1, 0.1, 0, 0), (3, 4, 0.5, 2, 100), (1, 4, 0.4, 2, 400)]):
        w.scrape(T0 + (k + 1) * 500_000_000, "server", snap(wait, run_, kv, pre, hits))
    w.mark(T0 + 1_600_000_000, "end", "4")
    w.close()
    series = read_series(tmp_path / SERIES_FILE)
    records = [make_record(start_ns=500_000_000, chunk_ns=[0, 100_000_000, 900_000_000], chunk_tokens=[1, 2, 3]),
               make_record(start_ns=1_000_000_000, chunk_ns=[200_000_000], chunk_tokens=[4])]
    panels = {p.title: p for p in server_panels(series, records, T0, FAMILIES["vllm"])}
    q = panels["Queue depth (waiting requests)"]
    assert q.source == "vllm:num_requests_waiting" and list(q.t_s) == [0.5, 1.0, 1.5] and list(q.y) == [0, 3, 1]
    assert list(panels["Running requests"].y) == [1, 4, 4]
    assert list(panels["KV-cache use"].y) == [0.1, 0.5, 0.4]
    pre = panels["Preemptions"]
    assert pre.source == "vllm:num_preemptions_total" and list(pre.t_s) == [1.0, 1.5] and list(pre.y) == [4.0, 0.0]
    assert list(panels["Prefix-cache hits"].y) == [200.0, 600.0]  # +100 then +300 tokens in 0.5 s
    # client: chunks at 0.5 s (1 token), 0.6 s (2), 1.2 s (4), 1.4 s (3) since t0, in 0.5 s bins from 0.5 s
    t, y = client_tokens_per_s(records, 0.5)
    assert t == pytest.approx([0.75, 1.25]) and y == pytest.approx([6.0, 14.0])
    assert windows(series, T0) == [("4", 0.4, 1.6)]
    out = server_timeline(list(panels.values()), windows(series, T0), tmp_path / "t.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_server_without_a_metric_gives_an_empty_panel_and_a_counter_reset_reads_zero(tmp_path):
    w = SeriesWriter(tmp_path / SERIES_FILE, {"server": "u"}, 0.5, 2**20)
    lab = (("engine", "0"),)
    for k, v in enumerate([10.0, 5.0, 8.0]):  # the server restarted between the first two scrapes
        w.scrape(T0 + k * 1_000_000_000, "server", Snapshot({("vllm:num_preemptions_total", lab): v}))
    w.close()
    panels = {p.title: p for p in server_panels(read_series(tmp_path / SERIES_FILE), [], T0, FAMILIES["vllm"])}
    assert list(panels["Preemptions"].y) == [0.0, 3.0]
    assert panels["Running requests"].t_s.size == 0 and panels["Running requests"].source == ""
    assert panels["Output tokens received by the client"].t_s.size == 0
    assert np.array_equal(panels["Prefix-cache hits"].y, np.array([]))


def test_the_html_report_of_a_simulator_run_embeds_the_server_timeline(tmp_path):
    with SimProcess() as sim:
        run_dir, _, _ = run(profile_for(sim.url, tmp_path, requests=12, concurrency=2, osl=8))
    page = write_html(run_dir).read_text()
    png = (run_dir / "plots" / "server_timeline.png").read_bytes()
    assert base64.b64encode(png).decode() in page and "queue depth, running requests, KV-cache use" in page

"""The scraper process (`loadgate.net.scraper`): it scrapes in its own process, so the measuring
process gains no thread (the quiet turns' bounds require none, `load.turns.no_other_threads`);
a window's report carries the gauges of the scrapes inside it and the process's own CPU; a
process that died gives each later window one warning instead of figures."""

from __future__ import annotations

import threading
import time

from loadgate.config.simconfig import SimConfig
from loadgate.core.series import SERIES_FILE, read_series
from loadgate.load.turns import no_other_threads
from loadgate.net.scraper import Scraper, sources_for
from loadgate.sim.process import SimProcess


def test_the_scraper_runs_beside_the_measuring_process_without_a_thread_in_it(tmp_path):
    with SimProcess(SimConfig(seed=1)) as sim:
        # (another test in this worker may have left its server's daemon thread behind: what counts is
        # that the scraper adds none, so the quiet-turn rule reads the same with it as without)
        before, quiet_before = threading.enumerate(), no_other_threads()
        scraper = Scraper(sources_for(sim.url + "/metrics", ()), tmp_path, 0.05, 64)
        try:
            assert scraper.ready and threading.enumerate() == before and no_other_threads() == quiet_before
            scraper.begin(1)
            time.sleep(0.6)
            report = scraper.end(1)
            assert threading.enumerate() == before
        finally:
            done = scraper.stop()
    assert scraper.proc.exitcode == 0 and done is not None and done["bytes"] == (tmp_path / SERIES_FILE).stat().st_size
    assert report["scrapes"] >= 3 and report["warnings"] == [] and report["cpu_s"] > 0
    assert report["gauges"]["running"] == {"samples": report["scrapes"], "min": 0.0, "mean": 0.0, "max": 0.0}
    series = read_series(tmp_path / SERIES_FILE)
    (b, _, _), (e, _, _) = series.marks
    # the window counts the scrapes that began in it and ended before it did (one may be in flight at its end)
    assert len([t for t, _ in series.of("server") if b <= t <= e]) - report["scrapes"] in (0, 1)


def test_a_scraper_whose_process_died_gives_the_window_one_warning(tmp_path):
    scraper = Scraper(sources_for("http://127.0.0.1:9/metrics", ()), tmp_path, 0.5, 64)
    scraper.proc.kill()
    scraper.proc.join()
    scraper.begin(2)
    got = scraper.end(2)
    assert got["gauges"] is None and got["cpu_s"] is None
    assert got["warnings"] == ["metrics scraper: its process did not answer; no series or gauges for this level"]
    assert scraper.stop() is None


def test_a_scraper_that_cannot_start_says_why_in_each_windows_warning(tmp_path):
    scraper = Scraper(sources_for("http://127.0.0.1:9/metrics", ()), tmp_path / "no-such-folder", 0.5, 64)
    assert not scraper.ready
    scraper.begin(1)
    (warning,) = scraper.end(1)["warnings"]
    assert warning.startswith("metrics scraper: its process did not answer (FileNotFoundError: ")
    assert "no-such-folder" in warning and warning.endswith("; no series or gauges for this level")
    assert scraper.stop() is None


def test_the_engines_headers_go_to_its_metrics_only_never_to_an_extra_target(tmp_path):
    """An API key the engine needs reaches its /metrics; an exporter (another host, perhaps) gets none."""
    import asyncio

    from aiohttp import web

    from loadgate.net.connect import run_async
    from loadgate.net.scraper import EngineAccess
    from tests.fixtures_path import fixture_file

    page = fixture_file("llama-server", "metrics_after.txt").read_bytes()
    seen: dict[str, set[str | None]] = {"/metrics": set(), "/exporter": set()}

    async def metrics(request: web.Request) -> web.Response:
        seen[request.path].add(request.headers.get("Authorization"))
        return web.Response(body=page, content_type="text/plain")

    async def go() -> dict:
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/exporter", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        try:
            scraper = Scraper(sources_for(base + "/metrics", (base + "/exporter",)), tmp_path, 0.05, 64,
                              EngineAccess({"Authorization": "Bearer s3cret"}))
            scraper.begin(1)
            await asyncio.sleep(0.5)  # this loop serves the scrapes meanwhile
            got = scraper.end(1)
            scraper.stop()
            return got
        finally:
            await runner.cleanup()

    report = run_async(go())
    assert seen == {"/metrics": {"Bearer s3cret"}, "/exporter": {None}}
    assert report["warnings"] == [] and report["gauges"]["running"] is not None

"""SGLang 0.5.23's recorded responses (tests/data/shared-fixtures/sglang-cpu/) through loadgate's
SGLang adapter, fingerprint and counter names: the shapes the live tests in
tests/engines/test_sglang.py meet, checked without a server."""

from __future__ import annotations

import orjson

from loadgate.analysis.specdec import contamination
from loadgate.engine.adapters import FAMILIES, adapter_for, family_for
from loadgate.gate.fingerprint import VOLATILE_KEYS, _strip
from loadgate.snapshot import Snapshot, first_name, parse_metrics
from tests.fixtures_path import fixture_file, sse_events
from tests.recs import make_record


def test_native_stream_and_body_decode_to_the_same_ids_logprobs_and_finish_reason():
    body = orjson.loads(fixture_file("sglang-cpu", "generate_logprob.json").read_bytes())
    a = adapter_for("sglang")
    streamed = a.decode_stream(sse_events(fixture_file("sglang-cpu", "generate_stream.txt")))
    whole = a.decode_body(0, fixture_file("sglang-cpu", "generate_logprob.json").read_bytes())
    assert whole.output_ids == body["output_ids"] and len(whole.output_ids) == 32
    assert whole.logprobs == [e[0] for e in body["meta_info"]["output_token_logprobs"]]
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 32}
    assert whole.finish_reason == "length" and whole.completion_tokens == 32 and whole.prompt_tokens == 9
    assert whole.top_logprobs is not None and all(top[0][0] == i for top, i in zip(whole.top_logprobs,
                                                                                 whole.output_ids, strict=True))
    # the stream repeats the whole output in every event (cumulative): one new id per chunk
    assert streamed.output_ids is not None and streamed.output_ids == whole.output_ids[: len(streamed.output_ids)]
    assert all(ch.n_tokens == 1 for ch in streamed.chunks) and streamed.finish_reason in ("length", "stop")
    assert streamed.spec is None and whole.spec is None  # no spec_verify_ct without speculation


def test_the_generation_counter_is_sglangs_and_sums_streaming_and_not():
    snap = parse_metrics(fixture_file("sglang-cpu", "metrics.out").read_text())
    assert family_for("openai-completions", snap) is FAMILIES["sglang"]
    assert first_name(snap, (FAMILIES["sglang"].generated,)) == "sglang:generation_tokens_total"
    # 184 generated for unstreamed requests, 16 for streamed ones
    assert snap.total("sglang:generation_tokens_total") == 200.0
    cc = contamination(Snapshot({}), snap, [make_record(completion_tokens=200)], family_for(None, snap))
    assert cc is not None and cc["clean"] and cc["server_generation_tokens"] == 200.0
    assert cc["server_requests"] is None  # SGLang has no vLLM-style success counter


def test_server_info_keeps_every_server_arg_and_drops_start_up_times_ports_and_the_command_line():
    info = orjson.loads(fixture_file("sglang-cpu", "server_info.out").read_bytes())
    stripped = _strip(info)
    assert {"startup_time", "launch_command", "port", "internal_states"} <= set(info) and "startup_time" in VOLATILE_KEYS
    assert not {"startup_time", "launch_command", "port", "internal_states"} & set(stripped)
    assert stripped["dtype"] == "auto" and stripped["attention_backend"] == "torch_native"
    assert stripped["version"] == "0.5.23" and stripped["disable_radix_cache"] is False


def test_gzipped_metrics_with_a_nan_gauge_are_read_and_survive_server_json(tmp_path):
    """SGLang's recorded /metrics served the way SGLang serves them (gzip to a client that accepts
    it, a NaN gauge): the scrape asks for plain text, decompresses a server that compresses anyway,
    leaves the NaN out, and the snapshot survives server.json and its reader; the scraper process
    reads the compressed page the same way, into its gauges and its series."""
    import asyncio
    import gzip

    from aiohttp import web

    from loadgate.core.series import read_series
    from loadgate.engine.adapters import metric_prefixes
    from loadgate.jsonutil import dump_json, load_json
    from loadgate.net.connect import run_async
    from loadgate.net.http import make_session
    from loadgate.net.scrape import scrape
    from loadgate.net.scraper import Scraper, sources_for
    from loadgate.snapshot import snapshot_from_json, snapshot_to_json

    text = fixture_file("sglang-cpu", "metrics_after.txt").read_bytes()
    assert b"sglang:fwd_occupancy{" in text and b"} NaN" in text
    asked: list[str] = []

    async def metrics(request: web.Request) -> web.Response:
        asked.append(request.headers.get("Accept-Encoding", ""))
        force = request.query.get("force") == "1"
        if force or "gzip" in request.headers.get("Accept-Encoding", ""):
            return web.Response(body=gzip.compress(text), headers={"Content-Encoding": "gzip",
                                                                   "Content-Type": "text/plain"})
        return web.Response(body=text, content_type="text/plain")

    async def go() -> tuple[Snapshot | None, Snapshot | None, dict]:
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            async with make_session() as s:
                plain = await scrape(s, f"http://127.0.0.1:{port}/metrics")
                forced = await scrape(s, f"http://127.0.0.1:{port}/metrics?force=1")
                # the gauges sampled during a run (by the scraper process), from a compressed page
                scraper = Scraper(sources_for(f"http://127.0.0.1:{port}/metrics?force=1", ()), tmp_path, 0.05, 64)
                scraper.begin(1)
                await asyncio.sleep(1.0)
                gauges = scraper.end(1)["gauges"]
                scraper.stop()
        finally:
            await runner.cleanup()
        return plain, forced, gauges

    plain, forced, gauges = run_async(go())
    assert set(asked) == {"identity"}
    assert gauges["running"] is not None and gauges["running"]["samples"] >= 2
    kept = read_series(tmp_path / "server-metrics.jsonl.gz").of("server")
    assert len(kept) >= 2 and all(snap == plain for _, snap in kept)  # the whole page, NaN left out
    for snap in (plain, forced):
        assert snap is not None and snap.total("sglang:generation_tokens_total") is not None
        assert snap.total("sglang:fwd_occupancy") is None  # NaN: left out
    assert plain == forced
    dump_json(tmp_path / "server.json", snapshot_to_json(plain, metric_prefixes()))
    back = snapshot_from_json(load_json(tmp_path / "server.json"))
    assert back.total("sglang:generation_tokens_total") == plain.total("sglang:generation_tokens_total")
    # a server.json written before the fix holds the NaN as null: read, the null left out
    old = [["sglang:fwd_occupancy", [["tp_rank", "0"]], None], ["sglang:num_running_reqs", [], 0.0]]
    assert snapshot_from_json(old).values == {("sglang:num_running_reqs", ()): 0.0}


def test_the_recorded_server_info_says_speculation_is_off_and_a_draft_algorithm_says_on():
    """The SGLang family reads speculative decoding from /server_info's `speculative_algorithm`
    (null in the recording: off); the exactness check takes the answer from the family."""
    from loadgate.exactness.check import speculation_declared

    info = orjson.loads(fixture_file("sglang-cpu", "server_info.out").read_bytes())
    assert FAMILIES["sglang"].speculation({"server_info": info}) == (False, "server_info speculative_algorithm = None")
    assert speculation_declared({"engine": {"server_info": info}})[0] is False
    on = {**info, "speculative_algorithm": "STANDALONE"}
    assert speculation_declared({"engine": {"server_info": on}}) == (True, "server_info speculative_algorithm = 'STANDALONE'")
    sim = {"server_info": {"sim": {"speculative": {"method": "ngram"}}, "speculative_algorithm": None}}
    assert speculation_declared({"engine": sim}) == (True, "simulator speculative.method = 'ngram'")  # the simulator's own
    assert speculation_declared({"engine": {"props": {}}})[0] is None
    assert speculation_declared({"declared": {"speculative": "off"}, "engine": {"server_info": on}})[0] is False


def test_a_server_info_of_another_shape_says_nothing_about_speculation():
    """Whatever a server sent as /server_info (a string naming the key, a list naming the
    simulator, a number) leaves the question open instead of raising."""
    from loadgate.exactness.check import speculation_declared

    for info in ("speculative_algorithm", ["sim"], 7, {"sim": "x"}, {"sim": {"speculative": [1]}}):
        assert speculation_declared({"engine": {"server_info": info}})[0] is None, info

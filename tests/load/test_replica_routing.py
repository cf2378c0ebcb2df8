"""Round robin over replicas, below the network: which endpoint a plan index goes to, the record
field that names it (records v9 `endpoint`, null in older records), and counters summed over the
replicas' snapshots."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgate.load.replica_metrics import summed
from loadgate.load.target import endpoint_of
from loadgate.records import Record, read_records
from loadgate.snapshot import Snapshot

V8 = Path(__file__).parents[1] / "data" / "runs-v8" / "single" / "records.jsonl"


@pytest.mark.parametrize(("requests", "n"), [(61, 2), (61, 3), (7, 3), (3, 3), (100, 7)])
def test_round_robin_by_plan_index_puts_within_one_request_on_each_replica(requests, n):
    counts = Counter(endpoint_of(i, n) for i in range(requests))
    assert sorted(counts) == list(range(min(n, requests)))
    assert max(counts.values()) - min(counts.values()) <= 1
    assert [endpoint_of(i, n) for i in range(requests)] == [i % n for i in range(requests)]
    assert {endpoint_of(i, 1) for i in range(requests)} == {0}


def test_a_record_names_its_endpoint_and_older_records_read_it_as_null():
    rec = Record.from_json({**orjson.loads(next(iter(V8.read_bytes().splitlines()))), "endpoint": 2})
    assert rec.endpoint == 2 and orjson.loads(rec.to_json())["endpoint"] == 2
    old = list(read_records(V8, include_warmup=True))
    assert old and all(r.endpoint is None for r in old)
    with pytest.raises(ValueError, match="endpoint"):
        Record.from_json({**orjson.loads(V8.read_bytes().splitlines()[0]), "endpoint": "1"})


def test_counters_over_replicas_are_the_sum_of_each_replicas_samples():
    key = ("vllm:request_success_total", (("finished_reason", "length"),))
    other = ("vllm:generation_tokens_total", ())
    a, b = Snapshot({key: 10.0, other: 100.0}), Snapshot({key: 5.0})
    s = summed([a, b])
    assert s.values == {key: 15.0, other: 100.0}
    assert s.total("vllm:request_success_total") == 15.0


def test_an_exchange_logs_record_names_the_replica_it_was_sent_to():
    from loadgate.engine.adapters.base import Decoded
    from loadgate.load.exchanges import Exchange, _exchange, encode
    from loadgate.load.exchanges import _frames as frames
    from loadgate.load.recorder import exchange_record
    from loadgate.load.target import Raw

    def x(endpoint: int | None) -> Exchange:
        return Exchange(7, False, 16, 8, 0, 2, 0, None, Raw(start_ns=10, end_ns=20, endpoint=endpoint))

    assert exchange_record(x(None), Decoded(), 0).endpoint is None  # one endpoint: null
    import io
    for ep in (None, 2):  # through the exchange log's frame and back
        (h, payload), = frames(io.BytesIO(encode(x(ep))))
        assert exchange_record(_exchange(h, payload), Decoded(), 0).endpoint == ep


def live(route: str, n: int) -> Any:
    from loadgate.load.target import LiveTarget, TargetSpec

    spec = TargetSpec("http://127.0.0.1:1", "openai-completions", "m", 1.0, transport="aiohttp", route=route,
                      endpoints=tuple(f"http://127.0.0.1:{k + 1}" for k in range(n)))
    return LiveTarget(spec, session=None)  # type: ignore[arg-type]  # (no request is sent)


def test_least_in_flight_picks_the_replica_with_fewest_requests_in_flight_ties_round_robin():
    t = live("least_in_flight", 3)
    assert [t.endpoint_of(i) for i in range(3)] == [0, 1, 2]  # all idle: round robin from i
    t.in_flight[:] = [2, 0, 1]
    assert {t.endpoint_of(i) for i in range(6)} == {1}
    t.in_flight[:] = [1, 3, 1]
    assert [t.endpoint_of(i) for i in range(3)] == [0, 2, 2]  # a tie between 0 and 2: from i mod 3 on
    sticky = live("sticky", 3)
    assert [sticky.endpoint_of(i, conversation=4) for i in range(3)] == [1, 1, 1]
    assert [live("round_robin", 3).endpoint_of(i, conversation=4) for i in range(3)] == [0, 1, 2]

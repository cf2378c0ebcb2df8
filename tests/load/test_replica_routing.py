"""Round robin over replicas, below the network: which endpoint a plan index goes to, the record
field that names it (records v9 `endpoint`, null in older records), and counters summed over the
replicas' snapshots."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

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


def test_an_exchange_logs_record_names_the_replica_its_plan_index_or_conversation_chose():
    from loadgate.engine.adapters.base import Decoded
    from loadgate.load.exchanges import Exchange
    from loadgate.load.recorder import exchange_record
    from loadgate.load.target import Raw

    def x(i: int, session: tuple[int, int, int] | None = None) -> Exchange:
        return Exchange(i, False, 16, 8, 0, 2, 0, None, Raw(start_ns=10, end_ns=20), False, None, session, False)

    assert exchange_record(x(7), Decoded(), 0).endpoint is None  # one endpoint: null
    assert exchange_record(x(7), Decoded(), 0, endpoints=3).endpoint == 1  # round robin: 7 mod 3
    turn = x(7, (5, 2, 3))  # turn 2 of conversation 5
    assert exchange_record(turn, Decoded(), 0, endpoints=3).endpoint == 1
    assert exchange_record(turn, Decoded(), 0, endpoints=3, sticky=True).endpoint == 2  # 5 mod 3

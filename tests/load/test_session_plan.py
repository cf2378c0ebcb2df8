"""Conversations in the plan (pure): what each turn sends, the same every time it is built; a dataset's
rows as conversations; think times; the summary's count of the turns not sent."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loadgate.analysis.conversations import conversation_counts
from loadgate.config.profile import (
    AB,
    Dataset,
    Distribution,
    Load,
    Profile,
    Sessions,
    Target,
    ThinkTime,
    Workload,
)
from loadgate.load.plan import build_plan
from loadgate.load.workload.sessions import Part, as_messages, as_text, read_conversations, think_times
from loadgate.records import SCHEMA_VERSION, Record, read_records
from tests.recs import make_record

POOL = list(range(300, 1300))


def prof(turns: int = 3, ab: bool = False, api: str = "openai-completions", **s: object) -> Profile:
    return Profile(seed=4, target=Target(api=api),
                   workload=Workload(requests=5, input_len=Distribution(dist="fixed", value=10),
                                     output_len=Distribution(dist="fixed", value=6),
                                     sessions=Sessions(turns=turns, **s)),  # type: ignore[arg-type]
                   load=Load(concurrency=2, warmup_requests=2), ab=AB() if ab else None)


def test_a_synthetic_turn_sends_the_turns_and_recorded_replies_before_it_the_same_every_build():
    p = prof()
    a, b = build_plan(p, POOL), build_plan(p, POOL)
    assert len(a) == 2 + 5 * 3 and list(a) == list(b)
    assert [c.session_id for c in a.conversations] == [c.session_id for c in b.conversations]
    assert len({c.session_id for c in a.conversations}) == 5
    conv = a.conversations[1]
    turns = [a[2 + conv.first + t] for t in range(3)]
    assert [r.session for r in turns] == [(1, 1, 3), (1, 2, 3), (1, 3, 3)]
    assert [len(r.prompt_ids or ()) for r in turns] == [10, 26, 42]
    replies = [c.ids for c in conv.replies]
    assert turns[2].prompt_ids == (conv.users[0].ids or ()) + (replies[0] or ()) + (conv.users[1].ids or ()) + (
        replies[1] or ()) + (conv.users[2].ids or ())
    assert [r.output_len for r in turns] == [6, 6, 6] and conv.think_s[0] == 0.0
    other = build_plan(p, POOL, round_=1)  # another prompt round: other ids and ids, the same lengths
    assert other[2 + 3].prompt_ids != a[2 + 3].prompt_ids and len(other[2 + 3].prompt_ids or ()) == 10
    assert other.conversations[0].session_id != a.conversations[0].session_id


def test_history_auto_is_actual_alone_and_recorded_in_an_ab_and_actual_bodies_are_built_when_sent():
    assert prof().history == "actual" and prof(ab=True).history == "recorded"
    assert prof(history="recorded").history == "recorded"
    a = build_plan(prof(), POOL)
    assert [a.static(i) for i in range(2, 5)] == [True, False, False]  # turn 1 only; the warmup too
    assert a.static(0) and all(build_plan(prof(history="recorded"), POOL).static(i) for i in range(len(a)))


def test_a_chat_turn_is_messages_alternating_user_and_assistant():
    p = build_plan(prof(api="openai-chat"), POOL)
    r = p[2 + 2]
    assert r.prompt_ids is None and r.exchange is not None and len(r.exchange) == 5
    text = {i: f"w{i} " for i in POOL}
    msgs = as_messages((), r.exchange, text)
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant", "user"]
    assert msgs[1]["content"] == "".join(text[i] for i in p.conversations[0].replies[0].ids or ())  # type: ignore[union-attr]
    sys = ({"role": "system", "content": "S"},)
    assert as_text(sys, (Part(text="a"), Part(text="b")), None) == "S\n\na\n\nb"


def test_think_times_fixed_uniform_and_exponential():
    import numpy as np

    rng = np.random.default_rng(0)
    assert think_times(1.5, 3, rng) == [1.5] * 3
    assert think_times(ThinkTime(dist="fixed", value=0.2), 2, rng) == [0.2, 0.2]
    u = think_times(ThinkTime(dist="uniform", min=1.0, max=2.0), 200, rng)
    assert all(1.0 <= x <= 2.0 for x in u) and max(u) - min(u) > 0.5
    e = think_times(ThinkTime(dist="exponential", mean=2.0), 4000, rng)
    assert 1.8 < sum(e) / len(e) < 2.2
    assert ThinkTime(dist="uniform", min=2.0, max=1.0).check() == [("max", "must be >= min (2), got 1")]
    assert ThinkTime(dist="uniform", min=1.0).check() == [("max", "required when dist is 'uniform'")]
    pauses = build_plan(prof(think_time=ThinkTime(dist="uniform", min=1.0, max=2.0)), POOL).conversations[0].think_s
    assert pauses[0] == 0.0 and all(1.0 <= x <= 2.0 for x in pauses[1:])


def test_a_dataset_row_is_a_conversation_of_its_user_turns_with_its_replies(tmp_path: Path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [
        {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "u1"},
                      {"role": "assistant", "content": "r1"}, {"role": "user", "content": "u2"},
                      {"role": "user", "content": "u3"}], "category": "chat"},
        {"conversations": [{"from": "human", "value": "h1"}, {"from": "gpt", "value": "g1"},
                           {"from": "human", "value": "h2"}, {"from": "gpt", "value": "g2"}]},
        {"prompt": "one turn", "completion": "its reply"}]))
    p = Profile(target=Target(api="openai-chat"),
                workload=Workload(requests=3, dataset=Dataset(path=str(path), order="file"),
                                  output_len=Distribution(dist="fixed", value=7), sessions=Sessions(max_turns=2)))
    rows = read_conversations(p)
    assert [r.users for r in rows] == [("u1", "u2", "u3"), ("h1", "h2"), ("one turn",)]
    assert [r.replies for r in rows] == [("r1", None, None), ("g1", "g2"), ("its reply",)]
    assert rows[0].system == ({"role": "system", "content": "S"},) and rows[0].category == "chat"
    plan = build_plan(p, POOL)
    assert [c.turns for c in plan.conversations] == [2, 2, 1] and len(plan) == 5  # max_turns: 2
    assert plan[1].messages == ({"role": "system", "content": "S"},) and plan[1].category == "chat"
    assert as_messages(plan[1].messages or (), plan[1].exchange or (), None)[1:] == [
        {"role": "user", "content": "u1"}, {"role": "assistant", "content": "r1"}, {"role": "user", "content": "u2"}]
    assert all(r.output_len == 7 for r in plan)


def test_the_summary_counts_the_turns_after_a_failed_one_as_not_sent():
    def turn(c: int, t: int, failed: bool = False) -> Record:
        return make_record(i=10 * c + t, conversation=c, turn=t, turns=3,
                           error={"kind": "http_status", "detail": "HTTP 500: boom"} if failed else None)

    recs = [turn(0, 1), turn(0, 2), turn(0, 3), turn(1, 1), turn(1, 2, failed=True), turn(2, 1, failed=True)]
    c = conversation_counts(recs)
    assert c is not None
    assert (c["conversations"], c["complete"], c["turns_sent"], c["not_sent"], c["ended_early"]) == (3, 1, 6, 3, 2)
    assert c["broken"] == [
        {"conversation": 1, "turn": 2, "turns": 3, "error": "http_status: HTTP 500: boom", "not_sent": [3, 3]},
        {"conversation": 2, "turn": 1, "turns": 3, "error": "http_status: HTTP 500: boom", "not_sent": [2, 3]}]
    assert conversation_counts([make_record(i=0)]) is None


def test_a_v8_record_keeps_its_conversation_and_a_wrong_type_is_refused(tmp_path: Path):
    from loadgate.errors import UsageError

    r = make_record(i=3, conversation=2, turn=1, turns=3, cached_tokens=64)
    path = tmp_path / "records.jsonl"
    path.write_bytes(r.to_json())
    (back,) = read_records(path)
    assert (back.v, back.conversation, back.turn, back.turns, back.cached_tokens) == (SCHEMA_VERSION, 2, 1, 3, 64)
    path.write_bytes(r.to_json().replace(b'"turn":1', b'"turn":"1"'))
    with pytest.raises(UsageError, match="wrong type for turn"):
        list(read_records(path))


def test_a_conversation_the_run_stopped_is_reported_as_stopped_not_failed():
    from loadgate.analysis.summary import LevelSummary
    from loadgate.report.table import conversation_lines

    recs = [make_record(i=0, conversation=0, turn=1, turns=3), make_record(i=1, conversation=1, turn=1, turns=1)]
    c = conversation_counts(recs)
    assert c is not None and c["not_sent"] == 2 and c["complete"] == 1
    s = LevelSummary.__new__(LevelSummary)
    object.__setattr__(s, "conversations", c)
    assert conversation_lines(s) == ["conversations: 2 begun, 1 with every turn sent, 2 turns sent, 2 not sent",
                                     "conversation 0: the run stopped after turn 1, turns 2–3 not sent"]


@pytest.mark.parametrize("fmt", ["sharegpt", "parquet", "arrow"])
def test_the_bundled_multi_turn_rows_read_as_conversations_from_each_format(tmp_path: Path, fmt: str):
    """The bundled set's multi_turn_chat rows (a user turn, an assistant turn, then the user again) as
    ShareGPT, parquet and an Arrow folder: two user turns each, the first one's reply recorded."""
    from tests.load.test_dataset import ROWS, write_arrow_folder, write_parquet, write_sharegpt

    rows = [r for r in ROWS if r["category"] == "multi_turn_chat"]
    path = {"sharegpt": lambda: write_sharegpt(tmp_path / "c.json", rows),
            "parquet": lambda: write_parquet(tmp_path / "c.parquet", rows),
            "arrow": lambda: write_arrow_folder(tmp_path / "arrow", rows)}[fmt]()
    p = Profile(target=Target(api="openai-chat"),
                workload=Workload(requests=len(rows), dataset=Dataset(path=str(path)), sessions=Sessions()))
    got = read_conversations(p)
    users = [[m["content"] for m in r["messages"] if m["role"] == "user"] for r in rows]
    assert sorted(list(g.users) for g in got) == sorted(users) and all(len(u) >= 2 for u in users)
    assert all(g.replies[0] is not None for g in got) and len(build_plan(p, POOL)) == sum(map(len, users))

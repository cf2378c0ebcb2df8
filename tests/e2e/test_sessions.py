"""Conversations (`workload.sessions`) against simulator children whose truth log says what each turn
was sent: later turns carry the earlier replies, the session header and the think time; cached prompt
tokens per turn; a conversation that fails mid-way; an A/B sending identical bodies; the bad input."""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

import loadgate
from loadgate.cli import main
from loadgate.config.profile import Dataset, Distribution, Load, Output, Profile, Sessions, Target, Workload
from loadgate.config.simconfig import FaultConfig, SimConfig
from loadgate.jsonutil import load_json
from loadgate.records import read_records
from loadgate.sim.process import SimProcess
from loadgate.sim.tokenizer import Tokenizer
from tests.profiles import LAX_BUDGETS, LAX_HEALTH

VOCAB = 4096
BLOCK = 16
THINK = 0.15


@pytest.fixture(scope="module")
def sim() -> Any:
    with SimProcess(SimConfig(vocab_size=VOCAB, decode_step_us=300.0, prefill_us_per_token=0.5,
                              prefix_cache_block=BLOCK, prompt_tokens_details=True, truth_prompts=True),
                    startup_timeout=60) as s:
        yield s


def profile(url: str, tmp: Path, *, api: str = "openai-completions", requests: int = 4, turns: int = 3,
            think: float = THINK, dataset: Path | None = None, **sessions: Any) -> Profile:
    return Profile(name="conv", seed=5, target=Target(endpoint=url, api=api),
                   workload=Workload(requests=requests, input_len=Distribution(dist="fixed", value=40),
                                     output_len=Distribution(dist="fixed", value=20),
                                     dataset=None if dataset is None else Dataset(path=str(dataset)),
                                     sessions=Sessions(turns=turns, think_time=think, **sessions)),
                   load=Load(concurrency=2), health=LAX_BUDGETS, output=Output(dir=str(tmp / "out")),
                   path=str(tmp / "p.yaml"))


def run(sim: Any, p: Profile) -> tuple[Any, list[Any], dict[str, dict[str, Any]]]:
    """(the run's result, its measured records, the simulator's truth by request id)."""
    sim.reset_truth()
    result = loadgate.run(p, unverified=True)
    recs = list(read_records(result.run_dir / "records.jsonl"))
    return result, recs, {t["request_id"]: t for t in sim.truth_records()}


def by_conversation(result: Any, recs: list[Any], truth: dict[str, Any]) -> dict[int, list[tuple[Any, Any]]]:
    """Per conversation, its (record, truth) pairs in turn order."""
    out: dict[int, list[tuple[Any, Any]]] = defaultdict(list)
    for r in sorted(recs, key=lambda r: (r.conversation, r.turn)):
        out[r.conversation].append((r, truth[f"{result.run_dir.name}-L{r.level}-{r.i}"]))
    return out


def output_ids(t: dict[str, Any]) -> list[int]:
    return [i for c in t["chunks"] for i in c["token_ids"]]


def reply_text(t: dict[str, Any]) -> str:
    """The text the simulator streamed for a request: its output ids' text, special tokens adding none."""
    tok = Tokenizer(VOCAB)
    return tok.decode(i for i in output_ids(t) if i not in tok.special_ids)


def test_each_turn_sends_the_history_with_the_engine_replies_the_session_header_after_its_think_time(
        sim, tmp_path, capsys):
    result, recs, truth = run(sim, profile(sim.url, tmp_path))
    assert result.exit_code == 11, result
    convs = by_conversation(result, recs, truth)
    assert sorted(convs) == [0, 1, 2, 3] and all(len(v) == 3 for v in convs.values())
    sessions = set()
    for pairs in convs.values():
        ids = {t["session"] for _, t in pairs}
        assert len(ids) == 1 and None not in ids  # one session header value a conversation
        sessions |= ids
        for k, (r, t) in enumerate(pairs):
            assert (r.turn, r.turns, r.error) == (k + 1, 3, None)
            assert r.prompt_tokens == t["prompt_tokens"] == 40 + k * 60  # the whole history: 40 + (20 + 40) a turn
            assert r.cached_tokens == t["cached_tokens"]
            if k:
                t_before = pairs[k - 1][1]
                # the history is the turn before's prompt, then the engine's own reply to it, then the new turn
                prev = t_before["prompt"]["prompt"]
                assert t["prompt"]["prompt"][:len(prev) + 20] == prev + output_ids(t_before)
                # the think time runs on the client, from the reply's last byte to the next turn's
                # readiness (the engine's own end stamp may come ms after the client got its last
                # byte on a busy host: its handler finishes later); a busy host delays, never hastens
                pause = (r.ready_ns - pairs[k - 1][0].end_ns) / 1e9
                assert THINK <= pause < THINK + 3.0, pause
                assert t["arrival_ns"] > t_before["end_ns"] - 50_000_000  # and the engine saw it after the reply
    assert len(sessions) == 4
    # a closed loop of conversations: at most load.concurrency (2) of them in flight at any moment
    spans = [(pairs[0][1]["arrival_ns"], pairs[-1][1]["end_ns"]) for pairs in convs.values()]
    assert max(sum(a <= t < b for a, b in spans) for t, _ in spans) == 2
    cached = {k: [r.cached_tokens for pairs in convs.values() for r, _ in pairs if r.turn == k] for k in (1, 2, 3)}
    assert cached[1] == [0] * 4 and all(0 < c for c in cached[2]) and all(b < c for b, c in zip(cached[2], cached[3], strict=True))
    assert main(["report", str(result.run_dir)]) == 11
    out = capsys.readouterr().out
    assert "by turn:" in out and re.search(r"^3 +4 +0 ", out, re.M)  # turn 3: 4 requests, 0 failed
    # turn 2 is 100 tokens, of which the first two blocks (turn 1's 40 tokens less the last) were cached
    assert "cached prompt tokens per request by turn" in out and "turn 2 32.0 of 100.0 · turn 3 96.0 of 160.0" in out
    assert "conversations: 4 begun, 4 with every turn sent, 12 turns sent, 0 not sent" in out
    summary = load_json(result.run_dir / "summary.json")
    assert list(summary["levels"]["2"]["groups"]["turn"]["by"]) == ["1", "2", "3"]


def test_sglang_native_route_turns_carry_the_replies_and_meta_info_cached_tokens(sim, tmp_path):
    result, recs, truth = run(sim, profile(sim.url, tmp_path, api="sglang", requests=2, think=0.0))
    for pairs in by_conversation(result, recs, truth).values():
        ids = [t["prompt"]["input_ids"] for _, t in pairs]
        for k in (1, 2):
            assert ids[k][:len(ids[k - 1]) + 20] == ids[k - 1] + output_ids(pairs[k - 1][1])
        assert [r.cached_tokens for r, _ in pairs] == [t["cached_tokens"] for _, t in pairs] == [0, 32, 96]


@pytest.mark.parametrize("cap", [None, 1])
def test_conversations_arrive_on_an_open_loop_schedule_turn_1_timed_from_its_intended_start(sim, tmp_path, cap):
    """load.rate 8/s, constant: conversation c's first turn arrives c / 8 s after the first (latency from
    its intended start); later turns follow their replies. At 200/s, conversations would overlap (each
    lasts longer than 5 ms): max_in_flight: 1 keeps one at a time (each then waits for the one before:
    that wait is in its turn 1's latency)."""
    rate = 8.0 if cap is None else 200.0
    p = profile(sim.url, tmp_path, requests=6, turns=2, think=0.0)
    p = dataclasses.replace(p, load=Load(rate=rate, arrival="constant", max_in_flight=cap))
    result, recs, truth = run(sim, p)
    assert result.exit_code in (11, 30), result
    convs = by_conversation(result, recs, truth)
    assert sorted(convs) == list(range(6)) and all(len(v) == 2 for v in convs.values())
    firsts = [convs[c][0] for c in range(6)]
    assert [r.intended_ns is not None for r, _ in firsts] == [True] * 6
    assert all(pairs[1][0].intended_ns is None for pairs in convs.values())
    intended = [r.intended_ns for r, _ in firsts]
    assert [round((b - a) / 1e6) for a, b in zip(intended, intended[1:], strict=False)] == [round(1e3 / rate)] * 5
    spans = [(pairs[0][1]["arrival_ns"], pairs[-1][1]["end_ns"]) for pairs in convs.values()]
    if cap is None:
        # each first turn reached the server after its intended start, and soon after (a busy 2-core
        # machine may hold the client for tens of ms; the schedule would be 125 ms apart either way)
        t0 = load_json(result.run_dir / "meta.json")["t0_ns"]
        late = [(t["arrival_ns"] - t0 - r.intended_ns) / 1e6 for r, t in firsts]
        assert all(0 <= x < 60 for x in late), late
    else:
        assert max(sum(a <= t < b for a, b in spans) for t, _ in spans) == 1
    lv = load_json(result.run_dir / "summary.json")["levels"][str(rate)]
    assert lv["client_health"]["schedule_lag_ms"]["p99"] is not None and lv["conversations"]["not_sent"] == 0


@pytest.mark.parametrize("loop", [{"concurrency": 3}, {"rate": 20.0, "arrival": "constant"}])
def test_two_worker_processes_share_the_conversations_each_sent_whole_by_one_of_them(sim, tmp_path, loop):
    p = profile(sim.url, tmp_path, requests=8, turns=3, think=0.02)
    p = dataclasses.replace(p, load=Load(workers=2, **loop))
    result, recs, truth = run(sim, p)
    level = next(iter(load_json(result.run_dir / "summary.json")["levels"].values()))
    assert level["client_health"]["workers"] == 2
    convs = by_conversation(result, recs, truth)
    assert sorted(convs) == list(range(8)) and all([r.turn for r, _ in v] == [1, 2, 3] for v in convs.values())
    for pairs in convs.values():  # one conversation, one connection's turns in order, the history growing
        assert len({t["session"] for _, t in pairs}) == 1
        assert all(b[1]["arrival_ns"] > a[1]["end_ns"] for a, b in zip(pairs, pairs[1:], strict=False))
        assert [r.prompt_tokens for r, _ in pairs] == [40, 100, 160]
    if "concurrency" in loop:
        spans = [(pairs[0][1]["arrival_ns"], pairs[-1][1]["end_ns"]) for pairs in convs.values()]
        assert max(sum(a <= t < b for a, b in spans) for t, _ in spans) <= 3
    else:
        firsts = sorted(pairs[0][0].intended_ns for pairs in convs.values())
        assert [round((b - a) / 1e6) for a, b in zip(firsts, firsts[1:], strict=False)] == [50] * 7


def test_a_chat_conversation_from_a_sharegpt_file_carries_the_engine_replies_as_assistant_turns(sim, tmp_path):
    rows = [{"conversations": [{"from": "system", "value": "Be brief."},
                               {"from": "human", "value": f"Question {k} about the sea."},
                               {"from": "gpt", "value": "A recorded answer."},
                               {"from": "human", "value": "And the sky?"},
                               {"from": "gpt", "value": "Another recorded answer."},
                               {"from": "human", "value": "Thanks, and rivers?"}]} for k in range(3)]
    path = tmp_path / "chats.json"
    path.write_bytes(orjson.dumps(rows))
    result, recs, truth = run(sim, profile(sim.url, tmp_path, api="openai-chat", requests=3, think=0.0,
                                           dataset=path))
    assert result.exit_code == 11, result
    for pairs in by_conversation(result, recs, truth).values():
        assert [r.turn for r, _ in pairs] == [1, 2, 3]
        msgs = [t["prompt"]["messages"] for _, t in pairs]
        assert msgs[0][0] == {"role": "system", "content": "Be brief."} and len(msgs[0]) == 2
        for k in (1, 2):  # the history, then the engine's own reply (not the recorded one), then the new turn
            assert msgs[k][:-2] == msgs[k - 1]
            assert msgs[k][-2] == {"role": "assistant", "content": reply_text(pairs[k - 1][1])}
            assert msgs[k][-2]["content"] != rows[0]["conversations"][2 * k]["value"]
        assert [m["content"] for m in msgs[2] if m["role"] == "user"][-1] == "Thanks, and rivers?"
        assert pairs[0][0].prompt_tokens < pairs[1][0].prompt_tokens < pairs[2][0].prompt_tokens


def test_a_text_only_completions_api_gets_the_history_as_text_with_the_engine_replies(tmp_path):
    """No /tokenize (prompts go as text): a turn's prompt is the turn before's, then the reply's text as the
    engine streamed it (its ids need not be among the pool's, whose text is known), then the new turn."""
    with SimProcess(SimConfig(vocab_size=VOCAB, decode_step_us=200.0, tokenize=False, truth_prompts=True),
                    startup_timeout=60) as s:
        p = profile(s.url, tmp_path, requests=2, think=0.0)
        p = dataclasses.replace(p, workload=dataclasses.replace(p.workload, tokenizer="none"))
        result, recs, truth = run(s, p)
    for pairs in by_conversation(result, recs, truth).values():
        assert [r.error for r, _ in pairs] == [None] * 3
        texts = [t["prompt"]["prompt"] for _, t in pairs]
        assert all(isinstance(x, str) for x in texts)
        for k in (1, 2):
            assert texts[k].startswith(texts[k - 1] + reply_text(pairs[k - 1][1]))
            assert len(texts[k]) > len(texts[k - 1]) + 20


def test_history_recorded_sends_the_dataset_replies(sim, tmp_path):
    rows = [{"messages": [{"role": "user", "content": "one"}, {"role": "assistant", "content": "recorded reply"},
                          {"role": "user", "content": "two"}]}]
    path = tmp_path / "chat.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    result, recs, truth = run(sim, profile(sim.url, tmp_path, api="openai-chat", requests=2, think=0.0,
                                           dataset=path, history="recorded", header=""))
    assert {t["session"] for t in truth.values()} == {None}  # header "": none sent
    for pairs in by_conversation(result, recs, truth).values():
        assert pairs[1][1]["prompt"]["messages"] == [{"role": "user", "content": "one"},
                                                     {"role": "assistant", "content": "recorded reply"},
                                                     {"role": "user", "content": "two"}]


def test_a_conversation_whose_second_turn_fails_keeps_its_first_and_sends_none_after(tmp_path, capsys):
    """HTTP 500 on a third of the requests: every conversation stops at its first failed turn (a record
    with its error), its later turns never reach the server, and the summary and report count them."""
    with SimProcess(SimConfig(decode_step_us=200.0, prefill_us_per_token=0.5, faults=FaultConfig(http_500=0.35)),
                    startup_timeout=60) as s:
        result, recs, truth = run(s, profile(s.url, tmp_path, requests=12, think=0.0))
    convs = by_conversation(result, recs, truth)
    sent = defaultdict(list)
    for t in truth.values():
        sent[t["session"]].append(t)
    second = []
    for c, pairs in convs.items():
        errors = [r.error is not None for r, _ in pairs]
        assert not any(errors[:-1])  # nothing after a failed turn
        assert len(pairs) == 3 or errors[-1]
        assert len(sent[pairs[0][1]["session"]]) == len(pairs)  # the server saw exactly the turns recorded
        if len(pairs) == 2 and errors[-1]:
            second.append(c)
    assert second, "no conversation failed at its second turn: pick another fault rate"
    s8 = load_json(result.run_dir / "summary.json")["levels"]["2"]["conversations"]
    assert s8["turns_sent"] == len(recs) and s8["not_sent"] == 36 - len(recs)
    c = second[0]
    b = next(b for b in s8["broken"] if b["conversation"] == c)
    assert b["turn"] == 2 and b["not_sent"] == [3, 3] and b["error"].startswith("http_status: HTTP 500")
    assert convs[c][0][0].error is None and convs[c][0][0].turn == 1  # turn 1 kept
    main(["report", str(result.run_dir)])
    out = capsys.readouterr().out
    assert f"conversation {c}: turn 2 failed (http_status: HTTP 500" in out and "turn 3 not sent" in out
    assert f"{36 - len(recs)} not sent" in out
    assert main(["report", "--html", str(result.run_dir)]) in (11, 30)
    html = next(result.run_dir.glob("*.html")).read_text()
    assert f"conversation {c}: turn 2 failed" in html and "By turn" in html


def test_an_ab_of_conversations_sends_byte_identical_bodies_to_both_sides(tmp_path):
    # two models that answer differently (other seeds): only the recorded history makes the bodies agree
    sides = [SimProcess(SimConfig(seed=k, decode_step_us=300.0, prefill_us_per_token=0.5, session_header="x-conv"),
                        startup_timeout=60) for k in (1, 2)]
    with sides[0] as a, sides[1] as b:
        doc = {"name": "abconv", "seed": 3,
               "target": {"endpoint": b.url},
               "workload": {"requests": 3, "input_len": {"dist": "fixed", "value": 24},
                            "output_len": {"dist": "fixed", "value": 12},
                            "sessions": {"turns": 3, "header": "x-conv"}},
               "load": {"concurrency": 2}, "ab": {"baseline": {"endpoint": a.url}, "pairs": 2},
               "health": LAX_HEALTH, "output": {"dir": str(tmp_path / "out"), "run_id": "ab"}}
        p = tmp_path / "ab.yaml"
        p.write_text(yaml.safe_dump(doc))
        main(["run", "-q", "--unverified", str(p)])
        ta, tb = a.truth_records(), b.truth_records()
    measured = [[t for t in side if t["session"] is not None] for side in (ta, tb)]
    assert len(measured[0]) == len(measured[1]) == 2 * 9  # two runs a side, 3 conversations of 3 turns
    assert sorted(t["body_hash"] for t in measured[0]) == sorted(t["body_hash"] for t in measured[1])
    assert sorted(t["session"] for t in measured[0]) == sorted(t["session"] for t in measured[1])
    assert len({t["body_hash"] for t in measured[0]}) == 18  # each pair its own prompts (cache: fresh)
    meta = load_json(tmp_path / "out" / "ab" / "A1" / "meta.json")
    assert meta["sessions"]["history"] == "recorded"


def write(tmp: Path, doc: dict[str, Any]) -> Path:
    base = {"name": "bad", "target": {"endpoint": "embedded"},
            "workload": {"requests": 2, "sessions": {"turns": 2}}, "load": {"concurrency": 1},
            "output": {"dir": str(tmp / "out")}}
    for k, v in doc.items():
        base[k] = {**base.get(k, {}), **v} if isinstance(v, dict) else v
    p = tmp / "bad.yaml"
    p.write_text(yaml.safe_dump(base))
    return p


def one_line(capsys: Any) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def test_a_sharegpt_conversation_without_a_user_turn_is_one_line_naming_the_row(tmp_path, capsys):
    (tmp_path / "c.json").write_bytes(orjson.dumps([
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]},
        {"conversations": [{"from": "system", "value": "be kind"}, {"from": "gpt", "value": "hello"}]}]))
    p = write(tmp_path, {"workload": {"dataset": {"path": "c.json"}, "sessions": {"turns": 2}}})
    assert main(["run", "--unverified", str(p)]) == 2
    assert one_line(capsys) == (f"loadgate: {tmp_path / 'c.json'}: row 2: conversations: a conversation needs a user "
                                "turn (from: human or user) with text")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("records.jsonl"))  # nothing sent


def test_an_openai_chat_line_without_a_user_message_is_one_line_naming_the_line(tmp_path, capsys):
    (tmp_path / "c.jsonl").write_bytes(
        b'{"messages": [{"role": "user", "content": "hi"}]}\n\n'
        b'{"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]}\n')
    p = write(tmp_path, {"workload": {"dataset": {"path": "c.jsonl"}, "sessions": {"turns": 2}}})
    assert main(["validate", str(p)]) == 2
    assert one_line(capsys) == (f"loadgate: {tmp_path / 'c.jsonl'}: line 3: messages: a conversation needs a user "
                                "turn (role: user) with text")


def test_an_ab_with_history_actual_is_refused_in_one_line(tmp_path, capsys):
    p = write(tmp_path, {"workload": {"sessions": {"turns": 2, "history": "actual"}},
                         "ab": {"baseline": {"endpoint": "embedded"}}})
    assert main(["validate", str(p)]) == 2
    line = one_line(capsys)
    assert "workload.sessions.history: an A/B sends identical bodies to both sides" in line and str(p) in line


def test_validate_says_what_conversations_a_profile_sends(tmp_path, capsys):
    assert main(["validate", str(write(tmp_path, {}))]) == 0
    assert "conversations: 2 of 2 turns, history actual (auto: actual in a single run), 1 in flight" in \
        capsys.readouterr().out
    p = write(tmp_path, {"ab": {"baseline": {"endpoint": "embedded"}}, "load": {"rate": 3.0, "concurrency": None}})
    assert main(["validate", str(p)]) == 0
    assert "history recorded (auto: recorded in an A/B), 3 started a second" in capsys.readouterr().out

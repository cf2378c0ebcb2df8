"""The plan-length check on records built by hand: with lengths the model chose (ignore_eos off or
stop strings) a shorter output is not off the plan, a longer one still is, and the lengths and
finish reasons received are reported; with ignore_eos every output must be its planned length."""

from __future__ import annotations

from loadgate.analysis.summary import natural, request_settings, token_check
from tests.recs import make_record


def recs(*outs: tuple[int, str]) -> list:
    return [make_record(i=k, output_tokens_planned=40, completion_tokens=n, chunk_tokens=[n], finish_reason=why)
            for k, (n, why) in enumerate(outs)]


def test_shorter_outputs_are_the_models_choice_under_natural_lengths_and_longer_ones_are_off_the_plan():
    rs = recs((40, "length"), (12, "stop"), (3, "stop"), (40, "length"))
    tc = token_check(rs, 0.0, natural_lengths=True)
    assert tc.ok and tc.completion_mismatches == 0
    assert tc.output_lengths == {"min": 3.0, "p50": 26.0, "p90": 40.0, "max": 40.0, "mean": 23.75, "distinct": 3.0}
    assert tc.finish_reasons == {"length": 2, "stop": 2}
    strict = token_check(rs, 0.0)
    assert not strict.ok and strict.completion_mismatches == 2 and strict.output_lengths is None
    over = token_check(recs((41, "length"), (10, "stop")), 0.0, natural_lengths=True)
    assert not over.ok and over.completion_mismatches == 1


def test_natural_lengths_follow_from_the_profile_and_old_profiles_read_as_ignore_eos():
    assert not natural(request_settings({"load": {}}))  # a profile written before load.request
    assert natural(request_settings({"load": {"request": {"ignore_eos": False}}}))
    assert natural(request_settings({"load": {"request": {"ignore_eos": True, "stop": ["\n"]}}}))


def test_an_output_cut_for_length_short_of_max_tokens_is_off_the_plan_under_natural_lengths():
    tc = token_check(recs((12, "length"), (12, "stop")), 0.0, natural_lengths=True)
    assert not tc.ok and tc.completion_mismatches == 1 and tc.examples == [0]

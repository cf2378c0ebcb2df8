"""`load.request` and `target.extra_body` as the profile loader reads them: stop strings may hold
line breaks (other control characters stay refused), extra_body takes any JSON value and refuses,
in one line naming the key, what JSON cannot carry or loadgate sets itself."""

from __future__ import annotations

import re

import pytest

from loadgate.config.profile import load_profile
from loadgate.errors import ProfileError


def load(tmp_path, text: str):
    p = tmp_path / "p.yaml"
    p.write_text(text)
    return load_profile(p)


def test_stop_strings_keep_line_breaks_and_tabs(tmp_path):
    p = load(tmp_path, 'load:\n  concurrency: 1\n  request: {stop: ["\\n\\n", "\\tEnd"], ignore_eos: false}\n')
    assert p.load.request.stop == ("\n\n", "\tEnd") and p.load.request.natural_lengths
    with pytest.raises(ProfileError, match=r"load\.request\.stop\[0\]: control character '\\x00'"):
        load(tmp_path, 'load:\n  concurrency: 1\n  request: {stop: ["a\\0"]}\n')
    with pytest.raises(ProfileError, match=r"control character '\\n'"):  # elsewhere a line break is refused
        load(tmp_path, 'target:\n  headers: {x-a: "a\\nb"}\n')


def test_extra_body_takes_json_values_and_refuses_what_json_cannot_carry(tmp_path):
    p = load(tmp_path, "target:\n  extra_body:\n    a: [1, 2.5, true, null, {b: x}]\n    big: 1e3\n")
    assert p.target.extra_body == {"a": [1, 2.5, True, None, {"b": "x"}], "big": 1000.0}
    with pytest.raises(ProfileError, match=r"p\.yaml:3: target\.extra_body\.a: \.inf cannot be sent as JSON|"
                                           r"target\.extra_body\.a: inf cannot be sent as JSON"):
        load(tmp_path, "target:\n  extra_body:\n    a: .inf\n")
    with pytest.raises(ProfileError, match=r"target\.extra_body\.a: keys must be strings, got 1"):
        load(tmp_path, "target:\n  extra_body:\n    a: {1: x}\n")


@pytest.mark.parametrize(("key", "instead"), [("top_p", "load.request.top_p"), ("seed", "load.request.seed"),
                                              ("sampling_seed", "load.request.seed"), ("stop", "load.request.stop")])
def test_a_sampling_key_in_extra_body_names_the_load_request_key(tmp_path, key, instead):
    with pytest.raises(ProfileError, match=rf"target\.extra_body\.{key}: set by {instead}"):
        load(tmp_path, f"target:\n  extra_body:\n    {key}: 1\n")


@pytest.mark.parametrize(("body", "path", "why"), [
    ("sampling_params: {temperature: 0.9}", "sampling_params.temperature", "set by load.request.temperature"),
    ("sampling_params: {max_new_tokens: 8}", "sampling_params.max_new_tokens", "loadgate sets this key itself"),
    ("stream_options: {include_usage: false}", "stream_options.include_usage", "loadgate sets this key itself"),
    ("return_token_ids: false", "return_token_ids", "loadgate sets this key itself"),
    ("cache_prompt: true", "cache_prompt", "loadgate sets this key itself")])
def test_loadgates_own_keys_are_refused_inside_the_nested_mappings_too(tmp_path, body, path, why):
    with pytest.raises(ProfileError, match=rf"target\.extra_body\.{re.escape(path)}: {why}"):
        load(tmp_path, f"target:\n  extra_body: {{{body}}}\n")


def test_the_sampling_caveat_needs_a_contract_that_ran_at_the_requests_temperature():
    from loadgate.verdict import sampling_caveats

    load_ = {"request": {"temperature": 0.8}}
    assert sampling_caveats({"load": load_, "exactness": {"sampling": {"temperature": 0.8, "seeded_replay": True}}}) == []
    off = sampling_caveats({"load": load_, "exactness": {"sampling": {"temperature": 0.8, "seeded_replay": False,
                                                                     "distribution_preserving": False}}})
    other = sampling_caveats({"load": load_, "exactness": {"sampling": {"temperature": 1.0, "seeded_replay": True}}})
    none = sampling_caveats({"load": load_, "exactness": {}})
    assert "no sampling contract" in off[0] and "no sampling contract" in none[0]
    assert "the sampling contract ran at temperature 1" in other[0]
    assert sampling_caveats({"load": {"request": {"temperature": 0.0}}}) == []

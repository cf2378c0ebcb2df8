"""The engine families' readings of a fingerprint: what a server sent that says nothing (a string,
a bool, a negative) gives no context length rather than an error."""

from __future__ import annotations

from loadgate.engine.adapters import context_length


def test_context_length_is_read_from_the_family_that_serves_it():
    assert context_length({"models": [{"id": "m", "max_model_len": 4096}]}) == 4096
    assert context_length({"props": {"default_generation_settings": {"n_ctx": 512}}}) == 512
    assert context_length({"server_info": {"context_length": 2048}}) == 2048


def test_a_context_length_no_server_can_mean_is_none_not_an_error():
    for bad in ("abc", True, -1, 0, 1.5, None):
        assert context_length({"models": [{"max_model_len": bad}]}) is None, bad

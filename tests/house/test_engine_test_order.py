"""The vLLM engine tests run grouped by the server variant they ask for (tests/engines/conftest.py
sorts a module's tests by its `server_phase`), so each variant starts once in CI. A test renamed
without its entry would silently fall back to the plain server's group and cost a restart: every
entry must name a test of the module."""

from __future__ import annotations

import inspect

from tests.engines import test_vllm


def test_every_entry_of_the_vllm_server_order_names_one_of_its_tests() -> None:
    tests = {name for name, fn in inspect.getmembers(test_vllm, inspect.isfunction) if name.startswith("test_")}
    for entry, variant in test_vllm._TESTS_SERVER.items():
        assert entry.split("[")[0] in tests, entry
        assert variant in test_vllm.SERVER_PHASES, (entry, variant)


def test_the_order_groups_the_tests_by_server_and_keeps_the_plain_ones_first() -> None:
    phase = test_vllm.server_phase
    assert phase("test_baseline_holds_ids_and_logprobs_from_both_routes_equal_to_plain_requests") == 0
    assert phase("test_speculation_in_float32_passes_the_gate_and_acceptance_sources_agree[ngram]") < phase(
        "test_speculation_in_float32_passes_the_gate_and_acceptance_sources_agree[draft]")
    assert phase("test_every_command_of_the_operators_guide_runs_and_prints_what_it_quotes") == 1

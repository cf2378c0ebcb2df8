"""Every generation API end to end against the simulator: exact token counts, ids, acceptance."""

from __future__ import annotations

import pytest

from loadgate.analysis.summary import build_summary
from loadgate.config.simconfig import SimConfig, SpeculativeConfig
from loadgate.sim.process import SimProcess
from tests.simtruth import profile_for, run

CFG = SimConfig(seed=9, speculative=SpeculativeConfig(method="draft_model", k=4), decode_step_us=1000,
                decode_us_per_seq=10)


@pytest.fixture(scope="module")
def sim():
    with SimProcess(CFG) as s:
        yield s


@pytest.mark.parametrize("api", ["openai-completions", "openai-chat", "sglang"])
def test_api_gives_exact_token_counts_and_matching_acceptance(sim, tmp_path, api):
    run_dir, records, meta = run(profile_for(sim.url, tmp_path, requests=12, concurrency=3, isl=40, osl=24, api=api))
    s = build_summary(run_dir).levels["3"]
    assert s.failed == 0
    tc = s.token_counts
    # chat prompts are text built from single-token words: the server's count (template included)
    # must still equal the plan
    assert tc.prompt_mismatches == 0 and tc.completion_mismatches == 0 and tc.prompt_unverified == 0
    assert all(sum(r.chunk_tokens) == 24 for r in records)
    assert {r.token_source for r in records} == {"ids"}
    assert s.acceptance.reconciliation["agree"]
    if api == "openai-chat":
        assert meta["chat_template_tokens"] > 0 and "word tokens" in meta["token_pool"]["source"]

"""SGLang native `/generate` responses.

Body: `{"text", "output_ids", "meta_info": {"id", "finish_reason", "prompt_tokens",
"completion_tokens", "cached_tokens", ["output_token_logprobs", "output_top_logprobs"],
[speculative fields], "e2e_latency"}}`.
  finish_reason  null while running; `{"type": "length", "length": max_new_tokens}`,
                 `{"type": "stop", "matched": <EOS or stop token id | stop string>}` or
                 `{"type": "abort", "message": ...}` at the end
  output_token_logprobs  `[[logprob, token_id, null], ...]` (only with return_logprob)
  output_top_logprobs    per position `[[logprob, token_id, null], ...]`, top_logprobs_num long
  speculative fields     with speculation on: spec_verify_ct, spec_accept_length,
                         spec_accept_rate, spec_num_correct_drafts, spec_num_proposed_drafts
                         (definitions in `loadgate.sim.speculative`)
  e2e_latency    seconds from arrival to this event
Streaming (chosen: SGLang's default, without `--incremental-streaming-output`): one SSE event
`data: {body}` per engine output, each carrying the CUMULATIVE `text`, `output_ids` and logprob
lists so far and cumulative `meta_info.completion_tokens`, then `data: [DONE]`. The truth log
still records, per event, only the token ids that are new in it.
"""

from __future__ import annotations

import time
from typing import Any

from loadgate.sim.params import SglangOptions
from loadgate.sim.sequence import Sequence, StepOutput

Event = tuple[dict[str, Any], str, list[int]]


class GenerateFormatter:
    """`/generate` events and body for one request."""

    def __init__(self, seq: Sequence, request_id: str, opts: SglangOptions, arrival_s: float) -> None:
        self.seq = seq
        self.id = request_id
        self.opts = opts
        self.arrival_s = arrival_s
        self.text = ""
        self.ids: list[int] = []
        self.lps: list[list[Any]] = []
        self.tops: list[list[list[Any]]] = []

    def _finish(self, out: StepOutput) -> dict[str, Any] | None:
        r = out.finish_reason
        if r is None:
            return None
        if r == "length":
            return {"type": "length", "length": self.seq.params.max_tokens}
        if r == "stop":
            matched = out.stop_reason if out.stop_reason is not None else self.seq.tokenizer.eos_id
            return {"type": "stop", "matched": matched}
        return {"type": "abort", "message": "aborted"}

    def _add(self, out: StepOutput) -> None:
        self.text += out.text
        self.ids.extend(out.token_ids)
        if self.opts.return_logprob and out.logprobs is not None and out.top is not None:
            self.lps.extend([lp, t, None] for t, lp in zip(out.token_ids, out.logprobs, strict=True))
            self.tops.extend([[alp, a, None] for a, alp in top] for top in out.top)

    def _payload(self, out: StepOutput) -> dict[str, Any]:
        n = len(self.ids)
        meta: dict[str, Any] = {"id": self.id, "finish_reason": self._finish(out),
                                "prompt_tokens": self.seq.n_prompt, "completion_tokens": n,
                                "cached_tokens": self.seq.cached_tokens}
        if self.opts.return_logprob:
            meta["output_token_logprobs"] = list(self.lps)
            meta["output_top_logprobs"] = list(self.tops)
        if self.seq.spec is not None:
            meta.update(self.seq.spec.sglang(n))
        meta["e2e_latency"] = time.perf_counter() - self.arrival_s
        return {"text": self.text, "output_ids": list(self.ids), "meta_info": meta}

    def chunks(self, out: StepOutput) -> list[Event]:
        """One cumulative event for `out`."""
        self._add(out)
        return [(self._payload(out), "tokens", out.token_ids)]

    def final(self) -> list[Event]:
        """SGLang sends no usage event."""
        return []

    def body(self, out: StepOutput) -> dict[str, Any]:
        """The non-stream body for the whole output `out`."""
        self._add(out)
        return self._payload(out)

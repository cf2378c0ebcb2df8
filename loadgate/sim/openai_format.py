"""Response bodies and stream chunks of vLLM's OpenAI routes, shaped like the recorded fixtures.

`/v1/completions` stream chunk: `{id, object: "text_completion", created, model, choices: [{index,
text, logprobs, finish_reason, stop_reason, prompt_token_ids, token_ids}], usage?}` with
`prompt_token_ids` only in the first chunk (null after, and null throughout unless
`return_token_ids`), `token_ids` null unless `return_token_ids`, and `usage` on every chunk only
with `stream_options.continuous_usage_stats`. `/v1/chat/completions` streams a role chunk
(`delta: {role: "assistant", content: ""}`, top-level `prompt_token_ids`, `prompt_text`) before the
first content chunk; content chunks carry `delta.content`, `logprobs.content[]`, `token_ids`, and
the last one `stop_reason`. With `include_usage`, a final chunk has `choices: []`, `usage`,
`system_fingerprint` and, with speculation on, `metrics.speculative_decoding`.

Logprobs: completions give `{text_offset, token_logprobs, tokens, top_logprobs}` where each
`top_logprobs` dict holds the emitted token first, then the top-N (at most N+1 entries, as vLLM
builds it); chat gives per token `{token, logprob, bytes, top_logprobs: [N entries: the emitted
token first, then the top-N]}`. With `return_tokens_as_token_ids` tokens read `token_id:<id>`.
`text_offset` advances by the length of each returned token string (vLLM's arithmetic).
"""

from __future__ import annotations

import time
from typing import Any

from loadgate.sim.params import OpenAIOptions
from loadgate.sim.sequence import Sequence, StepOutput
from loadgate.sim.tokenizer import Tokenizer

Event = tuple[dict[str, Any], str, list[int]]  # payload, truth kind, token ids


class OpenAIFormatter:
    """State shared by both OpenAI routes for one request."""

    object_chunk = ""

    def __init__(self, seq: Sequence, request_id: str, model: str, tk: Tokenizer, opts: OpenAIOptions,
                 fingerprint: str) -> None:
        self.seq = seq
        self.id = request_id
        self.model = model
        self.tk = tk
        self.opts = opts
        self.fingerprint = fingerprint
        self.created = int(time.time())
        self.n_out = 0
        self.offset = 0
        self.first = True

    def _tok(self, t: int) -> str:
        return f"token_id:{t}" if self.opts.tokens_as_ids else self.tk.token_str(t)

    def _usage(self, full: bool = False) -> dict[str, Any]:
        p = self.seq.n_prompt
        u: dict[str, Any] = {"prompt_tokens": p, "total_tokens": p + self.n_out, "completion_tokens": self.n_out}
        if full:
            u["prompt_tokens_details"] = None
            u["completion_tokens_details"] = None
        if self.opts.prompt_tokens_details:  # as vLLM with --enable-prompt-tokens-details
            u["prompt_tokens_details"] = {"cached_tokens": self.seq.cached_tokens}
        return u

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def final(self) -> list[Event]:
        """The final usage chunk, if `include_usage` was asked."""
        if not self.opts.include_usage:
            return []
        chunk = self._head(self.object_chunk)
        chunk["choices"] = []
        chunk["usage"] = self._usage()
        chunk["system_fingerprint"] = self.fingerprint
        if self.seq.spec is not None:
            chunk["metrics"] = {"speculative_decoding": self.seq.spec.vllm(non_stream=False)}
        return [(chunk, "usage", [])]

    def chunks(self, out: StepOutput) -> list[Event]:
        """The stream events for `out` (defined by each route)."""
        raise NotImplementedError

    def body(self, out: StepOutput) -> dict[str, Any]:
        """The non-stream body for the whole output `out` (defined by each route)."""
        raise NotImplementedError

    def _metrics(self) -> dict[str, Any]:
        spec = self.seq.spec
        return {"time_to_first_token_ms": None, "generation_time_ms": None, "queue_time_ms": None,
                "mean_itl_ms": None, "tokens_per_second": None,
                "speculative_decoding": spec.vllm(non_stream=True) if spec is not None else None}


class CompletionFormatter(OpenAIFormatter):
    """`/v1/completions` chunks and body."""

    object_chunk = "text_completion"

    def _logprobs(self, out: StepOutput) -> dict[str, Any] | None:
        if out.logprobs is None or out.top is None:
            return None
        tokens, offsets, tops = [], [], []
        for t, lp, top in zip(out.token_ids, out.logprobs, out.top, strict=True):
            s = self._tok(t)
            tokens.append(s)
            offsets.append(self.offset)
            self.offset += len(s)
            d = {s: lp}
            for alt, alp in top:
                d.setdefault(self._tok(alt), alp)
            tops.append(d)
        return {"text_offset": offsets, "token_logprobs": list(out.logprobs), "tokens": tokens,
                "top_logprobs": tops}

    def chunks(self, out: StepOutput) -> list[Event]:
        """The stream chunk for `out`."""
        self.n_out += len(out.token_ids)
        ids = self.opts.return_token_ids
        chunk = self._head("text_completion")
        chunk["choices"] = [{
            "index": 0, "text": out.text, "logprobs": self._logprobs(out),
            "finish_reason": out.finish_reason, "stop_reason": out.stop_reason,
            "prompt_token_ids": list(self.seq.params.prompt_ids) if ids and self.first else None,
            "token_ids": out.token_ids if ids else None}]
        self.first = False
        if self.opts.continuous_usage:
            chunk["usage"] = self._usage()
        return [(chunk, "tokens", out.token_ids)]

    def body(self, out: StepOutput) -> dict[str, Any]:
        """The non-stream response body for the whole output `out`."""
        self.n_out = len(out.token_ids)
        ids = self.opts.return_token_ids
        body = self._head("text_completion")
        body["choices"] = [{
            "index": 0, "text": out.text, "logprobs": self._logprobs(out),
            "finish_reason": out.finish_reason, "stop_reason": out.stop_reason,
            "token_ids": out.token_ids if ids else None, "prompt_logprobs": None,
            "prompt_token_ids": list(self.seq.params.prompt_ids) if ids else None, "routed_experts": None}]
        body.update({"service_tier": None, "system_fingerprint": self.fingerprint,
                     "usage": self._usage(full=True), "kv_transfer_params": None,
                     "ec_transfer_params": None, "metrics": self._metrics()})
        return body


class ChatFormatter(OpenAIFormatter):
    """`/v1/chat/completions` chunks and body."""

    object_chunk = "chat.completion.chunk"

    def _entry(self, t: int, lp: float) -> dict[str, Any]:
        s = self._tok(t)
        return {"token": s, "logprob": lp, "bytes": list(s.encode("utf-8"))}

    def _logprobs(self, out: StepOutput) -> dict[str, Any] | None:
        if out.logprobs is None or out.top is None:
            return None
        n = self.seq.params.logprobs or 0
        content = []
        for t, lp, top in zip(out.token_ids, out.logprobs, out.top, strict=True):
            e = self._entry(t, lp)
            alts = [(t, lp)] + [(a, alp) for a, alp in top if a != t]
            e["top_logprobs"] = [self._entry(a, alp) for a, alp in alts[:n]] if n else []
            content.append(e)
        return {"content": content}

    def chunks(self, out: StepOutput) -> list[Event]:
        """The role chunk (first call only) and the content chunk for `out`."""
        events: list[Event] = []
        ids = self.opts.return_token_ids
        if self.first:
            self.first = False
            role = self._head("chat.completion.chunk")
            role["choices"] = [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                "logprobs": None, "finish_reason": None}]
            role["prompt_token_ids"] = list(self.seq.params.prompt_ids) if ids else None
            role["prompt_text"] = None
            if self.opts.continuous_usage:
                role["usage"] = self._usage()
            events.append((role, "role", []))
        thinking = max(0, min(len(out.token_ids), self.opts.reasoning_tokens - self.n_out))
        if thinking:  # the reasoning phase: its own event, then the step's answer tokens (if any) in another
            part, rest = _split(out, thinking, self.tk)
            events.append(self._event(part, "reasoning"))
            if rest.token_ids or rest.finish_reason is not None:
                events.append(self._event(rest, "tokens"))
            return events
        events.append(self._event(out, "tokens"))
        return events

    def _event(self, out: StepOutput, kind: str) -> Event:
        """One chunk for `out`: its text as `content`, or as `reasoning_content` (kind "reasoning")."""
        self.n_out += len(out.token_ids)
        delta = {"reasoning_content": out.text} if kind == "reasoning" else {"content": out.text}
        choice: dict[str, Any] = {"index": 0, "delta": delta,
                                  "logprobs": self._logprobs(out), "finish_reason": out.finish_reason}
        if out.finish_reason is not None:
            choice["stop_reason"] = out.stop_reason
        choice["token_ids"] = out.token_ids if self.opts.return_token_ids else None
        chunk = self._head("chat.completion.chunk")
        chunk["choices"] = [choice]
        if self.opts.continuous_usage:
            chunk["usage"] = self._usage()
        return chunk, kind, out.token_ids

    def body(self, out: StepOutput) -> dict[str, Any]:
        """The non-stream response body for the whole output `out`."""
        self.n_out = len(out.token_ids)
        ids = self.opts.return_token_ids
        body = self._head("chat.completion")
        body["choices"] = [{
            "index": 0,
            "message": {"role": "assistant", "content": out.text, "refusal": None, "annotations": None,
                        "audio": None, "function_call": None, "reasoning": None},
            "logprobs": self._logprobs(out), "finish_reason": out.finish_reason,
            "stop_reason": out.stop_reason, "token_ids": out.token_ids if ids else None,
            "routed_experts": None}]
        body.update({"service_tier": None, "system_fingerprint": self.fingerprint,
                     "usage": self._usage(full=True), "prompt_logprobs": None,
                     "prompt_token_ids": list(self.seq.params.prompt_ids) if ids else None,
                     "prompt_text": None, "kv_transfer_params": None, "ec_transfer_params": None,
                     "metrics": self._metrics()})
        return body


def _split(out: StepOutput, k: int, tk: Tokenizer) -> tuple[StepOutput, StepOutput]:
    """`out`'s first `k` tokens and the rest, as two outputs; the finish reason goes with the last
    one that has tokens."""
    def part(ids: list[int], lo: int, hi: int) -> StepOutput:
        return StepOutput(ids, "".join(tk.token_str(x) for x in ids),
                          None if out.logprobs is None else out.logprobs[lo:hi], None if out.top is None else out.top[lo:hi])

    n = len(out.token_ids)
    head, tail = part(out.token_ids[:k], 0, k), part(out.token_ids[k:], k, n)
    last = tail if tail.token_ids else head
    last.finish_reason, last.stop_reason = out.finish_reason, out.stop_reason
    return head, tail

"""Settings of the simulated engine.

These frozen dataclasses are the single definition of every simulator knob: the profile loader
validates a profile's `target.sim` section against them, `loadgate schema` turns them into JSON
Schema, and `loadgate sim --help` documents them from the same `help` metadata.

Each field is a `loadgate.config.knob` (help text and bounds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from loadgate.config.knob import knob


@dataclass(frozen=True)
class SpeculativeConfig:
    """Speculative decoding: a draft proposes `k` tokens per step, the target verifies k+1."""

    method: Literal["none", "draft_model", "ngram"] = knob(
        "none", "speculation method; 'none' decodes one token per step")
    k: int = knob(4, "draft tokens proposed per verify step", min=1, max=16)
    acceptance: tuple[float, ...] = knob(
        (0.8, 0.6, 0.45, 0.3),
        "probability that draft position i is accepted given positions < i were; "
        "one value per position, the last repeats for positions beyond the list",
        min=0.0, max=1.0)

    sampling_rule: Literal["rejection", "argmax"] = knob(
        "rejection", "sampled requests (temperature > 0): how a verify step accepts a draft token x drawn "
        "from the draft distribution q: 'rejection' (the standard rule, which preserves the target's "
        "distribution p: accept with probability min(1, p(x)/q(x)), else draw from max(0, p - q) "
        "normalised) or 'argmax' (a wrong rule: accept x only if it is p's argmax, else draw from p)")
    wrong_rule_rate: float = knob(
        1.0, "with sampling_rule 'argmax': the share of draft positions judged by it (the others by "
        "the rejection rule), which scales its bias: at one position the emitted distribution's TV "
        "distance from p is this share times q[a] (1 - p[a]), a the argmax", min=0.0, max=1.0)
    draft_sharpness: float = knob(
        1.5, "sampled requests: the draft distribution q is the target's p sharpened, q ~ p**s "
        "(s > 1 puts more mass on the argmax than p does)", min=0.0)

    def check(self) -> list[tuple[str, str]]:
        """Speculation needs at least one acceptance probability (profiles and `loadgate sim` alike)."""
        if self.method != "none" and not self.acceptance:
            return [("acceptance", "needs at least one probability when speculating")]
        return []


@dataclass(frozen=True)
class DivergenceConfig:
    """Ways the simulated engine departs from its own reference output. All off by default."""

    batch_variant: bool = knob(
        False, "at near-tie positions, pick the runner-up token when the decode step holds more "
        "than one sequence (the max-num-seqs 1 vs 32 effect)")
    spec_variant: bool = knob(
        False, "at near-tie positions produced by a verify pass, pick the runner-up token")
    run_to_run: float = knob(
        0.0, "probability per request of one runner-up flip at a near-tie position, drawn anew "
        "on every run (e.g. 0.02 gives about 25 differing in 1,200 requests)", min=0.0, max=1.0)
    logprob_jitter: int = knob(
        0, "move every returned logprob by this many float32 ULPs (token ids unchanged)",
        min=0, max=1_000_000)
    long_context: int = knob(
        0, "pick the runner-up at near-tie positions once the context (prompt + output) holds "
        "more than this many tokens; 0 is off", min=0)


@dataclass(frozen=True)
class FaultConfig:
    """Seeded fault injection; rates are per request, in [0, 1]."""

    http_429: float = knob(0.0, "rate of HTTP 429 (too many requests) answers", min=0.0, max=1.0)
    http_500: float = knob(0.0, "rate of HTTP 500 answers", min=0.0, max=1.0)
    http_503: float = knob(0.0, "rate of HTTP 503 answers", min=0.0, max=1.0)
    disconnect: float = knob(0.0, "rate of streams cut (connection closed) mid-stream", min=0.0, max=1.0)
    malformed: float = knob(0.0, "rate of streams carrying one malformed SSE data line", min=0.0, max=1.0)
    error_event: float = knob(
        0.0, "rate of streams ending in an error event after HTTP 200", min=0.0, max=1.0)
    stall: float = knob(0.0, "rate of streams that stall mid-stream for `stall_s`", min=0.0, max=1.0)
    stall_s: float = knob(1.0, "length of a stall, seconds", min=0.0, max=3600.0)
    slow_first_byte: float = knob(
        0.0, "rate of requests whose first byte is delayed by `slow_first_byte_s`", min=0.0, max=1.0)
    slow_first_byte_s: float = knob(0.5, "delay before the first byte, seconds", min=0.0, max=3600.0)
    ignore_disconnect: bool = knob(
        False, "broken engine: a request whose client has gone keeps its slot and generates to max_tokens")
    ignore_stop: bool = knob(False, "broken engine: stop strings in a request are ignored")
    ignore_seed: bool = knob(False, "broken engine: per-request seeds are ignored (sampling draws afresh)")
    after_requests: int = knob(
        0, "faults start after this many requests the server counted (0: from the first): a server that "
        "breaks mid-run", min=0)


@dataclass(frozen=True)
class SlowdownConfig:
    """A server that slows down mid-run: from `after_s` seconds after the engine's first step on, every
    step costs `factor` times what the settings make it (a drifting server, for time slices)."""

    after_s: float = knob(0.0, "seconds after the engine's first step (whatever it served first: an exactness "
                          "check, a warmup) when the slowdown begins", min=0.0)
    factor: float = knob(1.0, "every step's cost is multiplied by this from then on (1: off; 2: steps take "
                         "twice as long)", exclusive_min=0.0, max=1000.0)


@dataclass(frozen=True)
class SimConfig:
    """The simulated engine: a deterministic model behind a continuous-batching loop."""

    seed: int = knob(0, "seed of the model's weights, speculation and faults", min=0)
    model: str = knob("sim-tiny", "served model name")
    vocab_size: int = knob(4096, "vocabulary size (bytes + merged tokens + specials)", min=512, max=65536)
    near_tie_rate: float = knob(
        0.05, "fraction of positions whose top-2 logprob gap is below 0.3 nats", min=0.0, max=1.0)
    tokenize: bool = knob(
        True, "serve /tokenize and /detokenize; off, they answer 404 as most gateways and hosted "
        "OpenAI-compatible endpoints do (`loadgate sim --write-tokenizer DIR` writes the tokenizer as a "
        "Hugging Face folder instead)")
    api_key_env: str | None = knob(
        None, "require `Authorization: Bearer <the value of this environment variable>` on every route but "
        "/health (401 otherwise); the key itself is never in the settings")
    tls_cert: str | None = knob(None, "serve HTTPS with this PEM certificate (and tls_key)")
    tls_key: str | None = knob(None, "the PEM private key of tls_cert")
    tls_client_ca: str | None = knob(None, "with tls_cert: require a client certificate signed by this PEM CA")
    max_model_len: int = knob(32768, "longest context (prompt + output) accepted", min=16)
    max_num_seqs: int = knob(64, "most sequences in one decode step; the rest wait", min=1, max=4096)
    prefill_us_per_token: float = knob(20.0, "prefill cost per prompt token, microseconds", min=0.0)
    prefix_cache_block: int = knob(
        0, "automatic prefix caching as vLLM does it, in blocks of this many tokens (0: off): a prompt's "
        "leading full blocks seen before are not prefilled again (no prefill cost, so a hit shows in TTFT) "
        "and count in vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total", min=0, max=4096)
    prompt_tokens_details: bool = knob(
        False, "OpenAI routes: usage carries prompt_tokens_details.cached_tokens (the prompt tokens the prefix "
        "cache served), as vLLM's --enable-prompt-tokens-details does; SGLang's meta_info.cached_tokens is "
        "always sent")
    truth_prompts: bool = knob(
        False, "the truth log keeps each request's prompt keys as sent (prompt, messages, input_ids, text), for "
        "tests of what a conversation's turns carry")
    session_header: str = knob(
        "x-session-id", "request header whose value the truth log keeps as each request's `session`")
    reasoning_tokens: int = knob(
        0, "chat replies: the first N output tokens stream as the model's reasoning (delta.reasoning_content), "
        "the rest as content, as vLLM's reasoning parsers do; a request whose chat_template_kwargs say "
        "enable_thinking: false gets none; 0 is off", min=0)
    decode_step_us: float = knob(4000.0, "cost of a decode step with one sequence, microseconds", min=0.0)
    decode_us_per_seq: float = knob(
        150.0, "extra decode step cost per additional running sequence, microseconds", min=0.0)
    verify_us_per_token: float = knob(
        300.0, "extra cost per verified token beyond the first in a verify step, microseconds", min=0.0)
    draft_us_per_token: float = knob(
        200.0, "cost of proposing one draft token, microseconds", min=0.0)
    stream_events: Literal["per_step", "per_token"] = knob(
        "per_step", "how a streamed engine step's tokens go out: 'per_step', one SSE event carrying all of them "
        "(vLLM's shape: with speculation an event holds a verify step's tokens), or 'per_token', one event "
        "per token, all of a step's events in one write (llama-server's shape: a verify step's accepted "
        "tokens arrive as a burst of one-token events)")
    fixed_step_us: float = knob(
        0.0, "if > 0, every engine step takes exactly this long regardless of batch and prompt "
        "(benchmark mode: makes send times predictable)", min=0.0)
    speculative: SpeculativeConfig = field(
        default_factory=SpeculativeConfig, metadata={"help": "speculative decoding"})
    divergence: DivergenceConfig = field(
        default_factory=DivergenceConfig, metadata={"help": "divergence knobs (all off by default)"})
    faults: FaultConfig = field(
        default_factory=FaultConfig, metadata={"help": "fault injection (all off by default)"})
    slowdown: SlowdownConfig = field(
        default_factory=SlowdownConfig, metadata={"help": "step costs multiplied from a time on (off by default)"})

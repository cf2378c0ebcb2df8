"""Request bodies of the three generation routes -> `GenParams` plus route options.

Implemented sampling: greedy when temperature < 1e-5 (SGLang: < 1e-6), otherwise sampling from
softmax(logits / temperature) with the request's `seed` (or a per-request random seed). Unset
temperature means 1.0, as in vLLM and SGLang without a generation config: send it explicitly.
top_p, top_k, min_p, penalties and similar fields are accepted and ignored. `n` other than 1,
`best_of` and `echo` are refused with 400. Limits: at most 20 logprobs (vLLM's default
max_logprobs); prompt + max_tokens must fit in max_model_len (400 otherwise, as in the fixture).
Unset max_tokens: 16 on /v1/completions, the rest of the context on chat, 128 on /generate.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from loadgate.config.simconfig import SimConfig
from loadgate.sim.chat import chat_prompt_ids
from loadgate.sim.errors import ApiError, bad_request
from loadgate.sim.sequence import GenParams
from loadgate.sim.tokenizer import Tokenizer

MAX_LOGPROBS = 20


@dataclass(frozen=True)
class OpenAIOptions:
    """How an OpenAI-route response is shaped (beyond the sampling parameters)."""

    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False
    return_token_ids: bool = False
    tokens_as_ids: bool = False
    reasoning_tokens: int = 0  # chat: the first N output tokens stream as `delta.reasoning_content`
    prompt_tokens_details: bool = False  # usage carries prompt_tokens_details.cached_tokens


@dataclass(frozen=True)
class SglangOptions:
    """How a `/generate` response is shaped."""

    stream: bool = False
    return_logprob: bool = False
    top_logprobs_num: int = 0
    rid: str | None = None


def body_field(body: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any) -> Any:
    v = body.get(key, default)
    if v is None:
        return default
    if kind in (int, float) or kind == (int, float):
        ok = isinstance(v, kind) and not isinstance(v, bool)
    else:
        ok = isinstance(v, kind)
    if not ok:
        raise bad_request(f"{key} has the wrong type: {type(v).__name__}", key)
    return v


def _int(body: dict[str, Any], key: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
    v: int | None = body_field(body, key, int, default)
    if v is not None and (v < lo or (hi is not None and v > hi)):
        rng = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise bad_request(f"{key} must be {rng}, got {v}", key)
    return v


def _stops(v: Any, key: str = "stop") -> tuple[str, ...]:
    if v is None:
        return ()
    if isinstance(v, str):
        return (v,) if v else ()
    if isinstance(v, list) and all(isinstance(s, str) for s in v):
        return tuple(s for s in v if s)
    raise bad_request(f"{key} must be a string or a list of strings", key)


def _ids(v: Any, key: str) -> tuple[int, ...]:
    if v is None:
        return ()
    if isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in v):
        return tuple(v)
    raise bad_request(f"{key} must be a list of integers", key)


def _temperature(body: dict[str, Any], greedy_below: float) -> float:
    t = float(body_field(body, "temperature", (int, float), 1.0))
    if t < 0:
        raise bad_request(f"temperature must be non-negative, got {t}", "temperature")
    return 0.0 if t < greedy_below else t


def _check_prompt(tk: Tokenizer, ids: list[int], cfg: SimConfig) -> tuple[int, ...]:
    if not ids:
        raise bad_request("The decoder prompt cannot be empty", "prompt")
    bad = tk.check_ids(ids)
    if bad is not None:
        raise bad_request(f"Token id {bad} is out of vocabulary (vocab_size={tk.vocab_size})", "prompt")
    if len(ids) >= cfg.max_model_len:
        raise bad_request(f"The decoder prompt (length {len(ids)}) is longer than the maximum model "
                          f"length of {cfg.max_model_len}.", "prompt")
    return tuple(ids)


def _check_max_tokens(max_tokens: int, n_prompt: int, cfg: SimConfig, key: str = "max_tokens") -> None:
    L = cfg.max_model_len
    if max_tokens > L:
        raise bad_request(f"{key}={max_tokens} cannot be greater than max_model_len={L}. Please request "
                          f"fewer output tokens. (parameter={key}, value={max_tokens})", key)
    if n_prompt + max_tokens > L:
        raise bad_request(f"This model's maximum context length is {L} tokens. However, you requested "
                          f"{n_prompt + max_tokens} tokens ({n_prompt} in the messages, {max_tokens} in the "
                          f"completion). Please reduce the length of the messages or completion. "
                          f"(parameter={key}, value={max_tokens})", key)


def check_model(body: dict[str, Any], cfg: SimConfig) -> None:
    """404 unless `model` is absent or the served model name."""
    model = body.get("model")
    if model is not None and model != cfg.model:
        raise ApiError(404, f"The model `{model}` does not exist. Valid aliases: {cfg.model}.", "model")


def _openai_common(body: dict[str, Any]) -> None:
    if body_field(body, "n", int, 1) != 1 or body_field(body, "best_of", int, 1) != 1:
        raise bad_request("the simulator serves n=1 only", "n")
    if isinstance(body.get("tool_choice"), dict) or body.get("tool_choice") == "required":
        raise bad_request("the simulator generates no tool calls: tool_choice must be 'none' or 'auto'", "tool_choice")
    if body_field(body, "echo", bool, False):
        raise bad_request("echo is not supported by the simulator", "echo")


def _openai_options(body: dict[str, Any]) -> OpenAIOptions:
    so = body_field(body, "stream_options", dict, {})
    include = bool(body_field(so, "include_usage", bool, False))
    return OpenAIOptions(
        stream=body_field(body, "stream", bool, False),
        include_usage=include,
        continuous_usage=include and bool(body_field(so, "continuous_usage_stats", bool, False)),
        return_token_ids=body_field(body, "return_token_ids", bool, False),
        tokens_as_ids=body_field(body, "return_tokens_as_token_ids", bool, False),
    )


def _prompt_ids(prompt: Any, tk: Tokenizer) -> list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return tk.encode(prompt)
    if isinstance(prompt, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
        return list(prompt)
    raise bad_request("prompt must be a string or a list of token ids (one prompt per request)", "prompt")


def parse_completion(body: dict[str, Any], cfg: SimConfig, tk: Tokenizer) -> tuple[GenParams, OpenAIOptions]:
    """`/v1/completions` body -> parameters (raises ApiError)."""
    check_model(body, cfg)
    _openai_common(body)
    if "prompt" not in body:
        raise bad_request("prompt is required", "prompt")
    prompt = _check_prompt(tk, _prompt_ids(body["prompt"], tk), cfg)
    max_tokens = _int(body, "max_tokens", 16, 1)
    assert max_tokens is not None
    _check_max_tokens(max_tokens, len(prompt), cfg)
    params = GenParams(
        prompt_ids=prompt, max_tokens=max_tokens,
        ignore_eos=body_field(body, "ignore_eos", bool, False), stop=_stops(body.get("stop")),
        stop_token_ids=_ids(body.get("stop_token_ids"), "stop_token_ids"),
        temperature=_temperature(body, 1e-5), seed=body_field(body, "seed", int, None),
        logprobs=_int(body, "logprobs", None, 0, MAX_LOGPROBS),
        skip_special_tokens=body_field(body, "skip_special_tokens", bool, True))
    return params, dataclasses.replace(_openai_options(body), prompt_tokens_details=cfg.prompt_tokens_details)


def parse_chat(body: dict[str, Any], cfg: SimConfig, tk: Tokenizer) -> tuple[GenParams, OpenAIOptions]:
    """`/v1/chat/completions` body -> parameters (raises ApiError)."""
    check_model(body, cfg)
    _openai_common(body)
    ids = chat_prompt_ids(tk, body.get("messages"), body.get("tools"),
                          body_field(body, "add_generation_prompt", bool, True))
    prompt = _check_prompt(tk, ids, cfg)
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _int(body, key, cfg.max_model_len - len(prompt), 1)
    assert max_tokens is not None
    _check_max_tokens(max_tokens, len(prompt), cfg, key)
    want_lp = body_field(body, "logprobs", bool, False)
    top = _int(body, "top_logprobs", None, 0, MAX_LOGPROBS)
    if top is not None and top > 0 and not want_lp:
        raise bad_request("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
    params = GenParams(
        prompt_ids=prompt, max_tokens=max_tokens,
        ignore_eos=body_field(body, "ignore_eos", bool, False), stop=_stops(body.get("stop")),
        stop_token_ids=_ids(body.get("stop_token_ids"), "stop_token_ids"),
        temperature=_temperature(body, 1e-5), seed=body_field(body, "seed", int, None),
        logprobs=(top or 0) if want_lp else None,
        skip_special_tokens=body_field(body, "skip_special_tokens", bool, True))
    kwargs = body_field(body, "chat_template_kwargs", dict, {})
    thinking = body_field(kwargs, "enable_thinking", bool, True)  # as Qwen3's template reads it
    return params, dataclasses.replace(_openai_options(body), reasoning_tokens=cfg.reasoning_tokens if thinking else 0,
                                       prompt_tokens_details=cfg.prompt_tokens_details)


def parse_generate(body: dict[str, Any], cfg: SimConfig, tk: Tokenizer) -> tuple[GenParams, SglangOptions]:
    """SGLang `/generate` body -> parameters (raises ApiError)."""
    if isinstance(body.get("text"), str):
        ids = tk.encode(body["text"])
    elif body.get("input_ids") is not None:
        ids = list(_ids(body["input_ids"], "input_ids"))
    else:
        raise bad_request("either text (a string) or input_ids (a list of ints) is required", "text")
    prompt = _check_prompt(tk, ids, cfg)
    sp = body_field(body, "sampling_params", dict, {})
    max_tokens = _int(sp, "max_new_tokens", 128, 0)
    assert max_tokens is not None
    if max_tokens == 0:
        raise bad_request("max_new_tokens must be at least 1 in the simulator", "max_new_tokens")
    _check_max_tokens(max_tokens, len(prompt), cfg, "max_new_tokens")
    return_logprob = body_field(body, "return_logprob", bool, False)
    top_n = _int(body, "top_logprobs_num", 0, 0, MAX_LOGPROBS) or 0
    rid = body.get("rid")
    params = GenParams(
        prompt_ids=prompt, max_tokens=max_tokens,
        ignore_eos=body_field(sp, "ignore_eos", bool, False), stop=_stops(sp.get("stop")),
        stop_token_ids=_ids(sp.get("stop_token_ids"), "stop_token_ids"),
        temperature=_temperature(sp, 1e-6), seed=body_field(sp, "sampling_seed", int, None),
        logprobs=top_n if return_logprob else None,
        skip_special_tokens=body_field(sp, "skip_special_tokens", bool, True))
    return params, SglangOptions(body_field(body, "stream", bool, False), return_logprob, top_n,
                                 rid if isinstance(rid, str) else None)

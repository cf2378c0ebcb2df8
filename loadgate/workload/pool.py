"""The token pool: real token ids of the target's own tokenizer, from which prompts are drawn.

Token counts must come from the tokenizer the server uses, never from a guess. The pool is the
target's `/tokenize` of fixed filler text (`loadgate.workload.text`), or, for engines without
that route, a local `tokenizer.json` (the optional `tokenizers` extra) named by
`workload.tokenizer`.

APIs that only take text (OpenAI chat) need prompts whose token count is known in advance. For
them the pool keeps only *word tokens*: ids whose text is a space followed by letters and which
the server tokenizes back to exactly that one id. A prompt made of such pieces re-tokenizes to
the same ids in byte-level BPE vocabularies, so its length stays exact; the per-request token
check verifies it anyway.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from loadgate.enginehttp import get_json
from loadgate.errors import EngineError, UsageError
from loadgate.workload.text import filler_text

_WORD = re.compile(r"^ [A-Za-z]{2,}$")
MAX_TEXT_POOL = 400


@dataclass(frozen=True)
class TokenPool:
    ids: tuple[int, ...]
    text: dict[int, str] = field(default_factory=dict)  # id -> its text, for text-only APIs
    source: str = "server /tokenize"

    def prompt_text(self, ids: tuple[int, ...]) -> str:
        return "".join(self.text[i] for i in ids)


def local_pool(tokenizer_path: str, need_text: bool) -> TokenPool:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UsageError("workload.tokenizer needs the `tokenizers` package: pip install 'loadgate[tokenizers]'") from None
    try:
        tok = Tokenizer.from_file(tokenizer_path)
    except Exception as e:  # the library raises its own exception types
        raise UsageError(f"{tokenizer_path}: cannot load tokenizer: {e}") from None
    ids = sorted(set(tok.encode(filler_text(), add_special_tokens=False).ids))
    text = {}
    if need_text:
        for i in ids:
            piece = tok.decode([i])
            if _WORD.match(piece) and tok.encode(piece, add_special_tokens=False).ids == [i]:
                text[i] = piece
        ids = sorted(text)[:MAX_TEXT_POOL]
        text = {i: text[i] for i in ids}
    if len(ids) < 20:
        raise UsageError(f"{tokenizer_path}: found only {len(ids)} usable word tokens to build prompts from")
    return TokenPool(tuple(ids), text, source=f"local tokenizer {tokenizer_path}")


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST for a JSON object (anything else is an EngineError)."""
    data = await get_json(session, url, method="POST", body=body)
    if not isinstance(data, dict):
        raise EngineError(f"POST {url} did not answer a JSON object")
    return data


def tokenize_body(api: str, model: str, text: str) -> dict[str, Any]:
    """vLLM and SGLang read `prompt`; llama-server reads `content` (and adds no special tokens)."""
    if api.startswith("llamacpp"):
        return {"content": text, "add_special": False}
    return {"model": model, "prompt": text, "add_special_tokens": False}


async def server_pool(session: aiohttp.ClientSession, base: str, model: str, need_text: bool,
                      api: str = "openai-completions") -> TokenPool:
    try:
        data = await _post(session, f"{base}/tokenize", tokenize_body(api, model, filler_text()))
    except EngineError as e:
        raise EngineError(f"{e}; set workload.tokenizer to a local tokenizer.json for engines without "
                          "/tokenize") from None
    ids = sorted({i for i in data.get("tokens") or [] if isinstance(i, int)})
    if not ids:
        raise EngineError(f"{base}/tokenize returned no tokens")
    if not need_text:
        return TokenPool(tuple(ids))
    sem = asyncio.Semaphore(16)

    async def check(i: int) -> tuple[int, str] | None:
        async with sem:
            d = await _post(session, f"{base}/detokenize", {"model": model, "tokens": [i]})
            piece = d.get("content") if api.startswith("llamacpp") else d.get("prompt")  # llama-server: content
            if not isinstance(piece, str) or not _WORD.match(piece):
                return None
            back = (await _post(session, f"{base}/tokenize", tokenize_body(api, model, piece))).get("tokens")
            return (i, piece) if back == [i] else None

    found = [x for x in await asyncio.gather(*(check(i) for i in ids)) if x is not None][:MAX_TEXT_POOL]
    if len(found) < 20:
        raise EngineError(f"{base}: found only {len(found)} single-token words to build text prompts from")
    return TokenPool(tuple(i for i, _ in found), dict(found), source="server /tokenize + /detokenize (word tokens)")


async def chat_overhead(session: aiohttp.ClientSession, base: str, model: str, pool: TokenPool) -> int | None:
    """Tokens the chat template adds around one user message (None when the server cannot say)."""
    content = pool.prompt_text(pool.ids[:8])
    try:
        with_template = await _post(session, f"{base}/tokenize", {"model": model, "messages": [
            {"role": "user", "content": content}], "add_generation_prompt": True})
    except EngineError:
        return None
    n = with_template.get("count")
    return None if n is None else int(n) - 8

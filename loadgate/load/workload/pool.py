"""The token pool: the ids (or words) from which prompts are drawn, and where their counts come from.

Token counts must come from the tokenizer the server uses, never from a guess. `workload.tokenizer`
picks one of three sources:
- `server` (the default): the target's `/tokenize` of fixed filler text (`loadgate.load.workload.text`);
  for chat, its `/tokenize` with `messages` gives what the chat template adds;
- a path: a local Hugging Face tokenizer (`loadgate.load.workload.hf`: a model folder or its
  `tokenizer.json`); for chat, its chat template rendered as transformers does;
- `none`: no tokenizer at all (gateways, hosted endpoints). Prompts are then text made of filler
  words, planned in words; every count is the server's own usage count, and the report says so.

APIs that only take text (OpenAI chat) need prompts whose token count is known in advance. For
them the pool keeps only *word tokens*: ids whose text is a space followed by letters and which
the tokenizer maps back to exactly that one id. A prompt made of such pieces re-tokenizes to
the same ids in byte-level BPE vocabularies, so its length stays exact; the per-request token
check verifies it anyway.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from loadgate.engine.adapters import adapter_for
from loadgate.engine.adapters.base import with_template_kwargs
from loadgate.errors import EngineError, UsageError
from loadgate.load.workload.hf import HFTokenizer, TemplateError
from loadgate.load.workload.text import filler_text, filler_words
from loadgate.net.http import Unreachable, get_json

_WORD = re.compile(r"^ [A-Za-z]{2,}$")
MAX_TEXT_POOL = 400


@dataclass(frozen=True)
class TokenPool:
    ids: tuple[int, ...]
    text: dict[int, str] = field(default_factory=dict)  # id -> its text, for text-only APIs
    source: str = "server /tokenize"
    exact: bool = True  # False: ids are word numbers, not token ids (`tokenizer: none`); send text

    def prompt_text(self, ids: tuple[int, ...]) -> str:
        return "".join(self.text[i] for i in ids)


def local_pool(tok: HFTokenizer, need_text: bool) -> TokenPool:
    """Token ids of the filler text by a local tokenizer (word tokens only when `need_text`)."""
    ids = sorted(set(tok.encode(filler_text())))
    text = {}
    if need_text:
        for i in ids:
            piece = tok.decode([i])
            if _WORD.match(piece) and tok.encode(piece) == [i]:
                text[i] = piece
        ids = sorted(text)[:MAX_TEXT_POOL]
        text = {i: text[i] for i in ids}
    if len(ids) < 20:
        raise UsageError(f"{tok.path}: found only {len(ids)} usable word tokens to build prompts from")
    return TokenPool(tuple(ids), text, source=f"local tokenizer {tok.path}")


def word_pool() -> TokenPool:
    """`tokenizer: none`: numbered filler words (" river", " cache", ...); prompts are text."""
    words = filler_words()
    return TokenPool(tuple(range(len(words))), {i: " " + w for i, w in enumerate(words)},
                     source="none (text prompts, planned in words)", exact=False)


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST for a JSON object (anything else is an EngineError)."""
    data = await get_json(session, url, method="POST", body=body)
    if not isinstance(data, dict):
        raise EngineError(f"POST {url} did not answer a JSON object")
    return data


async def server_pool(session: aiohttp.ClientSession, base: str, model: str, need_text: bool,
                      api: str = "openai-completions") -> TokenPool:
    adapter = adapter_for(api)
    try:
        data = await _post(session, f"{base}/tokenize", adapter.tokenize_body(model, filler_text()))
    except Unreachable:
        raise  # the server, not its /tokenize: the hints about token sources do not apply
    except EngineError as e:
        raise EngineError(f"{e.message.rstrip('.')}; {NO_TOKENIZE}") from None
    ids = sorted({i for i in data.get("tokens") or [] if isinstance(i, int)})
    if not ids:
        raise EngineError(f"{base}/tokenize returned no tokens")
    if not need_text:
        return TokenPool(tuple(ids))
    sem = asyncio.Semaphore(16)

    async def check(i: int) -> tuple[int, str] | None:
        async with sem:
            d = await _post(session, f"{base}/detokenize", {"model": model, "tokens": [i]})
            piece = adapter.detokenized(d)
            if not isinstance(piece, str) or not _WORD.match(piece):
                return None
            back = (await _post(session, f"{base}/tokenize", adapter.tokenize_body(model, piece))).get("tokens")
            return (i, piece) if back == [i] else None

    found = [x for x in await asyncio.gather(*(check(i) for i in ids)) if x is not None][:MAX_TEXT_POOL]
    if len(found) < 20:
        raise EngineError(f"{base}: found only {len(found)} single-token words to build text prompts from")
    return TokenPool(tuple(i for i, _ in found), dict(found), source="server /tokenize + /detokenize (word tokens)")


NO_TOKENIZE = ("prompt tokens need a source: the server's /tokenize (workload.tokenizer: server, the default), "
               "a local Hugging Face tokenizer (workload.tokenizer: PATH of the model folder or its tokenizer.json), "
               "or none (workload.tokenizer: none: text prompts, counts from the server's usage)")


async def chat_overhead(session: aiohttp.ClientSession, base: str, model: str, pool: TokenPool,
                        template_kwargs: dict[str, Any] | None = None) -> int | None:
    """Tokens the chat template adds around one user message (None when the server cannot say);
    `template_kwargs`: the requests' `chat_template_kwargs`, which may change what it adds."""
    content = pool.prompt_text(pool.ids[:8])
    try:
        with_template = await _post(session, f"{base}/tokenize", with_template_kwargs({"model": model, "messages": [
            {"role": "user", "content": content}], "add_generation_prompt": True}, template_kwargs or {}))
    except EngineError:
        return None
    n = with_template.get("count")
    return None if n is None else int(n) - 8


def local_chat_overhead(tok: HFTokenizer, pool: TokenPool, template_kwargs: dict[str, Any] | None = None) -> int | None:
    """Tokens a local chat template adds around one user message (None without a usable template)."""
    content = pool.prompt_text(pool.ids[:8])
    try:
        return len(tok.chat_ids([{"role": "user", "content": content}], template_kwargs=template_kwargs)) - 8
    except TemplateError:
        return None


async def token_pool(setting: str, resolve: Any, session: aiohttp.ClientSession, base: str, model: str,
                     api: str, chat: bool, template_kwargs: dict[str, Any] | None = None) -> tuple[TokenPool, int | None]:
    """The pool for `workload.tokenizer` (`server`, `none` or a path, given to `resolve`) and the
    tokens a chat template adds (0 for completion APIs; None when unknown)."""
    if setting == "none":
        return word_pool(), None
    if setting == "server":
        pool = await server_pool(session, base, model, chat, api)
        return pool, (await chat_overhead(session, base, model, pool, template_kwargs) if chat else 0)
    tok = HFTokenizer.load(resolve(setting))
    pool = local_pool(tok, chat)
    return pool, (local_chat_overhead(tok, pool, template_kwargs) if chat else 0)

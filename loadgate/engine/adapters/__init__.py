"""Engine adapters behind one Protocol (`loadgate.engine.adapters.base.EngineAdapter`)."""

from __future__ import annotations

from typing import get_args

from loadgate.core.apis import API
from loadgate.engine.adapters.base import EngineAdapter
from loadgate.engine.adapters.llamacpp import LlamaCppCompletion
from loadgate.engine.adapters.openai import (
    LlamaCppOpenAIChat,
    LlamaCppOpenAICompletions,
    OpenAIChat,
    OpenAICompletions,
)
from loadgate.engine.adapters.sglang import SGLangGenerate

ADAPTERS: dict[API, type[EngineAdapter]] = {
    "openai-completions": OpenAICompletions,
    "openai-chat": OpenAIChat,
    "sglang": SGLangGenerate,
    "llamacpp": LlamaCppCompletion,
    "llamacpp-openai-completions": LlamaCppOpenAICompletions,
    "llamacpp-openai-chat": LlamaCppOpenAIChat,
}
CHAT_APIS = frozenset({"openai-chat", "llamacpp-openai-chat"})
PROMPT_CACHE_OFF_APIS = frozenset({"llamacpp", "llamacpp-openai-completions", "llamacpp-openai-chat"})
"""APIs whose adapters send `cache_prompt: false` with every request: the engine's prompt cache is never used."""
if set(ADAPTERS) != set(get_args(API)):  # pragma: no cover - a new adapter must be named in API
    raise ImportError("loadgate.engine.adapters: API and ADAPTERS name different APIs")


def adapter_for(api: str) -> EngineAdapter:
    """The adapter for a profile's `target.api` value."""
    return ADAPTERS[api]()  # type: ignore[index]


def chat_api_for(api: str) -> str:
    """The chat route of the engine `api` talks to (chat cases of the reference corpus go there)."""
    return "llamacpp-openai-chat" if api.startswith("llamacpp") else "openai-chat"

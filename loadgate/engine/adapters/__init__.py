"""Engine adapters behind one Protocol (`loadgate.engine.adapters.base.EngineAdapter`)."""

from __future__ import annotations

from loadgate.engine.adapters.base import EngineAdapter
from loadgate.engine.adapters.llamacpp import LlamaCppCompletion
from loadgate.engine.adapters.openai import (
    LlamaCppOpenAIChat,
    LlamaCppOpenAICompletions,
    OpenAIChat,
    OpenAICompletions,
)
from loadgate.engine.adapters.sglang import SGLangGenerate

ADAPTERS: dict[str, type] = {
    "openai-completions": OpenAICompletions,
    "openai-chat": OpenAIChat,
    "sglang": SGLangGenerate,
    "llamacpp": LlamaCppCompletion,
    "llamacpp-openai-completions": LlamaCppOpenAICompletions,
    "llamacpp-openai-chat": LlamaCppOpenAIChat,
}
CHAT_APIS = frozenset({"openai-chat", "llamacpp-openai-chat"})


def adapter_for(api: str) -> EngineAdapter:
    """The adapter for a profile's `target.api` value."""
    return ADAPTERS[api]()  # type: ignore[no-any-return]


def chat_api_for(api: str) -> str:
    """The chat route of the engine `api` talks to (chat cases of the reference corpus go there)."""
    return "llamacpp-openai-chat" if api.startswith("llamacpp") else "openai-chat"

"""Engine adapters behind one Protocol (`loadgate.engines.base.EngineAdapter`)."""

from __future__ import annotations

from loadgate.engines.base import EngineAdapter
from loadgate.engines.llamacpp import LlamaCppCompletion
from loadgate.engines.openai import OpenAIChat, OpenAICompletions
from loadgate.engines.sglang import SGLangGenerate

ADAPTERS: dict[str, type] = {
    "openai-completions": OpenAICompletions,
    "openai-chat": OpenAIChat,
    "sglang": SGLangGenerate,
    "llamacpp": LlamaCppCompletion,
}


def adapter_for(api: str) -> EngineAdapter:
    """The adapter for a profile's `target.api` value."""
    return ADAPTERS[api]()  # type: ignore[no-any-return]

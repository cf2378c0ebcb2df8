"""The fixed ChatML-like chat template of the simulated model.

Rendering of `messages` (each `{"role": str, "content": str | list of parts | None}`; text parts
are `{"type": "text", "text": str}` and are joined with no separator; other parts are ignored):
    [<|im_start|>system\n# tools sha256:<first 16 hex digits of sha256 of the canonical JSON of
     `tools`><|im_end|>\n]                                  only if `tools` is non-empty
    <|im_start|>{role}\n{content}<|im_end|>\n              for each message
    <|im_start|>assistant\n                                 if add_generation_prompt (default)
The rendered text is tokenized with special tokens parsed, so the markers become single ids.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from loadgate.sim.errors import bad_request
from loadgate.sim.tokenizer import Tokenizer


def _content_text(content: Any, i: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    raise bad_request(f"messages[{i}].content must be a string or a list of parts", "messages")


def render_chat(messages: Any, tools: Any = None, add_generation_prompt: bool = True) -> str:
    """The prompt text for `messages` (see the module docstring); raises ApiError(400) if malformed."""
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty list", "messages")
    out: list[str] = []
    if tools:
        digest = hashlib.sha256(orjson.dumps(tools, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
        out.append(f"<|im_start|>system\n# tools sha256:{digest}<|im_end|>\n")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise bad_request(f"messages[{i}] must be an object with a string role", "messages")
        out.append(f"<|im_start|>{m['role']}\n{_content_text(m.get('content'), i)}<|im_end|>\n")
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
    return "".join(out)


def chat_prompt_ids(tokenizer: Tokenizer, messages: Any, tools: Any = None,
                    add_generation_prompt: bool = True) -> list[int]:
    """Token ids of the rendered chat prompt."""
    return tokenizer.encode(render_chat(messages, tools, add_generation_prompt))

"""The APIs loadgate speaks: the profile's `target.api` values, one per adapter in
`loadgate.engine.adapters` (which checks that the two lists agree when it is imported)."""

from __future__ import annotations

from typing import Literal

API = Literal["openai-completions", "openai-chat", "sglang", "llamacpp", "llamacpp-openai-completions",
              "llamacpp-openai-chat"]
"""The profile's `target.api` values."""

"""A local Hugging Face tokenizer: `tokenizer.json` and, beside it, the chat template.

`workload.tokenizer: PATH` names a model folder (as `save_pretrained` writes it) or a
`tokenizer.json` file. Text is encoded by the `tokenizers` library without special tokens added.
For chat APIs the prompt is the rendered chat template, tokenized the way transformers'
`apply_chat_template` does it, so that planned chat prompt lengths are exact:

- the template is `tokenizer_config.json`'s `chat_template` (a string, or a list of
  `{name, template}` of which `default` is taken), else `chat_template.jinja`, else
  `chat_template.json`'s `chat_template`;
- it is rendered by jinja2 in an immutable sandbox with `trim_blocks` and `lstrip_blocks` on and the
  loop-controls extension, with `messages`, `tools`, `add_generation_prompt` and the special tokens
  of `tokenizer_config.json` (`bos_token`, `eos_token`, …) as variables; `raise_exception(msg)`,
  `strftime_now(fmt)` and a `tojson` filter that keeps non-ASCII characters are available;
- the rendered text is encoded with `add_special_tokens=False` (the template writes them itself).

Written here rather than imported from transformers, which would pull in a large dependency for
one function; jinja2 and tokenizers do the real work.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgate.errors import UsageError

_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


class TemplateError(Exception):
    """The chat template refused these messages (its `raise_exception`) or failed to render."""


def _token_text(v: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or `{"content": ...}`."""
    if isinstance(v, str):
        return v
    if isinstance(v, dict) and isinstance(v.get("content"), str):
        return str(v["content"])
    return None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UsageError(f"{path}: cannot read: {e}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return data


def _chat_template(folder: Path, config: dict[str, Any]) -> str | None:
    t = config.get("chat_template")
    if isinstance(t, list):  # named templates
        named = {x.get("name"): x.get("template") for x in t if isinstance(x, dict)}
        t = named.get("default")
    if isinstance(t, str):
        return t
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    js = folder / "chat_template.json"
    if js.is_file():
        t = _read_json(js).get("chat_template")
        return t if isinstance(t, str) else None
    return None


@dataclass
class HFTokenizer:
    """A loaded tokenizer with its optional chat template (see the module docstring)."""

    path: Path
    tokenizer: Any  # tokenizers.Tokenizer
    chat_template: str | None
    special: dict[str, str]

    @classmethod
    def load(cls, path: Path) -> HFTokenizer:
        """From a folder holding tokenizer.json (and tokenizer_config.json), or the file itself."""
        from tokenizers import Tokenizer

        folder, file = (path, path / "tokenizer.json") if path.is_dir() else (path.parent, path)
        if not file.is_file():
            raise UsageError(f"{path}: no tokenizer.json there (give a Hugging Face model folder or the file)")
        try:
            tok = Tokenizer.from_file(str(file))
        except Exception as e:  # the library raises its own exception types
            raise UsageError(f"{file}: cannot load tokenizer: {e}") from None
        config = _read_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
        special = {k: t for k in _SPECIAL_KEYS if (t := _token_text(config.get(k))) is not None}
        return cls(path, tok, _chat_template(folder, config), special)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, no special tokens added."""
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))

    def render_chat(self, messages: list[dict[str, Any]], tools: list[Any] | None = None,
                    add_generation_prompt: bool = True, template_kwargs: dict[str, Any] | None = None) -> str:
        """The chat template's text for `messages` (`template_kwargs`: extra variables, as a request's
        `chat_template_kwargs` gives them); TemplateError when there is none or it refuses."""
        if self.chat_template is None:
            raise TemplateError(f"{self.path}: no chat template (tokenizer_config.json chat_template, "
                                "chat_template.jinja or chat_template.json)")
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise TemplateError(f"{self.path}: chat template: {message}")

        def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
                   separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: dt.datetime.now().strftime(fmt)
        try:
            return env.from_string(self.chat_template).render(
                **{**(template_kwargs or {}), "messages": messages, "tools": tools,
                   "add_generation_prompt": add_generation_prompt, **self.special})
        except TemplateError:
            raise
        except (jinja2.TemplateError, TypeError, ValueError, KeyError, AttributeError) as e:
            raise TemplateError(f"{self.path}: chat template: {type(e).__name__}: {e}") from None

    def chat_ids(self, messages: list[dict[str, Any]], tools: list[Any] | None = None,
                 add_generation_prompt: bool = True, template_kwargs: dict[str, Any] | None = None) -> list[int]:
        """Token ids of the rendered chat prompt (as transformers' apply_chat_template gives them)."""
        return self.encode(self.render_chat(messages, tools, add_generation_prompt, template_kwargs))

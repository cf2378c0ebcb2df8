"""Secrets (API keys, tokens) are read from the environment at run time and never written.

`expand` resolves `${NAME}` in a header value from the environment and registers what it read;
so does `key_from_env` (`target.api_key_env`). Every file loadgate writes goes through `redact`
(jsonutil, the records writer, bundles, baselines), and so do its error lines and tracebacks: a
registered value becomes `***`. Header names that carry credentials are shown as `***` in what is
written about the profile (`redact_headers`), whatever their value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from loadgate.errors import UsageError

MASK = "***"
SENSITIVE_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie",
                               "x-auth-token"})
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SECRETS: set[str] = set()


def register(value: str) -> None:
    """Remember a secret so that it is masked wherever it would be written (4+ characters)."""
    if len(value) >= 4:
        _SECRETS.add(value)


def registered() -> tuple[str, ...]:
    """The secrets read so far (handed to worker processes, which mask them too)."""
    return tuple(sorted(_SECRETS))


def expand(value: str, where: str, env: Mapping[str, str] | None = None) -> str:
    """`value` with each `${NAME}` replaced by the environment's NAME (registered as a secret);
    UsageError naming `where` when NAME is not set."""
    env = os.environ if env is None else env

    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in env:
            raise UsageError(f"{where}: ${{{name}}} is not set in the environment")
        register(env[name])
        return env[name]

    return _VAR.sub(one, value)


def key_from_env(name: str, env: Mapping[str, str] | None = None) -> str:
    """The API key in environment variable `name` (`target.api_key_env`), registered."""
    env = os.environ if env is None else env
    value = env.get(name)
    if not value:
        raise UsageError(f"target.api_key_env: the environment variable {name} is not set (or empty)")
    register(value)
    return value


def redact(text: str) -> str:
    for s in _SECRETS:
        if s in text:
            text = text.replace(s, MASK)
    return text


def redact_bytes(data: bytes) -> bytes:
    for s in _SECRETS:
        b = s.encode()
        if b in data:
            data = data.replace(b, MASK.encode())
    return data


def holds_literal_secret(name: str, value: str) -> bool:
    """A credential header whose value is more than `${NAME}` templates (a key written in the profile)."""
    template_only = _VAR.fullmatch(value.strip()) is not None or _VAR.sub("", value).strip() in ("", "Bearer")
    return name.lower() in SENSITIVE_HEADERS and not template_only


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Headers as they may be written: credential headers masked unless they are only `${NAME}`
    templates (which hold no secret), every other value with registered secrets masked."""
    out = {}
    for k, v in headers.items():
        template_only = _VAR.fullmatch(v.strip()) is not None or _VAR.sub("", v).strip() in ("", "Bearer")
        out[k] = (v if template_only else MASK) if k.lower() in SENSITIVE_HEADERS else redact(v)
    return out

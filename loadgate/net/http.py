"""HTTP to an engine: the session settings every command uses (headers with secrets from the
environment, TLS), the aiohttp session (`make_session`), and one JSON call (`get_json`) with every
failure as an EngineError (exit 3) that says what failed.

Proxies: loadgate connects directly. A load test through a proxy would measure the proxy, so an
`HTTP(S)_PROXY` that applies to the endpoint (not excluded by `NO_PROXY`) is refused with a line
saying how to exclude it; loopback addresses are always reached directly.
"""

from __future__ import annotations

import ipaddress
import ssl
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from loadgate.engine.adapters import adapter_for, reset_routes
from loadgate.errors import EngineError, UsageError
from loadgate.secrets import expand, key_from_env, redact

READ_BUFSIZE = 1 << 18
MAX_JSON_BYTES = 32 * 1024 * 1024  # introspection, /metrics, /tokenize answers


@dataclass(frozen=True)
class TlsFiles:
    """TLS settings with paths resolved (picklable: worker processes build their own context)."""

    ca_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    insecure: bool = False

    def context(self) -> ssl.SSLContext:
        """The client context: the system's CAs or `ca_file`, the client certificate if any."""
        try:
            ctx = ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as e:
            raise UsageError(f"target.tls.ca_file: cannot load {self.ca_file}: {e}") from None
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.client_cert:
            try:
                ctx.load_cert_chain(self.client_cert, self.client_key)
            except (OSError, ssl.SSLError) as e:
                raise UsageError(f"target.tls.client_cert: cannot load {self.client_cert}: {e}") from None
        return ctx


@dataclass(frozen=True)
class SessionSettings:
    """Headers (secrets expanded, in memory only) and TLS for one engine."""

    headers: dict[str, str]
    tls: TlsFiles
    extra_body: dict[str, Any] = field(default_factory=dict)  # target.extra_body, ${NAME} expanded

    def ssl_for(self, *urls: str) -> ssl.SSLContext | None:
        """The context for a session that will speak to these URLs: built from `tls` (the system's
        CAs, or `ca_file`) when any of them is https, else None (plain http needs none)."""
        return self.tls.context() if any(urlsplit(u).scheme == "https" for u in urls) else None


def session_settings(target: Any, resolve: Callable[[str], Path]) -> SessionSettings:
    """From the profile's target: `${NAME}` in header values read from the environment, the key of
    `api_key_env` as `Authorization: Bearer`, TLS files resolved against the profile."""
    headers = {k: expand(v, f"target.headers.{k}") for k, v in target.headers.items()}
    body = expand_json(dict(getattr(target, "extra_body", {})), "target.extra_body")
    if target.api_key_env:
        key = key_from_env(target.api_key_env)
        if not any(k.lower() == "authorization" for k in headers):
            headers["Authorization"] = f"Bearer {key}"
    t = target.tls

    def path(p: str | None) -> str | None:
        return str(resolve(p)) if p else None

    return SessionSettings(headers, TlsFiles(path(t.ca_file), path(t.client_cert), path(t.client_key), t.insecure),
                           body)


def expand_json(value: Any, where: str) -> Any:
    """`value` (a JSON value) with `${NAME}` in every string read from the environment (and
    registered as a secret, so it is masked in whatever is written), as in header values."""
    if isinstance(value, str):
        return expand(value, where)
    if isinstance(value, dict):
        return {k: expand_json(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [expand_json(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def refuse_proxies(url: str) -> None:
    """UsageError when an environment proxy would carry requests to `url` (see the module doc)."""
    u = urlsplit(url)
    host = u.hostname or ""
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        if host == "localhost":
            return
    proxies = urllib.request.getproxies()
    proxy = proxies.get(u.scheme) or proxies.get("all")
    if proxy and not urllib.request.proxy_bypass(host):
        raise UsageError(f"{u.scheme}_proxy is set ({redact(proxy)}) and would carry the requests to {host}: loadgate "
                         f"measures the engine, not a proxy, and connects directly; add {host} to NO_PROXY or "
                         "unset the proxy variable")


class Unreachable(EngineError):
    """The request never got an answer (no connection, an untrusted certificate, a timeout): the
    route's own hints do not apply."""


async def read_bounded(r: aiohttp.ClientResponse, url: str) -> bytes:
    parts, n = [], 0
    while chunk := await r.content.read(1 << 20):
        n += len(chunk)
        if n > MAX_JSON_BYTES:
            raise EngineError(f"{url} answered more than {MAX_JSON_BYTES // 2**20} MiB")
        parts.append(chunk)
    return b"".join(parts)


async def get_json(session: aiohttp.ClientSession, url: str, *, method: str = "GET",
                   body: dict[str, Any] | None = None, timeout_s: float = 30.0) -> Any:
    try:
        async with session.request(method, url, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            data = await read_bounded(r, url)
            if r.status != 200:
                raise EngineError(f"{method} {url} answered HTTP {r.status}: {data[:200].decode('utf-8', 'replace')}")
            return orjson.loads(data)
    except (aiohttp.ClientError, TimeoutError, ssl.SSLError) as e:
        hint = "is the engine up?"
        if isinstance(e, aiohttp.ClientConnectorCertificateError | ssl.SSLCertVerificationError):
            hint = ("the server's certificate is not trusted here: give the CA that signed it in target.tls.ca_file "
                    "(or, for a test server only, target.tls.insecure: true)")
        elif url.startswith("https:") and isinstance(e, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError):
            hint = ("over TLS, a server that requires a client certificate closes like this: give one in "
                    "target.tls.client_cert")
        raise Unreachable(f"{method} {url} failed: {e or type(e).__name__}; {hint}") from None
    except orjson.JSONDecodeError:
        raise EngineError(f"{method} {url} did not answer JSON") from None


async def reset_prefix_cache(session: aiohttp.ClientSession, base: str) -> str:
    """Empty the engine's prefix cache through the first route it answers 200 on; returns that
    route. EngineError (one line) when it has none: vLLM serves its route only with
    VLLM_SERVER_DEV_MODE=1, llama-server has none (see `empty_prefix_cache`)."""
    seen = []
    for route in reset_routes():  # each engine family's (vLLM's in dev mode only, SGLang's)
        try:
            async with session.post(base + route, timeout=aiohttp.ClientTimeout(total=60)) as r:
                await read_bounded(r, base + route)
                if r.status == 200:
                    return route
                seen.append(f"{route} {r.status}")
        except (aiohttp.ClientError, TimeoutError) as e:
            seen.append(f"{route} {type(e).__name__}")
    raise EngineError(f"load.reset_prefix_cache: {base} has no prefix-cache reset route ({', '.join(seen)}); "
                      "for vLLM start it with VLLM_SERVER_DEV_MODE=1, or restart the engine between runs; for "
                      "llama-server use a llamacpp* target.api (its requests never use the prompt cache)")


async def empty_prefix_cache(session: aiohttp.ClientSession, base: str, api: str) -> str:
    """`reset_prefix_cache` for an engine spoken to through `api`: llama.cpp's routes need no reset,
    as every request loadgate sends them carries `cache_prompt: false` (its adapters)."""
    if adapter_for(api).prompt_cache_off:
        return "cache_prompt: false"
    return await reset_prefix_cache(session, base)


def make_session(headers: dict[str, str] | None = None, ssl_context: ssl.SSLContext | None = None
                 ) -> aiohttp.ClientSession:
    """A session with an unlimited connector and an explicit read buffer (and the TLS context)."""
    conn = aiohttp.TCPConnector(limit=0, limit_per_host=0, force_close=False, enable_cleanup_closed=True,
                                ssl=ssl_context if ssl_context is not None else True)
    return aiohttp.ClientSession(connector=conn, read_bufsize=READ_BUFSIZE, headers=headers,
                                 timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False)

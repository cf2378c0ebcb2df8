"""HTTP to an engine: the aiohttp session every stage uses (`make_session`), and one JSON call
(`get_json`) with every failure as an EngineError (exit 3) that says what failed."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from loadgate.errors import EngineError


async def get_json(session: aiohttp.ClientSession, url: str, *, method: str = "GET",
                   body: dict[str, Any] | None = None, timeout_s: float = 30.0) -> Any:
    try:
        async with session.request(method, url, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            data = await r.read()
            if r.status != 200:
                raise EngineError(f"{method} {url} answered HTTP {r.status}: {data[:200].decode('utf-8', 'replace')}")
            return orjson.loads(data)
    except (aiohttp.ClientError, TimeoutError) as e:
        raise EngineError(f"{method} {url} failed: {e or type(e).__name__}; is the engine up?") from None
    except orjson.JSONDecodeError:
        raise EngineError(f"{method} {url} did not answer JSON") from None


READ_BUFSIZE = 1 << 18


def make_session(headers: dict[str, str] | None = None) -> aiohttp.ClientSession:
    """A session with an unlimited connector and an explicit read buffer."""
    conn = aiohttp.TCPConnector(limit=0, limit_per_host=0, force_close=False, enable_cleanup_closed=True)
    return aiohttp.ClientSession(connector=conn, read_bufsize=READ_BUFSIZE, headers=headers,
                                 timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False)

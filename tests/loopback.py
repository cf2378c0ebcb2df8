"""One request over the raw transport to a server thread on loopback, for tests of what the client
records of the server's writes."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from loadgate.load.transport import Conn, Pool


@contextlib.asynccontextmanager
async def sent_to(serve: Callable[[socket.socket], None]) -> AsyncIterator[Conn]:
    """Start `serve(listening socket)` in a thread, send one request to it and yield the connection
    (its exchange under way: `conn.done`); close everything afterwards."""
    lsock = socket.create_server(("127.0.0.1", 0))
    th = threading.Thread(target=serve, args=(lsock,), daemon=True)
    th.start()
    pool = Pool(f"http://127.0.0.1:{lsock.getsockname()[1]}/v1/completions")
    c: Conn | None = None
    try:
        c, _ = await pool.acquire()
        c.begin()
        await c.send(pool.request_bytes(b"{}", {}))
        yield c
    finally:
        if c is not None:
            c.close()  # acquired, never released: the pool closes only its idle connections
        pool.close()
        th.join(5)
        lsock.close()


@contextlib.asynccontextmanager
async def json_routes(routes: dict[str, Callable[[Any], Awaitable[Any]]]) -> AsyncIterator[str]:
    """An aiohttp server on loopback answering POSTs to `routes` (path -> handler); yields its base URL."""
    from aiohttp import web

    app = web.Application()
    for path, handler in routes.items():
        app.router.add_post(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()

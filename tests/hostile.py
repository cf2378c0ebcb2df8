"""A raw TCP server on loopback that answers loadgate's POSTs in broken ways, for hardening tests.

`HostileServer(behaviour)` runs an asyncio server in a background thread. Every POST is answered by
`behaviour(reader, writer, body)` (an async function that writes whatever it likes); any other
request (GET /metrics, /v1/models, …) gets a plain 404, as from a gateway. `connections` counts the
POSTs that arrived and `posted` is set at the first, so a test can act once one is in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any

Behaviour = Callable[[asyncio.StreamReader, asyncio.StreamWriter, bytes], Awaitable[None]]

SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse(payload: str) -> bytes:
    return chunk(b"data: " + payload.encode() + b"\n\n")


COMPLETION = ('{"id":"x","object":"text_completion","model":"m","choices":[{"index":0,"text":" a",'
              '"finish_reason":null}]}')
COMPLETION_END = ('{"id":"x","object":"text_completion","model":"m","choices":[{"index":0,"text":" b",'
                  '"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}')


async def good_stream(writer: asyncio.StreamWriter) -> None:
    """A small valid OpenAI completions stream (2 tokens) and its terminator."""
    writer.write(SSE_HEAD + sse(COMPLETION) + sse(COMPLETION_END) + sse("[DONE]") + b"0\r\n\r\n")
    await writer.drain()


class HostileServer:
    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.connections = 0
        self.posted = threading.Event()
        self.writers: set[asyncio.StreamWriter] = set()
        self.loop = asyncio.new_event_loop()
        self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError, OSError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length)
                if not head.startswith(b"POST"):
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                self.connections += 1
                self.posted.set()
                await self.behaviour(reader, writer, body)
                break
        with contextlib.suppress(Exception):
            writer.close()

    def close(self) -> None:
        async def shutdown() -> None:
            # Stop accepting; let a handler whose connection was just accepted take its first step
            # (so it registers its writer); drop every connection still open, then end the
            # handlers; and give the transports' close callbacks their turn before the loop stops
            # (else a busy machine leaves one for the garbage collector: a ResourceWarning in
            # whichever test runs next).
            self.server.close()
            await asyncio.sleep(0)
            for w in list(self.writers):
                w.transport.abort()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for _ in range(3):
                await asyncio.sleep(0)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --- behaviours -------------------------------------------------------------------------------

async def endless_fast(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> None:
    """A chunked stream that never stops, as fast as the socket takes it."""
    writer.write(SSE_HEAD)
    block = chunk(b"data: " + b"x" * 65000 + b"\n\n")
    while True:
        writer.write(block)
        await writer.drain()


async def endless_tiny(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> None:
    """A chunked stream of tiny events that never stops: one short write at a time, so the client
    keeps many small reads (each costs more memory in objects than in bytes)."""
    writer.write(SSE_HEAD)
    block = chunk(b": x\n")
    k = 0
    while True:
        writer.write(block)
        await writer.drain()
        k += 1
        if k % 16 == 0:
            await asyncio.sleep(0)  # let the other streams write


async def endless_slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> None:
    """A stream that never ends and never goes quiet: a comment line every 20 ms."""
    writer.write(SSE_HEAD)
    while True:
        writer.write(chunk(b": still here\n"))
        await writer.drain()
        await asyncio.sleep(0.02)


async def header_flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> None:
    """A status line, then header lines for ever: the header block never ends."""
    writer.write(b"HTTP/1.1 200 OK\r\n")
    line = b"X-Junk: " + b"a" * 1000 + b"\r\n"
    while True:
        writer.write(line * 64)
        await writer.drain()


async def interim_then_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes) -> None:
    """100 Continue and 103 Early Hints first, then the real answer."""
    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    await writer.drain()
    await asyncio.sleep(0.01)
    writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
    await good_stream(writer)

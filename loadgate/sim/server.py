"""Entry points of the simulated engine: the aiohttp app, an in-process server, a subprocess.

  build_app(cfg) -> aiohttp.web.Application
      every route of `loadgate.sim.routes`; the engine loop starts with the app and stops (aborting
      what is in flight) when the app shuts down.
  async with running_sim(cfg, host="127.0.0.1", port=0) as sim:
      serves the app on this event loop; `sim.url` ("http://127.0.0.1:PORT"), `sim.truth`
      (the `TruthLog`), `sim.engine`, `sim.state`, `sim.app`.
  with SimProcess(cfg) as sim:
      runs `python -m loadgate sim` in a child process (its own event loop and CPU), see
      `loadgate.sim.process`.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from loadgate.config.simconfig import SimConfig
from loadgate.errors import UsageError
from loadgate.sim.engine import SimEngine
from loadgate.sim.model import SimModel
from loadgate.sim.process import SimProcess
from loadgate.sim.routes import STATE, add_routes
from loadgate.sim.serving import SimState
from loadgate.sim.tokenizer import Tokenizer
from loadgate.sim.truth import TruthLog

__all__ = ["RunningSim", "SimProcess", "build_app", "running_sim", "STATE"]


def build_app(cfg: SimConfig) -> web.Application:
    """The simulator as an aiohttp application (one engine, one truth log, per app)."""
    tokenizer = Tokenizer(cfg.vocab_size)
    model = SimModel(cfg, tokenizer)
    state = SimState(cfg=cfg, tokenizer=tokenizer, model=model, engine=SimEngine(cfg, model))
    middlewares = [_first_request(state)] + ([_require_key(cfg.api_key_env)] if cfg.api_key_env else [])
    app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=middlewares)
    app[STATE] = state

    async def start_engine(app: web.Application) -> None:
        app[STATE].engine.start()

    async def stop_engine(app: web.Application) -> None:
        await app[STATE].engine.stop()

    app.on_startup.append(start_engine)
    app.on_shutdown.append(stop_engine)
    add_routes(app)
    return app


def _first_request(state: SimState) -> Any:
    """A middleware that notes when the first request of any route arrived (`SimState.first_request_ns`)."""
    @web.middleware
    async def note(request: web.Request, handler: Any) -> web.StreamResponse:
        if state.first_request_ns is None and request.path != "/health":
            state.first_request_ns = time.perf_counter_ns()
        return await handler(request)  # type: ignore[no-any-return]

    return note


def _require_key(env_name: str) -> Any:
    """A middleware answering 401 unless `Authorization: Bearer $env_name` (read once, at start)."""
    key = os.environ.get(env_name)
    if not key:
        raise UsageError(f"sim.api_key_env: the environment variable {env_name} is not set")
    want = f"Bearer {key}"

    @web.middleware
    async def check(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path != "/health" and request.headers.get("Authorization") != want:
            return web.json_response({"error": {"message": "missing or wrong API key", "type": "auth", "code": 401}},
                                     status=401)
        return await handler(request)  # type: ignore[no-any-return]

    return check


def _ssl_context(cfg: SimConfig) -> ssl.SSLContext | None:
    if not cfg.tls_cert:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(cfg.tls_cert, cfg.tls_key)
    except (OSError, ssl.SSLError) as e:
        raise UsageError(f"sim.tls_cert: cannot load {cfg.tls_cert} (key {cfg.tls_key}): {e}") from None
    if cfg.tls_client_ca:
        try:
            ctx.load_verify_locations(cfg.tls_client_ca)
        except (OSError, ssl.SSLError) as e:
            raise UsageError(f"sim.tls_client_ca: cannot load {cfg.tls_client_ca}: {e}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


@dataclass
class RunningSim:
    """A simulator serving on this event loop."""

    url: str
    app: web.Application

    @property
    def state(self) -> SimState:
        return self.app[STATE]

    @property
    def truth(self) -> TruthLog:
        return self.state.truth

    @property
    def engine(self) -> SimEngine:
        return self.state.engine


@asynccontextmanager
async def running_sim(cfg: SimConfig, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[RunningSim]:
    """Serve `build_app(cfg)` on host:port (0 = any free port) until the block exits."""
    app = build_app(cfg)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
    await runner.setup()
    tls = _ssl_context(cfg)
    site = web.TCPSite(runner, host, port, reuse_address=True, backlog=4096, ssl_context=tls)
    await site.start()
    try:
        bound = runner.addresses[0]
        scheme = "https" if tls is not None else "http"
        yield RunningSim(url=f"{scheme}://{_host_for_url(host)}:{bound[1]}", app=app)
    finally:
        await runner.cleanup()


def _host_for_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host

"""Connecting to the engine under test: its base URL (or the embedded simulator, launched here in
a child process), one HTTP session, the model it serves; and the event loop every command runs on.

This is the only module outside the command line that imports the simulator (`loadgate.sim`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp

from loadgate.config.profile import Profile
from loadgate.errors import EngineError, UsageError
from loadgate.net.http import SessionSettings, get_json, make_session, refuse_proxies, session_settings

T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run on uvloop when it is installed, else on asyncio's default loop."""
    try:
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    except ImportError:
        return asyncio.run(coro)


@contextlib.asynccontextmanager
async def engine_url(profile: Profile) -> AsyncIterator[str]:
    """The engine's base URL. For `endpoint: embedded`, loadgate starts its simulator itself, in a
    child process on loopback (`loadgate sim`): the engine's work then never runs on the client's
    event loop, where it would show up as client lag and trip the health budgets."""
    t = profile.target
    if t.replicas and t.route != "via_router":  # requests spread over the replicas: the first is the base
        yield t.replicas[0]
        return
    if t.endpoint != "embedded":
        yield t.endpoint.rstrip("/")
        return
    from loadgate.sim.process import SimProcess, take_prestarted

    sim = take_prestarted(profile.target.sim) or SimProcess(profile.target.sim)
    await asyncio.get_running_loop().run_in_executor(None, sim.wait if sim.spawned else sim.start)
    try:
        yield sim.url
    finally:
        await asyncio.get_running_loop().run_in_executor(None, sim.stop)


async def discover_model(session: aiohttp.ClientSession, base: str) -> str:
    data = await get_json(session, f"{base}/v1/models")
    try:
        return str(data["data"][0]["id"])
    except (KeyError, IndexError, TypeError):
        raise EngineError(f"{base}/v1/models lists no model; set target.model in the profile") from None


@dataclass
class Engine:
    """A reachable engine: its base URL, a session, the model name, the profile it serves, and the
    session settings (headers with secrets, TLS) every request to it uses."""

    base: str
    session: aiohttp.ClientSession
    model: str
    profile: Profile
    settings: SessionSettings

    @property
    def metrics_url(self) -> str:
        return self.profile.metrics_url(self.base)


@contextlib.asynccontextmanager
async def open_engine(profile: Profile) -> AsyncIterator[Engine]:
    settings = session_settings(profile.target, profile.resolve)
    for url in (profile.target.endpoint, *profile.target.replicas):
        if url != "embedded":
            refuse_proxies(url)
    async with engine_url(profile) as base, make_session(settings.headers, settings.ssl_for(
            base, profile.metrics_url(base), *profile.target.replicas)) as session:
        yield Engine(base, session, profile.target.model or await discover_model(session, base), profile, settings)


def reference_target(profile: Profile) -> Profile:
    """The profile of the simulator's reference configuration (`exactness.baseline: sim-reference`)."""
    if profile.target.endpoint != "embedded":
        raise UsageError("exactness.baseline: 'sim-reference' needs target.endpoint: embedded; for a real engine "
                         "write a baseline with `loadgate baseline PROFILE` and name its file")
    from loadgate.sim.reference import reference_config

    target = dataclasses.replace(profile.target, sim=reference_config(profile.target.sim), declared={})
    return dataclasses.replace(profile, target=target)

"""Engine adapters behind one Protocol (`base.EngineAdapter`) and engine families (`base.Family`):
one module per family in this folder (`vllm`, `sglang`, `llamacpp`, `simulator`; the
OpenAI-compatible adapters, which several families serve, are `openai`'s). A module declares
`FAMILY` (a `Family`) and `APIS` (the profile's `target.api` values it adds, each an adapter class),
either or both; this package finds every module here when it is imported, so adding an engine is
adding one file (docs/contributing.md, "Add an engine").

This package is the registry: `ADAPTERS` and `FAMILIES`. Every other module asks it (`adapter_for`,
`family_for`, `gauge_names`, ...) instead of naming an engine. An engine declared outside the
package registers its module with `register_module`."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from loadgate.engine.adapters.base import EngineAdapter, Family, GaugeKey, Introspection
from loadgate.snapshot import Snapshot

ADAPTERS: dict[str, type[EngineAdapter]] = {}
# In `Family.precedence` order: a fingerprint is the first family's that `identifies` it, and a
# snapshot the first family's whose metric names it holds.
FAMILIES: dict[str, Family] = {}


def register_module(module: ModuleType) -> None:
    """Add the `FAMILY` and `APIS` a module declares (names already taken are refused)."""
    _add_family(module)
    _add_apis(module)


def _add_family(module: ModuleType) -> None:
    family: Family | None = getattr(module, "FAMILY", None)
    if family is None:
        return
    if family.name in FAMILIES:
        raise ValueError(f"{module.__name__}: engine family {family.name!r} is already registered")
    both = sorted([*FAMILIES.values(), family], key=lambda f: (f.precedence, f.name))
    FAMILIES.clear()
    FAMILIES.update((f.name, f) for f in both)


def _add_apis(module: ModuleType) -> None:
    adapters: dict[str, type[EngineAdapter]] = getattr(module, "APIS", {})
    taken = sorted(set(adapters) & set(ADAPTERS))
    if taken:
        raise ValueError(f"{module.__name__}: target.api already registered: {', '.join(taken)}")
    unknown = sorted({c.family for c in adapters.values() if c.family is not None} - set(FAMILIES))
    if unknown:
        raise ValueError(f"{module.__name__}: its adapters name families nobody declares: {', '.join(unknown)}")
    ADAPTERS.update(adapters)


def _discover() -> None:
    """Every module of this folder: the families first (adapters name them), then the APIs, those
    that leave the family to the metrics (the OpenAI-compatible ones) first."""
    mods = [importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)
            if m.name != "base"]
    for mod in mods:
        _add_family(mod)
    for mod in sorted(mods, key=lambda m: any(c.family for c in getattr(m, "APIS", {}).values())):
        _add_apis(mod)


_discover()


def apis() -> tuple[str, ...]:
    """The profile's `target.api` values."""
    return tuple(ADAPTERS)


def adapter_for(api: str) -> EngineAdapter:
    """The adapter for a profile's `target.api` value."""
    return ADAPTERS[api]()


def is_chat(api: str) -> bool:
    return ADAPTERS[api].chat


def chat_api_for(api: str) -> str:
    """The chat route of the engine `api` talks to (chat cases of the reference corpus go there)."""
    return ADAPTERS[api].chat_api


def api_for_path(path: str) -> str | None:
    """The first registered API that POSTs to `path` (a reproducer's route)."""
    return next((api for api, cls in ADAPTERS.items() if cls.path == path), None)


def family_named(name: str | None) -> Family | None:
    return FAMILIES.get(name) if name else None


def family_for(api: str | None, snap: Snapshot | None = None) -> Family | None:
    """The engine family whose metric names to read: the one `api`'s adapter implies, where `snap`
    holds its names (or there is no snapshot); else the first family whose names `snap` holds
    (the OpenAI-compatible routes are served by several engines, and the simulator, which serves
    vLLM's names, plays every API); else the adapter's; None if nothing says."""
    cls = ADAPTERS.get(api) if api else None
    implied = FAMILIES.get(cls.family) if cls is not None and cls.family is not None else None
    if snap is None:
        return implied
    names = {n for n, _ in snap.values}
    if implied is not None and any(n in names for n in implied.metric_names()):
        return implied
    return next((f for f in FAMILIES.values() if any(n in names for n in f.metric_names())), implied)


def identify(engine: dict[str, object]) -> Family | None:
    """The family a fingerprint's introspected part (`engine`) belongs to, if any says so."""
    return next((f for f in FAMILIES.values() if f.identifies(engine)), None)


def gauge_names(key: GaugeKey) -> tuple[str, ...]:
    """Every family's names of one gauge, in family order."""
    return tuple(n for f in FAMILIES.values() for n in f.gauges.get(key, ()))


def metric_prefixes() -> tuple[str, ...]:
    """The prefixes of every family's metrics (what server.json and fingerprints keep)."""
    return tuple(dict.fromkeys(f.metric_prefix for f in FAMILIES.values() if f.metric_prefix))


def reset_routes() -> tuple[str, ...]:
    """Every family's prefix-cache reset routes, in family order, each once."""
    return tuple(dict.fromkeys(r for f in FAMILIES.values() for r in f.reset_routes))


def introspection() -> list[Introspection]:
    """What the fingerprint asks an engine about itself: every family's routes, one entry per key
    (the routes of all families that name it, in family order)."""
    out: dict[str, Introspection] = {}
    for f in FAMILIES.values():
        for q in f.introspection:
            had = out.get(q.key)
            out[q.key] = q if had is None else Introspection(q.key, tuple(dict.fromkeys(had.routes + q.routes)),
                                                             tuple(dict.fromkeys(had.hashed + q.hashed)),
                                                             min(had.order, q.order))
    return sorted(out.values(), key=lambda q: q.order)


def info_metrics() -> tuple[str, ...]:
    return tuple(n for f in FAMILIES.values() for n in f.info_metrics)


def context_length(engine: dict[str, object]) -> int | None:
    """The longest context one request may use, as the engine says (its family's reading first,
    then every family's); None when none says."""
    first = identify(engine)
    for f in ([first] if first else []) + [f for f in FAMILIES.values() if f is not first]:
        n = f.context_length(engine)
        if n is not None:
            return n
    return None

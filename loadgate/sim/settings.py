"""SimConfig from plain mappings (a YAML file, command-line overrides) and back.

`knob_fields()` lists every leaf setting of `SimConfig` with its dotted path, type, default, help
and bounds, in declaration order (nested sections `speculative`, `divergence`, `faults` expanded);
the CLI generates its options from it. `config_from_mapping` builds a `SimConfig` from a nested
mapping, rejecting unknown keys, wrong types and out-of-bounds values with a `UsageError` that
names the key path. Tuples may be given as lists or as comma-separated strings ("0.8,0.6").
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loadgate.errors import UsageError
from loadgate.sim.config import SimConfig


@dataclass(frozen=True)
class KnobField:
    """One leaf setting of SimConfig."""

    path: tuple[str, ...]
    type: Any
    default: Any
    help: str
    bounds: dict[str, float]

    @property
    def dotted(self) -> str:
        return ".".join(self.path)

    @property
    def choices(self) -> tuple[str, ...] | None:
        """The allowed values of a Literal setting, else None."""
        if typing.get_origin(self.type) is typing.Literal:
            return tuple(typing.get_args(self.type))
        return None

    @property
    def is_tuple(self) -> bool:
        return typing.get_origin(self.type) is tuple


def knob_fields(cls: type = SimConfig, prefix: tuple[str, ...] = ()) -> list[KnobField]:
    """Every leaf setting of `cls` (a config dataclass), nested sections expanded."""
    hints = typing.get_type_hints(cls)
    out: list[KnobField] = []
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        if dataclasses.is_dataclass(t):
            out.extend(knob_fields(t, prefix + (f.name,)))  # type: ignore[arg-type]
            continue
        bounds = {k: v for k, v in f.metadata.items() if k in ("min", "max", "exclusive_min")}
        out.append(KnobField(prefix + (f.name,), t, f.default, f.metadata.get("help", ""), bounds))
    return out


def _convert(k: KnobField, v: Any) -> Any:
    where = k.dotted
    if k.choices is not None:
        if v not in k.choices:
            raise UsageError(f"sim config: {where}: must be one of {', '.join(k.choices)}; got {v!r}")
        return v
    if k.is_tuple:
        items = [s.strip() for s in v.split(",") if s.strip()] if isinstance(v, str) else v
        if not isinstance(items, (list, tuple)) or not items:
            raise UsageError(f"sim config: {where}: must be a non-empty list of numbers; got {v!r}")
        return tuple(_number(where, float, x) for x in items)
    if k.type is bool:
        if not isinstance(v, bool):
            raise UsageError(f"sim config: {where}: must be true or false; got {v!r}")
        return v
    if k.type is str:
        if not isinstance(v, str):
            raise UsageError(f"sim config: {where}: must be a string; got {v!r}")
        return v
    return _number(where, k.type, v)


def _number(where: str, t: type, v: Any) -> Any:
    if isinstance(v, str):
        try:
            v = t(v)
        except ValueError:
            raise UsageError(f"sim config: {where}: must be a number; got {v!r}") from None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (t is int and not isinstance(v, int)):
        raise UsageError(f"sim config: {where}: must be {'an integer' if t is int else 'a number'}; got {v!r}")
    return t(v)


def _check_bounds(k: KnobField, v: Any) -> None:
    for x in v if isinstance(v, tuple) else (v,):
        b = k.bounds
        if ("min" in b and x < b["min"]) or ("max" in b and x > b["max"]) or (
                "exclusive_min" in b and x <= b["exclusive_min"]):
            lo = f">= {b['min']}" if "min" in b else f"> {b.get('exclusive_min')}" if "exclusive_min" in b else ""
            hi = f"<= {b['max']}" if "max" in b else ""
            rule = " and ".join(s for s in (lo, hi) if s)
            raise UsageError(f"sim config: {k.dotted}: must be {rule}; got {x!r}")


def config_from_mapping(data: Mapping[str, Any] | None) -> SimConfig:
    """A validated SimConfig from a nested mapping of overrides (missing keys keep defaults)."""
    data = dict(data or {})
    fields = {k.path: k for k in knob_fields()}
    sections = {p[0] for p in fields if len(p) > 1}
    values: dict[tuple[str, ...], Any] = {}

    def walk(m: Mapping[str, Any], prefix: tuple[str, ...]) -> None:
        if not isinstance(m, Mapping):
            raise UsageError(f"sim config: {'.'.join(prefix)}: must be a mapping")
        for key, v in m.items():
            path = prefix + (str(key),)
            if not prefix and key in sections:
                walk(v, path)
            elif path in fields:
                values[path] = v
            else:
                raise UsageError(f"sim config: unknown setting {'.'.join(path)!r}")

    walk(data, ())
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {s: {} for s in sections}
    for path, raw in values.items():
        k = fields[path]
        v = _convert(k, raw)
        _check_bounds(k, v)
        (nested[path[0]] if len(path) > 1 else top)[path[-1]] = v
    hints = typing.get_type_hints(SimConfig)
    for s in sections:
        top[s] = hints[s](**nested[s])
    return SimConfig(**top)


def config_to_mapping(cfg: SimConfig) -> dict[str, Any]:
    """The nested mapping (tuples as lists) that `config_from_mapping` turns back into `cfg`."""
    def plain(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return list(v) if isinstance(v, tuple) else v
    return plain(dataclasses.asdict(cfg))

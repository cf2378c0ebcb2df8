"""SimConfig from plain mappings (a YAML file, command-line overrides) and back.

`knob_fields()` lists every leaf setting of `SimConfig` with its dotted path, type, default, help
and bounds, in declaration order (nested sections `speculative`, `divergence`, `faults` expanded);
the CLI generates its options from it. `config_from_mapping` builds a `SimConfig` from a nested
mapping with the profile loader (`loadgate.config.typed_yaml`), so a simulator setting is checked exactly
as the same setting under `target.sim` in a profile. Tuples may be lists or comma-separated
strings ("0.8,0.6"). A SimConfig goes back to a mapping with `orjson.dumps(cfg)`.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loadgate.config.simconfig import SimConfig
from loadgate.config.typed_yaml import load_dataclass


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


def config_from_mapping(data: Mapping[str, Any] | None, *, file: str = "sim config",
                        lines: dict[str, int] | None = None) -> SimConfig:
    """A validated SimConfig from a nested mapping of overrides (missing keys keep defaults), by the
    profile loader (`typed_yaml.load_dataclass`): unknown keys, wrong types, NaN/inf and
    out-of-bounds values end in a ProfileError naming `file`, the line when known and the key path.
    A tuple setting may also be a comma-separated string ("0.8,0.6"), as the command line gives it."""
    tuples = {k.path for k in knob_fields() if k.is_tuple}

    def plain(m: Mapping[str, Any], prefix: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, v in m.items():
            path = prefix + (key,)
            if isinstance(v, Mapping):
                v = plain(v, path)
            elif path in tuples and isinstance(v, str):
                v = [_number_or_text(x.strip()) for x in v.split(",") if x.strip()]
            out[key] = v
        return out

    return load_dataclass(SimConfig, plain(dict(data or {}), ()), file=file, lines=lines or {})


def _number_or_text(x: str) -> Any:
    try:
        return float(x)
    except ValueError:
        return x  # the loader names the key and says a number was expected

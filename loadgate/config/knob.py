"""`knob`: a dataclass field with help text and bounds, for every settings dataclass (the profile,
the simulator's settings).

Field metadata keys understood by the loader (`loadgate.config.typed_yaml`):
  help  one sentence shown in `--help`, in the JSON Schema `description`, and in errors
  min / max   inclusive numeric bounds
  exclusive_min   numeric lower bound that is itself not allowed
  free_text   strings may hold tabs and line breaks (stop strings); other control characters stay refused
"""

from __future__ import annotations

from dataclasses import field
from typing import Any


def knob(default: Any, help: str, **bounds: Any) -> Any:  # noqa: A002 - `help` reads best in the definitions
    """A dataclass field with help text and optional bounds (min, max, exclusive_min)."""
    meta = {"help": help, **bounds}
    if isinstance(default, (list, dict, set)):
        raise TypeError("use a tuple or a default_factory for mutable defaults")
    return field(default=default, metadata=meta)

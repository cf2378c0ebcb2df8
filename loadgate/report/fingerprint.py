"""The fingerprint's diff for people (`loadgate fingerprint --against`)."""

from __future__ import annotations

from typing import Any


def fingerprint_diff_text(against: str, old_hash: str, now_hash: str, changes: list[tuple[str, Any, Any]]) -> str:
    """`loadgate fingerprint --against`'s report: every field that differs, one per line."""
    lines = [f"{len(changes)} field(s) differ ({against} -> {old_hash[:16]} vs now {now_hash[:16]}):"]
    lines += [f"  {k}: {a!r} -> {b!r}" for k, a, b in changes]
    return "\n".join(lines)

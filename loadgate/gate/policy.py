"""The gate's one rule, in one place: no speed figure without a passing exactness check on the
configuration being measured.

    async with attested(engine, run_dir, show) as token:   # check; raise unless it passed
        await measure(token, ...)                          # admit(token, engine) first
    # leaving: the fingerprint is read again; a change voids the run (exit 11)

    async with unverified(engine) as token:                # `--unverified`: no check, marked so

The performance phase (`loadgate.runs.measure`) takes the token as an argument and calls `admit`
before sending anything: the token must be one this module issued, and an attestation's
fingerprint must equal the engine's live fingerprint, read there and then. Single runs, sweeps
and A/B runs all go through here.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from loadgate.errors import ExactnessFailed, ExactnessNotEstablished
from loadgate.exactness.outcome import not_established_words
from loadgate.gate.attestation import Attestation, Token, Unverified
from loadgate.gate.engine_check import CheckOutcome, check_engine, fingerprint_of
from loadgate.gate.fingerprint import describe_diff, diff
from loadgate.net.connect import Engine

_ISSUED: weakref.WeakSet[Attestation | Unverified] = weakref.WeakSet()


def _issue(token: Token) -> Token:
    _ISSUED.add(token)
    return token


async def verify_fingerprint(e: Engine, att: Attestation, when: str) -> None:
    """Raise ExactnessNotEstablished (naming the fields) when the engine's live fingerprint is not
    the attested one."""
    fp, h = await fingerprint_of(e, when)  # with target.endpoints: every replica's, required equal
    if h != att.fingerprint_hash:
        changes = diff(att.doc["fingerprint"], fp)
        raise ExactnessNotEstablished(
            f"the engine's configuration fingerprint changed {when} ({h[:16]} vs attested "
            f"{att.fingerprint_hash[:16]}): {describe_diff(changes)}; the speed of this configuration is unproven")


async def admit(token: object, e: Engine) -> None:
    """Let the performance phase start, or raise ExactnessNotEstablished (exit 11): the token must
    be one the gate issued, and an attestation must still match the live fingerprint."""
    if not isinstance(token, Attestation | Unverified) or token not in _ISSUED:
        raise ExactnessNotEstablished("the performance phase needs an attestation issued by the gate after a "
                                      "passing exactness check (or an explicit --unverified); this one was not")
    if isinstance(token, Attestation):
        await verify_fingerprint(e, token, "between the check and the measurement")


def raise_if_failed(o: CheckOutcome) -> None:
    """Compared tokens that miss the contract fail the check (exit 10); requests that kept failing
    leave it not established (exit 11): nothing was compared for them."""
    if o.result.passed:
        return
    if o.result.reasons:
        raise ExactnessFailed("exactness failed: " + "; ".join(o.result.reasons) + " (see the report above)")
    raise ExactnessNotEstablished(not_established_words(o.result.not_established) + " (see the report above)")


@contextlib.asynccontextmanager
async def attested(e: Engine, run_dir: Path, show: Callable[[CheckOutcome], None]) -> AsyncIterator[Attestation]:
    """Run the exactness check on `e` (its outcome to `show`, which reports it), raise
    ExactnessFailed unless it passed, yield the attestation; on leaving, read the fingerprint again."""
    outcome = await check_engine(e, run_dir)
    show(outcome)
    raise_if_failed(outcome)
    assert outcome.attestation is not None
    token = _issue(Attestation(outcome.attestation))
    assert isinstance(token, Attestation)
    yield token
    await verify_fingerprint(e, token, "during the measurement")


@contextlib.asynccontextmanager
async def unverified(e: Engine) -> AsyncIterator[Unverified]:
    """No check: the explicit token of `--unverified` (its figures are marked UNVERIFIED, exit 11).
    Replicas (target.endpoints) must still be alike: their fingerprints are read and compared."""
    if e.profile.target.replicas:
        await fingerprint_of(e)
    token = _issue(Unverified())
    assert isinstance(token, Unverified)
    yield token

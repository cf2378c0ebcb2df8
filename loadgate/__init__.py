"""loadgate: a load tester for LLM serving engines that proves exactness before it reports speed.

The public API (everything else is a stage module, importable but not promised):

    import loadgate
    profile = loadgate.load_profile("profiles/quickstart.yaml")   # a frozen Profile; ProfileError (exit 2)
    result = loadgate.run(profile)                 # check, measure, judge: a RunResult
    result.run_dir, result.exit_code               # results/<run-id>/, the verdict's exit code
    result.judgement.verdict                       # Verdict: code, outcome, message, thresholds, ...
    loadgate.run(profile, unverified=True)         # measure without a check (exit code 11)
    loadgate.check(profile)                        # the exactness check alone (ExactnessFailed: 10)
    loadgate.judge("results/<run-id>")             # the verdict of a saved run, from its files
    loadgate.errors.LoadgateError                  # every error loadgate raises, with .exit_code

`run` and `check` take `say` (a callable for the text a command prints while it runs) and `run` a
`progress` factory; both default to silence. Names are imported on first use, so importing one
stage module (or the simulator in its child process) does not import the whole package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from loadgate.version import __version__

if TYPE_CHECKING:
    from loadgate import errors
    from loadgate.config.profile import Profile, load_profile
    from loadgate.runs import RunResult, check, run
    from loadgate.verdict import Judgement, Verdict, judge

_PUBLIC = {
    "load_profile": "loadgate.config.profile", "Profile": "loadgate.config.profile",
    "run": "loadgate.runs", "check": "loadgate.runs", "RunResult": "loadgate.runs",
    "judge": "loadgate.verdict", "Verdict": "loadgate.verdict", "Judgement": "loadgate.verdict",
}

__all__ = ["__version__", "errors", "load_profile", "Profile", "run", "check", "RunResult", "judge", "Verdict",
           "Judgement"]


def __getattr__(name: str) -> Any:
    if name == "errors":
        return importlib.import_module("loadgate.errors")
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'loadgate' has no attribute {name!r}")

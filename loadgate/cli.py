"""Command line: click commands only. Logic lives in the modules; errors map to exit codes here."""

from __future__ import annotations

import os
from collections.abc import Sequence

import click
import orjson

from loadgate.errors import EXIT_CODES, LoadgateError
from loadgate.version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog="Exit codes: " + "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items()))
@click.version_option(__version__, prog_name="loadgate")
def cli() -> None:
    """Load-test an LLM serving engine, and refuse to report its speed until its output is proven."""


@cli.command()
@click.argument("profile", type=click.Path(dir_okay=False))
def validate(profile: str) -> None:
    """Check PROFILE without running anything (keys, values, and that the files it names exist);
    exit 2 with a one-line error if it is invalid."""
    from loadgate.config.profile import load_profile

    p = load_profile(profile)
    p.check_files()
    if p.workload.trace is not None:
        from loadgate.load.plan import trace_of

        trace_of(p)
    click.echo(f"{profile}: valid profile {p.name!r}")
    c = p.load.concurrency
    slots = max(c) if isinstance(c, tuple) else c
    if slots and p.load.warmup_requests < slots:
        click.echo(f"note: load.warmup_requests ({p.load.warmup_requests}) is below the concurrency ({slots}): "
                   f"up to {slots - p.load.warmup_requests} measured requests per level open a connection, "
                   "and their TTFT includes it")


@cli.command()
def schema() -> None:
    """Print the profile's JSON Schema (for editor completion)."""
    from loadgate.config.profile import profile_json_schema

    click.echo(orjson.dumps(profile_json_schema(), option=orjson.OPT_INDENT_2).decode())


@cli.command()
@click.argument("profile", type=click.Path(dir_okay=False))
@click.option("--quiet", "-q", is_flag=True, help="no progress bar")
@click.option("--unverified", is_flag=True,
              help="measure without an exactness check; figures are marked UNVERIFIED and the exit code is 11")
def run(profile: str, quiet: bool, unverified: bool) -> None:
    """Run PROFILE: fingerprint the engine, check exactness against the baseline, and only if that
    passes, measure; write results/<run-id>/ and print the report and tables."""
    from loadgate.config.profile import load_profile
    from loadgate.runner import run_profile

    run_profile(load_profile(profile), progress=not quiet, unverified=unverified)


@cli.command()
@click.argument("profile", type=click.Path(dir_okay=False))
def check(profile: str) -> None:
    """Run only the exactness check of PROFILE; write results/<run-id>/ with the report, reproducer
    bundles and, when it passes, the attestation. Exit 0 passed, 10 failed."""
    from loadgate.config.profile import load_profile
    from loadgate.gate.policy import run_check_only

    run_check_only(load_profile(profile))


@cli.command()
@click.argument("profile", type=click.Path(dir_okay=False))
@click.option("--out", default="baselines", show_default=True, type=click.Path(file_okay=False),
              help="folder that receives <profile name>-<sha256[:12]>.json")
def baseline(profile: str, out: str) -> None:
    """Capture a baseline from PROFILE's target: every corpus case, one at a time, with token ids,
    raw logprobs, top alternatives and finish reasons; print the file written."""
    from pathlib import Path

    from loadgate.config.profile import load_profile
    from loadgate.gate.policy import run_baseline

    click.echo(run_baseline(load_profile(profile), Path(out)))


@cli.command()
@click.argument("profile", type=click.Path(dir_okay=False))
@click.option("--against", type=click.Path(dir_okay=False, exists=True),
              help="a saved fingerprint (fingerprint.json, attestation.json or a baseline file) to diff with")
def fingerprint(profile: str, against: str | None) -> None:
    """Print the configuration fingerprint of PROFILE's engine (canonical JSON and sha256), or the
    fields that differ from a saved one."""
    from loadgate.config.profile import load_profile
    from loadgate.gate.policy import show_fingerprint

    click.echo(show_fingerprint(load_profile(profile), against))


@cli.command()
@click.argument("bundle", type=click.Path(dir_okay=False, exists=True))
@click.option("--endpoint", help="send to this base URL instead of the one recorded in the bundle")
@click.option("--times", default=1, show_default=True, type=click.IntRange(1, 1000), help="how many times")
def replay(bundle: str, endpoint: str | None, times: int) -> None:
    """Re-send one reproducer bundle's request alone and compare the answer with its baseline.
    Exit 0 when every answer matches the baseline's tokens, 10 otherwise."""
    from loadgate.gate.policy import run_replay

    run_replay(bundle, endpoint, times)


@cli.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "csv", "json"]), default="table",
              show_default=True, help="markdown fits a CI step summary")
@click.option("--json", "as_json", is_flag=True, help="same as --format json")
@click.option("--html", "html", is_flag=True, help="also write report.html with plots (needs the plot extra)")
def report(run_dir: str, fmt: str, as_json: bool, html: bool) -> None:
    """Re-render a finished run from its files alone (records.jsonl, meta.json, …); an A/B run folder
    prints its comparison."""
    from pathlib import Path

    from loadgate.report.views import render_run

    click.echo(render_run(Path(run_dir), "json" if as_json else fmt, html=html))


@cli.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "csv", "json"]), default="table",
              show_default=True, help="markdown fits a CI step summary")
def compare(runs: tuple[str, ...], fmt: str) -> None:
    """Compare saved runs: RUN_A is the baseline, each further RUN is compared with it (p50/p99 side by
    side, ratios and intervals); a single A/B run folder compares its own baseline and candidate runs."""
    from pathlib import Path

    from loadgate.report.views import render_compare

    click.echo(render_compare([Path(r) for r in runs], fmt))


def _add_optional_commands() -> None:
    from loadgate.sim.cli import sim

    cli.add_command(sim)


_add_optional_commands()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code instead of exiting (callable from tests)."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="loadgate",
                 standalone_mode=False)
    except LoadgateError as e:
        click.echo(f"loadgate: {e.message}", err=True)
        return e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return 2
    except click.Abort:
        click.echo("loadgate: aborted", err=True)
        return 130
    except KeyboardInterrupt:
        click.echo("loadgate: interrupted", err=True)
        return 130
    except SystemExit as e:
        return int(e.code or 0) if not isinstance(e.code, str) else 1
    except Exception as e:  # a bug in loadgate: one line, the traceback only on request
        if os.environ.get("LOADGATE_DEBUG"):
            raise
        click.echo(f"loadgate: internal error: {type(e).__name__}: {e} (set LOADGATE_DEBUG=1 for the traceback)",
                   err=True)
        return 1
    return 0

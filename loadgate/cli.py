"""Command line: the click declarations (options, help) of every command; each calls its body in
`loadgate.commands`. `main` maps errors to exit codes and prints them."""

from __future__ import annotations

import os
import traceback
from collections.abc import Sequence

import click

from loadgate import commands
from loadgate.errors import EXIT_CODES, LoadgateError
from loadgate.secrets import redact
from loadgate.version import __version__


class _Commands(click.Group):
    """The command group, with `sim` loaded only when it is run or listed with its help: it lives in
    the simulator's package, which imports nothing of the client (and the client's commands import
    nothing of the simulator until they start it)."""

    LAZY = {"sim": ("loadgate.sim.cli", "sim", "Serve the simulated LLM engine (vLLM OpenAI routes, SGLang "
                                                "/generate, /metrics).")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.LAZY])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.LAZY and name not in self.commands:
            import importlib

            module, attr, _ = self.LAZY[name]
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The listing of `--help`: a lazy command's one line is kept here, so listing loads nothing."""
        rows = []
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(n) for n in names)
        for name in names:
            if name in self.LAZY and name not in self.commands:
                text = self.LAZY[name][2]
                rows.append((name, text if len(text) <= limit else text[:limit - 3].rsplit(" ", 1)[0] + "..."))
                continue
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog="Exit codes: " + "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items()))
@click.version_option(__version__, prog_name="loadgate")
def cli() -> None:
    """Load-test an LLM serving engine, and refuse to report its speed until its output is proven."""


@cli.command()
@click.argument("profile", type=click.Path(dir_okay=False))
def validate(profile: str) -> None:
    """Check PROFILE without running anything (keys, values, and that the files it names exist);
    exit 2 with a one-line error if it is invalid."""
    commands.validate(profile)


@cli.command()
def schema() -> None:
    """Print the profile's JSON Schema (for editor completion)."""
    commands.schema()


@cli.command()
@click.argument("profile", type=click.Path(dir_okay=False))
@click.option("--quiet", "-q", is_flag=True, help="no progress bar")
@click.option("--unverified", is_flag=True,
              help="measure without an exactness check; figures are marked UNVERIFIED and the exit code is 11")
@click.option("--html", "html", is_flag=True,
              help="also write report.html with plots before exiting (later: loadgate report --html RUN_DIR)")
@click.option("--ray", "ray_address", metavar="ADDRESS",
              help="send from Ray actors on the cluster at ADDRESS (auto, host:port or ray://host:port): "
                   "sets load.distributed (docs/distributed.md)")
@click.option("--actors", type=click.IntRange(1, 1024), help="with --ray (or load.distributed): how many actors")
def run(profile: str, quiet: bool, unverified: bool, html: bool, ray_address: str | None,
        actors: int | None) -> None:
    """Run PROFILE: fingerprint the engine, check exactness against the baseline, and only if that
    passes, measure; write results/<run-id>/, print the report and tables, and exit with the
    verdict's code."""
    commands.run(profile, quiet=quiet, unverified=unverified, html=html, ray_address=ray_address, actors=actors)


@cli.command()
@click.argument("profile", type=click.Path(dir_okay=False))
def check(profile: str) -> None:
    """Run only the exactness check of PROFILE; write results/<run-id>/ with the report, reproducer
    bundles and, when it passes, the attestation. Exit 0 passed, 10 failed, 11 not established
    (requests of the check kept failing in transport: nothing was compared for them)."""
    commands.check(profile)


@cli.command()
@click.argument("profile", type=click.Path(dir_okay=False))
@click.option("--out", default="baselines", show_default=True, type=click.Path(file_okay=False),
              help="folder that receives <profile name>-<sha256[:12]>.json")
def baseline(profile: str, out: str) -> None:
    """Capture a baseline from PROFILE's target: every corpus case, one at a time, with token ids,
    raw logprobs, top alternatives and finish reasons; print the file written."""
    commands.baseline(profile, out)


@cli.command()
@click.argument("profile", type=click.Path(dir_okay=False))
@click.option("--against", type=click.Path(dir_okay=False, exists=True),
              help="a saved fingerprint (fingerprint.json, attestation.json or a baseline file) to diff with")
def fingerprint(profile: str, against: str | None) -> None:
    """Print the configuration fingerprint of PROFILE's engine (canonical JSON and sha256), or the
    fields that differ from a saved one (exit 0 identical, 12 different)."""
    commands.fingerprint(profile, against)


@cli.command()
@click.argument("bundle", type=click.Path(dir_okay=False, exists=True))
@click.option("--endpoint", help="send to this base URL instead of the one recorded in the bundle")
@click.option("--times", default=1, show_default=True, type=click.IntRange(1, 1000), help="how many times")
@click.option("--concurrency", default=1, show_default=True, type=click.IntRange(1, 1024),
              help="requests in flight: the bundle's with N-1 copies of it beside it (a batch of the "
                   "size it diverged in; the bundle does not keep its neighbours' requests)")
def replay(bundle: str, endpoint: str | None, times: int, concurrency: int) -> None:
    """Re-send one reproducer bundle's request (alone by default) and compare the answer with its
    baseline. Exit 0 when every answer matches the baseline's tokens, 10 otherwise."""
    commands.replay(bundle, endpoint, times, concurrency)


@cli.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "csv", "json"]), default="table",
              show_default=True, help="markdown fits a CI step summary")
@click.option("--json", "as_json", is_flag=True, help="same as --format json")
@click.option("--html", "html", is_flag=True, help="also write report.html with plots (needs the plot extra)")
def report(run_dir: str, fmt: str, as_json: bool, html: bool) -> None:
    """Re-render a finished run from its files alone (records.jsonl, meta.json, …): the exactness
    check, the figures, thresholds and the verdict, exiting with the verdict's code; an A/B run
    folder prints its comparison."""
    commands.report(run_dir, "json" if as_json else fmt, html)


@cli.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "csv", "json"]), default="table",
              show_default=True, help="markdown fits a CI step summary")
def compare(runs: tuple[str, ...], fmt: str) -> None:
    """Compare saved runs: RUN_A is the baseline, each further RUN is compared with it (p50/p99 side by
    side, ratios and intervals); a single A/B run folder compares its own baseline and candidate runs."""
    commands.compare(runs, fmt)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code instead of exiting (callable from tests)."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="loadgate",
                 standalone_mode=False)
    except LoadgateError as e:
        click.echo(f"loadgate: {redact(e.message)}", err=True)
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
    except Exception as e:  # a bug in loadgate: one line, the traceback only on request (secrets masked)
        if os.environ.get("LOADGATE_DEBUG"):
            click.echo(redact(traceback.format_exc()), err=True, nl=False)
        click.echo(redact(f"loadgate: internal error: {type(e).__name__}: {e}")
                   + ("" if os.environ.get("LOADGATE_DEBUG") else " (set LOADGATE_DEBUG=1 for the traceback)"), err=True)
        return 1
    return 0

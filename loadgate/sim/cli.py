"""`loadgate sim`: serve the simulated engine over HTTP until interrupted.

Every SimConfig setting has an option generated from the dataclass (name, type, default, help,
bounds): `--seed`, `--max-num-seqs`, nested ones prefixed with their section (`--speculative-k`,
`--divergence-batch-variant/--no-divergence-batch-variant`, `--faults-http-429`); tuples are comma
lists (`--speculative-acceptance 0.8,0.6`). Precedence: defaults < `--config FILE` (a YAML mapping
of SimConfig keys, sections nested) < options. With `--port 0` any free port is used. Once
listening, the command prints `loadgate sim listening on http://HOST:PORT` on stdout (flushed);
SIGINT or SIGTERM stop it cleanly.
"""

from __future__ import annotations

import sys
import typing
from pathlib import Path
from typing import Any

import click

from loadgate.config.simconfig import SimConfig
from loadgate.config.typed_yaml import parse_yaml
from loadgate.errors import ProfileError, UsageError
from loadgate.sim.serve import run_server, serve_profile
from loadgate.sim.settings import KnobField, config_from_mapping, knob_fields


def option_name(k: KnobField) -> str:
    """The long option of a setting, e.g. `--speculative-k` for speculative.k."""
    return "--" + "-".join(k.path).replace("_", "-")


def _param_name(k: KnobField) -> str:
    return "__".join(k.path)


def _knob_option(k: KnobField) -> click.Option:
    default = ",".join(str(x) for x in k.default) if k.is_tuple else k.default
    bounds = ", ".join(f"{name.replace('_', ' ')} {v}" for name, v in k.bounds.items())
    help_text = f"{k.help} [default: {default}{'; ' + bounds if bounds else ''}]"
    name = option_name(k)
    if k.type is bool:
        return click.Option([f"{name}/--no-{name[2:]}", _param_name(k)], default=None, help=help_text)
    if k.choices is not None:
        kind: Any = click.Choice(k.choices)
    elif k.is_tuple:
        kind = click.STRING
    else:
        base = next((a for a in typing.get_args(k.type) if a is not type(None)), k.type)  # `X | None` -> X
        kind = {int: click.INT, float: click.FLOAT, str: click.STRING}[base]
    return click.Option([name, _param_name(k)], type=kind, default=None, help=help_text,
                        metavar="LIST" if k.is_tuple else None)


def build_config(config_file: str | None, overrides: dict[str, Any]) -> SimConfig:
    """SimConfig from the YAML file (if any) with the non-None option values on top; a bad file or
    value ends in one line naming the file (or `loadgate sim options`), line and key."""
    data: dict[str, Any] = {}
    lines: dict[str, int] = {}
    file = "loadgate sim options"
    if config_file:
        file = config_file
        try:
            text = Path(config_file).read_bytes().decode("utf-8-sig")
        except OSError as e:
            raise UsageError(f"{config_file}: cannot read the file: {e.strerror or e}") from None
        except UnicodeDecodeError as e:
            raise UsageError(f"{config_file}: not UTF-8 text (bad byte at offset {e.start})") from None
        loaded, lines = parse_yaml(text, file=config_file)
        if not isinstance(loaded, dict):
            raise UsageError(f"{config_file}: must be a mapping of simulator settings")
        data = loaded
    for k in knob_fields():
        v = overrides.get(_param_name(k))
        if v is None:
            continue
        target = data
        for depth, part in enumerate(k.path[:-1], 1):
            section = target.setdefault(part, {})
            if not isinstance(section, dict):
                dotted = ".".join(k.path[:depth])
                raise ProfileError(file, lines.get(dotted), dotted, "must be a mapping of settings")
            target = section
        target[k.path[-1]] = v
        lines.pop(k.dotted, None)  # the option's value has no line in the file
    return config_from_mapping(data, file=file, lines=lines)


@click.command("sim", context_settings={"max_content_width": 110})
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="port to listen on; 0 = any free port")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="YAML mapping of simulator settings (options below override it)")
@click.option("--write-tokenizer", "tokenizer_dir", type=click.Path(file_okay=False),
              help="write the simulator's tokenizer and chat template as a Hugging Face folder (tokenizer.json, "
                   "tokenizer_config.json) and exit; a profile names it in workload.tokenizer")
@click.option("--from-profile", "profile", type=click.Path(dir_okay=False), hidden=True,
              help="serve the settings of this loadgate profile's target.sim, print them, and stop when stdin "
                   "ends (how `loadgate run` starts its embedded engine early: loadgate.sim.early)")
def sim(host: str, port: int, config_file: str | None, tokenizer_dir: str | None, profile: str | None,
        **knobs: Any) -> None:
    """Serve the simulated LLM engine (vLLM OpenAI routes, SGLang /generate, /metrics)."""
    if profile is not None:
        serve_profile(profile, host, port)
        return
    cfg = build_config(config_file, knobs)
    if tokenizer_dir is not None:
        from loadgate.sim.hf_export import write_hf_tokenizer

        try:
            folder = write_hf_tokenizer(cfg.vocab_size, Path(tokenizer_dir))
        except OSError as e:
            raise UsageError(f"{tokenizer_dir}: cannot write the tokenizer: {e.strerror or e}") from None
        click.echo(f"wrote the simulator's tokenizer (vocab_size {cfg.vocab_size}) to {folder}")
        return
    run_server(cfg, host, port)


for _k in knob_fields():
    sim.params.append(_knob_option(_k))


def main(argv: list[str] | None = None) -> None:
    """`python -m loadgate.sim`: the command above on its own, errors as one line with their exit
    code (as `loadgate sim` prints them), without importing the client."""
    from loadgate.errors import LoadgateError

    try:
        sim.main(args=argv, prog_name="loadgate sim", standalone_mode=False)
    except LoadgateError as e:
        click.echo(f"loadgate: {e.message}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(2)
    except click.Abort:
        sys.exit(130)
    sys.exit(0)

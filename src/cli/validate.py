"""``korral validate-config``: a queues.yaml checked the way YuniKorn's validator checks it."""

from __future__ import annotations

from pathlib import Path

import click

from korral.cli.config_input import naming, read_config, source_name
from korral.cli.group import fail, main
from korral.cli.options import CONFIG_FILE
from korral.errors import ConfigError


@main.command("validate-config", short_help="Check a queues.yaml as YuniKorn's validator does.")
@click.argument("file", type=CONFIG_FILE)
def validate_config(file: Path) -> None:
    """Check FILE the way YuniKorn's validator does: prints OK (exit 0), or the error on stderr (exit 1).

    FILE is a queues.yaml, or a Kubernetes ConfigMap holding one under data."queues.yaml" (as
    YuniKorn's shim deploys it); - reads standard input.
    """
    from korral.config import load_config
    from korral.config.defaulted import defaulted_values

    source = source_name(file)
    try:
        text, source = read_config(file)
        config = load_config(text)
    except ConfigError as error:
        fail(f"invalid: {naming(error, source)}")
    for warning in defaulted_values(config):  # accepted as YuniKorn accepts them, but said
        click.echo(f"warning: {source}: {warning}", err=True)
    click.echo("OK")

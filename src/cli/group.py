"""The ``korral`` command group and what every command shares: how a count reads, how a user error ends.

What a command reports goes to stdout; errors go to stderr. Exit codes: 0 done, 1 the input or the
run failed (an invalid config, an invariant violated), 2 a usage error (click's).
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click

import korral


def plural(count: int, noun: str) -> str:
    """``1 checkpoint``, ``2 checkpoints``, ``1,024 operations``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def fail(message: str) -> NoReturn:
    """An error for the user: on stderr, exit code 1."""
    click.echo(message, err=True)
    sys.exit(1)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    korral.__version__, "-V", "--version", prog_name="korral", message="%(prog)s %(version)s"
)
def main() -> None:
    """korral: Apache YuniKorn's scheduler core as an actor system.

    Also runs as python -m korral. Results go to stdout, errors to stderr; exit code 0 is
    success, 1 an invalid input or a failed run, 2 a usage error.
    """

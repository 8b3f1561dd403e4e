"""The option shapes the commands share, each declared once: a decorator per shape.

A command keeps its own name, help and default for each option; what is shared is the shape (the type,
its bounds, whether the default is shown), so that ``--nodes`` or ``--duration`` reads the same way in
every command that takes it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

from korral.cli.checks import host_port, writable_file

F = TypeVar("F", bound=Callable[..., object])

CONFIG_FILE = click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path)
CONFIG_HELP = (
    'a queues.yaml, or a Kubernetes ConfigMap holding one under data."queues.yaml" '
    "(as YuniKorn's shim deploys it); - reads standard input"
)


def shown(default: object) -> bool | None:
    """A default is shown in --help when there is one (None: the command works one out, said in help)."""
    return True if default is not None else None


def config_option(help: str) -> Callable[[F], F]:
    """``--config FILE``: a queues.yaml or a ConfigMap holding one (``-``: standard input)."""
    return click.option("--config", type=CONFIG_FILE, default=None, help=help)


def count_option(
    name: str,
    help: str | None = None,
    *,
    default: int | None = None,
    minimum: int = 1,
    maximum: int | None = None,
) -> Callable[[F], F]:
    """A whole number of things (nodes, asks, RMs, seeds, ...) within bounds; its default shown when it
    has one (None: the command works one out)."""
    return click.option(
        name,
        type=click.IntRange(min=minimum, max=maximum),
        default=default,
        show_default=shown(default),
        help=help,
    )


def real_option(
    name: str, help: str | None = None, *, default: float | None, minimum: float
) -> Callable[[F], F]:
    """A number from ``minimum`` up (seconds, a rate); its default shown when it has one."""
    return click.option(
        name,
        type=click.FloatRange(min=minimum),
        default=default,
        show_default=shown(default),
        help=help,
    )


def seed_option(default: int | None, help: str | None = None) -> Callable[[F], F]:
    """``--seed``: the seed of a run's randomness (the same seed, the same run)."""
    return click.option("--seed", type=int, default=default, show_default=shown(default), help=help)


def flag_option(name: str, help: str, dest: str | None = None) -> Callable[[F], F]:
    """An on/off switch, off unless given."""
    names = (name, dest) if dest is not None else (name,)
    return click.option(*names, is_flag=True, help=help)


def input_file_option(name: str, help: str, dest: str | None = None) -> Callable[[F], F]:
    """A file the command reads when it starts (keys, certificates, tokens): a Path, read then."""
    names = (name, dest) if dest is not None else (name,)
    return click.option(*names, type=click.Path(dir_okay=False, path_type=Path), default=None, help=help)


def output_file_option(name: str, help: str, dest: str | None = None) -> Callable[[F], F]:
    """A file the command writes (a chart, JSON): a Path whose folder exists and is writable, checked
    before any work (korral.cli.checks.writable_file)."""
    names = (name, dest) if dest is not None else (name,)
    return click.option(
        *names,
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        callback=writable_file,
        help=help,
    )


def pem_option(name: str, help: str) -> Callable[[F], F]:
    """An existing PEM file (a certificate, its key, a CA), given as a string path."""
    return click.option(name, type=click.Path(exists=True, dir_okay=False), help=help)


def address_option(name: str, dest: str, help: str, default: str | None = None) -> Callable[[F], F]:
    """``HOST:PORT`` (port 0: any free port), checked before the command runs."""
    return click.option(
        name,
        dest,
        default=default,
        show_default=shown(default),
        callback=host_port,
        help=help,
    )

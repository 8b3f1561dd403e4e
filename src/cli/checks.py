"""Checks of the `korral` command line's options that click cannot express on its own: which options
each mode of `korral stress` and each workload of `korral bench` reads (any other given on the command
line is a usage error, exit 2, never silently ignored), HOST:PORT addresses, and the paths a command
writes to (checked before any work: a run of minutes is never lost to a folder that does not exist).
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from korral.cli.group import fail

# korral bench: the options each workload reads (every other one given is a usage error)
_BENCH_COMMON = frozenset({"workload", "nodes", "json_file"})
BENCH_MODES: dict[str, tuple[str, frozenset[str]]] = {
    "yunikorn": (
        "korral bench --workload yunikorn (the default)",
        _BENCH_COMMON | {"asks", "sweep", "out", "reference_only", "plot_only", "remote", "repeat"},
    ),
    "scale": (
        "korral bench --workload scale",
        _BENCH_COMMON | {"asks", "seed", "rate", "user_limits", "reference_only", "remote"},
    ),
    "gang": ("korral bench --workload gang", _BENCH_COMMON | {"asks"}),
    "multi-rm": ("korral bench --workload multi-rm", _BENCH_COMMON | {"asks", "rms", "engine", "repeat"}),
    "preemption": (
        "korral bench --workload preemption",
        _BENCH_COMMON | {"allocations", "preemptors", "rate", "preemption_delay", "burst"},
    ),
}


# korral stress: the options each mode reads (every other one given is a usage error, never ignored)
STRESS_MODES: dict[str, tuple[str, frozenset[str]]] = {
    "threads": (
        "korral stress without --simulated, --soak or --preemption",
        frozenset({"rms", "duration", "seed", "checkpoint", "fault"}),
    ),
    "simulated": (
        "korral stress --simulated",
        frozenset(
            {
                "simulated",
                "rms",
                "duration",
                "seed",
                "fault",
                "seeds",
                "operations",
                "replay",
                "no_perturb",
                "schedule_seed",
                "explore",
                "env_faults",
                "jobs",
                "coverage",
                "no_deep_queues",
            }
        ),
    ),
    "soak": ("korral stress --soak", frozenset({"soak", "duration", "cycles", "every"})),
    "preemption": (
        "korral stress --preemption",
        frozenset({"preemption", "rms", "duration", "seed", "checkpoint"}),
    ),
    "preemption-simulated": (
        "korral stress --preemption --simulated",
        frozenset({"preemption", "simulated", "rms", "duration", "seed", "seeds", "operations"}),
    ),
}


def stress_mode(soak: bool, preemption: bool, simulated: bool) -> str:
    if soak and (preemption or simulated):
        raise click.UsageError("--soak runs on its own: not with --preemption, --simulated or --replay")
    if soak:
        return "soak"
    if preemption:
        return "preemption-simulated" if simulated else "preemption"
    return "simulated" if simulated else "threads"


def refuse_inapplicable(
    ctx: click.Context, mode: str, modes: dict[str, tuple[str, frozenset[str]]] | None = None
) -> None:
    """A usage error (exit 2) for each option given on the command line that ``mode`` does not read."""
    label, applies = (modes if modes is not None else STRESS_MODES)[mode]
    given = [
        param
        for param in ctx.command.params
        if param.name is not None
        and param.name not in applies
        and ctx.get_parameter_source(param.name) not in (None, click.core.ParameterSource.DEFAULT)
    ]
    if given:
        names = ", ".join(param.opts[0] for param in given)
        raise click.UsageError(f"{names} {'does' if len(given) == 1 else 'do'} not apply to {label}")


def host_port(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--grpc``/``--rest``: HOST:PORT (port 0-65535; [::1]:PORT for IPv6), else a usage error (exit 2)."""
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise click.BadParameter(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:9090; port 0: any free port)")
    return value


def output_problem(path: Path, *, folder: bool) -> str | None:
    """Why ``path`` cannot be written (a file, or with ``folder`` a folder the command creates), or None.

    Only the last part of what the user named is ever created: a missing parent folder is an error,
    never made on the user's behalf."""
    kind = "folder" if folder else "file"
    if path.exists():
        if folder != path.is_dir():
            return f"is a {'file' if folder else 'folder'}, not a {kind}"
        if not os.access(path, os.W_OK):
            return f"cannot write to this {kind} (permission denied)"
        return None
    parent = path.parent
    if not parent.exists():
        return f"the folder {parent} does not exist (korral creates no folder but the one named)"
    if not parent.is_dir():
        return f"{parent} is not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot create it in {parent} (permission denied)"
    return None


def writable_file(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """A file the command writes (--plot, --json): its folder must exist and be writable, checked when
    the command line is read, before any work; otherwise one line on stderr and exit 1."""
    if value is not None and (problem := output_problem(value, folder=False)) is not None:
        fail(f"{param.opts[0]} {value}: {problem}")
    return value


def writable_folder(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """A folder the command writes into (--out): it exists, or its parent does and it can be created."""
    if value is not None and (problem := output_problem(value, folder=True)) is not None:
        fail(f"{param.opts[0]} {value}: {problem}")
    return value

"""Run the README's ``sh`` and ``python`` blocks as written, top to bottom, from the clone's root.

A ``python`` block runs in the venv's interpreter (``.venv/bin/python``, or ``--venv``'s). Each ``sh``
block runs in its own ``bash`` with ``set -e`` (a failing command fails the block), within a time
bound; whatever a block left running in the background (``korral serve &``) is killed when the block
ends. ``--skip REGEX`` leaves out the lines it matches (CI skips ``make test``, which it has just run;
the test suite skips the ``make`` lines, which would install a venv or run the suite inside itself).
``--venv DIR`` runs ``.venv/bin/...`` from DIR instead (the test suite's own environment). Exit 0 when
every block passed; otherwise the failing block's output and exit 1.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```(sh|python)\n(.*?)^```", re.M | re.S)
# after the block: stop what it started in the background, and give it a moment to stop cleanly
# (the trap runs under set -e too: a kill with no job left must not fail the block)
PROLOGUE = "set -e\ntrap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT\n"


def blocks(readme: Path) -> list[tuple[str, str]]:
    """(language, text) of every sh and python block, in order."""
    return [(str(kind), str(block)) for kind, block in BLOCK.findall(readme.read_text(encoding="utf-8"))]


def prepare(block: str, skip: re.Pattern[str] | None, venv: Path | None) -> str:
    lines = [line for line in block.splitlines() if skip is None or not skip.search(line)]
    text = "\n".join(lines) + "\n"
    if venv is not None:
        text = re.sub(r"(?<![\w/])\.venv/bin/", f"{venv}/bin/", text)
    return text


def command(kind: str, block: str, venv: Path | None) -> list[str]:
    if kind == "python":
        return [str((venv or ROOT / ".venv") / "bin" / "python"), "-c", block]
    return ["bash", "-c", PROLOGUE + block]


def run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    process = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: killed whole on a timeout
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        output += f"\n(timed out after {timeout:g}s)\n"
        return subprocess.CompletedProcess(process.args, 124, output)
    return subprocess.CompletedProcess(process.args, process.returncode, output)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument("--skip", default=None, help="a regex: lines it matches are left out")
    parser.add_argument("--venv", type=Path, default=None, help="run .venv/bin/... from this venv")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per block")
    options = parser.parse_args(argv)
    skip = re.compile(options.skip) if options.skip else None
    found = blocks(options.readme)
    if not found:
        print(f"no sh or python block in {options.readme}", file=sys.stderr)
        return 1
    for number, (kind, block) in enumerate(found, 1):
        text = prepare(block, skip, options.venv) if kind == "sh" else block
        if not text.strip():
            print(f"block {number}: nothing left to run")
            continue
        done = run(command(kind, text, options.venv), options.timeout)
        print(f"--- block {number} (exit {done.returncode}) ---\n{text}--- its output ---\n{done.stdout}")
        if done.returncode != 0:
            print(f"block {number} of {options.readme} failed", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

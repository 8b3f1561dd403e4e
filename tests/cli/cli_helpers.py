"""What the command line tests (test_cli_*.py, test_simulate.py) share: the runner, files, text helpers.

Each test runs a command as a user would (options, files, exit code, what is printed or written) on
the smallest input that still shows the behaviour, so all of them take a few seconds plus one
stress run with an injected fault (which shrinks its reproducing sequence before reporting).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import korral

BUNDLED_EXAMPLE = Path(korral.__file__).with_name("examples") / "queues.yaml"
KNOWN_FAULT = "node-keeps-released"


@pytest.fixture
def runner() -> CliRunner:
    # rich decides colour and width from the environment: no colour codes, and lines wide enough that
    # the output is not wrapped in the middle of a phrase
    return CliRunner(env={"FORCE_COLOR": None, "COLUMNS": "200"})


def flat(text: str) -> str:
    """The text with every run of whitespace made one space (rich may still wrap long lines)."""
    return " ".join(text.split())


def number(text: str) -> int:
    """An integer as printed with thousands separators: ``"2,552"`` -> 2552."""
    return int(text.replace(",", ""))


def write_config(directory: Path, text: str, name: str = "queues.yaml") -> Path:
    path = directory / name
    path.write_text(text)
    return path


# how YuniKorn's Kubernetes shim deploys its queues (deployments/scheduler/yunikorn-configs.yaml)
SHIM_CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: yunikorn-configs
data:
  queues.yaml: |
    partitions:
      - name: default
        placementrules:
          - name: tag
            value: namespace
            create: true
        queues:
          - name: root
            submitacl: '*'
"""


def table_rows(output: str, title: str) -> dict[str, list[str]]:
    """The rows of the table titled ``title...``: full queue path (from the tree's indentation) -> cells."""
    lines = output.splitlines()
    start = next(index for index, line in enumerate(lines) if line.strip().startswith(title))
    header = next(index for index in range(start, len(lines)) if lines[index].split()[:1] == ["queue"])
    rows: dict[str, list[str]] = {}
    stack: list[str] = []
    base = None
    for line in lines[header + 2 :]:
        if not line.strip():
            break
        indent = len(line) - len(line.lstrip())
        base = indent if base is None else base
        depth = (indent - base) // 2
        name, *cells = line.split()
        stack[depth:] = [name]
        rows[".".join(stack)] = cells
    return rows

"""The paths a command writes to are checked when the command line is read, before any work: a run of
minutes is never lost to a folder that does not exist, and korral creates no folder but the one named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_helpers import runner  # noqa: F401  (a fixture)
from click.testing import CliRunner

from korral.cli import main


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any simulation or benchmark started fails the test: the path must be refused before."""
    from korral.cli import bench_runs
    from korral.harness.simulate import runs as simulate

    def started(*_: object, **__: object) -> None:
        raise AssertionError("the command started its work before checking where it writes")

    for name in ("simulate", "compare"):
        monkeypatch.setattr(simulate, name, started)
    for name in ("sweep", "against_reference", "plot_only", "multi_rm", "preemption", "gang"):
        monkeypatch.setattr(bench_runs, name, started)


@pytest.mark.usefixtures("no_work")
@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (
            ["simulate", "--plot", "{tmp}/no/such/x.png"],
            "--plot {tmp}/no/such/x.png: the folder {tmp}/no/such",
        ),
        (["simulate", "--compare", "{cfg}", "{cfg}", "--plot", "{tmp}/no/x.png"], "--plot {tmp}/no/x.png"),
        (["bench", "--json", "{tmp}/missing/out.json"], "--json {tmp}/missing/out.json: the folder"),
        (["bench", "--sweep", "--out", "{tmp}/a/b"], "--out {tmp}/a/b: the folder {tmp}/a does not exist"),
        (["bench", "--workload", "preemption", "--json", "{tmp}/m/o.json"], "--json {tmp}/m/o.json"),
    ],
)
def test_an_output_path_in_a_missing_folder_is_one_line_before_any_work(
    runner: CliRunner,  # noqa: F811
    tmp_path: Path,
    arguments: list[str],
    named: str,
) -> None:
    config = tmp_path / "queues.yaml"
    config.write_text("partitions:\n  - name: default\n    queues:\n      - name: root\n")
    given = [a.format(tmp=tmp_path, cfg=config) for a in arguments]
    result = runner.invoke(main, given)
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and named.format(tmp=tmp_path, cfg=config) in result.stderr
    # nothing created on the way: the folder was neither made nor half made
    assert sorted(p.name for p in tmp_path.iterdir()) == ["queues.yaml"]


@pytest.mark.usefixtures("no_work")
def test_a_folder_that_cannot_be_written_is_refused(runner: CliRunner, tmp_path: Path) -> None:  # noqa: F811
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        result = runner.invoke(main, ["simulate", "--plot", str(locked / "x.png")])
    finally:
        locked.chmod(0o700)
    if os.geteuid() == 0:  # root writes anywhere: nothing to refuse
        assert "permission denied" not in result.stderr
        return
    assert result.exit_code == 1 and "permission denied" in result.stderr, result.output

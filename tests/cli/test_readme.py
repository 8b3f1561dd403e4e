"""The README's command blocks run as written, top to bottom (scripts/readme_blocks.py; CI runs the
``make`` lines too, this leaves them out: one would build a venv, the other run this suite inside itself)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_the_readmes_sh_blocks_run_as_written() -> None:
    done = subprocess.run(
        [
            sys.executable,
            ROOT / "scripts" / "readme_blocks.py",
            "--skip",
            r"^make ",
            "--venv",
            sys.prefix,  # .venv/bin/korral, .venv/bin/python: this interpreter's
            "--timeout",
            "240",
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # the Python examples: the application got its three allocations; REST answered its health check
    assert "ApplicationInfo(" in out and '"Healthy":true' in out.replace(" ", ""), out
    # the serve block: the remote RM got its four allocations, the REST API saw them, the server stopped
    assert out.count("allocated task-") == 4, out
    assert '"[demo]default"' in out or "[demo]default" in out, out
    assert "yunikorn_scheduler" in out, out
    assert "korral: stopped" in out, out
    assert "Address already in use" not in out


def run_blocks(readme: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, ROOT / "scripts" / "readme_blocks.py", "--readme", readme, *options],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_block_runner_fails_a_failing_line_and_stops_what_a_block_left_running(tmp_path: Path) -> None:
    marker = tmp_path / "still-running"
    readme = tmp_path / "README.md"
    readme.write_text(
        "```sh\necho first block\n```\n\n"
        f"```sh\n(sleep 5; touch {marker}) &\necho started\n```\n\n"
        "```text\nexit 1  # not a command block\n```\n"
    )
    done = run_blocks(readme)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "first block" in done.stdout and "started" in done.stdout
    subprocess.run(["sleep", "6"], check=True)
    assert not marker.exists()  # the background job was killed when its block ended

    readme.write_text("```sh\necho one\nfalse\necho never\n```\n")
    failed = run_blocks(readme)
    assert failed.returncode == 1
    assert "one" in failed.stdout and "never" not in failed.stdout.split("--- its output ---")[1]
    # a python block runs in the venv's interpreter; an exception fails it
    readme.write_text(
        "```python\nimport sys\nprint(sys.prefix)\n```\n\n```python\nraise SystemExit(3)\n```\n"
    )
    python = run_blocks(readme, "--venv", sys.prefix)
    assert python.returncode == 1 and sys.prefix in python.stdout and "(exit 3)" in python.stdout
    readme.write_text("```sh\nsleep 30\n```\n")
    timed_out = run_blocks(readme, "--timeout", "1")
    assert timed_out.returncode == 1 and "timed out after 1s" in timed_out.stdout

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
    # the serve block: the remote RM got its four allocations, the REST API saw them, the server stopped
    assert out.count("allocated task-") == 4, out
    assert '"[demo]default"' in out or "[demo]default" in out, out
    assert "yunikorn_scheduler" in out, out
    assert "korral: stopped" in out, out
    assert "Address already in use" not in out

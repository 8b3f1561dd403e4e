"""Machine instructions of one window of a bench script, counted by callgrind (valgrind).

The script runs again under ``valgrind --tool=callgrind --instr-atstart=no`` with ``--under-callgrind
LIBRARY`` added to its arguments; it loads LIBRARY with ctypes and calls ``cg_start()`` and
``cg_stop()`` around what it measures, so start-up and set-up are not counted. A fixed hash seed keeps
dict and set layouts, and so the count, the same run to run. Needs valgrind's headers and gcc.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TOGGLE_C = """#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_DUMP_STATS_AT("window"); CALLGRIND_STOP_INSTRUMENTATION; }
"""


def count_window(script: str, arguments: list[str]) -> tuple[int, str]:
    """Run ``script arguments --under-callgrind LIBRARY`` under callgrind: the instructions counted
    between its ``cg_start()`` and ``cg_stop()``, and what it printed."""
    if shutil.which("valgrind") is None or shutil.which("gcc") is None:
        sys.exit("--callgrind needs valgrind and gcc on the path")
    with tempfile.TemporaryDirectory() as work:
        source = Path(work, "toggle.c")
        source.write_text(TOGGLE_C, encoding="utf-8")
        library = Path(work, "toggle.so")
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
        out = Path(work, "callgrind.out")
        command = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
            sys.executable, script, *arguments, "--under-callgrind", str(library),
        ]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        printed = subprocess.run(
            command, check=True, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        ).stdout
        dumped = [path for path in Path(work).iterdir() if path.name.startswith("callgrind.out.")]
        for line in dumped[0].read_text(encoding="utf-8", errors="replace").splitlines() if dumped else []:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1]), printed
    sys.exit("callgrind wrote no counts")

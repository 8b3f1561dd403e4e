"""A ``korral serve`` process for the hostile suite: started with the flags a test names, its addresses
read from stdout, its whole log (stderr) kept for the test to read once it has stopped. The log is
read as it is written: a full pipe would block the server's logging (and the thread logging)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import attrs

KORRAL = [sys.executable, "-c", "from korral.cli import main; main()"]
WAIT = 60
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ \S+: ")


@attrs.define
class Served:
    process: subprocess.Popen[str]
    grpc: str = ""
    rest: str = ""
    log: str = ""
    lines: list[str] = attrs.Factory(list)
    reader: threading.Thread | None = None

    def read_log(self) -> None:
        assert self.process.stderr is not None
        self.reader = threading.Thread(
            target=lambda: self.lines.extend(self.process.stderr or ()), daemon=True
        )
        self.reader.start()

    def stop(self) -> str:
        """Stops the server (SIGTERM), checks it exits 0 and returns its log."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=WAIT)
        if self.reader is not None:
            self.reader.join(WAIT)
        self.log = "".join(self.lines)
        assert self.process.returncode == 0, self.log[-3000:]
        return self.log


@contextmanager
def korral_serve(*flags: str, rest: bool = False) -> Iterator[Served]:
    command = [*KORRAL, "serve", "--grpc", "127.0.0.1:0", "--log-level", "debug", *flags]
    if rest:
        command += ["--rest", "127.0.0.1:0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    served = Served(process)
    served.read_log()
    try:
        assert process.stdout is not None
        while not served.grpc or (rest and not served.rest):
            line = process.stdout.readline()
            if not line:  # it exited: its log says why
                process.wait(timeout=WAIT)
                if served.reader is not None:
                    served.reader.join(WAIT)
                raise AssertionError(
                    "korral serve exited before it listened: " + "".join(served.lines)[-3000:]
                )
            if found := re.search(r"gRPC SI listening on (\S+)", line):
                served.grpc = found.group(1)
            if found := re.search(r"REST API at (\S+)", line):
                served.rest = found.group(1)
        yield served
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=WAIT)

"""Configs parse after ``yaml`` is imported a second time, as pytest-cov's ``--cov=PACKAGE`` makes it:
libyaml's C parser keeps the first import's event and error classes (an extension module is
initialised once per process), and `make test` once failed every config on exactly that."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
import yaml, yaml._yaml  # the C parser, initialised with these classes
for name in [name for name in sys.modules if name == "yaml" or name.startswith("yaml.")]:
    if name != "yaml._yaml":
        del sys.modules[name]
from korral.errors import ConfigError
from korral.config.yaml_reader import read_yaml
assert read_yaml("partitions:\\n  - name: default\\n") == {"partitions": [{"name": "default"}]}
try:
    read_yaml("a: *")
except ConfigError as error:
    print("refused:", error)
"""


def test_a_second_import_of_yaml_breaks_neither_parsing_nor_its_errors() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused: invalid YAML"), done.stdout

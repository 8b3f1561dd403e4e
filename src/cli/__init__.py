"""The ``korral`` command line: validate-config, simulate, bench, stress, serve.

One module per command group, each adding its command to the group (``korral.cli.group.main``) when
imported; the option shapes they share are declared once (``korral.cli.options``). The product never
imports this package (tests/unit/test_layering.py); ``korral.__main__`` and the ``korral`` script do.
"""

from __future__ import annotations

import os

# gRPC's C core logs its own errors (a port in use: an "E1129 ... add_port.cc" line) on stderr, before
# korral's one-line message that says the same; it reads this once, when grpc is imported, which
# `import korral` does not do. GRPC_VERBOSITY=debug in the environment still shows them.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

# the imports below come after the environment above
from korral.cli import bench, serve, simulate, stress, validate
from korral.cli.config_input import (
    CONFIGMAP_KEY,
    naming,
    read_config,
    source_name,
    unwrap_configmap,
)
from korral.cli.group import fail, main, plural

__all__ = [
    "CONFIGMAP_KEY",
    "bench",
    "fail",
    "main",
    "naming",
    "plural",
    "read_config",
    "serve",
    "simulate",
    "source_name",
    "stress",
    "unwrap_configmap",
    "validate",
]

if __name__ == "__main__":  # pragma: no cover
    main()

"""The ``korral`` command line: validate-config, simulate, bench, stress, serve.

One module per command group, each adding its command to the group (``korral.cli.group.main``) when
imported; the option shapes they share are declared once (``korral.cli.options``). The product never
imports this package (tests/unit/test_layering.py); ``korral.__main__`` and the ``korral`` script do.
"""

from __future__ import annotations

from korral.cli import bench, serve, simulate, stress, validate
from korral.cli.config_input import CONFIGMAP_KEY, naming, read_config, source_name, unwrap_configmap
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

"""``python -m korral`` and the ``korral`` command: the command line, or how to install it.

The command line needs the ``cli`` extra (click, rich, matplotlib); ``import korral`` does not. This
launcher imports nothing of them itself, so that a missing extra gets one clear sentence, not a
traceback from deep inside the first import.
"""

from __future__ import annotations

import sys
from importlib.util import find_spec

CLI_DEPENDENCIES = ("click", "rich", "matplotlib")


def missing_cli_dependencies() -> list[str]:
    """The command line's dependencies that cannot be imported here (found, not imported: cheap)."""
    return [name for name in CLI_DEPENDENCIES if not _installed(name)]


def _installed(name: str) -> bool:
    try:
        return find_spec(name) is not None
    except ImportError:  # a finder that refuses the name, or a broken parent package
        return False


def main() -> None:
    missing = missing_cli_dependencies()
    if missing:
        print(
            f"korral's command line needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'}"
            " not installed: pip install 'korral[cli]'",
            file=sys.stderr,
        )
        sys.exit(1)
    from korral.cli import main as cli

    cli(prog_name="korral")


if __name__ == "__main__":
    main()

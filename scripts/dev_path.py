"""Put the clone's ``src/`` on this virtual environment's path as the regular package ``korral``.

``make`` runs it with the venv's python after the editable install. The editable install alone
resolves ``korral`` through a meta-path finder that Python consults only after every ``sys.path``
entry: a script saved beside a clone folder named ``korral`` would import that folder as a namespace
package instead (the script's own folder is the first path entry). A *regular* package found anywhere
on ``sys.path`` wins over a namespace portion, so this writes ``<venv>/korral-src/korral -> src`` and a
``.pth`` that adds ``<venv>/korral-src`` to the path: the clone's folder, whatever it is called and
wherever the script lives, can no longer shadow the package, and the tests still run the code being
edited (the link points at ``src/`` itself). ``make clean`` removes both with the venv.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PTH_NAME = "korral-src.pth"


def install(prefix: Path, site_packages: Path, src: Path = SRC) -> Path:
    """Link ``prefix/korral-src/korral`` to ``src`` and put its folder on the path; return the link."""
    holder = prefix / "korral-src"
    holder.mkdir(parents=True, exist_ok=True)
    link = holder / "korral"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(src, target_is_directory=True)
    (site_packages / PTH_NAME).write_text(f"{holder}\n", encoding="utf-8")
    return link


def main() -> int:
    if sys.prefix == sys.base_prefix:
        print("dev_path.py: run it with a virtual environment's python (make does)", file=sys.stderr)
        return 1
    install(Path(sys.prefix), Path(sysconfig.get_path("purelib")))
    return 0


if __name__ == "__main__":
    sys.exit(main())

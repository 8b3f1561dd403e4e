"""The development install: a folder named ``korral`` beside a script never shadows the package.

A newcomer saves the README's example as ``example.py`` next to the clone (``~/code/korral`` and
``~/code/example.py``) and runs it with the clone's ``.venv/bin/python``. Python puts the script's
folder first on its path; with only setuptools' editable finder (consulted after every path entry) it
imported the clone's folder as an empty namespace package: ``module 'korral' has no attribute 'start'``.
"""

from __future__ import annotations

import os
import re
import site
import subprocess
import sys
from pathlib import Path

import korral

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def readme_python_example() -> str:
    """The README's first Python block: the example a newcomer copies."""
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)
    assert blocks, "README.md has no python block"
    return str(blocks[0])


def beside_a_clone_named_korral(tmp_path: Path) -> Path:
    """``tmp/code/korral`` (this clone) and ``tmp/code/example.py`` (the README's example)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "korral").symlink_to(ROOT, target_is_directory=True)
    example = code / "example.py"
    example.write_text(
        readme_python_example() + "\nprint('korral from', korral.__file__)\n", encoding="utf-8"
    )
    return example


def test_the_readme_example_runs_beside_a_clone_named_korral(tmp_path: Path) -> None:
    # the interpreter and path the tests run with: make's venv (or PYTHONPATH to a link to src)
    example = beside_a_clone_named_korral(tmp_path)
    done = subprocess.run(
        [sys.executable, example.name], cwd=example.parent, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "ApplicationInfo(application_id='app-1'" in done.stdout
    # and it is the code being edited, not a copy
    loaded = done.stdout.rsplit("korral from ", 1)[1].strip()
    assert Path(loaded).resolve() == (ROOT / "src" / "__init__.py").resolve()
    assert Path(korral.__file__).resolve() == (ROOT / "src" / "__init__.py").resolve()


def test_make_s_path_entry_beats_the_folder_in_a_fresh_venv(tmp_path: Path) -> None:
    """What ``make`` sets up (scripts/dev_path.py), in a venv of its own: before, the folder wins."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # korral's dependencies from the interpreter running the tests (plain path entries: their .pth
    # files, an editable finder among them, are not run)
    (Path(purelib) / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n", encoding="utf-8")
    example = beside_a_clone_named_korral(tmp_path)
    probe = example.parent / "probe.py"
    probe.write_text("import korral\nprint(korral.__file__, hasattr(korral, 'start'))\n", encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}

    def run(script: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [python, script.name], cwd=script.parent, capture_output=True, text=True, env=env, timeout=120
        )

    # without it: the clone's folder is imported as a namespace package (no __file__, no start)
    assert run(probe).stdout.split() == ["None", "False"]

    subprocess.run([python, ROOT / "scripts" / "dev_path.py"], check=True, timeout=60)
    assert (venv / "korral-src" / "korral").resolve() == (ROOT / "src").resolve()
    assert run(probe).stdout.split() == [str(venv / "korral-src" / "korral" / "__init__.py"), "True"]
    done = run(example)
    assert done.returncode == 0, done.stderr
    assert "ApplicationInfo(application_id='app-1'" in done.stdout


def test_dev_path_refuses_an_interpreter_outside_a_venv() -> None:
    base = Path(sys.base_prefix) / "bin" / "python3"
    done = subprocess.run(
        [base, "-I", ROOT / "scripts" / "dev_path.py"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert "virtual environment" in done.stderr


def test_make_run_installs_only_the_command_line_and_quietly(tmp_path: Path) -> None:
    """``make run`` on a fresh clone (dry run): the cli extra only, no test tools or Ray, no notices."""
    for name in ("Makefile", "pyproject.toml", "scripts/dev_path.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    installs = [line for line in done.stdout.splitlines() if " install " in line]
    assert installs and all("--quiet" in line for line in installs), installs
    # setuptools' "Editable installation" box is a UserWarning of the build backend
    assert all("PYTHONWARNINGS=ignore::UserWarning" in line for line in installs), installs
    assert [line for line in installs if "-e " in line] == [
        line for line in installs if line.endswith("-e '.[cli]'")
    ], installs
    assert "dev_path.py" in done.stdout
    assert done.stdout.rstrip().endswith(".venv/bin/korral simulate")

"""What an embedding program and a command-line user get from the installed distribution.

A program that only calls ``korral.start()`` installs korral without the ``cli`` extra: nothing but
the command line may need click, rich or matplotlib. Each check runs in a fresh interpreter in which
those three cannot be imported, as on a machine that never installed them.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import korral

CLI_ONLY = ("click", "rich", "matplotlib")


def not_installed(modules: tuple[str, ...]) -> str:
    """Code for a finder placed first that refuses ``modules``, as if they were not installed."""
    return textwrap.dedent(
        f"""
        import sys

        class NotInstalled:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {modules!r}:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
                return None

        sys.meta_path.insert(0, NotInstalled())
        """
    )


def run_without(
    modules: tuple[str, ...], code: str, cwd: Path, *arguments: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", not_installed(modules) + textwrap.dedent(code), *arguments],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def run_without_cli_extra(code: str, cwd: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return run_without(CLI_ONLY, code, cwd, *arguments)


@pytest.mark.slow
def test_the_core_schedules_without_the_command_lines_dependencies(tmp_path: Path) -> None:
    done = run_without_cli_extra(
        """
        import pkgutil, importlib
        import korral
        from korral import si, testing

        # every module of the product and of the harness, except the command line's own
        command_line = {
            "korral.harness.simulate.cluster",
            "korral.harness.simulate.report",
            "korral.harness.simulate.plot",
            "korral.harness.simulate.runs",
            "korral.harness.simulate.history",
            "korral.__main__",
            "korral.cli",
            "korral.cli.simulated",
        }
        for module in pkgutil.walk_packages(korral.__path__, "korral."):
            # the korral.cli package, every module of it, is the command line's
            if module.name not in command_line and not module.name.startswith("korral.cli."):
                importlib.import_module(module.name)

        rm = testing.RecordingRM("rm1")
        with korral.start() as core:
            core.register_resource_manager(si.RegisterResourceManagerRequest(rm_id="rm1", config=""), rm)
            core.update_node(testing.nodes("rm1", ["node-1"], {"memory": 8_000_000_000, "vcore": 4000}))
            core.update_application(
                testing.applications("rm1", {"app-1": "root.default"}, tags={"namespace": "default"})
            )
            core.update_allocation(testing.asks("rm1", "app-1", 3, {"memory": 1_000_000_000, "vcore": 500}))
            core.wait_until_idle()
            print(len(core.application("[rm1]default", "app-1").allocations))
        print(sorted(name for name in sys.modules if name.split(".")[0] in ("click", "rich", "matplotlib")))
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["3", "[]"], done.stdout


def test_the_korral_command_names_the_extra_to_install_when_it_is_missing(tmp_path: Path) -> None:
    done = run_without_cli_extra(
        """
        import runpy
        sys.argv[0] = "korral"
        runpy.run_module("korral", run_name="__main__")
        """,
        tmp_path,
        "--version",
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert done.stderr == (
        "korral's command line needs click, rich, matplotlib, which are not installed: "
        "pip install 'korral[cli]'\n"
    )


SERVE_EXTRA = "serving the REST API needs aiohttp, which is not installed: pip install 'korral[serve]'"


def test_korral_serve_rest_without_the_serve_extra_is_one_line_naming_the_install(tmp_path: Path) -> None:
    done = run_without(
        ("aiohttp",),
        """
        import runpy
        sys.argv[0] = "korral"
        runpy.run_module("korral", run_name="__main__")
        """,
        tmp_path,
        "serve",
        "--grpc",
        "127.0.0.1:0",
        "--rest",
        "127.0.0.1:0",
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout == ""  # refused before anything listened
    assert done.stderr == SERVE_EXTRA + "\n"


def test_core_serve_rest_without_the_serve_extra_raises_naming_the_install(tmp_path: Path) -> None:
    done = run_without(
        ("aiohttp",),
        """
        import korral

        with korral.start() as core:
            try:
                core.serve_rest("127.0.0.1:0")
            except korral.MissingExtraError as error:
                print(isinstance(error, ImportError), error)
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"True {SERVE_EXTRA}\n"


def test_the_command_lines_dependencies_are_an_extra_not_the_core_install() -> None:
    requirements = importlib.metadata.requires("korral") or []
    base = {r.split(";")[0].split(">")[0].split("<")[0].strip() for r in requirements if ";" not in r}
    cli = {r.split(">")[0].strip() for r in requirements if 'extra == "cli"' in r}
    # grpcio and protobuf: korral.connect and Core.serve_grpc are part of the core's API
    # msgspec: the records built once per ask and per allocation (model.allocation)
    assert base == {"pykka", "pyyaml", "attrs", "msgspec", "prometheus-client", "grpcio", "protobuf"}
    assert cli == set(CLI_ONLY)
    # the console script goes through the launcher that can say so
    scripts = {e.name: e.value for e in importlib.metadata.entry_points(group="console_scripts")}
    assert scripts["korral"] == "korral.__main__:main"


def test_version_comes_from_the_installed_metadata_and_type_hints_are_marked() -> None:
    assert korral.__version__ == importlib.metadata.version("korral")
    assert (Path(korral.__file__).parent / "py.typed").is_file()


def test_every_package_of_the_source_tree_is_in_the_distribution() -> None:
    # pyproject lists the packages by name (src/ is mapped to korral): one left out is missing from a
    # wheel or a non-editable install, though an editable one still finds it
    import tomllib

    root = Path(__file__).resolve().parents[2]
    setuptools = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    source = root / "src"
    packages = {
        ".".join(("korral", *init.parent.relative_to(source).parts))
        for init in source.rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert {"korral", "korral.cli", "korral.harness.stress", "korral.model"} <= packages
    assert sorted(packages - set(setuptools["packages"])) == []
    assert sorted(set(setuptools["packages"]) - packages) == []  # nor one that is not there

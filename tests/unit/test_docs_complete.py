"""The docs are complete against the code, read from the source tree as it is now: every public name
and ``Core`` method in docs/api.md, every snapshot field in its class's row, every module in
docs/architecture.md's module layout, and every test file the docs cite exists. A module or method
added anywhere fails here until the docs name it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import attrs
import pytest

import korral
from korral.info import AskInfo

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
API = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
# generated from si.proto (make proto), documented as "the gRPC proto and stubs"
GENERATED = {"si/si_pb2.py", "si/si_pb2_grpc.py"}


def public_core_methods() -> list[str]:
    """``Core``'s public methods, read from src/core.py (not from an import that may be stale)."""
    tree = ast.parse((SRC / "core.py").read_text(encoding="utf-8"))
    core = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Core")
    return [
        node.name
        for node in core.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_")
    ]


def test_api_md_names_every_public_name() -> None:
    missing = [name for name in korral.__all__ if not re.search(rf"\b{re.escape(name)}\b", API)]
    assert not missing, f"docs/api.md does not name korral.{missing}"


def test_api_md_names_every_public_core_method() -> None:
    methods = public_core_methods()
    assert "register_resource_manager" in methods and "wait_until_idle" in methods
    missing = [name for name in methods if not re.search(rf"`{name}\(|\b{name}\(", API)]
    assert not missing, f"docs/api.md does not name Core.{missing}"


def snapshot_classes() -> list[type]:
    named = [getattr(korral, name) for name in korral.__all__]
    return [
        cls for cls in named if isinstance(cls, type) and attrs.has(cls) and cls.__name__.endswith("Info")
    ] + [AskInfo]


@pytest.mark.parametrize("cls", snapshot_classes(), ids=lambda cls: cls.__name__)
def test_api_md_lists_every_field_of_each_snapshot_class(cls: type) -> None:
    # the class's own row of the snapshot table (UserUsageInfo / GroupUsageInfo share one)
    row = next(
        (
            line
            for line in API.splitlines()
            if line.startswith("|") and f"`{cls.__name__}`" in line.split("|")[1]  # its first cell
        ),
        None,
    )
    assert row is not None, f"docs/api.md has no table row for {cls.__name__}"
    missing = [field.name for field in attrs.fields(cls) if f"`{field.name}`" not in row]
    assert not missing, f"docs/api.md's {cls.__name__} row lacks {missing}"


def layout_paths() -> set[str]:
    """The module paths the layout's tree names, from its indentation (``dir/`` lines open a level)."""
    block = ARCHITECTURE.split("## Module layout", 1)[1].split("```", 2)[1]
    paths: set[str] = set()
    stack: list[tuple[int, str]] = []
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        listed = re.match(r"((?:[\w.]+\.py|\w+/)(?:, (?:[\w.]+\.py|\w+/))*)", line.strip())
        if listed is None:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        prefix = "".join(name for _, name in stack[1:])  # the first level is korral/ itself
        for name in listed.group(1).split(", "):
            if name.endswith("/"):
                paths.add(prefix + name)
                stack.append((indent, name))
            else:
                paths.add(prefix + name)
    return paths


def source_modules() -> list[str]:
    modules = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if path.name == "__init__.py" and relative != "__init__.py":
            continue  # a package is listed by its folder
        modules.append(relative)
    return modules


def test_the_module_layout_lists_every_module() -> None:
    listed = layout_paths()
    assert {
        "core.py",
        "model/partition/composed.py",
        "actors/partition/actor.py",
    } <= listed  # the parse works
    missing = [
        module
        for module in source_modules()
        if module not in listed and not (module in GENERATED and "si/" in listed)
    ]
    assert not missing, f"docs/architecture.md's module layout lacks {missing}"
    # and names nothing that is not there
    gone = [path for path in listed if path != "korral/" and not (SRC / path).exists()]
    assert not gone, f"docs/architecture.md's module layout names {gone}, which do not exist"


def test_every_test_file_the_docs_cite_exists() -> None:
    texts = [API, ARCHITECTURE] + [
        (ROOT / name).read_text(encoding="utf-8") for name in ("README.md", "bench/README.md")
    ]
    cited = sorted({path for text in texts for path in re.findall(r"\btests/[\w/]+\.py\b", text)})
    assert cited
    missing = [path for path in cited if not (ROOT / path).is_file()]
    assert not missing, f"the docs cite {missing}, which do not exist"

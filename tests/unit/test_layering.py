"""The layering of the package, checked on the source: what may import what.

- The product (``korral`` outside ``korral.harness``) never imports the harness; only the command line
  (the ``korral.cli`` package, ``korral.cli.simulated``, ``korral.__main__``), which fronts
  ``korral stress`` and ``korral bench``, may; and nothing but the command line imports it.
- ``korral.model`` and ``korral.policies`` are plain synchronous code: no actors, no pykka, no core.
- The product has no import circle at run time, neither between its modules nor between its layers
  (``korral.model``, ``korral.config``, ``korral.server``, ... and each module beside them, such as
  ``korral.core``): a circle makes the order of imports matter and no layer readable on its own.
  Imports only for type checking (under ``if TYPE_CHECKING:``) do not run and do not count.

Every import form counts: ``import a.b``, ``from a import b`` (also a submodule ``a.b``), relative
imports, and ``__import__`` / ``importlib.import_module`` with a literal name, at any depth (inside
functions too).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import korral

SRC = Path(korral.__file__).parent
HARNESS = "korral.harness"
# the command line: the korral.cli package (every module of it), and these beside it
COMMAND_LINE = {"korral.cli", "korral.cli.simulated", "korral.__main__"}


def is_command_line(module: str) -> bool:
    return module in COMMAND_LINE or within(module, "korral.cli")


PLAIN = ("korral.model", "korral.policies")
NOT_IN_PLAIN = ("korral.actors", "pykka", "korral.core", "korral.server", HARNESS)


def module_name(path: Path) -> str:
    parts = ("korral", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, *, is_package: bool = False) -> set[str]:
    """Every module name ``source`` (the text of ``module``) may import."""
    names: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join([*base_parts, node.module] if node.module else base_parts)
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)  # may be a submodule
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = (
                func.id
                if isinstance(func, ast.Name)
                else func.attr
                if isinstance(func, ast.Attribute)
                else ""
            )
            if called in ("__import__", "import_module") and isinstance(node.args[0].value, str):
                names.add(node.args[0].value)
    return names


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(module: str, imports: set[str]) -> list[str]:
    found: list[str] = []
    if not within(module, HARNESS) and not is_command_line(module):
        found += [f"{module} imports the harness: {name}" for name in imports if within(name, HARNESS)]
    if not is_command_line(module):
        found += [
            f"{module} imports the command line: {name}"
            for name in imports
            if any(within(name, command_line) for command_line in COMMAND_LINE)
        ]
    if any(within(module, plain) for plain in PLAIN):
        found += [
            f"{module} (plain code) imports {name}"
            for name in imports
            if any(within(name, banned) for banned in NOT_IN_PLAIN)
        ]
    return sorted(set(found))


def source_modules() -> list[tuple[str, Path]]:
    return sorted((module_name(path), path) for path in SRC.rglob("*.py") if "__pycache__" not in path.parts)


def test_the_source_tree_is_where_the_check_looks() -> None:
    modules = dict(source_modules())
    assert {"korral.core", "korral.model.partition.composed", "korral.harness.stress", "korral.cli"} <= set(
        modules
    )
    assert {"korral.cli.bench", "korral.cli.stress", "korral.cli.serve"} <= set(modules)


@pytest.mark.parametrize(("module", "path"), source_modules(), ids=lambda value: str(value))
def test_module_respects_the_layering(module: str, path: Path) -> None:
    imports = imported_modules(path.read_text(), module, is_package=path.name == "__init__.py")
    assert violations(module, imports) == []


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("korral.actors.node", "from korral.harness import faults", "imports the harness"),
        ("korral.actors.node", "from ..harness.faults import KNOWN", "imports the harness"),
        ("korral.core", "def f():\n    import korral.harness.stress", "imports the harness"),
        ("korral.core", "__import__('korral.harness.faults')", "imports the harness"),
        ("korral.model.queue", "import pykka", "(plain code) imports pykka"),
        ("korral.policies.placement", "from korral.actors.messages import Tick", "(plain code) imports"),
        ("korral.model.view", "from ..actors import base", "(plain code) imports korral.actors"),
        ("korral.core", "from korral.cli.config_input import read_config", "imports the command line"),
        ("korral.harness.stress", "from korral.cli import plural", "imports the command line"),
        ("korral.server.rest.server", "import korral.cli.simulated", "imports the command line"),
    ],
)
def test_the_check_catches_a_forbidden_import(module: str, source: str, expected: str) -> None:
    found = violations(module, imported_modules(source, module))
    assert found and all(expected in problem for problem in found), found


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("korral.cli", "from korral.harness.stress import StressRun"),
        ("korral.cli.bench_runs", "from korral.harness.benchmark import runner"),
        ("korral.cli.simulated", "from korral.cli import plural"),
        ("korral.harness.stress", "from korral.harness import faults\nimport pykka"),
        ("korral.model.queue", "from korral.policies.sorting import SORT_FIFO"),
        ("korral.actors.node", "import pykka\nfrom korral.model.node import Node"),
    ],
)
def test_the_check_allows_what_the_layering_allows(module: str, source: str) -> None:
    assert violations(module, imported_modules(source, module)) == []


# ---- no import circle in the product -----------------------------------------------------------------


def in_product(module: str) -> bool:
    return not within(module, HARNESS) and not is_command_line(module)


def is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def run_time_source(source: str) -> str:
    """``source`` without its ``if TYPE_CHECKING:`` blocks (their ``else`` kept)."""

    class DropTypeOnly(ast.NodeTransformer):
        def visit_If(self, node: ast.If) -> Any:
            if is_type_checking(node):
                return node.orelse or ast.Pass()
            return self.generic_visit(node)

    return ast.unparse(DropTypeOnly().visit(ast.parse(source)))


def run_time_imports(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``source`` imports when it runs: ``from a import b`` is ``a.b``
    when that is a module, else ``a``; the rest as ``imported_modules`` reads them."""
    package = module if is_package else module.rpartition(".")[0]
    names: set[str] = set()
    tree = ast.parse(run_time_source(source))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join([*base_parts, node.module] if node.module else base_parts)
            else:
                base = node.module or ""
            names.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names)
    names |= imported_modules(source_without_from_imports(tree), module, is_package=is_package)
    found: set[str] = set()
    for name in names:
        while name and name not in known:  # a name inside a module: the module
            name = name.rpartition(".")[0]
        if name:
            found.add(name)
    return found


def source_without_from_imports(tree: ast.Module) -> str:
    class DropFromImports(ast.NodeTransformer):
        def visit_ImportFrom(self, node: ast.ImportFrom) -> Any:
            return ast.Pass()

    return ast.unparse(DropFromImports().visit(tree))


def run_time_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """Which product module imports which at run time (at any depth: inside functions too). Importing
    ``korral.a.b`` imports ``korral.a`` first (its ``__init__`` runs), so that counts too, unless the
    importer is inside ``korral.a`` already; the root package ``korral`` holds every module, so it
    counts only when named."""
    known = set(sources)
    graph: dict[str, set[str]] = {}
    for module, (source, is_package) in sources.items():
        if not in_product(module):
            continue
        targets: set[str] = set()
        for name in run_time_imports(source, module, is_package, known):
            parts = name.split(".")
            for depth in range(2, len(parts)):
                package = ".".join(parts[:depth])
                if package in known and not within(module, package):
                    targets.add(package)
            targets.add(name)
        graph[module] = {target for target in targets if in_product(target) and target != module}
    return graph


def layer(module: str) -> str:
    """``korral.model.queue`` -> ``korral.model``; ``korral.core`` -> itself; ``korral`` -> itself."""
    return ".".join(module.split(".")[:2])


def layer_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    layers: dict[str, set[str]] = {}
    for module, targets in graph.items():
        layers.setdefault(layer(module), set()).update(
            layer(target) for target in targets if layer(target) != layer(module)
        )
    return layers


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's circles: each strongly connected set of two or more, one path round it shown."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        order[node] = low[node] = len(order)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in order:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], order[target])
        if low[node] == order[node]:
            members = []
            while True:
                member = stack.pop()
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for node in sorted(graph):
        if node not in order:
            visit(node)
    return found


def product_sources() -> dict[str, tuple[str, bool]]:
    return {module: (path.read_text(), path.name == "__init__.py") for module, path in source_modules()}


def test_the_product_has_no_import_circle_between_modules() -> None:
    graph = run_time_graph(product_sources())
    assert {"korral.core", "korral.model.queue", "korral.server.rest.api"} <= set(graph)
    assert circles(graph) == []


def test_the_product_has_no_import_circle_between_layers() -> None:
    layers = layer_graph(run_time_graph(product_sources()))
    assert {"korral.model", "korral.config", "korral.policies", "korral.core"} <= set(layers)
    assert "korral.config" in layers["korral.model"]  # the check sees the layers' imports
    assert circles(layers) == []


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        (  # two modules, one import inside a function
            {
                "korral.a": ("import korral.b", False),
                "korral.b": ("def f():\n    from korral import a", False),
            },
            [["korral.a", "korral.b"]],
        ),
        (  # through a package's __init__, which imports its module
            {
                "korral.p": ("from korral.p.m import X", True),
                "korral.p.m": ("import korral.q", False),
                "korral.q": ("from korral.p.n import Y", False),
                "korral.p.n": ("", False),
            },
            [["korral.p", "korral.p.m", "korral.q"]],
        ),
        (  # a type-only import does not run
            {
                "korral.a": ("import korral.b", False),
                "korral.b": (
                    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import korral.a",
                    False,
                ),
            },
            [],
        ),
    ],
)
def test_the_circle_check_finds_module_circles(sources: dict[str, tuple[str, bool]], expected: list) -> None:
    assert circles(run_time_graph(sources)) == expected


def test_the_circle_check_finds_layer_circles_of_modules_apart() -> None:
    sources = {
        "korral.config": ("", True),
        "korral.config.validator": ("from korral.model import resource", False),
        "korral.model": ("", True),
        "korral.model.resource": ("", False),
        "korral.model.partition.composed": ("from korral.config.schema import PartitionConfig", False),
        "korral.config.schema": ("", False),
        "korral.harness.reference": ("import korral.model.partition.composed", False),
    }
    graph = run_time_graph(sources)
    assert circles(graph) == []  # no module circle...
    assert circles(layer_graph(graph)) == [["korral.config", "korral.model"]]  # ...but a layer circle
    assert "korral.harness.reference" not in graph  # the harness is not the product


# ---- pykka's public surface only -------------------------------------------------------------------

# The hooks pykka documents for implementors of new actor types: overridden, never called from outside.
PYKKA_HOOKS = frozenset({"_create_actor_inbox", "_create_future", "_start_actor_loop"})
# pykka's instance attributes that no class dict lists (set in its constructors)
PYKKA_PRIVATE_ATTRIBUTES = frozenset(
    {"_actor_ref", "_actor_weakref", "_get_hook", "_get_hook_result", "_actor_proxies", "_callable_proxies"}
)


def pykka_private_names() -> frozenset[str]:
    """Every private name of pykka's public classes and of ``pykka.messages``, but the hooks."""
    import pykka
    import pykka.messages

    classes = (
        pykka.Actor,
        pykka.ThreadingActor,
        pykka.ActorRef,
        pykka.ActorRegistry,
        pykka.Future,
        pykka.ThreadingFuture,
        pykka.ActorProxy,
        pykka.CallableProxy,
    )
    names = {name for cls in classes for name in vars(cls)}
    names |= set(vars(pykka.messages))
    private = {name for name in names if name.startswith("_") and not name.startswith("__")}
    return frozenset((private | PYKKA_PRIVATE_ATTRIBUTES) - PYKKA_HOOKS - {"_abc_impl"})


def pykka_private_uses(source: str, private: frozenset[str]) -> list[str]:
    """Where ``source`` imports a private pykka module or name, or reads, writes, calls or overrides
    a private name of pykka's (the documented hooks may only be overridden)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [f"{line}: import {a.name}" for a in node.names if a.name.startswith("pykka._")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pykka"):
            module = node.module or ""
            if module.startswith("pykka._") or any(a.name.startswith("_") for a in node.names):
                found.append(f"{line}: from {module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Attribute):
            if node.attr in private:
                found.append(f"{line}: .{node.attr}")
            elif node.attr in PYKKA_HOOKS and not (isinstance(node.ctx, ast.Store)):
                found.append(f"{line}: .{node.attr} called (a hook is pykka's to call)")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in private:
            found.append(f"{line}: def {node.name} overrides pykka's")
    return found


def test_pykka_private_names_are_known() -> None:
    private = pykka_private_names()
    # what the runtime once used: the check must know them, or it proves nothing
    assert {"_stop", "_handle_receive", "_handle_failure", "_actor_loop_running", "_actor_refs"} <= private
    assert "_ActorStop" in private


def reaches_actors(module: str, path: Path) -> bool:
    """Whether a module can hold a pykka actor or ref: it imports pykka or korral's actors (a module
    that does neither, say the gRPC server with a ``_stop`` of its own, is not looked at)."""
    imports = imported_modules(path.read_text(), module, is_package=path.name == "__init__.py")
    return any(within(name, "pykka") or within(name, "korral.actors") for name in imports)


def test_the_pykka_check_looks_at_the_runtime() -> None:
    looked_at = {module for module, path in source_modules() if reaches_actors(module, path)}
    assert {
        "korral.actors.base",
        "korral.actors.loop",
        "korral.actors.runtime",
        "korral.actors.simulated",
        "korral.core",
    } <= looked_at


@pytest.mark.parametrize(("module", "path"), source_modules(), ids=lambda value: str(value))
def test_module_uses_only_pykkas_public_surface(module: str, path: Path) -> None:
    source = path.read_text()
    assert "pykka._" not in source, f"{module} names a private pykka module"
    if reaches_actors(module, path):
        found = pykka_private_uses(source, pykka_private_names())
        assert not found, f"{module} uses pykka's private names: {found}"


@pytest.mark.parametrize(
    "source,expected",
    [
        ("from pykka._envelope import Envelope", "from pykka._envelope"),
        ("import pykka._actor", "import pykka._actor"),
        ("from pykka.messages import _ActorStop", "from pykka.messages"),
        ("pykka.ActorRegistry._actor_refs.append(ref)", "._actor_refs"),
        ("self._stop()", "._stop"),
        ("actor._handle_receive(message)", "._handle_receive"),
        ("class A:\n    def _actor_loop_running(self): pass", "def _actor_loop_running"),
        ("actor._start_actor_loop()", "called"),
        ("ref._actor_weakref()", "._actor_weakref"),
    ],
)
def test_the_pykka_check_catches_a_private_use(source: str, expected: str) -> None:
    found = pykka_private_uses(source, pykka_private_names())
    assert any(expected in item for item in found), found


def test_the_pykka_check_allows_the_documented_hooks() -> None:
    source = (
        "class A:\n    @staticmethod\n    def _create_actor_inbox(): pass\n"
        "    def _start_actor_loop(self): pass\n"
    )
    assert pykka_private_uses(source, pykka_private_names()) == []

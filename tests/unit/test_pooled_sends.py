"""A pooled actor sends with its own ``tell`` (its pool's outbox), never through a handle directly.

``Handle.tell`` delivers at once from every thread; a pooled actor's ``self.tell(target, message)``
holds the message in its pool's outbox until the worker's run is over. A pooled actor that mixed the
two could have a later message overtake an earlier one to the same receiver, so the source of every
pooled actor class (node, application and queue actors, and the harness's planted variants) is
checked: no ``<handle>.tell(...)`` inside one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import korral

SRC = Path(korral.__file__).parent
# the pooled actor classes, and (by name) every class deriving from one of them in the package
POOLED_BASES = {"PoolActor", "RetiringActor"}


def _classes() -> list[tuple[Path, ast.ClassDef]]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        found.extend((path, node) for node in ast.walk(tree) if isinstance(node, ast.ClassDef))
    return found


def _base_names(node: ast.ClassDef) -> set[str]:
    names = set()
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.add(base.id)
        elif isinstance(base, ast.Attribute):
            names.add(base.attr)
    return names


def pooled_classes() -> list[tuple[Path, ast.ClassDef]]:
    classes = _classes()
    pooled = set(POOLED_BASES)
    grew = True
    while grew:  # derived classes of derived classes, across modules
        grew = False
        for _, node in classes:
            if node.name not in pooled and _base_names(node) & pooled:
                pooled.add(node.name)
                grew = True
    return [(path, node) for path, node in classes if node.name in pooled - POOLED_BASES]


def test_the_pooled_actors_are_found() -> None:
    names = {node.name for _, node in pooled_classes()}
    assert {"NodeActor", "ApplicationActor"} <= names, names


def test_no_pooled_actor_tells_through_a_handle() -> None:
    direct = []
    for path, node in pooled_classes():
        for call in ast.walk(node):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "tell"
                and not (isinstance(call.func.value, ast.Name) and call.func.value.id == "self")
            ):
                where = f"{path.relative_to(SRC)}:{call.lineno} {node.name}"
                direct.append(f"{where}: {ast.unparse(call.func)}(...)")
    assert not direct, "send with self.tell(target, message): " + "; ".join(direct)

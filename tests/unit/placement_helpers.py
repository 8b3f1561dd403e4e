"""Fakes and builders for the placement rule tests (test_placement_*.py): a queue tree, rules, requests."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from korral.config.schema import FilterConfig, PlacementRuleConfig
from korral.policies.acl import ACL
from korral.policies.placement import (
    NO_RULE_MATCHED,
    Placement,
    PlacementError,
    PlacementManager,
    PlacementQueue,
    PlacementRequest,
    QueueLookup,
)

# --- fakes --------------------------------------------------------------------------------------------------


@dataclass(eq=False)
class FakeQueue:
    path: str
    is_leaf: bool
    parent: FakeQueue | None = None
    is_draining: bool = False
    submit_acl: ACL = field(default_factory=ACL.nobody)
    admin_acl: ACL = field(default_factory=ACL.nobody)


class FakeTree:
    """A queue tree from leaf paths; every proper prefix of a path is a parent queue."""

    def __init__(
        self,
        leaves: tuple[str, ...] = (),
        parents: tuple[str, ...] = (),
        submit: Mapping[str, str] | None = None,
        admin: Mapping[str, str] | None = None,
        draining: tuple[str, ...] = (),
    ) -> None:
        self.queues: dict[str, FakeQueue] = {"root": FakeQueue("root", is_leaf=False)}
        for path, leaf in [*((p, False) for p in parents), *((p, True) for p in leaves)]:
            parts = path.split(".")
            for depth in range(2, len(parts) + 1):
                sub = ".".join(parts[:depth])
                if sub not in self.queues:
                    is_leaf = leaf and depth == len(parts)
                    self.queues[sub] = FakeQueue(
                        sub, is_leaf, parent=self.queues[".".join(parts[: depth - 1])]
                    )
        for path, text in (submit or {}).items():
            self.queues[path].submit_acl = ACL.parse(text)
        for path, text in (admin or {}).items():
            self.queues[path].admin_acl = ACL.parse(text)
        for path in draining:
            self.queues[path].is_draining = True

    def get_queue(self, path: str) -> PlacementQueue | None:
        return self.queues.get(path)


OPEN = {"root": "*"}


def tree(
    *leaves: str, parents: tuple[str, ...] = (), submit: Mapping[str, str] = OPEN, **kw: object
) -> FakeTree:
    return FakeTree(leaves=leaves, parents=parents, submit=submit, **kw)  # type: ignore[arg-type]


def rule(
    name: str,
    *,
    create: bool = False,
    value: str = "",
    parent: PlacementRuleConfig | None = None,
    filter: FilterConfig | None = None,
) -> PlacementRuleConfig:
    return PlacementRuleConfig(
        name=name, create=create, value=value, parent=parent, filter=filter or FilterConfig()
    )


def req(
    user: str = "developer",
    queue: str = "",
    groups: tuple[str, ...] = (),
    tags: Mapping[str, str] | None = None,
) -> PlacementRequest:
    return PlacementRequest("app-1", queue, user, groups, dict(tags or {}))


def placed(path: str, create: bool, rule_name: str) -> Placement:
    return Placement(queue_path=path, create=create, rule=rule_name)


@dataclass(frozen=True)
class Rejected:
    match: str = NO_RULE_MATCHED


Expected = Placement | Rejected


def check(
    rules: tuple[PlacementRuleConfig, ...], queues: QueueLookup, request: PlacementRequest, want: Expected
) -> None:
    manager = PlacementManager.build(rules)
    if isinstance(want, Rejected):
        with pytest.raises(PlacementError) as info:
            manager.place(request, queues)
        assert want.match in info.value.reason
        assert str(info.value) == info.value.reason
    else:
        assert manager.place(request, queues) == want


def cases(*params: object) -> pytest.MarkDecorator:
    return pytest.mark.parametrize(("rules", "queues", "request_", "want"), params)

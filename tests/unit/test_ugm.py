"""The user/group tracker (src/model/ugm.py) on its own, table-driven, and in the partition's walk.

Config quantities: plain integers in ``maxresources`` are raw (memory in bytes), as are the asks here.
"""

from __future__ import annotations

import textwrap

import pytest

from korral import resource as res
from korral.config import load_config
from korral.model.allocation import Allocation
from korral.model.app.application import ApplicationState
from korral.model.ugm import AppTracking, AppUsage, QueueUsage, UserGroupTracker, resolve_group


def config_of(queues: str, root_limits: str = "") -> str:
    """root (submitacl *) with ``root_limits`` and the child queues ``queues`` (YAML list items)."""
    text = 'partitions:\n  - name: default\n    queues:\n      - name: root\n        submitacl: "*"\n'
    if root_limits:
        text += (
            "        limits:\n"
            + textwrap.indent(textwrap.dedent(root_limits).strip("\n"), "          ")
            + "\n"
        )
    if queues:
        text += (
            "        queues:\n" + textwrap.indent(textwrap.dedent(queues).strip("\n"), "          ") + "\n"
        )
    return text


def tracker_of(queues: str, root_limits: str = "") -> UserGroupTracker:
    return UserGroupTracker(load_config(config_of(queues, root_limits)).partitions[0])


# parent (dev: 100, * users: 50 memory) -> leaf a (ops group, alice named), leaf b (no limits)
TREE = """
- name: parent
  limits:
    - limit: dev group
      groups: [dev]
      maxresources: {memory: 100}
    - limit: any user
      users: ["*"]
      maxresources: {memory: 50}
  queues:
    - name: a
      limits:
        - limit: ops
          groups: [ops]
          maxresources: {memory: 30}
          maxapplications: 2
        - limit: alice
          users: [alice]
          maxresources: {memory: 40}
          maxapplications: 1
    - name: b
"""
ROOT_WILDCARD_GROUP = """
- limit: named group
  groups: [admins]
  maxresources: {memory: 1000}
- limit: every other group
  groups: ["*"]
  maxresources: {memory: 1000}
"""
ROOT_WILDCARD_GROUP_APPS = """
- limit: named group
  groups: [admins]
  maxapplications: 10
- limit: every other group
  groups: ["*"]
  maxapplications: 2
"""


@pytest.mark.parametrize(
    ("queue_path", "groups", "expected"),
    [
        ("root.parent.a", ("dev", "ops"), "ops"),  # the leaf's group comes first walking up
        ("root.parent.a", ("dev",), "dev"),  # not limited at the leaf: the parent's
        ("root.parent.b", ("ops",), "*"),  # ops is limited only at a sibling leaf: the wildcard
        ("root.parent.b", ("dev", "ops"), "dev"),
        ("root.parent.a", (), None),  # no groups at all: no group usage, wildcard or not
        ("root.other", ("dev",), "*"),  # nothing named matches: the wildcard configured on the path
        ("root.other", ("admins", "dev"), "admins"),
        ("root.parent.a", ("sales",), "*"),
    ],
)
def test_group_resolution(queue_path: str, groups: tuple[str, ...], expected: str | None) -> None:
    config = config_of(TREE + "- name: other\n", ROOT_WILDCARD_GROUP)
    limits = UserGroupTracker(load_config(config).partitions[0]).limits
    assert resolve_group(limits, queue_path, groups) == expected


def test_no_wildcard_group_means_no_group() -> None:
    tracker = tracker_of(TREE)
    assert tracker.resolve_group("root.parent.a", ("sales",)) is None


class Books:
    """A tracker with the applications' side kept here (what each holds), driven by application id."""

    def __init__(self, queues: str, root_limits: str = "") -> None:
        self.tracker = tracker_of(queues, root_limits)
        self.trackings: dict[str, AppTracking | None] = {}
        self.where: dict[str, tuple[str, str, str | None]] = {}
        self.held: dict[str, tuple[dict[str, int], int]] = {}

    def add(self, app_id: str, queue_path: str, user: str, group: str | None) -> None:
        self.trackings[app_id] = self.tracker.add_application(app_id, queue_path, user, group)
        self.where[app_id] = (queue_path, user, group)
        self.held[app_id] = ({}, 0)

    def allocate(self, app_id: str, resource: dict[str, int]) -> None:
        tracking = self.trackings[app_id]
        if tracking is not None:
            self.tracker.allocated(tracking, resource)
        held, count = self.held[app_id]
        self.held[app_id] = (res.add(held, resource), count + 1)

    def release(self, app_id: str, resource: dict[str, int]) -> None:
        tracking = self.trackings[app_id]
        if tracking is not None:
            self.tracker.released(tracking, resource)
        held, count = self.held[app_id]
        self.held[app_id] = (res.prune(res.sub(held, resource)), count - 1)

    def remove(self, app_id: str) -> None:
        self.tracker.remove_application(app_id)
        del self.trackings[app_id], self.where[app_id], self.held[app_id]

    def over(self, app_id: str, resource: dict[str, int]) -> bool:
        tracking = self.trackings[app_id]
        return tracking is not None and self.tracker.over_limit(tracking, resource)

    def can_run(self, app_id: str) -> bool:
        tracking = self.trackings[app_id]
        return tracking is None or self.tracker.can_run_app(tracking)

    def headroom(self, app_id: str) -> dict[str, int] | None:
        tracking = self.trackings[app_id]
        return None if tracking is None else self.tracker.headroom(tracking)

    def reload(self, queues: str, root_limits: str = "") -> None:
        config = load_config(config_of(queues, root_limits)).partitions[0]
        self.trackings.update(self.tracker.apply_config(config, self.held))

    def rows(self, kind: str, name: str) -> list[QueueUsage] | None:
        apps = [
            AppUsage(
                application_id=app_id,
                queue_path=queue,
                allocated=self.held[app_id][0],
                running=bool(self.held[app_id][1]),
            )
            for app_id, (queue, user, group) in self.where.items()
            if (user if kind == "user" else group) == name
        ]
        return self.tracker.usage_rows(kind, name, apps)


@pytest.mark.parametrize(
    ("user", "group", "booked", "ask", "over"),
    [
        # alice: named 40 at the leaf beats the wildcard 50 at the parent? No: both apply, the parent's
        # wildcard is the limit at the parent, alice's named one at the leaf; the lower (40) wins
        ("alice", None, 40, 1, True),
        ("alice", None, 39, 1, False),
        # bob: only the parent's wildcard user limit (50)
        ("bob", None, 49, 1, False),
        ("bob", None, 50, 1, True),
        # bob in ops: the group limit at the leaf (30) is lower than his user limit (50)
        ("bob", "ops", 30, 1, True),
        ("bob", "ops", 29, 1, False),
        # undefined types are unlimited
        ("bob", None, 50, 0, False),
    ],
)
def test_headroom_is_the_lowest_of_user_and_group_along_the_path(
    user: str, group: str | None, booked: int, ask: int, over: bool
) -> None:
    tracker = Books(TREE)
    tracker.add("app-1", "root.parent.a", user, group)
    if booked:
        tracker.allocate("app-1", {"memory": booked})
    resource = {"memory": ask} if ask else {"vcore": 1000}
    assert tracker.over("app-1", resource) is over


def test_named_user_limit_beats_the_wildcard_at_the_same_queue() -> None:
    tracker = Books(
        """
        - name: leaf
          limits:
            - limit: alice
              users: [alice]
              maxresources: {memory: 100}
            - limit: everyone else
              users: ["*"]
              maxresources: {memory: 10}
        """
    )
    tracker.add("a1", "root.leaf", "alice", None)
    tracker.add("b1", "root.leaf", "bob", None)
    tracker.allocate("a1", {"memory": 50})
    assert not tracker.over("a1", {"memory": 50})  # alice: her own 100, not the wildcard's 10
    assert tracker.over("b1", {"memory": 11})
    assert not tracker.over("b1", {"memory": 10})  # bob's wildcard limit is his own


def test_wildcard_user_limit_applies_per_user_wildcard_group_to_members_together() -> None:
    tracker = Books(
        """
        - name: leaf
          limits:
            - limit: each user
              users: ["*"]
              maxapplications: 1
        """,
        ROOT_WILDCARD_GROUP_APPS,
    )
    for app_id, user in (("a1", "alice"), ("a2", "alice"), ("b1", "bob"), ("c1", "carol")):
        tracker.add(app_id, "root.leaf", user, tracker.tracker.resolve_group("root.leaf", ("staff",)))
    tracker.allocate("a1", {"memory": 1})
    assert not tracker.can_run("a2")  # alice already runs one
    assert tracker.can_run("b1")  # the wildcard user limit is per user
    tracker.allocate("b1", {"memory": 1})
    # alice and bob resolved to the wildcard group "*": two applications of its 2 run
    assert not tracker.can_run("c1")
    assert tracker.can_run("a1")  # a running application always may go on
    tracker.release("a1", {"memory": 1})
    assert tracker.can_run("c1") and tracker.can_run("a2")


def test_parent_limits_count_the_whole_subtree() -> None:
    tracker = Books(TREE)
    tracker.add("a", "root.parent.a", "bob", None)
    tracker.add("b", "root.parent.b", "bob", None)
    tracker.allocate("a", {"memory": 30})
    assert tracker.over("b", {"memory": 21})  # 30 in a + 21 in b > 50 at the parent
    assert not tracker.over("b", {"memory": 20})
    assert tracker.headroom("b") == {"memory": 20}  # the minimum along the path
    rows = {row.queue_path: row for row in tracker.rows("user", "bob") or []}
    assert rows["root.parent"].resource == {"memory": 30}
    assert rows["root.parent"].running_applications == ("a",)
    assert rows["root.parent.b"].resource == {}
    assert rows["root.parent"].max_resources == {"memory": 50}
    assert rows["root"].max_resources == {} and rows["root"].max_applications == 0
    tracker.add("c", "root.parent.a", "bob", "ops")
    assert tracker.headroom("c") == {"memory": 20}  # ops' 30 at the leaf is not the lowest
    tracker.allocate("c", {"memory": 10})
    assert tracker.headroom("c") == {"memory": 10}  # bob: 50 - 40 at the parent; ops: 30 - 10


def test_running_applications_count_until_the_last_allocation_goes() -> None:
    tracker = Books(TREE)
    tracker.add("one", "root.parent.a", "alice", None)
    tracker.add("two", "root.parent.a", "alice", None)
    tracker.allocate("one", {"memory": 1})
    tracker.allocate("one", {"memory": 1})
    assert not tracker.can_run("two")  # alice: maxapplications 1 at the leaf
    tracker.release("one", {"memory": 1})
    assert not tracker.can_run("two")
    tracker.release("one", {"memory": 1})
    assert tracker.can_run("two")
    assert tracker.rows("user", "alice")[-1].running_applications == ()  # type: ignore[index]


def test_reload_changes_limits_and_keeps_usage() -> None:
    tracker = Books(TREE)
    tracker.add("app", "root.parent.a", "alice", None)
    tracker.allocate("app", {"memory": 35})
    lowered = TREE.replace("maxresources: {memory: 40}", "maxresources: {memory: 20}")
    tracker.reload(lowered)
    assert tracker.rows("user", "alice")[-1].resource == {"memory": 35}  # type: ignore[index]
    assert tracker.over("app", {"memory": 1})  # lowered below what is in use: blocks, no eviction
    assert tracker.tracker.violations()  # the usage is over the new limit, as a check would report
    tracker.reload("- name: parent\n  queues:\n    - name: a\n")
    assert tracker.trackings["app"] is None and not tracker.over("app", {"memory": 10**9})
    assert tracker.rows("user", "alice")[-1].resource == {"memory": 35}  # type: ignore[index]


def test_unknown_user_and_untracked_group_read_none_and_idle_ones_are_dropped() -> None:
    tracker = Books(TREE)
    assert tracker.rows("user", "nobody-here") is None
    tracker.add("app", "root.parent.a", "bob", "ops")
    assert tracker.rows("group", "ops") is not None and tracker.rows("group", "dev") is None
    tracker.allocate("app", {"memory": 5})
    tracker.release("app", {"memory": 5})
    tracker.remove("app")
    assert tracker.rows("user", "bob") is None and tracker.rows("group", "ops") is None
    assert tracker.tracker.users == {} and tracker.tracker.groups == {}  # nothing left behind


# ---- in the partition's scheduling walk (the reference's and the actors' view's code) ------------------

LIMITED = config_of(
    """
    - name: leaf
      limits:
        - limit: alice
          users: [alice]
          maxresources: {memory: 1000}
        - limit: one app each
          users: ["*"]
          maxapplications: 1
    - name: other
    """
)


def test_walk_skips_asks_over_a_user_limit_and_tries_the_next(make_partition) -> None:
    partition = make_partition(LIMITED)
    partition.add_node("n1", {"memory": 10_000, "vcore": 10_000})
    partition.add_application("app-1", queue_name="root.leaf", user="alice")
    partition.add_ask("app-1", "big", {"memory": 800}, max_allocations=2, priority=10)
    partition.add_ask("app-1", "small", {"memory": 100}, max_allocations=5)
    made = partition.schedule()
    # one big (800), then the second big is over alice's 1000; small ones fit until 1000
    assert sorted(a.allocation_key for a in made) == ["big", "small", "small"]
    assert partition.user_group_usage("user", "alice")[0].resource == {"memory": 1000}  # type: ignore[index]
    assert partition.schedule() == []  # blocked: nothing more until usage or limits ease
    uuid = next(a.uuid for a in made if a.allocation_key == "big")
    partition.release_allocation("app-1", uuid)
    assert [a.allocation_key for a in partition.schedule()] == ["big"]


def test_second_application_of_a_user_stays_accepted_until_the_first_ends(make_partition) -> None:
    partition = make_partition(LIMITED)
    partition.add_node("n1", {"memory": 10_000})
    for app_id in ("first", "second"):
        partition.add_application(app_id, queue_name="root.leaf", user="bob")
        partition.add_ask(app_id, "ask", {"memory": 10})
    partition.add_application("carol-app", queue_name="root.leaf", user="carol")
    partition.add_ask("carol-app", "ask", {"memory": 10})
    assert sorted(a.application_id for a in partition.schedule()) == ["carol-app", "first"]
    assert partition.applications["second"].state is ApplicationState.ACCEPTED
    first = partition.applications["first"]
    partition.release_allocation("first", next(iter(first.allocations)))
    assert [a.application_id for a in partition.schedule()] == ["second"]
    assert partition.applications["second"].state is ApplicationState.STARTING


def test_recovered_allocations_count_even_above_the_limit(make_partition) -> None:
    partition = make_partition(LIMITED)
    partition.add_node("n1", {"memory": 10_000})
    partition.add_application("app-1", queue_name="root.leaf", user="alice")
    partition.recover_allocation(
        Allocation(
            uuid="r1", allocation_key="r", application_id="app-1", node_id="n1", resource={"memory": 1500}
        )
    )
    assert partition.user_group_usage("user", "alice")[-1].resource == {"memory": 1500}  # type: ignore[index]
    partition.add_ask("app-1", "more", {"memory": 1})
    assert partition.schedule() == []


def test_reload_lowering_a_limit_blocks_new_work_and_evicts_nothing(make_partition) -> None:
    partition = make_partition(LIMITED)
    partition.add_node("n1", {"memory": 10_000})
    partition.add_application("app-1", queue_name="root.leaf", user="alice")
    partition.add_ask("app-1", "ask", {"memory": 100}, max_allocations=20)
    assert len(partition.schedule()) == 10
    partition.apply_config(load_config(LIMITED.replace("memory: 1000", "memory: 500")).partitions[0])
    assert partition.schedule() == [] and len(partition.applications["app-1"].allocations) == 10
    partition.apply_config(load_config(LIMITED.replace("memory: 1000", "memory: 1200")).partitions[0])
    assert len(partition.schedule()) == 2

"""queues.yaml validation of limits: partition, root and queue limits, maxapplications (reference 2.3)."""

from __future__ import annotations

from typing import Any

import pytest
from config_helpers import assert_rejected, doc, find, leaf, limit, parent, res, root

from korral.config import LimitConfig, load_config

# --- rule 4: partition limits and root limits ---

BOB = limit(["bob"], maxapplications=2)
SUE = limit(["sue"], maxapplications=3)


def test_rule4_partition_limits_copied_to_root() -> None:
    partition = load_config(doc(root(leaf("a")), limits=[BOB])).partitions[0]
    expected = (LimitConfig(limit="test limit", users=("bob",), max_applications=2),)
    assert partition.root.limits == expected
    assert partition.limits == expected


def test_rule4_partition_limits_copied_to_inserted_root() -> None:
    partition = load_config(doc([leaf("a"), leaf("b")], limits=[BOB])).partitions[0]
    assert partition.root.limits[0].users == ("bob",)


def test_rule4_root_limits_only() -> None:
    partition = load_config(doc(root(limits=[BOB]))).partitions[0]
    assert partition.root.limits[0].users == ("bob",)
    assert partition.limits == partition.root.limits


def test_rule4_equal_limits_pass() -> None:
    partition = load_config(doc(root(limits=[BOB]), limits=[BOB])).partitions[0]
    assert len(partition.root.limits) == 1


def test_rule4_different_limits_fail() -> None:
    assert_rejected(
        doc(root(limits=[BOB]), limits=[SUE]), "partition 'default'", "partition limits and root queue limits"
    )


# --- rule 6: limit entries ---


@pytest.mark.parametrize(
    "limits",
    [
        pytest.param([limit(["sue", "bob"], maxapplications=10)], id="users-maxapps"),
        pytest.param([limit(groups=["dev"], maxresources={"memory": "1G"})], id="group-maxresources"),
        pytest.param([limit(["bob"], maxresources={"memory": "1G", "vcore": 0})], id="zero-next-to-nonzero"),
        pytest.param(
            [limit(["bob"], maxapplications=1), limit(["*"], maxapplications=1)], id="user-wildcard-last"
        ),
        pytest.param(
            [limit(groups=["dev"], maxapplications=1), limit(groups=["*"], maxapplications=1)],
            id="group-wildcard-with-named",
        ),
        pytest.param([limit(groups=["dev", "*"], maxapplications=1)], id="group-wildcard-same-list"),
        pytest.param(
            [limit(["_svc:acct#1/x@y.z-w$"], groups=["grp:a_b.c-d"], maxapplications=1)], id="name-characters"
        ),
        pytest.param([limit(["bob"], groups=["dev"], maxapplications=5)], id="users-and-groups"),
    ],
)
def test_rule6_valid_limits(limits: list[dict[str, Any]]) -> None:
    config = load_config(
        doc(root(leaf("a", limits=limits, maxapplications=10, resources=res(max={"memory": "2G"}))))
    )
    assert len(find(config, "root.a").limits) == len(limits)


@pytest.mark.parametrize(
    ("limits", "fragments"),
    [
        pytest.param([limit(maxapplications=1)], ["empty user and group lists"], id="no-users-or-groups"),
        pytest.param([limit([], [], maxapplications=1)], ["empty user and group lists"], id="empty-lists"),
        pytest.param([limit(["1bob"], maxapplications=1)], ["invalid limit user name '1bob'"], id="bad-user"),
        pytest.param([limit(["bob smith"], maxapplications=1)], ["invalid limit user name"], id="user-space"),
        pytest.param(
            [limit(groups=["dev@x"], maxapplications=1)], ["invalid limit group name 'dev@x'"], id="bad-group"
        ),
        pytest.param(
            [limit(groups=["dev$"], maxapplications=1)], ["invalid limit group name"], id="group-dollar"
        ),
        pytest.param(
            [limit(["bob"], maxapplications=1), limit(["bob"], maxapplications=2)],
            ["limit #1", "duplicated user name 'bob'"],
            id="duplicate-user",
        ),
        pytest.param(
            [limit(["bob", "bob"], maxapplications=1)],
            ["duplicated user name 'bob'"],
            id="duplicate-user-same-list",
        ),
        pytest.param(
            [limit(groups=["dev"], maxapplications=1), limit(groups=["dev"], maxapplications=1)],
            ["duplicated group name 'dev'"],
            id="duplicate-group",
        ),
        pytest.param(
            [limit(["*"], maxapplications=1), limit(["bob"], maxapplications=1)],
            ["should not set no wildcard user bob after wildcard user limit"],
            id="user-after-wildcard",
        ),
        pytest.param(
            [limit(["*", "bob"], maxapplications=1)],
            ["should not set no wildcard user bob"],
            id="user-after-wildcard-same-list",
        ),
        pytest.param(
            [limit(["*"], maxapplications=1), limit(["*"], maxapplications=1)],
            ["duplicated user name '*'"],
            id="two-user-wildcards",
        ),
        pytest.param(
            [limit(["bob"], groups=["*"], maxapplications=1)],
            ["should not specify only one group limit that is using the wildcard"],
            id="lone-group-wildcard",
        ),
        pytest.param(
            [limit(groups=["*", "dev"], maxapplications=1)],
            ["should not set no wildcard group dev after wildcard group limit"],
            id="group-after-wildcard",
        ),
        pytest.param(
            [limit(groups=["*"], maxapplications=1), limit(groups=["dev"], maxapplications=1)],
            ["only one group limit that is using the wildcard"],
            id="group-wildcard-first",
        ),
        pytest.param(
            [limit(["bob"], maxresources={"memory": 0, "vcore": 0}, maxapplications=1)],
            ["maxresources is zero"],
            id="all-zero-maxresources",
        ),
        pytest.param([limit(["bob"])], ["all resource limits are null"], id="nothing-limited"),
        pytest.param(
            [limit(["bob"], maxapplications=11)],
            ["limit #0 'test limit'", "exceeds the queue maxapplications 10"],
            id="maxapps-over-queue",
        ),
        pytest.param(
            [limit(["bob"], maxresources={"memory": "3G"})],
            ["exceeds the queue max resources"],
            id="maxresources-over-queue",
        ),
    ],
)
def test_rule6_invalid_limits(limits: list[dict[str, Any]], fragments: list[str]) -> None:
    text = doc(root(leaf("a", limits=limits, maxapplications=10, resources=res(max={"memory": "2G"}))))
    assert_rejected(text, "partition 'default'", "queue 'root.a'", *fragments)


def test_rule6_limit_types_undefined_in_queue_max_are_unlimited() -> None:
    text = doc(
        root(
            leaf("a", limits=[limit(["bob"], maxresources={"vcore": 100})], resources=res(max={"memory": 1}))
        )
    )
    assert find(load_config(text), "root.a").limits[0].max_resources == {"vcore": 100_000}


def test_rule6_partition_limits_checked_against_root() -> None:
    assert_rejected(
        doc(root(), limits=[limit(["1x"], maxapplications=1)]), "queue 'root'", "invalid limit user name"
    )


def test_rule6_root_limit_resources_not_checked_against_cluster() -> None:
    config = load_config(doc(root(limits=[limit(["bob"], maxresources={"memory": "1E"})])))
    assert config.partitions[0].root.limits[0].max_resources == {"memory": 10**18}


def test_rule6_root_limit_maxapps_checked_against_root_maxapps() -> None:
    assert_rejected(
        doc(root(maxapplications=2, limits=[limit(["bob"], maxapplications=3)])),
        "queue 'root'",
        "exceeds the queue maxapplications 2",
    )


def test_rule6_wildcard_order_is_per_queue() -> None:
    # a wildcard at the root does not constrain the order of entries in a child queue
    text = doc(
        root(leaf("a", limits=[limit(["bob"], maxapplications=1)]), limits=[limit(["*"], maxapplications=1)])
    )
    assert find(load_config(text), "root.a").limits[0].users == ("bob",)


# --- rule 10: maxapplications ---


@pytest.mark.parametrize(
    "queues",
    [
        pytest.param(root(parent("p", leaf("a", maxapplications=5), maxapplications=10)), id="child-smaller"),
        pytest.param(root(parent("p", leaf("a", maxapplications=10), maxapplications=10)), id="child-equal"),
        pytest.param(root(parent("p", leaf("a", maxapplications=50))), id="parent-unset"),
        pytest.param(root(parent("p", leaf("a"))), id="both-unset"),
        pytest.param(
            root(
                parent("p", parent("q", leaf("a", maxapplications=2), maxapplications=3), maxapplications=4)
            ),
            id="three-levels",
        ),
    ],
)
def test_rule10_valid_max_applications(queues: list[dict[str, Any]]) -> None:
    load_config(doc(queues))


@pytest.mark.parametrize(
    ("queues", "fragments"),
    [
        pytest.param(
            root(parent("p", leaf("a", maxapplications=11), maxapplications=10)),
            ["queue 'root.p.a'", "parent maxRunningApps must be larger than child maxRunningApps"],
            id="child-larger",
        ),
        pytest.param(
            root(parent("p", leaf("a"), maxapplications=10)),
            ["queue 'root.p.a'", "parent maxRunningApps", "child maxapplications unset"],
            id="child-unset",
        ),
        pytest.param(
            root(
                parent("p", parent("q", leaf("a", maxapplications=5), maxapplications=3), maxapplications=4)
            ),
            ["queue 'root.p.q.a'", "parent root.p.q maxapplications 3"],
            id="grandchild-larger",
        ),
        pytest.param(
            root(leaf("a", maxapplications=3), maxapplications=2),
            ["queue 'root.a'", "parent root"],
            id="root-set",
        ),
    ],
)
def test_rule10_invalid_max_applications(queues: list[dict[str, Any]], fragments: list[str]) -> None:
    assert_rejected(doc(queues), "partition 'default'", *fragments)


# --- rule 11: user/group limit hierarchy ---


@pytest.mark.parametrize(
    "queues",
    [
        pytest.param(
            root(
                leaf("a", limits=[limit(["bob"], maxapplications=5)]),
                limits=[limit(["bob"], maxapplications=10)],
            ),
            id="child-user-smaller",
        ),
        pytest.param(
            root(
                leaf("a", limits=[limit(["bob"], maxapplications=20)]),
                limits=[limit(["sue"], maxapplications=10)],
            ),
            id="different-user",
        ),
        pytest.param(
            root(
                leaf("a", limits=[limit(groups=["dev"], maxresources={"memory": "1G"})]),
                limits=[limit(groups=["dev"], maxresources={"memory": "2G"})],
            ),
            id="child-group-smaller",
        ),
        pytest.param(
            root(
                leaf("a", limits=[limit(["bob"], maxresources={"vcore": 100})]),
                limits=[limit(["bob"], maxresources={"memory": "2G"})],
            ),
            id="type-undefined-upstream",
        ),
        pytest.param(
            root(
                leaf("a", limits=[limit(["bob"], maxapplications=3)]),
                limits=[limit(["bob"], maxresources={"memory": "2G"})],
            ),
            id="ancestor-apps-unlimited",
        ),
        pytest.param(
            root(
                leaf("a", limits=[limit(["bob"], maxapplications=2)]),
                limits=[limit(["*"], maxapplications=2)],
            ),
            id="under-wildcard-within",
        ),
        pytest.param(
            root(
                parent("p", leaf("a", limits=[limit(["bob"], maxapplications=4)])),
                limits=[limit(["bob"], maxapplications=5)],
            ),
            id="through-queue-without-limits",
        ),
    ],
)
def test_rule11_valid_limit_hierarchy(queues: list[dict[str, Any]]) -> None:
    load_config(doc(queues))


@pytest.mark.parametrize(
    ("queues", "fragments"),
    [
        pytest.param(
            root(
                leaf("a", limits=[limit(["bob"], maxapplications=20)]),
                limits=[limit(["bob"], maxapplications=10)],
            ),
            ["queue 'root.a'", "user bob max applications 20", "ancestor parent max applications 10"],
            id="user-apps-over",
        ),
        pytest.param(
            root(
                leaf("a", limits=[limit(["bob"], maxresources={"memory": 1})]),
                limits=[limit(["bob"], maxapplications=10)],
            ),
            ["user bob max applications 0"],
            id="user-apps-unlimited-under-set",
        ),
        pytest.param(
            root(
                leaf("a", limits=[limit(groups=["dev"], maxresources={"memory": "3G"})]),
                limits=[limit(groups=["dev"], maxresources={"memory": "2G"})],
            ),
            [
                "queue 'root.a'",
                "group dev max resource {memory:3000000000}",
                "ancestor parent maximum resource {memory:2000000000}",
            ],
            id="group-resources-over",
        ),
        pytest.param(
            root(
                leaf("a", limits=[limit(["bob"], maxapplications=3)]),
                limits=[limit(["*"], maxapplications=2)],
            ),
            ["user bob max applications 3", "max applications 2"],
            id="over-wildcard",
        ),
        pytest.param(
            root(
                parent("p", leaf("a", limits=[limit(["bob"], maxapplications=6)])),
                limits=[limit(["bob"], maxapplications=5)],
            ),
            ["queue 'root.p.a'", "user bob max applications 6"],
            id="through-queue-without-limits",
        ),
        pytest.param(
            root(
                parent(
                    "p",
                    leaf("a", limits=[limit(["bob"], maxapplications=4)]),
                    limits=[limit(["bob"], maxapplications=3)],
                ),
                limits=[limit(["bob"], maxapplications=5)],
            ),
            ["queue 'root.p.a'", "user bob max applications 4", "max applications 3"],
            id="tightest-ancestor-wins",
        ),
        pytest.param(
            root(
                parent(
                    "p",
                    leaf("a", limits=[limit(["bob"], maxresources={"vcore": 3})]),
                    limits=[limit(["sue"], maxapplications=3)],
                ),
                limits=[limit(["bob"], maxresources={"vcore": 2})],
            ),
            ["queue 'root.p.a'", "user bob max resource {vcore:3000}"],
            id="skips-unrelated-limits",
        ),
        pytest.param(
            [leaf("a", limits=[limit(["bob"], maxapplications=9)])],
            ["user bob max applications 9"],
            id="partition-limits-are-root-limits",
        ),
    ],
)
def test_rule11_invalid_limit_hierarchy(queues: list[dict[str, Any]], fragments: list[str]) -> None:
    text = doc(queues)
    if queues[0]["name"] != "root":
        text = doc(queues, limits=[limit(["bob"], maxapplications=5)])
    assert_rejected(text, "partition 'default'", *fragments)

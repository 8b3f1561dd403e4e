"""PartitionModel scenarios: placement, dynamic queues and config reload."""

from __future__ import annotations

import json
import re

import attrs
import pytest
from partition_helpers import conf

from korral.config import PartitionConfig, PlacementRuleConfig, load_config
from korral.errors import ConfigError
from korral.model.partition.composed import ModelError, PartitionModel
from korral.model.queue import QueueState

# ---- placement --------------------------------------------------------------------------------------------

PLACEMENT = conf(
    """
    - name: default
      submitacl: "*"
    - name: batch
      submitacl: batchuser
    - name: secure
      submitacl: "alice admins"
    - name: users
      parent: true
      submitacl: "*"
      childtemplate:
        maxapplications: 3
        properties: {application.sort.policy: fair}
        resources:
          guaranteed: {memory: 500, vcore: 1}
          max: {memory: 1000, vcore: 2}
    - name: ns
      parent: true
      submitacl: "*"
    """,
    partition="""
    placementrules:
      - name: provided
      - name: tag
        value: namespace
        create: true
        parent: {name: fixed, value: root.ns}
      - name: fixed
        value: batch
        filter: {type: allow, users: [batchuser]}
      - name: user
        create: true
        filter: {type: deny, users: [homeless]}
        parent: {name: fixed, value: root.users}
    """,
    root="",
)


@pytest.mark.parametrize(
    "queue_name, user, groups, tags, expected",
    [
        ("root.secure", "alice", (), {}, "root.secure"),
        ("secure", "alice", (), {}, "root.secure"),  # provided short name is qualified under root
        ("root.secure", "bob", ("admins",), {}, "root.secure"),  # group in the ACL
        ("root.secure", "bob", (), {}, "root.users.bob"),  # ACL refuses: the next rules run
        ("", "carol", (), {"namespace": "dev"}, "root.ns.dev"),  # tag rule creates below root.ns
        ("", "batchuser", (), {}, "root.batch"),  # fixed rule, filter allows
        ("", "first.last", (), {}, "root.users.first_dot_last"),  # user rule, dots replaced
        ("", "homeless", (), {}, "root.default"),  # every rule passes: root.default fallback
        ("root.missing", "dave", (), {}, "root.users.dave"),  # provided without create: next rule
    ],
)
def test_placement_rules(make_partition, queue_name, user, groups, tags, expected):
    p = make_partition(PLACEMENT)
    app = p.add_application("app-1", queue_name=queue_name, user=user, groups=groups, tags=tags)
    assert app.queue_path == expected
    assert p.queues[expected].applications["app-1"] is app


@pytest.mark.parametrize(
    "children, root, partition, queue_name, user",
    [
        pytest.param(
            '- name: secure\n  submitacl: "alice"', "", "", "root.secure", "bob", id="acl-refused-no-default"
        ),
        pytest.param("- name: other", 'submitacl: "*"', "", "root.nothere", "bob", id="no-queue-no-create"),
        pytest.param(
            "- name: parent\n  parent: true", 'submitacl: "*"', "", "root.parent", "bob", id="not-a-leaf"
        ),
    ],
)
def test_placement_rejections(make_partition, children, root, partition, queue_name, user):
    p = make_partition(conf(children, root=root, partition=partition))
    with pytest.raises(ModelError, match="no placement rule matched"):
        p.add_application("app-1", queue_name=queue_name, user=user)
    assert p.applications == {}


@pytest.mark.parametrize("queue_name", ["root.leaf.below", "root.leaf.a.b"])
def test_creating_below_a_leaf_rejects_the_application(make_partition, queue_name):
    """YuniKorn's placement accepts a missing queue below a leaf; creating it fails and rejects the
    application: a later rule does not get it."""
    rules = "placementrules:\n  - {name: provided, create: true}\n  - {name: fixed, value: root.leaf}"
    p = make_partition(conf("- name: leaf", root='submitacl: "*"', partition=rules))
    with pytest.raises(ModelError, match=f"failed to create rule based queue {re.escape(queue_name)}.*leaf"):
        p.add_application("app-1", queue_name=queue_name, user="bob")
    assert p.applications == {}
    assert sorted(p.queues) == ["root", "root.leaf"]


def test_creating_below_a_draining_queue_rejects_the_application(make_partition):
    rules = "placementrules:\n  - {name: provided, create: true}\n  - {name: fixed, value: root.a}"
    p = make_partition(conf("- name: a\n- name: p\n  parent: true", root='submitacl: "*"', partition=rules))
    p.apply_config(load_config(conf("- name: a", root='submitacl: "*"', partition=rules)).partitions[0])
    assert p.queues["root.p"].state is QueueState.DRAINING
    with pytest.raises(ModelError, match=r"failed to create rule based queue root\.p\.new.*draining"):
        p.add_application("app-1", queue_name="root.p.new", user="bob")
    assert "root.p.new" not in p.queues


def test_placement_refuses_a_draining_queue(make_partition):
    text = conf("- name: a\n- name: b")
    p = make_partition(text)
    p.apply_config(load_config(conf("- name: a")).partitions[0])
    assert p.queues["root.b"].state is QueueState.DRAINING
    with pytest.raises(ModelError, match="no placement rule matched"):
        p.add_application("app-1", queue_name="root.b", user="u")
    p.add_application("app-2", queue_name="root.a", user="u")


@pytest.mark.parametrize(
    "user, tags, reason",
    [
        ("", {}, "empty user cannot resolve"),
        ("", {"application.create.force": "false"}, "empty user cannot resolve"),
    ],
)
def test_application_without_user_is_rejected(make_partition, user, tags, reason):
    p = make_partition(conf("- name: default"))
    with pytest.raises(ModelError, match=reason):
        p.add_application("app-1", queue_name="root.default", user=user, tags=tags)


def test_forced_application_without_user_lands_in_recovery(make_partition):
    p = make_partition(conf("- name: default", root=""))
    app = p.add_application(
        "app-1", queue_name="root.default", user="", tags={"application.create.force": "true"}
    )
    assert (app.user, app.groups, app.queue_path) == ("nobody", ("nogroup",), "root.@recovery@")
    assert p.queues["root.@recovery@"].is_managed is False


def test_duplicate_application_is_rejected(make_partition):
    p = make_partition(conf("- name: default"))
    p.add_application("app-1", queue_name="root.default", user="u")
    with pytest.raises(ModelError, match="already exists"):
        p.add_application("app-1", queue_name="root.default", user="u")
    with pytest.raises(ModelError, match="must not be empty"):
        p.add_application("", queue_name="root.default", user="u")
    assert list(p.applications) == ["app-1"]


@pytest.mark.parametrize(
    "path, reason",
    [
        ("other.queue", "not fully qualified"),
        ("root.leaf.below", "is a leaf queue"),
        ("root.gone.child", "is draining"),
    ],
)
def test_create_queue_refuses_impossible_paths(make_partition, path, reason):
    p = make_partition(conf("- name: leaf\n- name: gone\n  parent: true"))
    p.apply_config(load_config(conf("- name: leaf")).partitions[0])
    with pytest.raises(ModelError, match=reason):
        p.create_queue(path)
    assert set(p.queues) == {"root", "root.leaf", "root.gone"}


def test_dynamic_leaf_takes_the_child_template(make_partition):
    p = make_partition(PLACEMENT)
    p.add_application("app-1", queue_name="", user="bob")
    leaf = p.queues["root.users.bob"]
    assert (leaf.is_leaf, leaf.is_managed) == (True, False)
    assert leaf.max == {"memory": 1000, "vcore": 2000}
    assert leaf.guaranteed == {"memory": 500, "vcore": 1000}
    assert leaf.max_applications == 3
    assert leaf.sort_policy == "fair"
    # the template's max is enforced
    p.add_node("node-1", {"memory": 10_000, "vcore": 10_000})
    p.add_ask("app-1", "x", {"memory": 100, "vcore": 1000}, max_allocations=5)
    assert len(p.schedule()) == 2


def test_child_template_is_inherited_through_dynamic_parents(make_partition):
    p = make_partition(
        conf(
            """
            - name: org
              parent: true
              childtemplate:
                maxapplications: 7
                resources: {max: {memory: 300}}
            """,
            partition="placementrules:\n  - {name: provided, create: true}",
        )
    )
    app = p.add_application("app-1", queue_name="root.org.team.work", user="u")
    assert app.queue_path == "root.org.team.work"
    team, work = p.queues["root.org.team"], p.queues["root.org.team.work"]
    assert (team.is_leaf, team.is_managed) == (False, False)
    assert (work.is_leaf, work.max, work.max_applications) == (True, {"memory": 300}, 7)


def _quota(**quantities: int) -> str:
    return json.dumps({"resources": {name: {"value": value} for name, value in quantities.items()}})


def test_namespace_quota_tags_apply_to_dynamic_queues_only(make_partition):
    p = make_partition(PLACEMENT)
    tags = {
        "namespace": "dev",
        "namespace.resourcequota": _quota(memory=30, vcore=3000),
        "namespace.resourceguaranteed": _quota(memory=10),
        "namespace.resourcemaxapps": "4",
    }
    p.add_application("app-1", queue_name="", user="carol", tags=tags)
    dev = p.queues["root.ns.dev"]
    assert (dev.max, dev.guaranteed, dev.max_applications) == (
        {"memory": 30, "vcore": 3000},
        {"memory": 10},
        4,
    )

    # a managed queue keeps its configuration
    p.add_application("app-2", queue_name="root.default", user="carol", tags=tags)
    default = p.queues["root.default"]
    assert (default.max, default.guaranteed, default.max_applications) == (None, None, 0)

    p.add_node("node-1", {"memory": 1000, "vcore": 100_000})
    p.add_ask("app-1", "x", {"memory": 10}, max_allocations=5)
    assert len(p.schedule()) == 3
    assert dev.allocated == {"memory": 30}


def test_quota_tags_set_both_limits_as_yunikorn(make_partition):
    """YuniKorn's AddApplication sets max and guaranteed together from an application's tags (the one
    not given is cleared), reads the tag keys in any case, and keeps the queue's max applications unless
    the tag is an unsigned 64-bit integer."""
    p = make_partition(PLACEMENT)
    quota = {
        "namespace": "dev",
        "Namespace.ResourceQuota": _quota(memory=30),
        "namespace.resourcemaxapps": "4",
    }
    p.add_application("app-1", queue_name="", user="carol", tags=quota)
    dev = p.queues["root.ns.dev"]
    assert (dev.max, dev.guaranteed, dev.max_applications) == ({"memory": 30}, None, 4)
    guarantee = {"namespace": "dev", "namespace.resourceguaranteed": _quota(memory=10)}
    p.add_application("app-2", queue_name="", user="carol", tags=guarantee)
    assert (dev.max, dev.guaranteed, dev.max_applications) == (None, {"memory": 10}, 4)
    for index, max_apps in enumerate(["\u00b2", "1" * 30, "-1", "+3", "x"]):
        p.add_application(
            f"app-x{index}",
            queue_name="",
            user="carol",
            tags={"namespace": "dev", "namespace.resourcemaxapps": max_apps},
        )
    assert dev.max_applications == 4, "not an unsigned 64-bit integer: ignored"


@pytest.mark.parametrize(
    "value",
    [
        _quota(memory=-1, vcore=5),
        _quota(memory=0),
        json.dumps({"resources": {"memory": {"value": 1.5}}}),
        json.dumps({"resources": {"memory": {"value": 1 << 63}}}),
        json.dumps({"resources": {"memory": 5}}),
        json.dumps({"memory": {"value": 5}}),
    ],
    ids=["negative", "zero", "float", "over-int64", "not-a-quantity", "no-resources"],
)
def test_a_quota_tag_yunikorn_cannot_read_is_ignored(make_partition, value):
    p = make_partition(PLACEMENT)
    p.add_application(
        "app-1", queue_name="", user="u", tags={"namespace": "x", "namespace.resourcequota": value}
    )
    assert p.queues["root.ns.x"].max is None


@pytest.mark.parametrize("force", ["1", "t", "TRUE"])
def test_forced_creation_reads_the_tag_as_go_parses_a_bool(make_partition, force):
    p = make_partition(conf("- name: default", root=""))
    app = p.add_application(
        "app-1", queue_name="root.default", user="", tags={"Application.Create.Force": force}
    )
    assert (app.user, app.queue_path) == ("nobody", "root.@recovery@")


def test_broken_quota_tag_is_ignored(make_partition):
    p = make_partition(PLACEMENT)
    p.add_application(
        "app-1", queue_name="", user="u", tags={"namespace": "x", "namespace.resourcequota": "{oops"}
    )
    assert p.queues["root.ns.x"].max is None


# ---- config reload ----------------------------------------------------------------------------------------

BEFORE = conf(
    """
    - name: base
      resources:
        guaranteed: {memory: 100M, vcore: 10}
        max: {memory: 150M, vcore: 20}
    - name: tobedeleted
    - name: busy
    - name: org
      parent: true
    """,
    partition="placementrules:\n  - {name: provided, create: true}",
)
AFTER = conf(
    """
    - name: base
      resources:
        guaranteed: {memory: 500M, vcore: 250m}
        max: {memory: 1G, vcore: 500m}
    - name: tobeadded
      properties: {something: withAvalue}
    - name: org
      parent: true
    """,
    partition="""
    nodesortpolicy: {type: binpacking}
    placementrules:
      - {name: provided, create: true}
    """,
)


def test_config_reload_adds_updates_and_drains_queues(make_partition):
    """YuniKorn's TestConfigScheduler, plus what happens to the queues that are left out."""
    p = make_partition(BEFORE)
    assert p.queues["root.base"].max == {"memory": 150_000_000, "vcore": 20_000}
    p.add_node("node-1", {"memory": 10_000_000_000, "vcore": 100_000})
    p.add_application("app-1", queue_name="root.busy", user="u")
    p.add_application("app-2", queue_name="root.org.dyn", user="u")
    p.add_ask("app-1", "k", {"memory": 1}, max_allocations=2)
    p.schedule(limit=1)

    p.apply_config(load_config(AFTER).partitions[0])
    base = p.queues["root.base"]
    assert base.max == {"memory": 1_000_000_000, "vcore": 500}
    assert base.guaranteed == {"memory": 500_000_000, "vcore": 250}
    assert p.queues["root.tobeadded"].properties["something"] == "withAvalue"
    assert p.queues["root.tobedeleted"].state is QueueState.DRAINING
    assert p.queues["root.busy"].state is QueueState.DRAINING
    assert p.queues["root.org.dyn"].state is QueueState.ACTIVE  # dynamic queues are not in the config
    assert p.node_sort_policy == "binpacking"

    # a draining queue keeps scheduling what it has
    assert [a.application_id for a in p.schedule()] == ["app-1"]

    removed = p.cleanup_queues()
    assert set(removed) == {"root.tobedeleted"}
    p.remove_application("app-1")
    p.remove_application("app-2")
    assert set(p.cleanup_queues()) == {"root.busy", "root.org.dyn"}
    assert set(p.queues) == {"root", "root.base", "root.tobeadded", "root.org"}

    # configured again: a draining queue is Active again
    p.apply_config(load_config(AFTER.replace("- name: tobeadded", "- name: tobeadded2")).partitions[0])
    assert p.queues["root.tobeadded"].state is QueueState.DRAINING
    p.apply_config(load_config(AFTER).partitions[0])
    assert p.queues["root.tobeadded"].state is QueueState.ACTIVE


def test_dynamic_queue_that_appears_in_config_becomes_managed(make_partition):
    p = make_partition(BEFORE)
    p.add_application("app-1", queue_name="root.org.dyn", user="u")
    assert p.queues["root.org.dyn"].is_managed is False
    after = BEFORE.replace("parent: true\n", "parent: true\n            queues:\n              - name: dyn\n")
    p.apply_config(load_config(after).partitions[0])
    assert p.queues["root.org.dyn"].is_managed is True
    p.remove_application("app-1")
    assert p.cleanup_queues() == []


def test_cleanup_removes_empty_dynamic_parents_bottom_up(make_partition):
    p = make_partition(BEFORE)
    p.add_application("app-1", queue_name="root.a.b.c", user="u")
    p.add_application("app-2", queue_name="root.a.d", user="u")
    assert p.cleanup_queues() == []
    p.remove_application("app-1")
    assert p.cleanup_queues() == ["root.a.b.c", "root.a.b"]
    p.remove_application("app-2")
    assert p.cleanup_queues() == ["root.a.d", "root.a"]


def _bogus_rules(text: str) -> PartitionConfig:
    """The config's partition with a rule no validated config can hold (load_config refuses the name):
    the model still defends itself against it."""
    partition = load_config(text).partitions[0]
    return attrs.evolve(partition, placement_rules=(PlacementRuleConfig(name="bogus"),))


def test_the_validator_refuses_an_unknown_rule_before_the_model_sees_it():
    with pytest.raises(ConfigError, match="unknown placement rule name 'bogus'"):
        load_config(BEFORE.replace("{name: provided, create: true}", "{name: bogus}"))


def test_reload_with_broken_placement_rules_keeps_the_old_rules(make_partition):
    p = make_partition(BEFORE)
    with pytest.raises(ModelError, match="placement rules rejected"):
        p.apply_config(_bogus_rules(BEFORE))
    assert p.add_application("app-1", queue_name="root.new", user="u").queue_path == "root.new"


def test_broken_placement_rules_at_creation_fall_back_to_provided(clock):
    p = PartitionModel("[rm]default", _bogus_rules(BEFORE), rm_id="rm", clock=clock)
    assert p.add_application("app-1", queue_name="root.base", user="u").queue_path == "root.base"
    with pytest.raises(ModelError):
        p.add_application("app-2", queue_name="root.new", user="u")


def test_reload_switches_node_sorting(make_partition):
    p = make_partition(BEFORE)
    p.add_node("node-1", {"memory": 100, "vcore": 100}, occupied={"memory": 50, "vcore": 50})
    p.add_node("node-2", {"memory": 100, "vcore": 100})
    p.add_application("app-1", queue_name="root.busy", user="u")
    p.add_ask("app-1", "a", {"memory": 1})
    assert p.schedule()[0].node_id == "node-2"  # fair: least used
    p.apply_config(load_config(AFTER).partitions[0])
    p.add_ask("app-1", "b", {"memory": 1})
    assert p.schedule()[0].node_id == "node-1"  # binpacking: most used

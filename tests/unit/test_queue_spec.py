"""A queue's configuration and lifecycle as one value: the rules making the next one, and the trees
(the partition's registry, the scheduler's view) reading the values their writer made by reference."""

from __future__ import annotations

import json

import pytest
from queue_helpers import q

from korral.config.schema import ChildTemplateConfig, PartitionConfig, QueueConfig, ResourcesConfig
from korral.model.partition.composed import PartitionModel
from korral.model.queue_spec import (
    GivenQueueSpecs,
    QueueSpec,
    QueueState,
    configured,
    drained,
    own_config,
    tagged,
    templated,
    unconfigured,
)
from korral.model.view import SchedulingView


def config_of(*children: QueueConfig) -> PartitionConfig:
    return PartitionConfig(name="default", queues=(q("root", *children, parent=True, submit_acl="*"),))


def test_configured_takes_everything_of_the_queue_and_nothing_of_its_children():
    config = q("leaf", max={"memory": 10}, guaranteed={"memory": 5}, max_applications=3, submit_acl="bob")
    spec = configured("root.leaf", config)
    assert spec.managed and spec.leaf and spec.state is QueueState.ACTIVE
    assert spec.max == {"memory": 10} and spec.guaranteed == {"memory": 5}
    assert spec.max_applications == 3
    assert spec.submit_acl.allows("bob", ()) and not spec.admin_acl.allows("bob", ())
    parent = q("parent", q("child", max={"memory": 1}))
    assert configured("root.parent", parent).source == own_config(parent)
    assert own_config(parent).queues == () and own_config(parent).is_parent
    assert configured("root.parent", own_config(parent)) == configured("root.parent", parent)


def test_the_roots_max_is_never_configured():
    assert configured("root", q("root", max={"memory": 10}, parent=True)).max is None


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param(QueueState.DRAINING, QueueState.ACTIVE, id="draining-configured-again-is-active"),
        pytest.param(QueueState.ACTIVE, QueueState.ACTIVE, id="active-stays"),
        pytest.param(QueueState.STOPPED, QueueState.STOPPED, id="stopped-stays"),
    ],
)
def test_configured_again(before, after):
    previous = QueueSpec(path="root.a", managed=True, leaf=True, state=before)
    assert configured("root.a", q("a"), previous).state is after


def test_drained_is_a_new_value_once():
    spec = configured("root.a", q("a"))
    gone = drained(spec)
    assert gone.state is QueueState.DRAINING and spec.state is QueueState.ACTIVE
    assert drained(gone) is gone


def test_templated_and_unconfigured():
    template = ChildTemplateConfig(max_applications=2, resources=ResourcesConfig(max={"memory": 50}))
    spec = templated("root.p.dyn", template)
    assert not spec.managed and spec.leaf and spec.max == {"memory": 50} and spec.max_applications == 2
    assert templated("root.p.dyn", None) == QueueSpec(path="root.p.dyn", managed=False, leaf=True)
    assert not unconfigured("root.p", leaf=False).managed and unconfigured("root", leaf=False).managed


def _quota(memory: int) -> str:
    return json.dumps({"resources": {"memory": {"value": memory}}})


def test_namespace_tags_set_a_dynamic_queues_limits_only():
    dynamic = templated("root.ns", None)
    tags = {"namespace.resourcequota": _quota(100), "namespace.resourcemaxapps": "4"}
    spec = tagged(dynamic, tags)
    assert spec.max == {"memory": 100} and spec.guaranteed is None and spec.max_applications == 4
    assert tagged(spec, tags) is spec, "tags that change nothing keep the value"
    assert tagged(configured("root.ns", q("ns")), tags).max is None, "a configured queue keeps its own"
    recovery = templated("root.@recovery@", None)
    assert tagged(recovery, tags) is recovery


def test_the_view_takes_the_specs_it_is_given_by_reference():
    config = config_of(q("a", max_applications=2), q("b"))
    made = PartitionModel("default", config)
    specs = tuple(queue.spec for queue in made.queues.values())
    view = SchedulingView("default", config, queues=specs)
    for path, queue in made.queues.items():
        assert view.queues[path].spec is queue.spec
    # a reload: the queue dropped drains, each spec the one its writer made
    reload = config_of(q("a", max_applications=3))
    made.apply_config(reload)
    assert made.queues["root.b"].state is QueueState.DRAINING
    view.apply_config(reload, queues=tuple(queue.spec for queue in made.queues.values()))
    for path, queue in made.queues.items():
        assert view.queues[path].spec is queue.spec
    assert view.queues["root.a"].max_applications == 3
    assert view.queues["root.b"].is_draining


def test_given_specs_fall_back_to_the_rules():
    given = GivenQueueSpecs()
    assert given.configure("root.a", q("a"), None) == configured("root.a", q("a"))

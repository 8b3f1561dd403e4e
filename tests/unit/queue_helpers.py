"""Builders for the queue hierarchy tests (test_queue_*.py; reference 2.5, 2.6, 2.8, 2.9)."""

from __future__ import annotations

import itertools

from korral.config.schema import ChildTemplateConfig, QueueConfig, ResourcesConfig
from korral.model.allocation import Allocation, Ask
from korral.model.app.application import Application
from korral.model.queue import Queue
from korral.model.queue_spec import configured, templated

SORT_POLICY = "application.sort.policy"
SORT_PRIORITY = "application.sort.priority"
PRIORITY_POLICY = "priority.policy"
PRIORITY_OFFSET = "priority.offset"

_ids = itertools.count(1)


def q(name: str, *children: QueueConfig, parent: bool | None = None, **kwargs) -> QueueConfig:
    """A QueueConfig; ``guaranteed`` / ``max`` keyword arguments become its resources."""
    resources = ResourcesConfig(guaranteed=kwargs.pop("guaranteed", {}), max=kwargs.pop("max", {}))
    is_parent = bool(children) if parent is None else parent
    return QueueConfig(name=name, parent=is_parent, queues=children, resources=resources, **kwargs)


def configure(queue: Queue, config: QueueConfig) -> None:
    """Configure ``queue`` as a partition does (its next spec made by the rules)."""
    queue.apply_spec(configured(queue.path, config, queue.spec))


def apply_template(queue: Queue, template: ChildTemplateConfig | None) -> None:
    """Make ``queue`` a dynamic leaf from ``template`` as placement does."""
    queue.apply_spec(templated(queue.path, template))


def build(*children: QueueConfig, capacity: dict[str, int] | None = None, **root_kwargs) -> dict[str, Queue]:
    """Build a managed tree under root the way a partition does; returns the queues by path."""
    queues: dict[str, Queue] = {}

    def make(config: QueueConfig, parent: Queue | None) -> None:
        queue = Queue(config.name, parent, leaf=not config.is_parent, managed=True)
        if parent is not None:
            parent.children[queue.name] = queue
        configure(queue, config)
        queues[queue.path] = queue
        for child in config.queues:
            make(child, queue)

    make(q("root", *children, parent=True, **root_kwargs), None)
    queues["root"].refresh_limits(capacity)
    return queues


def submit(
    leaf: Queue,
    resource: dict[str, int] | None = None,
    *,
    priority: int = 0,
    repeats: int = 1,
    seq: int | None = None,
    app_id: str | None = None,
) -> Application:
    """Add an application with one pending ask to a leaf, keeping the queue books the way a partition does."""
    app_id = app_id or f"app-{next(_ids)}"
    app = Application.new(app_id, queue_path=leaf.path, submission_seq=next(_ids) if seq is None else seq)
    leaf.applications[app_id] = app
    if resource is not None:
        add_ask(leaf, app, resource, priority=priority, repeats=repeats)
    return app


def add_ask(leaf: Queue, app: Application, resource: dict[str, int], *, priority: int = 0, repeats: int = 1):
    ask = Ask.of(
        allocation_key=f"ask-{next(_ids)}",
        application_id=app.application_id,
        resource=resource,
        priority=priority,
        max_allocations=repeats,
    )
    app.add_ask(ask)
    leaf.add_pending(ask.resource, ask.pending)
    leaf.update_app(app)
    return ask


def allocate(leaf: Queue, app: Application, resource: dict[str, int]) -> None:
    uuid = f"uuid-{next(_ids)}"
    app.add_allocation(
        Allocation(
            uuid=uuid,
            allocation_key="key",
            application_id=app.application_id,
            node_id="node-1",
            resource=resource,
        )
    )
    leaf.add_allocated(resource)
    leaf.update_app(app)


def order_of(queue: Queue) -> list[str]:
    return [item.application_id if queue.is_leaf else item.name for item in queue.order]

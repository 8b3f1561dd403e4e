"""A queue's configuration and lifecycle as one immutable value, and the rules that make the next one.

A ``QueueSpec`` is what a queue is, apart from what the scheduling decisions change (its usage, its
order, its running applications): how it was made (configured, or created by placement from its
parent's child template), its state (Active, Draining), its limits (guaranteed, max, maxapplications),
its ACLs, its own properties and the template it hands its dynamic children. Every change makes a new
value (``configured``, ``drained``, ``tagged``); nothing changes one in place, so a value can be shared
by reference between threads.

In the actor system a queue's actor holds its spec and is its only writer; the partition's registry
and the scheduler's view hold the values it answered, by reference (``Queue.apply_spec``). The
sequential reference applies the same rules directly (``LocalQueueSpecs``).

Plain Python: no pykka.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from typing import Protocol

import attrs

from korral import resource as res
from korral.config.schema import ChildTemplateConfig, QueueConfig
from korral.policies.acl import ACL
from korral.policies.placement import RECOVERY_QUEUE_PATH, tag_value
from korral.records import frozen
from korral.resource import Resource

ROOT = "root"

TAG_RESOURCE_QUOTA = "namespace.resourcequota"
TAG_RESOURCE_GUARANTEED = "namespace.resourceguaranteed"
TAG_RESOURCE_MAX_APPS = "namespace.resourcemaxapps"


class QueueState(enum.StrEnum):
    ACTIVE = "Active"
    DRAINING = "Draining"
    STOPPED = "Stopped"


@frozen
class QueueSpec:
    path: str
    # configured (from the partition's configuration) or created by placement
    managed: bool
    # made as a leaf: a configured queue that is no parent, a dynamic queue at the end of its path
    leaf: bool
    state: QueueState = QueueState.ACTIVE
    # as configured (explicit zeros kept); None: not set. Never changed in place.
    guaranteed: Resource | None = None
    max: Resource | None = None
    max_applications: int = 0
    submit_acl: ACL = attrs.field(factory=ACL.nobody)
    admin_acl: ACL = attrs.field(factory=ACL.nobody)
    # its own properties (what it inherits is its tree's business). Never changed in place.
    properties: Mapping[str, str] = attrs.field(factory=dict)
    # the template its dynamic children are made from (None: its parent's applies)
    child_template: ChildTemplateConfig | None = None
    # what it was made from, children and limits left out: a reload that leaves this alike leaves the
    # queue alone
    source: QueueConfig | ChildTemplateConfig | None = None

    @property
    def is_active(self) -> bool:
        return self.state is QueueState.ACTIVE


def _configured_resource(resource: Mapping[str, int]) -> Resource | None:
    """A configured max or guaranteed as YuniKorn's setResources takes it: as given, explicit zeros
    included, when strictly greater than zero (at least one positive type, no negative); else not set."""
    return dict(resource) if res.strictly_greater_than_zero(resource) else None


def own_config(config: QueueConfig) -> QueueConfig:
    """A queue's configuration without its children's and its user/group limits (not the queue's own);
    a parent for having children stays one."""
    if not config.queues and not config.limits:
        return config
    return attrs.evolve(config, parent=config.is_parent, queues=(), limits=())


def unconfigured(path: str, *, leaf: bool) -> QueueSpec:
    """A queue with nothing configured: the root before its configuration, a parent placement made."""
    return QueueSpec(path=path, managed=path == ROOT, leaf=leaf)


def configured(path: str, config: QueueConfig, previous: QueueSpec | None = None) -> QueueSpec:
    """A queue as ``config`` configures it. Configured again, a draining queue is active; the root's
    max is the partition's capacity, never configured."""
    state = QueueState.STOPPED if previous is not None and previous.state is QueueState.STOPPED else None
    return QueueSpec(
        path=path,
        managed=True,
        leaf=not config.is_parent,
        state=state or QueueState.ACTIVE,
        guaranteed=_configured_resource(config.resources.guaranteed),
        max=None if path == ROOT else _configured_resource(config.resources.max),
        max_applications=config.max_applications,
        submit_acl=ACL.parse(config.submit_acl),
        admin_acl=ACL.parse(config.admin_acl),
        properties=dict(config.properties),
        child_template=config.child_template,
        source=own_config(config),
    )


def templated(path: str, template: ChildTemplateConfig | None) -> QueueSpec:
    """A leaf placement created, with its parent's child template's settings (if any)."""
    if template is None:
        return QueueSpec(path=path, managed=False, leaf=True)
    return QueueSpec(
        path=path,
        managed=False,
        leaf=True,
        guaranteed=_configured_resource(template.resources.guaranteed),
        max=_configured_resource(template.resources.max),
        max_applications=template.max_applications,
        properties=dict(template.properties),
        source=template,
    )


def drained(spec: QueueSpec) -> QueueSpec:
    """A configured queue the configuration no longer has: it takes no new applications and goes once
    empty (queue cleanup)."""
    if spec.state is QueueState.DRAINING:
        return spec
    return attrs.evolve(spec, state=QueueState.DRAINING)  # type: ignore[misc]  # (``frozen``)


def tagged(spec: QueueSpec, tags: Mapping[str, str]) -> QueueSpec:
    """A dynamic queue's limits as an application's namespace tags set them (YuniKorn's AddApplication):
    a max applications tag sets that; a quota or a guarantee tag sets both, the one not given cleared.
    A configured queue and the recovery queue keep theirs."""
    if spec.managed or spec.path == RECOVERY_QUEUE_PATH:
        return spec
    quota = parse_resource_tag(tag_value(tags, TAG_RESOURCE_QUOTA))
    guaranteed = parse_resource_tag(tag_value(tags, TAG_RESOURCE_GUARANTEED))
    max_apps = parse_uint64(tag_value(tags, TAG_RESOURCE_MAX_APPS))
    changed = spec
    if max_apps and max_apps != spec.max_applications:
        changed = attrs.evolve(changed, max_applications=max_apps)  # type: ignore[misc]
    if (quota is not None or guaranteed is not None) and (quota, guaranteed) != (spec.max, spec.guaranteed):
        changed = attrs.evolve(changed, max=quota, guaranteed=guaranteed)  # type: ignore[misc]
    return changed


def parse_resource_tag(value: str) -> Resource | None:
    """A quota tag as YuniKorn reads it: a JSON si.Resource, {"resources": {"memory": {"value": 1000}}},
    with at least one positive quantity and none negative; anything else is ignored (None)."""
    if not value:
        return None
    try:
        data = json.loads(value)
    except ValueError:
        return None
    quantities = _json_field(data, "resources")
    if not isinstance(quantities, dict):
        return None
    parsed: Resource = {}
    for name, quantity in quantities.items():
        if quantity is not None and not isinstance(quantity, dict):
            return None  # not a Quantity: Go's json.Unmarshal fails on the whole tag
        amount = _json_field(quantity, "value")
        if amount is None:
            amount = 0
        if type(amount) is not int or not -(1 << 63) <= amount < 1 << 63:
            return None  # Go's int64 does not take it: the whole tag fails to parse
        parsed[name] = amount
    if any(amount < 0 for amount in parsed.values()) or not any(parsed.values()):
        return None
    return res.prune(parsed)


def _json_field(data: object, name: str) -> object:
    """A field of a JSON object as Go's json.Unmarshal finds it: the exact name, else any case."""
    if not isinstance(data, dict):
        return None
    if name in data:
        return data[name]
    return next((value for key, value in data.items() if key.lower() == name), None)


def parse_uint64(text: str) -> int:
    """Go's strconv.ParseUint(text, 10, 64), 0 when it fails."""
    if not text.isascii() or not text.isdigit() or int(text) >= 1 << 64:
        return 0
    return int(text)


def configured_queues(root: QueueConfig) -> list[tuple[str, QueueConfig]]:
    """Every queue a configuration has, by path (names lower-cased), parents before children."""
    found: list[tuple[str, QueueConfig]] = []
    pending = [(ROOT, root)]
    while pending:
        path, config = pending.pop()
        found.append((path, config))
        pending.extend((f"{path}.{child.name.lower()}", child) for child in reversed(config.queues))
    return found


class QueueSpecWriter(Protocol):
    """Who makes a queue's next spec: its actor in the actor system, the rules directly elsewhere.
    ``prepare`` comes first for each configuration, with the specs the queues hold: a writer may make
    the next specs of all the queues the configuration changes at once."""

    def prepare(self, root: QueueConfig, current: Mapping[str, QueueSpec]) -> None: ...

    def configure(self, path: str, config: QueueConfig, current: QueueSpec | None) -> QueueSpec: ...

    def drain(self, current: QueueSpec) -> QueueSpec: ...

    def tag(self, current: QueueSpec, tags: Mapping[str, str]) -> QueueSpec: ...


class LocalQueueSpecs:
    """The rules applied where the queue tree is (the reference scheduler, a model on its own)."""

    def prepare(self, root: QueueConfig, current: Mapping[str, QueueSpec]) -> None:
        return None

    def configure(self, path: str, config: QueueConfig, current: QueueSpec | None) -> QueueSpec:
        return configured(path, config, current)

    def drain(self, current: QueueSpec) -> QueueSpec:
        return drained(current)

    def tag(self, current: QueueSpec, tags: Mapping[str, str]) -> QueueSpec:
        return tagged(current, tags)


class GivenQueueSpecs:
    """Specs another holder's writer made, taken by reference: the scheduler's view takes the ones the
    partition got from the queue actors. A queue not given gets the rules' (a view on its own)."""

    def __init__(self, specs: Iterable[QueueSpec] = ()) -> None:
        self.given: dict[str, QueueSpec] = {}
        self.offer(specs)

    def prepare(self, root: QueueConfig, current: Mapping[str, QueueSpec]) -> None:
        return None

    def offer(self, specs: Iterable[QueueSpec]) -> None:
        """The specs the next configuration takes (each queue's by its path)."""
        self.given = {spec.path: spec for spec in specs}

    def configure(self, path: str, config: QueueConfig, current: QueueSpec | None) -> QueueSpec:
        given = self.given.get(path)
        return given if given is not None else configured(path, config, current)

    def drain(self, current: QueueSpec) -> QueueSpec:
        given = self.given.get(current.path)
        return given if given is not None else drained(current)

    def tag(self, current: QueueSpec, tags: Mapping[str, str]) -> QueueSpec:
        return tagged(current, tags)

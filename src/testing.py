"""A recording resource manager and request builders: for tests, benchmarks, stress runs and demos.

``RecordingRM`` keeps everything the core tells it (thread-safe) and the RM's own view of its live
allocations, which is what an RM such as the Kubernetes shim would hold.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping

from korral import si
from korral.callback import ResourceManagerCallback

# releases the core makes itself; the RM confirms each by sending it back
CORE_RELEASES = frozenset(
    {
        si.TerminationType.TIMEOUT,
        si.TerminationType.PREEMPTED_BY_SCHEDULER,
        si.TerminationType.PLACEHOLDER_REPLACED,
    }
)


class RecordingRM(ResourceManagerCallback):
    def __init__(
        self, rm_id: str = "rm", predicate: Callable[[si.PredicatesArgs], bool] | None = None
    ) -> None:
        self.rm_id = rm_id
        self.predicate = predicate
        self.lock = threading.Condition()
        # uuid -> allocation: the RM's view of what runs now
        self.live: dict[str, si.Allocation] = {}
        self.allocated_total = 0
        self.allocation_times: dict[str, float] = {}
        self.released: list[si.AllocationRelease] = []
        self.rejected_asks: list[si.RejectedAllocationAsk] = []
        self.accepted_apps: list[str] = []
        self.rejected_apps: dict[str, str] = {}
        self.app_states: dict[str, list[str]] = defaultdict(list)
        self.accepted_nodes: list[str] = []
        self.rejected_nodes: dict[str, str] = {}
        self.events: list[si.EventRecord] = []
        self.scheduling_states: list[si.UpdateContainerSchedulingStateRequest] = []
        self.predicate_calls = 0
        self.foreign: list[si.Allocation] = []
        self.released_asks: list[si.AllocationAskRelease] = []
        # releases the core made (timeouts, replaced placeholders) that this RM has not confirmed yet
        self.to_confirm: list[si.AllocationRelease] = []

    # ---- callbacks ---------------------------------------------------------------------------------

    def update_allocation(self, response: si.AllocationResponse) -> None:
        now = time.perf_counter()
        with self.lock:
            for allocation in response.new:
                if allocation.uuid in self.live:
                    self.foreign.append(allocation)  # the same allocation twice: a bug worth seeing
                self.live[allocation.uuid] = allocation
                self.allocation_times[allocation.uuid] = now
                self.allocated_total += 1
            for release in response.released:
                self.live.pop(release.uuid, None)
                self.released.append(release)
                if release.termination_type in CORE_RELEASES:
                    self.to_confirm.append(release)
            self.released_asks.extend(response.released_asks)
            self.rejected_asks.extend(response.rejected)
            self.lock.notify_all()

    def update_application(self, response: si.ApplicationResponse) -> None:
        with self.lock:
            self.accepted_apps.extend(a.application_id for a in response.accepted)
            for rejected in response.rejected:
                self.rejected_apps[rejected.application_id] = rejected.reason
            for updated in response.updated:
                self.app_states[updated.application_id].append(updated.state)
            self.lock.notify_all()

    def update_node(self, response: si.NodeResponse) -> None:
        with self.lock:
            self.accepted_nodes.extend(n.node_id for n in response.accepted)
            for rejected in response.rejected:
                self.rejected_nodes[rejected.node_id] = rejected.reason
            self.lock.notify_all()

    def predicates(self, args: si.PredicatesArgs) -> bool:
        self.predicate_calls += 1
        return True if self.predicate is None else self.predicate(args)

    def send_event(self, events: list[si.EventRecord]) -> None:
        with self.lock:
            self.events.extend(events)
            self.lock.notify_all()

    def update_container_scheduling_state(self, request: si.UpdateContainerSchedulingStateRequest) -> None:
        with self.lock:
            self.scheduling_states.append(request)
            self.lock.notify_all()

    # ---- reading -----------------------------------------------------------------------------------

    def wait_for(self, condition: Callable[[RecordingRM], bool], timeout: float = 10.0) -> bool:
        with self.lock:
            return self.lock.wait_for(lambda: condition(self), timeout)

    def wait_for_allocations(self, count: int, timeout: float = 30.0) -> bool:
        return self.wait_for(lambda rm: rm.allocated_total >= count, timeout)

    def rejected_asks_by_key(self) -> dict[str, str]:
        """The reason each rejected ask (or existing allocation) was given, by allocation key."""
        with self.lock:
            return {r.allocation_key: r.reason for r in self.rejected_asks}

    def live_by_app(self) -> dict[str, dict[str, int]]:
        """Allocated resources per application, from the RM's own view."""
        totals: dict[str, dict[str, int]] = defaultdict(dict)
        with self.lock:
            for allocation in self.live.values():
                bucket = totals[allocation.application_id]
                for name, quantity in allocation.resource_per_alloc.items():
                    bucket[name] = bucket.get(name, 0) + quantity
        return dict(totals)

    def take_confirmations(self) -> si.AllocationRequest | None:
        """The releases the core made since the last call, echoed back as a shim does once the
        containers stopped: the request that confirms them (None when there are none)."""
        with self.lock:
            releases, self.to_confirm = self.to_confirm, []
        if not releases:
            return None
        return si.AllocationRequest(
            rm_id=self.rm_id,
            releases=si.AllocationReleasesRequest(allocations_to_release=releases),
        )

    def release_reasons(self) -> list[tuple[str, si.TerminationType, str]]:
        with self.lock:
            return [(r.uuid, r.termination_type, r.message) for r in self.released]


class PassivePredicateRM(RecordingRM):
    """A RecordingRM without predicates (the core skips the call entirely)."""

    predicates = ResourceManagerCallback.predicates


# ---- request builders ---------------------------------------------------------------------------------


def register(rm_id: str = "rm", config: str = "") -> si.RegisterResourceManagerRequest:
    return si.RegisterResourceManagerRequest(rm_id=rm_id, config=config, policy_group="queues")


def nodes(
    rm_id: str,
    node_ids: Iterable[str],
    capacity: Mapping[str, int],
    *,
    action: si.NodeAction = si.NodeAction.CREATE,
    partition: str = "",
    occupied: Mapping[str, int] | None = None,
    existing: Iterable[si.Allocation] = (),
) -> si.NodeRequest:
    attributes = {si.NODE_PARTITION: partition} if partition else {}
    existing = tuple(existing)
    return si.NodeRequest(
        rm_id=rm_id,
        nodes=[
            si.NodeInfo(
                node_id=node_id,
                action=action,
                attributes=attributes,
                schedulable_resource=dict(capacity),
                occupied_resource=dict(occupied or {}),
                existing_allocations=[a for a in existing if a.node_id == node_id],
            )
            for node_id in node_ids
        ],
    )


def node_action(rm_id: str, node_id: str, action: si.NodeAction, **fields: object) -> si.NodeRequest:
    return si.NodeRequest(rm_id=rm_id, nodes=[si.NodeInfo(node_id=node_id, action=action, **fields)])  # type: ignore[arg-type]


def applications(
    rm_id: str,
    app_queues: Mapping[str, str],
    *,
    user: str = "user",
    groups: Iterable[str] = (),
    partition: str = "",
    tags: Mapping[str, str] | None = None,
    placeholder_ask: Mapping[str, int] | None = None,
    gang_style: str = "",
    execution_timeout_ms: int = 0,
) -> si.ApplicationRequest:
    """Each application in its queue. A gang application names its placeholders' total
    (``placeholder_ask``) and, optionally, its style ("Soft" or "Hard") and how long its placeholders
    may wait (``execution_timeout_ms``)."""
    return si.ApplicationRequest(
        rm_id=rm_id,
        new=[
            si.AddApplicationRequest(
                application_id=app_id,
                queue_name=queue,
                partition_name=partition,
                ugi=si.UserGroupInformation(user=user, groups=list(groups)),
                tags=dict(tags or {}),
                placeholder_ask=dict(placeholder_ask or {}),
                gang_scheduling_style=gang_style,
                execution_timeout_milliseconds=execution_timeout_ms,
            )
            for app_id, queue in app_queues.items()
        ],
    )


def remove_applications(rm_id: str, app_ids: Iterable[str], partition: str = "") -> si.ApplicationRequest:
    return si.ApplicationRequest(
        rm_id=rm_id,
        remove=[si.RemoveApplicationRequest(application_id=a, partition_name=partition) for a in app_ids],
    )


def asks(
    rm_id: str,
    app_id: str,
    count: int,
    resource: Mapping[str, int],
    *,
    prefix: str = "",
    priority: int = 0,
    max_allocations: int = 1,
    partition: str = "",
    start: int = 0,
    task_group: str = "",
    placeholder: bool = False,
    execution_timeout_ms: int = 0,
) -> si.AllocationRequest:
    """``count`` asks keyed ``{prefix}{index}``; a gang's asks name their ``task_group`` (placeholders
    with ``placeholder=True``, the real asks that replace them without)."""
    prefix = prefix or f"{app_id}-ask-"
    return si.AllocationRequest(
        rm_id=rm_id,
        asks=[
            si.AllocationAsk(
                allocation_key=f"{prefix}{index}",
                application_id=app_id,
                partition_name=partition,
                resource_ask=dict(resource),
                max_allocations=max_allocations,
                priority=priority,
                task_group_name=task_group,
                placeholder=placeholder,
                execution_timeout_milliseconds=execution_timeout_ms,
            )
            for index in range(start, start + count)
        ],
    )


def release(
    rm_id: str,
    app_id: str,
    *,
    uuid: str = "",
    allocation_key: str = "",
    partition: str = "",
    termination: si.TerminationType = si.TerminationType.STOPPED_BY_RM,
    message: str = "released by the RM",
) -> si.AllocationRequest:
    return si.AllocationRequest(
        rm_id=rm_id,
        releases=si.AllocationReleasesRequest(
            allocations_to_release=[
                si.AllocationRelease(
                    partition_name=partition,
                    application_id=app_id,
                    uuid=uuid,
                    allocation_key=allocation_key,
                    termination_type=termination,
                    message=message,
                )
            ]
        ),
    )


def release_asks(
    rm_id: str, app_id: str, allocation_key: str = "", partition: str = ""
) -> si.AllocationRequest:
    return si.AllocationRequest(
        rm_id=rm_id,
        releases=si.AllocationReleasesRequest(
            allocation_asks_to_release=[
                si.AllocationAskRelease(
                    partition_name=partition, application_id=app_id, allocation_key=allocation_key
                )
            ]
        ),
    )

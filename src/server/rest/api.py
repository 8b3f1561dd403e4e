"""The REST API's answers: what each ``/ws/v1`` route returns, computed synchronously from the core.

``RestApi`` looks up partitions, queues, nodes, applications, users and groups, events and history
through the core's snapshot queries (``korral.server.rest.routes`` holds the longer answers). The HTTP
side (aiohttp, its event loop, the worker pool, limits and streams) is ``korral.server.rest.server``: it calls
these on its workers, or inline on its loop for what is published (``WouldBlock`` sends those to a
worker when they would wait).
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import yaml

from korral.config import load_config
from korral.config.validator import GROUP_NAME_RE, QUEUE_NAME_RE, USER_NAME_RE
from korral.info import QueueInfo
from korral.model.naming import partition_without_rm
from korral.policies.placement import PlacementManager
from korral.server.rest import dao, routes
from korral.server.rest.routes import HttpError

if TYPE_CHECKING:
    from korral.core import Core

# yunikorn-core config: event.RESTResponseSize (the stream limits: rest.limits.RestLimits)
MAX_EVENTS_PER_RESPONSE = 10_000
# a published queue tree larger than this is turned into JSON on a worker, not on the event loop
INLINE_MAX_QUEUES = 2_000


class WouldBlock(Exception):
    """The answer would wait on the core (or take long): compute it on a worker thread instead."""


class RestApi:
    """The routes' answers, computed synchronously (on the server's worker threads) from the core."""

    def __init__(self, core: Core) -> None:
        self.core = core
        # the event log has a reader: events for every RM from now on (korral setting log_events)
        core.metrics.events_read = core.metrics.log_events
        self.started_ns = time.time_ns()
        self.instance_uuid = str(uuid.uuid4())
        self._dump_lock = threading.Lock()

    # ---- lookups ----------------------------------------------------------------------------------

    def partition(self, name: str) -> str:
        """The core's name of a partition given by YuniKorn's plain name or the full ``[rm1]default``.

        A plain name several RMs share answers with one of them, as YuniKorn's
        GetPartitionWithoutClusterID does (it takes whichever its map yields): korral takes the one
        whose full name sorts first (``[rm1]default`` before ``[rm2]default``), every time."""
        names = self.core.partition_names()
        if name in names:
            return name
        owners = sorted(full for full in names if partition_without_rm(full) == name.lower())
        if not owners:
            raise HttpError(404, "Partition not found")
        return owners[0]

    @staticmethod
    def _valid_queue(path: str) -> None:
        for part in path.split("."):
            if not QUEUE_NAME_RE.fullmatch(part):
                raise HttpError(
                    400,
                    f"problem in queue query parameter parsing as queue param {path} contains invalid "
                    f"queue name {part}. Queue name must only have alphanumeric characters, - or _, and "
                    "be no longer than 64 characters",
                )

    def queue(self, partition: str, path: str) -> QueueInfo:
        self._valid_queue(path)
        info = self.core.queue(partition, path)
        if info is None:
            raise HttpError(404, "Queue not found")
        return info

    def _queue_infos(self, partition: str, wait: bool) -> list[QueueInfo]:
        """Every queue of the partition as published; ``wait=False``: raise WouldBlock rather than ask
        the core (nothing published in this process) or build a large answer on the caller's thread."""
        published = self.core.published_queues(partition)
        if published is None:
            if not wait:
                raise WouldBlock
            return self.core.queues(partition)
        if not wait and len(published) > INLINE_MAX_QUEUES:
            raise WouldBlock
        return published

    def queue_tree(self, partition: str, path: str, subtree: bool, *, wait: bool = True) -> dict[str, Any]:
        """A queue's document from one snapshot of every queue; its children's too if ``subtree``."""
        self._valid_queue(path)
        infos = {info.path: info for info in self._queue_infos(partition, wait)}
        info = infos.get(path.lower())
        if info is None:
            raise HttpError(404, "Queue not found")
        templates = routes.queue_templates(self.core, partition)
        return self._queue_tree(partition, infos, info, subtree, templates)

    def _queue_tree(
        self,
        partition: str,
        infos: dict[str, QueueInfo],
        info: QueueInfo,
        subtree: bool,
        templates: dict[str, Any],
    ) -> dict[str, Any]:
        """A queue's document, with its children's if ``subtree``."""
        extra = routes.priority_fields(info.properties)
        extra["template"] = routes.template_of(infos, templates, info)
        derived = routes.headroom(infos, info.path), extra
        if not subtree:
            return dao.queue(info, partition, None, *derived)
        children = [
            self._queue_tree(partition, infos, infos[path], subtree, templates)
            for path in info.children
            if path in infos
        ]
        return dao.queue(info, partition, children, *derived)

    # ---- routes -----------------------------------------------------------------------------------

    def partitions(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        documents = []
        infos = self.core.partitions()
        names = routes.display_names(info.name for info in infos)
        for info in infos:
            apps = self.core.applications(info.name) + self.core.completed_applications(info.name)
            containers = sum(len(app.allocations) for app in apps)
            rejected = [r for r in self.core.metrics.rejected_applications if r[0] == info.rm_id]
            documents.append(dao.partition(info, apps, containers))
            documents[-1]["name"] = names[info.name]
            if rejected:
                documents[-1]["applications"]["Rejected"] = len(rejected)
                documents[-1]["applications"]["total"] += len(rejected)
        return documents

    def queues(self, params: Mapping[str, str], query: Mapping[str, str], *, wait: bool = True) -> Any:
        return self.queue_tree(self.partition(params["partition"]), "root", True, wait=wait)

    def one_queue(self, params: Mapping[str, str], query: Mapping[str, str], *, wait: bool = True) -> Any:
        partition = self.partition(params["partition"])
        return self.queue_tree(partition, params["queue"], "subtree" in query, wait=wait)

    def nodes(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        partition = self.partition(params["partition"])
        return [dao.node(info) for info in self.core.nodes(partition)]

    def one_node(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        partition = self.partition(params["partition"])
        info = self.core.node(partition, params["node"])
        if info is None:
            raise HttpError(404, "Node not found")
        return dao.node(info)

    def _rejected(self, partition: str) -> list[dict[str, Any]]:
        return [
            dao.rejected_application(app_id, partition, reason)
            for rm_id, app_id, reason in list(self.core.metrics.rejected_applications)
            if rm_id == rm_of(partition)
        ]

    def applications_by_state(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        partition = self.partition(params["partition"])
        state = params["state"].lower()
        if state == "active":
            status = query.get("status", "").lower()
            if status and status not in dao.ACTIVE_STATES:
                raise HttpError(400, _active_status_message())
            apps = self.core.applications(partition)
            return [dao.application(a) for a in apps if not status or a.state.lower() == status]
        if state == "rejected":
            return self._rejected(partition)
        if state == "completed":
            return [dao.application(a) for a in self.core.completed_applications(partition)]
        raise HttpError(400, "Only following application states are allowed: active, rejected, completed")

    def queue_applications(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        partition = self.partition(params["partition"])
        info = self.queue(partition, params["queue"])
        state = params.get("state")
        if state is not None and state.lower() != "active":
            raise HttpError(400, "Only following application states are allowed: active")
        status = query.get("status", "").lower() if state is not None else ""
        if status and status not in dao.ACTIVE_STATES:
            raise HttpError(400, _active_status_message())
        apps = [a for a in self.core.applications(partition) if a.queue == info.path]
        return [dao.application(a) for a in apps if not status or a.state.lower() == status]

    def one_application(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        partition = self.partition(params["partition"])
        queue_path = params.get("queue")
        info = self.core.application(partition, params["application"])
        if queue_path is not None:
            queue = self.queue(partition, queue_path)
            if info is not None and info.queue != queue.path:
                info = None
        if info is None:
            raise HttpError(404, "Application not found")
        return dao.application(info)

    def _usage(self, kind: str, name: str | None, params: Mapping[str, str]) -> Any:
        """A user's or group's usage (``core.user_usage``/``group_usage``), or every one tracked in the
        partition (``core.users_usage``/``groups_usage``)."""
        partition = self.partition(params["partition"])
        convert = dao.user_usage if kind == "user" else dao.group_usage
        if name is None:
            every = self.core.users_usage if kind == "user" else self.core.groups_usage
            return [convert(usage) for usage in every(partition)]
        pattern = USER_NAME_RE if kind == "user" else GROUP_NAME_RE
        if not pattern.fullmatch(name):
            raise HttpError(400, f"Invalid {kind} name")
        one = self.core.user_usage if kind == "user" else self.core.group_usage
        usage = one(partition, name)
        if usage is None:
            raise HttpError(404, f"{kind.capitalize()} not found")
        return convert(usage)

    def users(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        return self._usage("user", None, params)

    def user(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        return self._usage("user", params["user"], params)

    def groups(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        return self._usage("group", None, params)

    def group(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        return self._usage("group", params["group"], params)

    def placement_rules(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        """The partition's placement rules as its placement manager runs them (recovery last)."""
        partition = self.partition(params["partition"])
        config = self.core.configurations().get(rm_of(partition))
        partition_config = config.partition(partition_without_rm(partition)) if config is not None else None
        if partition_config is None:  # removed since its name was looked up
            raise HttpError(404, "Partition not found")
        return PlacementManager.build(partition_config.placement_rules).describe()

    def config(self, accept_json: bool) -> tuple[str, str]:
        """``/ws/v1/config``: (body, content type); YAML unless the client accepts exactly JSON."""
        configs = self.core.configurations()
        if accept_json:
            return json.dumps(dao.config(configs, yaml_keys=False)) + "\n", "application/json"
        text = yaml.safe_dump(dao.config(configs, yaml_keys=True), sort_keys=False)
        return text, "application/x-yaml"

    def clusters(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        builds = self.core.build_information()
        return [
            dao.cluster(info, self.started_ns, builds.get(info.rm_id, {})) for info in self.core.partitions()
        ]

    def healthcheck(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        snapshots = [
            (info, self.core.nodes(info.name), self.core.applications(info.name))
            for info in self.core.partitions()
        ]
        metrics = self.core.metrics
        errors = int(
            metrics.value("yunikorn_scheduler_container_allocation_attempt_total", {"state": "error"})
        )
        failed = int(metrics.value("yunikorn_scheduler_node", {"state": "failed"}))
        return dao.health(errors, failed, snapshots)

    def events(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        count = MAX_EVENTS_PER_RESPONSE
        if "count" in query:
            count = min(parse_unsigned(query["count"]), MAX_EVENTS_PER_RESPONSE)
            if count == 0:
                raise HttpError(400, '0 is not a valid value for "count"')
        start = parse_unsigned(query["start"]) if "start" in query else 0
        records, lowest, highest = self.core.metrics.events.since(start, count)
        return {
            "InstanceUUID": self.instance_uuid,
            "LowestID": lowest,
            "HighestID": highest,
            "EventRecords": [dao.event(event_id, record) for event_id, record in records],
        }

    # ---- what YuniKorn's web UI reads besides the partition routes (routes.py) ---------------

    def application_history(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        return routes.application_history(self._history())

    def container_history(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        return routes.container_history(self._history())

    def _history(self) -> list[Any]:
        history = self.core.metrics.history
        if history is None:
            raise HttpError(500, "Internal metrics collection is not enabled.")
        return history.records()

    def node_utilizations(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        return routes.every_node_utilization(self.core)

    def metrics_exposition(self) -> bytes:
        """``/ws/v1/metrics``: the node usage gauges from the nodes as they are now, then every metric."""
        return routes.metrics_exposition(self.core)

    def validate_conf(self, body: str) -> Any:
        try:
            load_config(body)
        except Exception as exc:  # every refusal, a bound's too, is YuniKorn's 200 with the reason
            return {"allowed": False, "reason": str(exc)}
        return {"allowed": True}  # reason: omitempty

    def state_dump(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        with self._dump_lock:  # one dump at a time, as YuniKorn
            return routes.state_dump(self, params, query)


def rm_of(partition: str) -> str:
    """The RM that owns a partition, from the core's name: ``[rm1]default`` -> ``rm1``."""
    return partition[1 : partition.index("]")] if partition.startswith("[") and "]" in partition else ""


def _active_status_message() -> str:
    return f"Only following active statuses are allowed: {','.join(dao.ACTIVE_STATES)}"


_DIGITS = re.compile(r"[0-9]+")
UINT64_MAX = (1 << 64) - 1


def parse_unsigned(text: str) -> int:
    """A query's unsigned number as YuniKorn's strconv.ParseUint(text, 10, 64) reads it: 400 for
    anything else, however long (Python's int() refuses over 4,300 digits: that was a 500)."""
    if not _DIGITS.fullmatch(text):
        raise HttpError(400, f'strconv.ParseUint: parsing "{text}": invalid syntax')
    if len(text.lstrip("0")) > 20 or int(text) > UINT64_MAX:
        raise HttpError(400, f'strconv.ParseUint: parsing "{text}": value out of range')
    return int(text)

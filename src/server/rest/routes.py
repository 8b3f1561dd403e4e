"""The routes YuniKorn's web UI calls besides the partition ones, and the HTTP manners of its server.

- ``/ws/v1/history/apps`` and ``/containers``: the core's internal metrics history (``history.py``);
- ``/ws/v1/scheduler/node-utilizations``: per partition and resource type, how many nodes fall in each
  tenth of utilisation (yunikorn-core's handlers.go ``getPartitionNodesUtilJSON``);
- ``OPTIONS`` on every route: 200 with ``Allow`` and YuniKorn's CORS headers (a browser's preflight);
- gzip: a response of 1,400 bytes or more is compressed when ``Accept-Encoding`` accepts gzip (not the
  event stream), as yunikorn-core's ``compressResponse``;
- partition names: with several RMs, the name ``/ws/v1/partitions`` shows for a partition.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler

from korral import log_text
from korral.errors import KorralError
from korral.info import NodeInfo, QueueInfo
from korral.model.naming import partition_without_rm
from korral.model.queue import (
    PREEMPTION_DELAY,
    PRIORITY_OFFSET,
    PRIORITY_POLICY,
    parse_preemption_delay,
    parse_priority_offset,
)
from korral.server.history import HistoryRecord

if TYPE_CHECKING:
    from korral.core import Core
    from korral.server.rest.api import RestApi

JSON = dict[str, Any]
BUCKETS = 10
MIN_COMPRESSION_SIZE = 1400  # yunikorn-core's minCompressionSize
STREAM_PATH = "/ws/v1/events/stream"

log = log_text.logger("korral.rest")


class HttpError(Exception):
    """An answer other than 200: its status and message (the routes' answers raise it)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def cors_headers(method: str = "GET") -> dict[str, str]:
    """yunikorn-core's ``writeHeaders``: what every answer carries."""
    return {
        "Access-Control-Allow-Origin": "*",
        "Access-Control-Allow-Methods": "OPTIONS, POST" if method == "POST" else "GET, OPTIONS",
        "Access-Control-Allow-Headers": "X-Requested-With,Content-Type,Accept,Origin",
    }


# ---- partition names with several RMs ---------------------------------------------------------------


def display_names(full_names: Iterable[str]) -> dict[str, str]:
    """The name each partition is listed under: YuniKorn's plain name (``default``) while one RM owns
    it, the core's full name (``[rm1]default``) when several RMs have a partition of that name - so
    that every name ``/ws/v1/partitions`` lists works in ``/ws/v1/partition/{name}/...``."""
    names = list(full_names)
    owners: dict[str, int] = {}
    for full in names:
        plain = partition_without_rm(full)
        owners[plain] = owners.get(plain, 0) + 1
    return {
        full: full if owners[partition_without_rm(full)] > 1 else partition_without_rm(full) for full in names
    }


# ---- the internal metrics history -------------------------------------------------------------------


def application_history(records: Iterable[HistoryRecord]) -> list[JSON]:
    """``dao.ApplicationHistoryDAOInfo`` per record (omitempty: a zero is left out, as Go does)."""
    return [
        _omit_zero({"timestamp": r.timestamp_ns, "totalApplications": str(r.total_applications)})
        for r in records
    ]


def container_history(records: Iterable[HistoryRecord]) -> list[JSON]:
    """``dao.ContainerHistoryDAOInfo`` per record."""
    return [
        _omit_zero({"timestamp": r.timestamp_ns, "totalContainers": str(r.total_containers)}) for r in records
    ]


def _omit_zero(document: JSON) -> JSON:
    return {key: value for key, value in document.items() if value not in (0, "")}


# ---- node utilisation buckets -----------------------------------------------------------------------


def bucket_of(capacity: int, used: int) -> int:
    """The tenth of utilisation a node falls in: YuniKorn's ``ceil(percent / 10) - 1``, at least 0,
    where percent is CalculateAbsUsedCapacity's whole percentage (0-10 % is bucket 0, 90-100 % 9)."""
    percent = int(used * 100 / capacity) if capacity > 0 else 0
    return min(int(max(math.ceil(percent / 10) - 1, 0)), BUCKETS - 1)


def node_utilizations(rm_id: str, partition_name: str, nodes: Iterable[NodeInfo]) -> JSON:
    """``dao.PartitionNodesUtilDAOInfo``: per resource type a node advertises, the nodes per bucket."""
    buckets: dict[str, list[list[str]]] = {}
    for node in nodes:
        for name, capacity in node.capacity.items():
            lists = buckets.setdefault(name, [[] for _ in range(BUCKETS)])
            used = node.allocated.get(name, 0)
            index = bucket_of(capacity, used) if capacity > 0 else 0
            lists[index].append(node.node_id)
    utilizations = [
        {
            "type": name,
            "utilization": [
                _omit_zero(
                    {
                        "bucketName": f"{k * 10}-{(k + 1) * 10}%",
                        "numOfNodes": len(lists[k]),
                        "nodeNames": lists[k] or "",
                    }
                )
                for k in range(BUCKETS)
            ],
        }
        for name, lists in sorted(buckets.items())
    ]
    document: JSON = {"clusterId": rm_id, "partition": partition_name}
    if utilizations:
        document["utilizations"] = utilizations
    return document


# ---- HTTP manners -----------------------------------------------------------------------------------


def add_options(app: web.Application) -> None:
    """``OPTIONS`` on every route registered so far: 200, its methods in ``Allow``, CORS headers."""
    methods: dict[str, set[str]] = {}
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter")
        if path and route.method not in (hdrs.METH_ANY, hdrs.METH_HEAD):  # HEAD: aiohttp's own
            methods.setdefault(path, set()).add(route.method)
    for path, allowed in methods.items():
        allow = ", ".join(sorted({*allowed, "OPTIONS"}))
        headers = {"Allow": allow, **cors_headers("POST" if "POST" in allowed else "GET")}

        async def options(request: web.Request, headers: Mapping[str, str] = headers) -> web.Response:
            return web.Response(status=200, headers=headers)

        app.router.add_route("OPTIONS", path, options)


def accepts_gzip(header: str) -> bool:
    """yunikorn-core's ``clientAcceptsGzip``: a ``gzip`` token without ``q=0``."""
    for token in header.split(","):
        name, _, quality = token.strip().partition(";")
        if name.strip().lower() != "gzip":
            continue
        return not quality or quality.strip() != "q=0"
    return False


@web.middleware
async def compress(request: web.Request, handler: Handler) -> web.StreamResponse:
    """gzip an answer of ``MIN_COMPRESSION_SIZE`` bytes or more when the client accepts it."""
    response = await handler(request)
    if (
        request.path != STREAM_PATH
        and isinstance(response, web.Response)
        and response.body is not None
        and len(response.body) >= MIN_COMPRESSION_SIZE  # type: ignore[arg-type]
        and accepts_gzip(request.headers.get(hdrs.ACCEPT_ENCODING, ""))
    ):
        response.enable_compression(web.ContentCoding.gzip)
        response.headers.add(hdrs.VARY, hdrs.ACCEPT_ENCODING)
    return response


# ---- queue fields derived from what a queue publishes -----------------------------------------------


def headroom(infos: Mapping[str, QueueInfo], path: str) -> dict[str, int] | None:
    """yunikorn-core's ``getHeadRoom``: what the queue may still be given, the least of its own max
    less allocated and every ancestor's (only the resources a max names count; None: no max above)."""
    info = infos.get(path)
    if info is None:
        return None
    parent_path = path.rpartition(".")[0]
    parent = headroom(infos, parent_path) if parent_path else None
    if not info.max:
        return parent
    own = {name: limit - info.allocated.get(name, 0) for name, limit in info.max.items()}
    if parent is None:
        return own
    return {name: min(value, parent[name]) if name in parent else value for name, value in own.items()}


def go_duration(seconds: float) -> str:
    """A duration as Go's ``time.Duration.String`` writes it: ``30s``, ``1m30s``, ``1h0m0s``, ``500ms``."""
    nanos = round(seconds * 1e9)
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    nanos = abs(nanos)
    if nanos < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if nanos >= size:
                return sign + _trim(nanos / size) + unit
    hours, rest = divmod(nanos, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    text = _trim(rest / 1e9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


def _trim(value: float) -> str:
    return f"{value:.9f}".rstrip("0").rstrip(".")


def priority_fields(properties: Mapping[str, str]) -> JSON:
    """``isPriorityFence``, ``priorityOffset`` and ``preemptionDelay`` from the queue's properties, as
    yunikorn-core reads them (an offset outside int32 or not a number is 0; a delay that is not a
    positive Go duration is the default 30 s)."""
    # the model's own reading of them, so that every reader sees what the scheduler runs with
    offset = parse_priority_offset(properties.get(PRIORITY_OFFSET, "0"))
    delay = parse_preemption_delay(properties.get(PREEMPTION_DELAY))
    return {
        "isPriorityFence": properties.get(PRIORITY_POLICY, "").lower() == "fence",
        "priorityOffset": offset,
        "preemptionDelay": go_duration(delay),
    }


# ---- answers that read the whole core ------------------------------------------------------------


def every_node_utilization(core: Core) -> list[JSON]:
    """``/ws/v1/scheduler/node-utilizations``: every partition, named as ``/ws/v1/partitions`` lists it."""
    infos = core.partitions()
    names = display_names(info.name for info in infos)
    return [node_utilizations(info.rm_id, names[info.name], core.nodes(info.name)) for info in infos]


def metrics_exposition(core: Core) -> bytes:
    """``/ws/v1/metrics``: the node usage gauges from the nodes as they are now, then every metric."""
    metrics = core.metrics
    if metrics.history is not None:  # metrics on
        try:
            nodes = [(n.capacity, n.allocated) for info in core.partitions() for n in core.nodes(info.name)]
        except KorralError as error:
            # a partition (or its nodes) too busy to answer in time: the scrape is still served, the
            # node usage gauges as last read (YuniKorn's are never read at scrape time)
            log.warning("/ws/v1/metrics: node usage not refreshed: %s", error)
        else:
            metrics.node_usage(nodes)
    return metrics.exposition()


def state_dump(api: RestApi, params: Mapping[str, str], query: Mapping[str, str]) -> JSON:
    """yunikorn-core's ``AggregatedStateInfo`` (every field omitempty); korral keeps no event streams
    by name, so ``eventStreams`` is left out."""
    from korral.server.rest import dao

    core = api.core
    partitions = core.partitions()
    applications: list[Any] = []
    nodes = []
    queues = []
    rules = []
    for info in partitions:
        apps = core.applications(info.name) + core.completed_applications(info.name)
        applications.extend(dao.application(a) for a in apps)
        applications.extend(api._rejected(info.name))
        plain = partition_without_rm(info.name)
        node_documents = [dao.node(n) for n in core.nodes(info.name)]
        nodes.append(
            {"partitionName": plain, "nodesInfo": node_documents}
            if node_documents
            else {"partitionName": plain}
        )
        with contextlib.suppress(HttpError):  # a partition without a root: stopping
            queues.append(api.queue_tree(info.name, "root", True))
        with contextlib.suppress(HttpError):  # removed meanwhile
            rules.append({"partition": plain, "rules": api.placement_rules({"partition": info.name}, {})})
    history = core.metrics.history
    records = history.records() if history is not None else []
    configs = core.configurations()
    document = {
        "timestamp": time.time_ns(),
        "partitions": api.partitions(params, query),
        "applications": applications,
        "appHistory": application_history(records),
        "nodes": nodes,
        "clusterInfo": api.clusters(params, query),
        "containerHistory": container_history(records),
        "queues": queues,
        "rmDiagnostics": {"empty": "Resource Manager did not register callback"},
        "logLevel": logging.getLevelName(logging.getLogger("korral").getEffectiveLevel()).lower(),
        "config": dao.config(configs, yaml_keys=False) if configs else None,
        "placementRules": rules,
    }
    return {key: value for key, value in document.items() if value}


# ---- queue templates (yunikorn-core Queue.template, dao.TemplateInfo) ------------------------------


def _template(config: Any) -> JSON | None:
    """``dao.TemplateInfo`` of a child template; None for none or an empty one (template.FromConf)."""
    if config is None:
        return None
    properties = {k: v for k, v in config.properties.items() if v}
    resources = config.resources
    if not (config.max_applications or properties or resources.guaranteed or resources.max):
        return None
    document: JSON = {
        "maxApplications": config.max_applications,
        "maxResource": dict(resources.max),
        "guaranteedResource": dict(resources.guaranteed),
        "properties": dict(config.properties),
    }
    return {key: value for key, value in document.items() if value}


def templates(partition_config: Any) -> dict[str, JSON]:
    """Each configured queue's template by path: its own child template, else (a parent queue) its
    parent's, as yunikorn-core sets and inherits them; a leaf has only its own."""
    found: dict[str, JSON] = {}

    def walk(queue: Any, prefix: str, inherited: JSON | None) -> None:
        path = f"{prefix}.{queue.name}".lower() if prefix else queue.name.lower()
        own = _template(queue.child_template)
        is_parent = queue.parent or bool(queue.queues)
        effective = own if own is not None else (inherited if is_parent else None)
        if effective is not None:
            found[path] = effective
        for child in queue.queues:
            walk(child, path, effective)

    for queue in partition_config.queues if partition_config is not None else ():
        walk(queue, "", None)
    return found


def queue_templates(core: Core, partition: str) -> dict[str, JSON]:
    """The templates of a partition's configured queues (korral's full partition name)."""
    rm_id = partition[1 : partition.index("]")] if partition.startswith("[") and "]" in partition else ""
    config = core.configurations().get(rm_id)
    return templates(config.partition(partition_without_rm(partition)) if config is not None else None)


def template_of(
    infos: Mapping[str, QueueInfo], templates: Mapping[str, JSON], info: QueueInfo
) -> JSON | None:
    """A queue's template: a configured queue's as configured or inherited; a dynamic parent queue
    inherits its nearest ancestor's, a dynamic leaf has none (it was made from it)."""
    if info.path in templates:
        return templates[info.path]
    if info.is_managed or info.is_leaf:
        return None
    parent = info.path.rpartition(".")[0]
    while parent:
        if parent in templates:
            return templates[parent]
        if parent not in infos or infos[parent].is_managed:
            return None
        parent = parent.rpartition(".")[0]
    return None

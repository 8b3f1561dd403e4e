"""``korral simulate --replay FILE``: a cluster's recorded history replayed against one config or two.

What a cluster did -- its applications with their queues and users, their asks with resources, when
each ask came, and how long each of its allocations ran -- replays on the simulated runtime against
another queues.yaml: the asks come at their recorded times, each allocation, wherever and whenever
the config lets korral make it, runs as long as it ran then and is released. How waits, usage and
fairness would have differed is the summary's (or, with ``--compare``, the two summaries').

Two sources (docs/api.md, "korral simulate --replay"):

- YuniKorn's event stream, ``/ws/v1/events/stream`` of a running YuniKorn or korral, one JSON
  record a line (the stream's first line, ``{"InstanceUUID": ...}``, is skipped): an ask from
  ``APP``/``ADD``/``APP_REQUEST`` (YuniKorn: the ask's key and resource) or ``REQUEST``/``ADD``
  (korral: key, application); its allocation and release from ``NODE``/``ADD`` and ``REMOVE`` of
  ``NODE_ALLOC`` (both: key, resource) or ``APP``/``ADD``/``APP_ALLOC`` and ``APP``/``REMOVE``; an
  application's queue from ``QUEUE``/``ADD``/``QUEUE_APP`` or an ``APP``/``SET`` state record naming
  it; the nodes from ``NODE``/``ADD`` (with their capacity where the record has it, else the default
  size of ``korral simulate``'s nodes). The stream names no application's user
  (YuniKorn's user records count usage per queue): those replay as user ``replayed``.
- A CSV with a header: ``submitted`` (seconds from the start), ``application``, ``queue``, ``user``,
  ``ask`` (its key), ``duration`` (seconds its allocation ran; empty: it never ended), and one column
  per resource (``memory`` in bytes, ``vcore`` in millicores, any other name as the RM reports it).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

import korral
from korral import si
from korral.harness.simulate.cluster import NODE_RESOURCE, RM_ID, SimApp, SimulateRun

FIXED_COLUMNS = ("submitted", "application", "queue", "user", "ask", "duration")
UNKNOWN_USER = "replayed"

APP, NODE, QUEUE, REQUEST = 2, 3, 4, 1
SET, ADD, REMOVE = 1, 2, 3
APP_NEW, APP_REQUEST, APP_ALLOC, NODE_ALLOC, QUEUE_APP = 203, 201, 200, 303, 405
ALLOC_REMOVALS = range(500, 505)  # ALLOC_CANCEL, _PREEMPT, _TIMEOUT, _REPLACED, _NODEREMOVED


class HistoryError(ValueError):
    """A recording that cannot be replayed; the message names the file, and the line where it can."""


@attrs.define
class RecordedAsk:
    key: str
    resource: dict[str, int]
    submitted: float  # seconds from the recording's start
    ran: float  # seconds its allocation ran (inf: never released while recorded)


@attrs.define
class RecordedApp:
    app_id: str
    queue: str
    user: str
    asks: list[RecordedAsk]


@attrs.frozen
class History:
    source: str
    apps: list[RecordedApp]  # by the time of their first ask
    nodes: list[tuple[str, dict[str, int]]]  # recorded capacities (empty: none recorded)
    span: float  # seconds from the first record to the last
    skipped: int  # asks the recording never gave a resource for (never allocated, korral's stream)

    @property
    def ask_count(self) -> int:
        return sum(len(app.asks) for app in self.apps)


def read_history(path: Path) -> History:
    """A recording from ``path``: a CSV by its ``.csv`` suffix, else the event stream's JSON lines."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise HistoryError(f"{path}: cannot read it: {error}") from None
    history = _from_csv(text, str(path)) if path.suffix.lower() == ".csv" else _from_events(text, str(path))
    if not history.apps:
        raise HistoryError(f"{path}: no ask with a resource recorded: nothing to replay")
    return history


def _from_csv(text: str, source: str) -> History:
    rows = csv.DictReader(text.splitlines())
    missing = [c for c in FIXED_COLUMNS if c not in (rows.fieldnames or ())]
    if missing:
        raise HistoryError(f"{source}: the CSV lacks the column(s) {', '.join(missing)}")
    apps: dict[str, RecordedApp] = {}
    for number, row in enumerate(rows, 2):
        try:
            resource = {
                name: int(value) for name, value in row.items() if name not in FIXED_COLUMNS and value
            }
            duration = row["duration"].strip()
            ask = RecordedAsk(
                key=row["ask"],
                resource=resource,
                submitted=float(row["submitted"]),
                ran=float(duration) if duration else math.inf,
            )
        except (TypeError, ValueError) as error:
            raise HistoryError(f"{source}, line {number}: {error}") from None
        if not ask.key or not row["application"] or ask.submitted < 0 or ask.ran < 0 or not resource:
            raise HistoryError(
                f"{source}, line {number}: an ask needs a key, an application, times >= 0 and a resource"
            )
        app = apps.setdefault(row["application"], RecordedApp(row["application"], row["queue"], "", []))
        app.user = app.user or row["user"] or UNKNOWN_USER
        app.asks.append(ask)
    span = max(
        (a.submitted + (0 if math.isinf(a.ran) else a.ran) for p in apps.values() for a in p.asks),
        default=0.0,
    )
    return History(source, _ordered(apps.values()), [], span, 0)


def _from_events(text: str, source: str) -> History:
    records: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as error:
            raise HistoryError(f"{source}, line {number}: not JSON: {error}") from None
        if not isinstance(record, dict):
            raise HistoryError(f"{source}, line {number}: not an event record")
        if "InstanceUUID" in record:
            continue
        records.append((number, record))
    if not records:
        return History(source, [], [], 0.0, 0)
    start = min(int(r.get("timestampNano", 0)) for _, r in records)
    queue_of: dict[str, str] = {}
    asked: dict[str, tuple[str, float, dict[str, int]]] = {}  # key -> (application, when, resource)
    allocated: dict[str, tuple[float, dict[str, int]]] = {}
    released: dict[str, float] = {}
    nodes: dict[str, dict[str, int]] = {}
    for number, record in records:
        try:
            kind, change = int(record.get("type", 0)), int(record.get("eventChangeType", 0))
            detail = int(record.get("eventChangeDetail", 0))
            when = (int(record.get("timestampNano", 0)) - start) / 1e9
            resource = {
                name: int(quantity["value"])
                for name, quantity in ((record.get("resource") or {}).get("resources") or {}).items()
            }
        except (TypeError, ValueError, KeyError, AttributeError) as error:
            raise HistoryError(f"{source}, line {number}: not an event record: {error!r}") from None
        object_id, reference = str(record.get("objectID", "")), str(record.get("referenceID", ""))
        if kind == APP and change == ADD and detail == APP_REQUEST:
            asked.setdefault(reference, (object_id, when, resource))
        elif kind == REQUEST and change == ADD:
            asked.setdefault(object_id, (reference, when, resource))
        elif (kind == NODE and detail == NODE_ALLOC) or (
            kind == APP and detail == APP_ALLOC and change == ADD
        ):
            if change == ADD:
                allocated.setdefault(reference, (when, resource))
            elif change == REMOVE:
                released.setdefault(reference, when)
        elif kind == APP and change == REMOVE and detail in ALLOC_REMOVALS:
            released.setdefault(reference, when)
        elif kind == QUEUE and change == ADD and detail == QUEUE_APP:
            queue_of.setdefault(reference, object_id)
        elif kind == APP and change == SET and reference.startswith("root"):
            queue_of.setdefault(object_id, reference)
        elif kind == NODE and change == ADD and detail != NODE_ALLOC:
            nodes[object_id] = resource  # empty when the record has no capacity (korral's): the default
    apps: dict[str, RecordedApp] = {}
    skipped = 0
    for key, (app_id, when, resource) in sorted(asked.items(), key=lambda item: (item[1][1], item[0])):
        allocation = allocated.get(key)
        resource = resource or (allocation[1] if allocation else {})
        if not resource:
            skipped += 1
            continue
        ran = math.inf
        if allocation is not None and key in released:
            ran = max(0.0, released[key] - allocation[0])
        app = apps.setdefault(app_id, RecordedApp(app_id, queue_of.get(app_id, ""), UNKNOWN_USER, []))
        app.asks.append(RecordedAsk(key=key, resource=resource, submitted=when, ran=ran))
    span = (max(int(r.get("timestampNano", 0)) for _, r in records) - start) / 1e9
    return History(source, _ordered(apps.values()), sorted(nodes.items()), span, skipped)


def _ordered(apps: Iterable[RecordedApp]) -> list[RecordedApp]:
    for app in apps:
        app.asks.sort(key=lambda ask: (ask.submitted, ask.key))
    return sorted(apps, key=lambda app: (app.asks[0].submitted, app.app_id))


class HistoryRun(SimulateRun):
    """A SimulateRun whose workload is a recording: its asks at their times, each allocation held as
    long as it was then; the cluster the recording's nodes, or ``nodes`` of the default size."""

    def __init__(self, config: str, history: History, nodes: int, seed: int, label: str = "") -> None:
        self.recording = history
        self.pending_asks = sorted(
            ((ask.submitted, index, app) for app in history.apps for index, ask in enumerate(app.asks)),
            key=lambda entry: (entry[0], entry[2].app_id, entry[1]),
        )
        self.cursor = 0
        super().__init__(config, nodes, max(1.0, math.ceil(history.span)), seed, 1.0, label)

    def node_list(self) -> list[tuple[str, dict[str, int]]]:
        """The recorded nodes (a node recorded without its capacity: the default size), else ``nodes``
        nodes of the default size."""
        return [(n, dict(r or NODE_RESOURCE)) for n, r in self.recording.nodes] or super().node_list()

    def _arrive(self, core: korral.Core, elapsed: float, due: float) -> float:
        new_apps: list[si.AddApplicationRequest] = []
        asks: list[si.AllocationAsk] = []
        while self.cursor < len(self.pending_asks) and self.pending_asks[self.cursor][0] <= elapsed:
            _, index, recorded = self.pending_asks[self.cursor]
            self.cursor += 1
            app = self.apps.get(recorded.app_id)
            if app is None and recorded.app_id not in self.app_queue:
                self._seq += 1
                app = SimApp(
                    app_id=recorded.app_id,
                    queue=recorded.queue,
                    tags={},
                    tasks=len(recorded.asks),
                    resource={},
                    durations=[ask.ran for ask in recorded.asks],
                    submitted=elapsed,
                )
                self.apps[app.app_id] = app
                new_apps.append(
                    si.AddApplicationRequest(
                        application_id=app.app_id,
                        queue_name=app.queue,
                        ugi=si.UserGroupInformation(user=recorded.user),
                    )
                )
            if app is None:  # removed already (every ask of it ran): a late ask of a finished application
                continue
            key = f"{recorded.app_id}-task-{index}"  # the index is how SimulateRun finds the duration
            self.submitted_at[key] = elapsed
            self.asks_submitted += 1
            asks.append(
                si.AllocationAsk(
                    allocation_key=key,
                    application_id=recorded.app_id,
                    resource_ask=dict(recorded.asks[index].resource),
                    max_allocations=1,
                )
            )
        if new_apps:
            core.update_application(si.ApplicationRequest(rm_id=RM_ID, new=new_apps))
        if asks:
            core.update_allocation(si.AllocationRequest(rm_id=RM_ID, asks=asks))
        return self.pending_asks[self.cursor][0] if self.cursor < len(self.pending_asks) else math.inf

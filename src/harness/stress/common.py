"""What every mode of ``korral stress`` shares: settings, configs, the operation log, the recording RMs."""

from __future__ import annotations

import os
import pickle
import random
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from typing import IO, Any

import attrs

from korral import si
from korral import testing as t

# A shrunk sequence must fail on this many fresh replays in a row (see ``StressRun.reproduces``).
REPRODUCTIONS = 3

SETTINGS: dict[str, Any] = {
    "completing_timeout": 0.5,
    "queue_cleanup_interval": 0.5,
    "reservation_delay": 0.2,
    "scheduling_interval": 0.05,
    "placeholder_timeout": 1.0,
}


# User and group limits in every config (the same on every reload, so usage never ends up above one
# legitimately): at most 4 applications per user in the partition and 3 (and 20G memory) in root.a;
# group dev shares 40G and 6 applications. Users take turns by application (``USERS``).
ROOT_USER_LIMITS = """        limits:
          - limit: each user
            users: ["*"]
            maxapplications: 4
          - limit: dev group
            groups: [dev]
            maxresources: {memory: 40000}
            maxapplications: 6
"""
A_USER_LIMITS = """            limits:
              - limit: each user in a
                users: ["*"]
                maxresources: {memory: 20000}
                maxapplications: 3
"""
USERS: tuple[tuple[str, tuple[str, ...]], ...] = (("ann", ("dev",)), ("ben", ("dev", "ops")), ("cid", ()))
LIMITED_GROUPS = ("dev",)


def recovery_nodes(
    node_capacity: dict[str, Any], believed: dict[str, si.Allocation]
) -> tuple[list[si.NodeInfo], dict[str, list[si.Allocation]]]:
    """The SI's recovery of an RM's nodes: each node it knows, in id order, created again with the
    allocations it believes live there; and those allocations by node id (a node it does not know
    may be among them: the caller says what that means)."""
    by_node: dict[str, list[si.Allocation]] = {}
    for allocation in believed.values():
        by_node.setdefault(allocation.node_id, []).append(allocation)
    infos = [
        si.NodeInfo(
            node_id=node_id,
            action=si.NodeAction.CREATE,
            schedulable_resource=capacity,
            existing_allocations=by_node.get(node_id, []),
        )
        for node_id, capacity in sorted(node_capacity.items())
    ]
    return infos, by_node


def rm_config(
    variant: int, *, extra_queue: bool = False, binpacking: bool = False, guarantee: int = 20
) -> str:
    """A config per RM: two leaves with limits, a fair leaf, a parent with a child template."""
    extra = "          - name: d\n" if extra_queue else ""
    policy = "binpacking" if binpacking else "fair"
    return f"""
partitions:
  - name: default
    nodesortpolicy:
      type: {policy}
    placementrules:
      - name: provided
      - name: tag
        value: namespace
        create: true
        parent:
          name: fixed
          value: root.c
    queues:
      - name: root
        submitacl: "*"
{ROOT_USER_LIMITS}        queues:
          - name: a
            resources:
              guaranteed: {{memory: {guarantee}000, vcore: {guarantee // 2}}}
              max: {{memory: {60 + variant * 10}000, vcore: 40}}
{A_USER_LIMITS}          - name: b
            properties:
              application.sort.policy: fair
          - name: c
            parent: true
            childtemplate:
              resources:
                max: {{memory: 30000, vcore: 20}}
{extra}"""


INVALID_CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        resources:
          max: {memory: 1}
"""


@attrs.frozen(kw_only=True)
class Op:
    """One SI call, recorded in issue order so that a run can be replayed."""

    seq: int
    rm: int
    kind: str  # nodes | apps | allocations | config | register
    request: Any
    description: str
    expect_error: bool = False
    # (uuid, application, allocation key) of each allocation the request releases by uuid, as the run
    # knew it when sending: a replay releases the allocation of the same application and key
    released_keys: tuple[tuple[str, str, str], ...] = ()


class OpLog:
    """A run's operations in issue order, for its replay: the newest in memory, the others pickled to
    an anonymous temporary file in chunks, so a long run's memory stays flat (an operation holds its
    whole SI request: ~3 KB, 2 GB over a 600 s run of three RMs)."""

    CHUNK = 2_000

    def __init__(self) -> None:
        self._recent: list[Op] = []
        self._file: IO[bytes] | None = None
        self._chunks = 0
        self._spilled = 0

    def append(self, op: Op) -> None:
        self._recent.append(op)
        if len(self._recent) >= self.CHUNK:
            if self._file is None:
                self._file = tempfile.TemporaryFile()  # noqa: SIM115 (open for the log's life; anonymous)
            self._file.seek(0, os.SEEK_END)
            pickle.dump(self._recent, self._file, protocol=pickle.HIGHEST_PROTOCOL)
            self._chunks += 1
            self._spilled += len(self._recent)
            self._recent = []

    def __len__(self) -> int:
        return self._spilled + len(self._recent)

    def __iter__(self) -> Iterator[Op]:
        if self._file is not None:
            self._file.seek(0)
            for _ in range(self._chunks):
                chunk: list[Op] = pickle.load(self._file)
                yield from chunk
        yield from list(self._recent)


class Violation(Exception):
    pass


class StressRM(t.RecordingRM):
    """Records like RecordingRM, except the events (counted, not kept: nothing checks their text, and
    a run is told of ~4,000 a second); sometimes raises after recording, sometimes is slow."""

    def __init__(self, rm_id: str, seed: int, misbehave: bool) -> None:
        super().__init__(rm_id)
        self._rng = random.Random(seed)
        self.misbehave = misbehave
        self.raised = 0
        # uuid -> (application, allocation key) of every allocation told of: a replay names it by key
        self.keys_of: dict[str, tuple[str, str]] = {}
        self.told: dict[str, si.Allocation] = {}  # uuid -> every allocation told of as new, as told
        self.events_received = 0

    def send_event(self, events: list[si.EventRecord]) -> None:
        with self.lock:
            self.events_received += len(events)
            self.lock.notify_all()

    def core_release_counts(self) -> Counter[str]:
        """The releases the core made that this RM was told of, by termination type name."""
        with self.lock:
            return Counter(
                release.termination_type.name
                for release in self.released
                if release.termination_type in t.CORE_RELEASES
            )

    def released_keys(self, request: Any) -> tuple[tuple[str, str, str], ...]:
        """(uuid, application, allocation key) of each allocation ``request`` releases by a uuid this
        RM was told of (a release the core made names its key itself)."""
        if not isinstance(request, si.AllocationRequest) or request.releases is None:
            return ()
        releases = request.releases.allocations_to_release
        if not isinstance(releases, list):
            return ()
        keys = []
        with self.lock:
            for release in releases:
                if not isinstance(release, si.AllocationRelease) or not release.uuid:
                    continue
                known = self.keys_of.get(release.uuid)
                if known is not None:
                    keys.append((release.uuid, *known))
                elif release.allocation_key:
                    keys.append((release.uuid, release.application_id, release.allocation_key))
        return tuple(keys)

    def update_allocation(self, response: si.AllocationResponse) -> None:
        with self.lock:
            for allocation in response.new:
                self.keys_of[allocation.uuid] = (allocation.application_id, allocation.allocation_key)
                self.told[allocation.uuid] = allocation
        super().update_allocation(response)
        self._misbehave()

    def update_application(self, response: si.ApplicationResponse) -> None:
        super().update_application(response)
        self._misbehave()

    def _misbehave(self) -> None:
        if not self.misbehave:
            return
        roll = self._rng.random()
        if roll < 0.01:
            time.sleep(0.005)
        elif roll < 0.03:
            self.raised += 1
            raise RuntimeError("simulated RM callback failure (after recording)")


class ReplayRM(t.RecordingRM):
    """The RM of a replay: the core's uuids differ from the recorded run's (a new token, another order),
    so a recorded release by uuid is sent for the allocation of the same application and key here."""

    def __init__(self, rm_id: str, recorded_keys: dict[str, tuple[str, str]]) -> None:
        super().__init__(rm_id)
        self.recorded_keys = recorded_keys
        self.uuid_of: dict[tuple[str, str], str] = {}

    def update_allocation(self, response: si.AllocationResponse) -> None:
        with self.lock:
            for allocation in response.new:
                self.uuid_of[(allocation.application_id, allocation.allocation_key)] = allocation.uuid
        super().update_allocation(response)

    def translate(self, request: Any) -> Any:
        """``request`` with each release by a recorded uuid naming this replay's uuid for the same
        allocation (a uuid never told of, such as a hostile one, is sent as recorded)."""
        if not isinstance(request, si.AllocationRequest) or request.releases is None:
            return request
        releases = request.releases.allocations_to_release
        if not isinstance(releases, list):
            return request
        translated = []
        for release in releases:
            if isinstance(release, si.AllocationRelease) and release.uuid in self.recorded_keys:
                with self.lock:
                    uuid = self.uuid_of.get(self.recorded_keys[release.uuid], release.uuid)
                release = attrs.evolve(release, uuid=uuid)
            translated.append(release)
        return attrs.evolve(
            request, releases=attrs.evolve(request.releases, allocations_to_release=translated)
        )


SIMULATED_SETTLE = 3.0  # virtual seconds at the end: completing timeouts, queue cleanup, retries

"""A TCP relay in front of a gRPC server whose connections can be cut on demand: a network failing.

For tests and bench/grpc_chaos.py. ``CuttingProxy(upstream).start()`` listens on loopback and relays
each connection to ``upstream`` ("HOST:PORT"); ``cut()`` closes every connection it relays at that
moment, both ways, as a dropped network would. The clients' channels then reconnect through it.
``drop_at_first_reply=N`` closes each of the first N connections the moment the server's first bytes
have reached the client: a connection that fails just as it comes up.

``ResyncingRM``: an RM over ``korral.connect`` that keeps its own books and resyncs as api.md says
(register again, its applications, then its nodes with their existing allocations, then the asks still
pending) when korral tells it to, or when a call raises ``ResyncRequired``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from korral import si
from korral.callback import ResourceManagerCallback
from korral.errors import SchedulerError

BUFFER = 64 * 1024


class CuttingProxy:
    def __init__(self, upstream: str, host: str = "127.0.0.1", drop_at_first_reply: int = 0) -> None:
        upstream_host, _, port = upstream.rpartition(":")
        self._upstream = (upstream_host, int(port))
        self._listener = socket.create_server((host, 0))
        self.address = f"{host}:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._closed = False
        self.cuts = 0  # cut() calls that closed at least one connection
        self.connections = 0
        self._drops_left = drop_at_first_reply
        self._pumps: set[threading.Thread] = set()
        self._acceptor = threading.Thread(target=self._accept, name="korral-chaos-accept", daemon=True)

    def start(self) -> CuttingProxy:
        self._acceptor.start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self._upstream, timeout=10)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed:
                    client.close()
                    server.close()
                    return
                self._pairs.append((client, server))
                self.connections += 1
                drop = self._drops_left > 0
                self._drops_left -= drop
            for source, sink, once in ((client, server, False), (server, client, drop)):
                pump = threading.Thread(
                    target=self._pump, args=(source, sink, once), name="korral-chaos-pump", daemon=True
                )
                self._pumps.add(pump)
                pump.start()

    def _pump(self, source: socket.socket, sink: socket.socket, once: bool) -> None:
        try:
            while True:
                data = source.recv(BUFFER)
                if not data:
                    break
                sink.sendall(data)
                if once:
                    break
        except OSError:
            pass
        self._drop(source, sink)
        self._pumps.discard(threading.current_thread())

    def _drop(self, one: socket.socket, other: socket.socket) -> None:
        with self._lock:
            self._pairs = [pair for pair in self._pairs if one not in pair]
        for sock in (one, other):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def open_connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def cut(self) -> int:
        """Close every relayed connection now; how many there were."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
            if pairs:
                self.cuts += 1
        for client, server in pairs:
            for sock in (client, server):  # both ends at once: what was in flight is gone
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        return len(pairs)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self._listener.close()
        self.cut()
        if self._acceptor.is_alive():
            self._acceptor.join(10)
        for pump in list(self._pumps):
            pump.join(10)


class ResyncNeeded(Exception):
    """Internal: korral told the RM to resync while it waited."""


class ResyncingRM(ResourceManagerCallback):
    """An RM that knows what it runs and recovers it after korral cut it off.

    Its books: ``live`` (uuid -> allocation it was told of and has not released), ``pending`` (asks sent
    and not yet allocated or rejected), ``unconfirmed`` (releases sent and not yet confirmed by korral,
    which reports each release back). Releases leave ``live`` when sent: the RM's intent. ``in_step``
    says whether korral has answered everything sent since the last resync: a request lost on a
    broken stream shows as a pending ask or an unconfirmed release until the RM resyncs."""

    def __init__(
        self,
        rm_id: str,
        config: str,
        nodes: Mapping[str, Mapping[str, int]],
        applications: Mapping[str, str],
    ) -> None:
        self.rm_id = rm_id
        self.config = config
        self.nodes = {node_id: dict(capacity) for node_id, capacity in nodes.items()}
        self.applications = dict(applications)
        self.live: dict[str, si.Allocation] = {}
        self.pending: dict[str, si.AllocationAsk] = {}
        self.accepted_apps: set[str] = set()
        self.accepted_nodes: set[str] = set()
        # uuids the RM released since it last registered (a uuid is never used twice): what a recovered
        # allocation's echo may still carry. Cleared at each registration, so a long run holds only these
        self.released: set[str] = set()
        self.unconfirmed: set[str] = set()  # of those, the ones korral has not reported released yet
        self.rejected: list[str] = []  # reasons korral rejected something of the RM's
        self.told_to_resync = 0  # resync_required calls
        self.resyncs = 0  # resyncs done
        self.lock = threading.Condition()
        self._resync_reason: str | None = None

    # ---- callbacks (the RM's callback thread) ---------------------------------------------------------

    def update_allocation(self, response: si.AllocationResponse) -> None:
        with self.lock:
            for allocation in response.new:
                self.pending.pop(allocation.allocation_key, None)
                # a recovered allocation is confirmed as new: not one the RM released since
                if allocation.uuid not in self.released:
                    self.live[allocation.uuid] = allocation
            for release in response.released:
                self.live.pop(release.uuid, None)
                self.unconfirmed.discard(release.uuid)
            for rejected in response.rejected:
                self.pending.pop(rejected.allocation_key, None)
                self.rejected.append(f"ask {rejected.allocation_key}: {rejected.reason}")
            self.lock.notify_all()

    def update_application(self, response: si.ApplicationResponse) -> None:
        with self.lock:
            self.accepted_apps.update(accepted.application_id for accepted in response.accepted)
            self.rejected.extend(f"app {r.application_id}: {r.reason}" for r in response.rejected)
            self.lock.notify_all()

    def update_node(self, response: si.NodeResponse) -> None:
        with self.lock:
            self.accepted_nodes.update(accepted.node_id for accepted in response.accepted)
            self.rejected.extend(f"node {r.node_id}: {r.reason}" for r in response.rejected)
            self.lock.notify_all()

    def resync_required(self, reason: str) -> None:
        with self.lock:
            self.told_to_resync += 1
            self._resync_reason = reason
            self.lock.notify_all()

    # ---- the RM's own thread --------------------------------------------------------------------------

    @property
    def must_resync(self) -> bool:
        with self.lock:
            return self._resync_reason is not None

    @property
    def in_step(self) -> bool:
        """Korral has answered every ask and release sent since the last resync, and asks for none."""
        with self.lock:
            return self._resync_reason is None and not self.pending and not self.unconfirmed

    def _wait(self, condition: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.lock:
            while not condition():
                if self._resync_reason is not None:
                    raise ResyncNeeded(self._resync_reason)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"RmID={self.rm_id}: korral did not answer within {timeout}s")
                self.lock.wait(min(left, 0.5))

    def resync(self, remote: Any, timeout: float = 60.0) -> None:
        """Register (again) and re-declare everything the RM runs; retried until it goes through."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._resync_once(remote, max(1.0, deadline - time.monotonic()))
                self.resyncs += 1
                return
            except (SchedulerError, ResyncNeeded, TimeoutError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)  # a cut during the resync: start it again

    def _resync_once(self, remote: Any, timeout: float) -> None:
        # registering drains the old registration's callbacks first: the books are final after it
        remote.register_resource_manager(
            si.RegisterResourceManagerRequest(rm_id=self.rm_id, config=self.config, policy_group="queues"),
            self,
        )
        with self.lock:
            self._resync_reason = None
            # the core's books start afresh from what is declared now: earlier releases are moot, and
            # no echo to come carries a uuid released before (none of those is declared)
            self.unconfirmed.clear()
            self.released.clear()
            self.accepted_apps.clear()
            self.accepted_nodes.clear()
            existing = list(self.live.values())
            pending = list(self.pending.values())
        remote.update_application(
            si.ApplicationRequest(
                rm_id=self.rm_id,
                new=[
                    si.AddApplicationRequest(
                        application_id=app_id, queue_name=queue, ugi=si.UserGroupInformation(user="chaos")
                    )
                    for app_id, queue in self.applications.items()
                ],
            )
        )
        self._wait(lambda: self.accepted_apps >= set(self.applications), timeout)
        remote.update_node(
            si.NodeRequest(
                rm_id=self.rm_id,
                nodes=[
                    si.NodeInfo(
                        node_id=node_id,
                        action=si.NodeAction.CREATE,
                        schedulable_resource=capacity,
                        existing_allocations=[a for a in existing if a.node_id == node_id],
                    )
                    for node_id, capacity in self.nodes.items()
                ],
            )
        )
        self._wait(lambda: self.accepted_nodes >= set(self.nodes), timeout)
        if pending:
            remote.update_allocation(si.AllocationRequest(rm_id=self.rm_id, asks=pending))

    def ask(self, remote: Any, asks: list[si.AllocationAsk]) -> None:
        with self.lock:
            for ask in asks:
                self.pending[ask.allocation_key] = ask
        remote.update_allocation(si.AllocationRequest(rm_id=self.rm_id, asks=asks))

    def release(self, remote: Any, uuids: list[str]) -> None:
        with self.lock:
            released = [self.live.pop(uuid) for uuid in uuids if uuid in self.live]
            self.released.update(a.uuid for a in released)
            self.unconfirmed.update(a.uuid for a in released)
        if released:
            remote.update_allocation(
                si.AllocationRequest(
                    rm_id=self.rm_id,
                    releases=si.AllocationReleasesRequest(
                        allocations_to_release=[
                            si.AllocationRelease(
                                application_id=a.application_id,
                                uuid=a.uuid,
                                termination_type=si.TerminationType.STOPPED_BY_RM,
                            )
                            for a in released
                        ]
                    ),
                )
            )

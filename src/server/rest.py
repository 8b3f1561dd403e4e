"""YuniKorn's REST API (``/ws/v1``, read-only) and Prometheus metrics for one core, on aiohttp.

aiohttp: one well-kept dependency that is both a small HTTP server and streams responses (the event
stream) without a separate ASGI server. The server runs its own event loop on its own thread. The queue
routes, which monitoring polls, are answered on that thread from what the partitions published
(``QueueBoard``): no actor message, no thread hand-off, so an answer does not wait behind the
scheduler for the GIL more often than the loop itself must. Every other request reads the core through
its snapshot queries on a small worker pool, so neither a slow query blocks the loop nor a request ever
touches scheduling state (a query is an ask from outside the actors, answered between the messages
they handle).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import yaml
from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST

from korral.config import MAX_CONFIG_BYTES, load_config
from korral.config.validator import GROUP_NAME_RE, QUEUE_NAME_RE, USER_NAME_RE
from korral.errors import ConfigLimitError
from korral.info import QueueInfo
from korral.model.naming import partition_without_rm
from korral.policies.placement import PlacementManager
from korral.server import dao, rest_routes
from korral.server.rest_limits import ConnectionGuard, RestLimits, tls_context
from korral.server.rest_stream import EventFanout, StreamLimiter, serve_stream
from korral.server.switch_interval import switch_interval as _switch_interval

if TYPE_CHECKING:
    from korral.core import Core

log = logging.getLogger("korral.rest")

WORKERS = 4
START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
# yunikorn-core config: event.RESTResponseSize (the stream limits: rest_limits.RestLimits)
MAX_EVENTS_PER_RESPONSE = 10_000
# a published queue tree larger than this is turned into JSON on a worker, not on the event loop
INLINE_MAX_QUEUES = 2_000
# While a REST server runs, the interpreter hands the GIL over at least this often (Python's default
# is 5 ms): each time the event loop wakes (a connection, a request) it waits that long behind a
# scheduler batch. Measured on the yunikorn shape: the same CPU time per allocation at 1 ms as at 5 ms.
SWITCH_INTERVAL = 0.001


HEADERS = rest_routes.cors_headers()  # yunikorn-core's writeHeaders


class WouldBlock(Exception):
    """The answer would wait on the core (or take long): compute it on a worker thread instead."""


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _json(body: Any, status: int = 200, *, encoded: str | None = None) -> web.Response:
    return web.Response(
        text=encoded if encoded is not None else json.dumps(body),
        status=status,
        content_type="application/json",
        charset="UTF-8",
        headers=HEADERS,
    )


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address must be HOST:PORT, got {address!r}")
    return (host.strip("[]") or "127.0.0.1"), int(port)


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
        """The core's name of a partition given by YuniKorn's plain name or the full ``[rm1]default``."""
        names = self.core.partition_names()
        if name in names:
            return name
        owners = [full for full in names if partition_without_rm(full) == name.lower()]
        if len(owners) > 1:
            choices = ", ".join(owners)
            raise HttpError(
                400, f"Partition {name} is owned by more than one resource manager: use one of {choices}"
            )
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
        templates = rest_routes.queue_templates(self.core, partition)
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
        extra = rest_routes.priority_fields(info.properties)
        extra["template"] = rest_routes.template_of(infos, templates, info)
        derived = rest_routes.headroom(infos, info.path), extra
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
        names = rest_routes.display_names(info.name for info in infos)
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
            return json.dumps(dao.config(configs, yaml_keys=False)), "application/json"
        text = yaml.safe_dump(dao.config(configs, yaml_keys=True), sort_keys=False)
        return text, "application/x-yaml"

    def clusters(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        return [dao.cluster(info, self.started_ns) for info in self.core.partitions()]

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
            count = min(_unsigned(query["count"]), MAX_EVENTS_PER_RESPONSE)
            if count == 0:
                raise HttpError(400, '0 is not a valid value for "count"')
        start = _unsigned(query["start"]) if "start" in query else 0
        records, lowest, highest = self.core.metrics.events.since(start, count)
        return {
            "InstanceUUID": self.instance_uuid,
            "LowestID": lowest,
            "HighestID": highest,
            "EventRecords": [dao.event(event_id, record) for event_id, record in records],
        }

    # ---- what YuniKorn's web UI reads besides the partition routes (rest_routes.py) ---------------

    def application_history(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        return rest_routes.application_history(self._history())

    def container_history(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        return rest_routes.container_history(self._history())

    def _history(self) -> list[Any]:
        history = self.core.metrics.history
        if history is None:
            raise HttpError(500, "Internal metrics collection is not enabled.")
        return history.records()

    def node_utilizations(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        return rest_routes.every_node_utilization(self.core)

    def metrics_exposition(self) -> bytes:
        """``/ws/v1/metrics``: the node usage gauges from the nodes as they are now, then every metric."""
        return rest_routes.metrics_exposition(self.core)

    def validate_conf(self, body: str) -> Any:
        try:
            load_config(body)
        except ConfigLimitError as exc:  # refused before it could be judged (docs/api.md): a bad request
            raise HttpError(400, str(exc)) from None
        except Exception as exc:  # every reason a config is refused, as YuniKorn's reason text
            return {"allowed": False, "reason": str(exc)}
        return {"allowed": True}  # reason: omitempty

    def state_dump(self, params: Mapping[str, str], query: Mapping[str, str]) -> Any:
        with self._dump_lock:  # one dump at a time, as YuniKorn
            return rest_routes.state_dump(self, params, query)


def rm_of(partition: str) -> str:
    """The RM that owns a partition, from the core's name: ``[rm1]default`` -> ``rm1``."""
    return partition[1 : partition.index("]")] if partition.startswith("[") and "]" in partition else ""


def _active_status_message() -> str:
    return f"Only following active statuses are allowed: {','.join(dao.ACTIVE_STATES)}"


_DIGITS = re.compile(r"[0-9]+")
UINT64_MAX = (1 << 64) - 1


def _unsigned(text: str) -> int:
    """A query's unsigned number as YuniKorn's strconv.ParseUint(text, 10, 64) reads it: 400 for
    anything else, however long (Python's int() refuses over 4,300 digits: that was a 500)."""
    if not _DIGITS.fullmatch(text):
        raise HttpError(400, f'strconv.ParseUint: parsing "{text}": invalid syntax')
    if len(text.lstrip("0")) > 20 or int(text) > UINT64_MAX:
        raise HttpError(400, f'strconv.ParseUint: parsing "{text}": value out of range')
    return int(text)


class RestServer:
    """The REST API of one core on ``host:port``, on its own thread and event loop."""

    def __init__(
        self,
        core: Core,
        address: str,
        *,
        switch_interval: float | None = SWITCH_INTERVAL,
        tls: ssl.SSLContext | Mapping[str, Any] | None = None,
        **limits: Any,
    ) -> None:
        """``switch_interval``: the longest GIL hand-off while serving (None: leave the process's);
        ``tls``: serve HTTPS (rest_limits.tls_context); ``limits``: rest_limits.RestLimits' settings."""
        self.host, self.port = parse_address(address)
        self.limits = RestLimits.of(limits)
        self._ssl = tls_context(tls)
        self._guard = ConnectionGuard(self.limits)  # every connection through it (rest_limits)
        self._server: asyncio.AbstractServer | None = None
        self._fanout = EventFanout(core.metrics.events, self.limits)
        self._stream_limiter = StreamLimiter(self.limits)
        self.switch_interval = switch_interval
        self._switch_held = False
        self.api = RestApi(core)
        self.metrics = core.metrics
        self._executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="korral-rest")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self.url = ""

    # ---- lifecycle --------------------------------------------------------------------------------

    def start(self) -> str:
        self._thread = threading.Thread(target=self._serve, name="korral-rest", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT):
            raise TimeoutError(f"REST server on {self.host}:{self.port} did not start")
        if self._failure is not None:
            raise self._failure
        if self.switch_interval is not None:
            _switch_interval.acquire(self.switch_interval)
            self._switch_held = True
        return self.url

    def _serve(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._start_site())
        except BaseException as exc:
            self._failure = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(self._shutdown())
            loop.close()

    async def _start_site(self) -> None:
        limits = self.limits
        self._runner = web.AppRunner(
            self._app(),
            access_log=None,
            shutdown_timeout=STOP_TIMEOUT,
            keepalive_timeout=limits.idle_timeout,
            handler_cancellation=True,  # a client gone: its stream (or wait) ends at once, its slot freed
        )
        await self._runner.setup()
        assert self._runner.server is not None
        # every connection through the guard: counted, capped, closed when slow or idle (rest_limits)
        self._server, self.url = await self._guard.listen(
            self._runner.server, self.host, self.port, self._ssl
        )

    async def _shutdown(self) -> None:
        self._fanout.close()  # ends the streams' responses
        self._guard.stop()
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def close(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
            thread.join(STOP_TIMEOUT * 2)
        # a query in flight finishes (the core still runs: servers stop first); none is left behind
        self._executor.shutdown(wait=True, cancel_futures=True)
        if self._switch_held:
            self._switch_held = False
            _switch_interval.release()

    # ---- routing ----------------------------------------------------------------------------------

    def _app(self) -> web.Application:
        # a body one byte over the config size limit still reaches validate-conf, which says so (400)
        app = web.Application(
            middlewares=[self._guard.middleware, self._errors, rest_routes.compress],
            client_max_size=MAX_CONFIG_BYTES + 1,
        )
        api = self.api
        get: list[tuple[str, Callable[..., Any]]] = [
            ("/ws/v1/partitions", api.partitions),
            ("/ws/v1/partition/{partition}/placementrules", api.placement_rules),
            ("/ws/v1/partition/{partition}/queues", api.queues),
            ("/ws/v1/partition/{partition}/queue/{queue}", api.one_queue),
            ("/ws/v1/partition/{partition}/nodes", api.nodes),
            ("/ws/v1/partition/{partition}/node/{node}", api.one_node),
            ("/ws/v1/partition/{partition}/applications/{state}", api.applications_by_state),
            ("/ws/v1/partition/{partition}/queue/{queue}/applications", api.queue_applications),
            ("/ws/v1/partition/{partition}/queue/{queue}/applications/{state}", api.queue_applications),
            ("/ws/v1/partition/{partition}/application/{application}", api.one_application),
            ("/ws/v1/partition/{partition}/queue/{queue}/application/{application}", api.one_application),
            ("/ws/v1/partition/{partition}/usage/users", api.users),
            ("/ws/v1/partition/{partition}/usage/user/{user}", api.user),
            ("/ws/v1/partition/{partition}/usage/groups", api.groups),
            ("/ws/v1/partition/{partition}/usage/group/{group}", api.group),
            ("/ws/v1/clusters", api.clusters),
            ("/ws/v1/scheduler/healthcheck", api.healthcheck),
            ("/ws/v1/scheduler/node-utilizations", api.node_utilizations),
            ("/ws/v1/history/apps", api.application_history),
            ("/ws/v1/history/containers", api.container_history),
            ("/ws/v1/events/batch", api.events),
            ("/ws/v1/fullstatedump", api.state_dump),
            ("/debug/fullstatedump", api.state_dump),
        ]
        # answered on the event loop when what they read is published (RestApi._queue_infos)
        inline = {api.queues, api.one_queue}
        for path, answer in get:
            app.router.add_get(path, self._route(answer, inline=answer in inline), allow_head=False)
        app.router.add_get("/ws/v1/metrics", self._metrics)
        app.router.add_get("/ws/v1/config", self._config)
        app.router.add_get("/ws/v1/events/stream", self._event_stream)
        app.router.add_post("/ws/v1/validate-conf", self._validate_conf)
        rest_routes.add_options(app)
        return app

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:  # unknown route or method: YuniKorn's error body
            if exc.status < 400:
                raise
            return _json(dao.error(exc.status, exc.reason), exc.status)
        except ConnectionError as exc:  # the client left before its answer: one line, no traceback
            log.info("REST %s %s: the client left (%s)", request.method, request.path, exc)
            return _json(dao.error(500, "the client left"), 500)  # never delivered; raised, aiohttp logs it
        except Exception as exc:  # a fault of the server's own: the client still gets an error body
            log.exception("REST %s %s failed", request.method, request.path)
            return _json(dao.error(500, str(exc)), 500)

    def _route(self, answer: Callable[..., Any], *, inline: bool = False) -> Callable[..., Any]:
        async def handle(request: web.Request) -> web.Response:
            params = dict(request.match_info)
            query = dict(request.query)
            if inline:
                try:
                    return _json(None, encoded=json.dumps(answer(params, query, wait=False)))
                except WouldBlock:
                    pass
                except HttpError as exc:
                    return _json(dao.error(exc.status, exc.message), exc.status)
            return await self._answer(answer, params, query)

        return handle

    async def _answer(self, answer: Callable[..., Any], *args: Any) -> web.Response:
        loop = asyncio.get_running_loop()

        def encoded() -> str:  # the answer and its encoding off the loop: a big one blocks no request
            return json.dumps(answer(*args))

        try:
            text = await loop.run_in_executor(self._executor, encoded)
        except HttpError as exc:
            return _json(dao.error(exc.status, exc.message), exc.status)
        except Exception as exc:
            log.exception("REST %s failed", getattr(answer, "__name__", answer))
            return _json(dao.error(500, str(exc)), 500)
        return _json(None, encoded=text)

    async def _config(self, request: web.Request) -> web.Response:
        # read from what the RMProxy published: no wait, answered on the loop
        body, content_type = self.api.config(request.headers.get("Accept") == "application/json")
        return web.Response(text=body, content_type=content_type, charset="UTF-8", headers=HEADERS)

    async def _metrics(self, request: web.Request) -> web.Response:
        loop = asyncio.get_running_loop()
        body = await loop.run_in_executor(self._executor, self.api.metrics_exposition)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _validate_conf(self, request: web.Request) -> web.Response:
        try:  # the body within the header timeout too: a stalled upload holds no connection for good
            raw = await asyncio.wait_for(request.read(), self.limits.header_timeout)
        except TimeoutError:
            return _json(dao.error(408, "the request body did not arrive in time"), 408)
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return _json({"allowed": False, "reason": f"the configuration is not UTF-8 text: {exc}"})
        return await self._answer(self.api.validate_conf, body)

    async def _event_stream(self, request: web.Request) -> web.StreamResponse:
        """One JSON document per line: the instance id, then every event as it is logged (rest_stream)."""
        count = 0
        if "count" in request.query:
            try:
                count = min(_unsigned(request.query["count"]), MAX_EVENTS_PER_RESPONSE)
            except HttpError as exc:
                return _json(dao.error(exc.status, exc.message), exc.status)
        return await serve_stream(
            request,
            fanout=self._fanout,
            limiter=self._stream_limiter,
            instance_uuid=self.api.instance_uuid,
            count=count,
            error=lambda status, message: _json(dao.error(status, message), status),
            headers=HEADERS,
            connection=self._guard.of(request.transport),
        )

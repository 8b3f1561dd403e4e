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
import ssl
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST

from korral import log_text
from korral.config import MAX_CONFIG_BYTES
from korral.config.yaml_reader import too_large
from korral.server.rest import dao, routes
from korral.server.rest.api import (
    MAX_EVENTS_PER_RESPONSE,
    RestApi,
    WouldBlock,
    parse_unsigned,
)
from korral.server.rest.limits import HTTP_LOG, ConnectionGuard, RestLimits, tls_context
from korral.server.rest.routes import HttpError
from korral.server.rest.stream import EventFanout, StreamLimiter, serve_stream
from korral.server.switch_interval import SERVING_SWITCH_INTERVAL
from korral.server.switch_interval import switch_interval as _switch_interval

if TYPE_CHECKING:
    from korral.core import Core

log = log_text.logger("korral.rest")

WORKERS = 4
START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
# the switch interval korral serve asks for (korral.server.switch_interval says why); a server leaves the
# process's own alone unless given one
SWITCH_INTERVAL = SERVING_SWITCH_INTERVAL


HEADERS = routes.cors_headers()  # yunikorn-core's writeHeaders


def _refused(reason: str) -> web.Response:
    return _json({"allowed": False, "reason": reason})


async def _read_at_most(request: web.Request, limit: int) -> bytes | None:
    """The request's body, or None once it is longer than ``limit`` (what was read is dropped)."""
    if request.content_length is not None and request.content_length > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await request.content.read(1 << 16)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)


def _json(body: Any, status: int = 200, *, encoded: str | None = None) -> web.Response:
    return web.Response(
        # a newline after the document, as YuniKorn's JSON encoder writes (curl outputs do not run together)
        text=(encoded if encoded is not None else json.dumps(body)) + "\n",
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


class RestServer:
    """The REST API of one core on ``host:port``, on its own thread and event loop."""

    def __init__(
        self,
        core: Core,
        address: str,
        *,
        switch_interval: float | None = None,
        tls: ssl.SSLContext | Mapping[str, Any] | None = None,
        **limits: Any,
    ) -> None:
        """``switch_interval``: the longest GIL hand-off while serving, the whole process's (None, the
        default: leave the process's alone; ``korral serve`` gives ``SWITCH_INTERVAL``);
        ``tls``: serve HTTPS (rest.limits.tls_context); ``limits``: rest.limits.RestLimits' settings."""
        self.host, self.port = parse_address(address)
        self.limits = RestLimits.of(limits)
        self._ssl = tls_context(tls)
        self._guard = ConnectionGuard(self.limits)  # every connection through it (rest.limits)
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
            logger=HTTP_LOG,  # a malformed request is one DEBUG line, not a traceback (rest.limits)
        )
        await self._runner.setup()
        assert self._runner.server is not None
        # every connection through the guard: counted, capped, closed when slow or idle (rest.limits)
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
        # validate-conf reads its own body, bounded (_read_at_most); no other route takes one
        app = web.Application(
            middlewares=[self._guard.middleware, self._errors, routes.compress],
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
        routes.add_options(app)
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
        """YuniKorn's answer to every refusal: 200 with ``allowed: false`` and the reason. Its admission
        controller admits a config on any other answer, so no refusal here is an HTTP error."""
        try:  # the body within the header timeout too: a stalled upload holds no connection for good
            raw = await asyncio.wait_for(_read_at_most(request, MAX_CONFIG_BYTES), self.limits.header_timeout)
        except TimeoutError:
            return _refused("the request body did not arrive in time")
        if raw is None:  # past the size bound: refused by its length, never read whole
            return _refused(too_large(request.content_length))
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return _refused(f"the configuration is not UTF-8 text: {exc}")
        return await self._answer(self.api.validate_conf, body)

    async def _event_stream(self, request: web.Request) -> web.StreamResponse:
        """One JSON document per line: the instance id, then every event as it is logged (rest.stream)."""
        count = 0
        if "count" in request.query:
            try:
                count = min(parse_unsigned(request.query["count"]), MAX_EVENTS_PER_RESPONSE)
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

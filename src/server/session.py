"""One remote RM's session on the gRPC server: its streams, what is held for it, when it must resync.

Everything here runs on the server's event loop thread only.

- A stream carries one RM, fixed by its first request; the responses of that RM's current registration
  (its ``generation``) go on the latest stream of each kind, or are held until one opens. An ordered
  stream (``UpdateInOrder``) carries all three kinds, each response framed as an ``OrderedResponse``.
- Held and queued responses are bounded per RM, by count per kind and by bytes in total. Past either
  bound the RM is cut off: its streams end with ``RESOURCE_EXHAUSTED``, what was held is dropped and
  every later stream or call for it is ``FAILED_PRECONDITION`` until it registers again (resync).
- A stream that breaks (the client cancels it, its connection drops) after korral handed it responses
  may have lost them on the way: the RM is cut off the same way and must resync. A stream korral ends
  itself (an abort, a shutdown) loses nothing: gRPC delivers what was written before the status, and
  what was not yet written waits for the RM's next stream.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any

import grpc

from korral import log_text

log = log_text.logger("korral.grpc")

ALLOCATION, APPLICATION, NODE = "allocation", "application", "node"
KINDS = (ALLOCATION, APPLICATION, NODE)
ORDERED = "ordered"  # UpdateInOrder: one stream for all three kinds
# the field number of each kind in OrderedRequest / OrderedResponse (si.proto); the oneof's field
# names are the kinds' names
ORDERED_FIELDS = {ALLOCATION: 1, APPLICATION: 2, NODE: 3}
MAX_BACKLOG = 10_000  # responses held per RM and stream kind
MAX_BACKLOG_BYTES = 64 * 1024 * 1024  # bytes of responses held per RM, all kinds together
RESYNC_METADATA = "korral-resync"  # trailing metadata of a refusal that registering again cures
# metadata of an UpdateConfiguration by which an RM leaves (korral's addition: the SI has no call for it)
LEAVE_METADATA = "korral-leave"
RESYNC = "register again to resync (re-declaring its applications, nodes and existing allocations)"

CLOSE = object()


def frame(kind: str, data: bytes) -> bytes:
    """The OrderedRequest/OrderedResponse holding the serialized message ``data`` of ``kind``: its
    oneof field's key, length and bytes (protobuf's encoding of a message field), without re-encoding
    what is already serialized."""
    size = len(data)
    prefix = bytearray(((ORDERED_FIELDS[kind] << 3) | 2,))
    while size >= 0x80:
        prefix.append((size & 0x7F) | 0x80)
        size >>= 7
    prefix.append(size)
    return bytes(prefix) + data


class Abort:
    def __init__(self, code: grpc.StatusCode, details: str, resync: bool = False) -> None:
        self.code = code
        self.details = details
        self.resync = resync

    @property
    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return ((RESYNC_METADATA, "1"),) if self.resync else ()


class Stream:
    """One open bidirectional call: what to write on it, in order (``(kind, data)`` responses, then an
    ``Abort`` or ``CLOSE``)."""

    def __init__(self, kind: str, peer: str) -> None:
        self.kind = kind  # one of KINDS, or ORDERED
        self.peer = peer
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.first_rm_id: str | None = None  # the RM the stream carries, fixed by its first request
        self.session: RmSession | None = None  # that RM's session, when it registered over gRPC
        self.generation = 0
        self.sent_any = False  # korral handed the transport at least one response on it
        self.ended_by_server = False
        self.client_closed = False  # the client ended its requests: a goodbye, not a break
        self.task: asyncio.Task[Any] | None = None  # the call's handler
        self.writing = False  # the handler waits in a write (a client that does not read)
        self.interrupt: Abort | None = None

    @property
    def rm_id(self) -> str | None:
        return self.session.rm_id if self.session is not None else None

    def close(self, abort: Abort | None = None, *, drop: bool = False) -> None:
        """End the call after what it holds (with an error: abort), or with drop at once: what it holds
        is dropped and a write the client does not take is interrupted (the RM resyncs)."""
        self.ended_by_server = True
        if not drop:
            self.queue.put_nowait(abort if abort is not None else CLOSE)
            return
        assert abort is not None
        self.unsent()
        self.queue.put_nowait(abort)
        if self.writing and self.task is not None and self.interrupt is None:
            self.interrupt = abort
            self.task.cancel()

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of response it carries."""
        return KINDS if self.kind == ORDERED else (self.kind,)

    def wire(self, kind: str, data: bytes) -> bytes:
        """What is written on the call for a response of ``kind``."""
        return frame(kind, data) if self.kind == ORDERED else data

    def unsent(self) -> list[tuple[str, bytes]]:
        items = []
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if isinstance(item, tuple):
                items.append(item)
        return items


class RmSession:
    """Where one RM's responses go: its latest stream of each kind, or held."""

    def __init__(self, rm_id: str, max_backlog: int, max_backlog_bytes: int) -> None:
        self.rm_id = rm_id
        self.max_backlog = max_backlog
        self.max_backlog_bytes = max_backlog_bytes
        self.generation = 0  # one per registration
        self.peer = ""  # the connection the RM speaks from
        self.identity: tuple[bytes, ...] = ()  # its client certificate's identities (mutual TLS)
        self.streams: dict[str, Stream | None] = dict.fromkeys(KINDS)
        self.open: set[Stream] = set()  # every open stream of the current registration
        # responses with no stream of their kind open, in the core's order
        self.held: collections.deque[tuple[str, bytes]] = collections.deque()
        self.unwritten: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.unwritten_bytes = 0
        self.resync: str | None = None  # why the RM must register again; None: in sync

    @property
    def live(self) -> bool:
        return bool(self.open)

    def backlog(self) -> tuple[int, int]:
        """(responses, bytes) held or queued for the RM and not yet written."""
        return sum(self.unwritten.values()), self.unwritten_bytes

    # ---- registration ---------------------------------------------------------------------------------

    def begin_registration(self) -> int:
        """A registration is under way: what the previous one had not delivered is stale from now on."""
        self.generation += 1
        self._detach(
            Abort(
                grpc.StatusCode.ABORTED,
                f"RmID={self.rm_id} registered again: this stream belonged to its previous registration",
            )
        )
        self.resync = None
        return self.generation

    def registered(self, peer: str, identity: tuple[bytes, ...]) -> None:
        self.peer = peer
        self.identity = identity

    def registration_failed(self, error: str, was_registered: bool) -> None:
        if was_registered:  # the previous registration's responses were dropped meanwhile
            self.cut_off(
                f"RmID={self.rm_id}: registering again failed ({error}): {RESYNC}",
                code=grpc.StatusCode.FAILED_PRECONDITION,
            )

    # ---- streams --------------------------------------------------------------------------------------

    def attach(self, stream: Stream) -> None:
        stream.session = self
        stream.generation = self.generation
        self.open.add(stream)
        self.peer = stream.peer
        self.bind(stream)

    def bind(self, stream: Stream) -> None:
        """Responses of the stream's kinds go on it from now on, after what was held, in order."""
        kinds = stream.kinds
        if all(self.streams[kind] is stream for kind in kinds):
            return
        for kind in kinds:
            self.streams[kind] = stream
        kept: collections.deque[tuple[str, bytes]] = collections.deque()
        for item in self.held:
            if item[0] in kinds:
                stream.queue.put_nowait(item)
            else:
                kept.append(item)
        self.held = kept

    def ended(self, stream: Stream) -> None:
        """The stream's call is over: keep what it did not write, or cut the RM off if it broke."""
        self.open.discard(stream)
        if stream.generation != self.generation or self.resync is not None:
            return
        for kind in stream.kinds:
            if self.streams[kind] is stream:
                self.streams[kind] = None
        unsent = stream.unsent()
        if stream.ended_by_server or not stream.sent_any:
            self.held.extendleft(reversed(unsent))
            if stream.client_closed:
                log.info("RmID=%s closed its %s stream", self.rm_id, stream.kind)
            return
        self.cut_off(
            f"RmID={self.rm_id}: its {stream.kind} stream broke after korral had sent responses on it; "
            f"they may not have reached the RM: {RESYNC}",
            code=grpc.StatusCode.FAILED_PRECONDITION,
        )

    # ---- responses ------------------------------------------------------------------------------------

    def deliver(self, generation: int, kind: str, data: bytes) -> None:
        if generation != self.generation or self.resync is not None:
            return  # a previous registration's, or the RM must resync anyway
        self.unwritten[kind] += 1
        self.unwritten_bytes += len(data)
        if self.unwritten[kind] > self.max_backlog:
            self.cut_off(
                f"RmID={self.rm_id}: more than {self.max_backlog} {kind} responses not read by the RM; "
                f"they were dropped: {RESYNC}"
            )
            return
        if self.unwritten_bytes > self.max_backlog_bytes:
            self.cut_off(
                f"RmID={self.rm_id}: more than {self.max_backlog_bytes} bytes of responses not read by "
                f"the RM; they were dropped: {RESYNC}"
            )
            return
        stream = self.streams[kind]
        if stream is None:
            self.held.append((kind, data))
        else:
            stream.queue.put_nowait((kind, data))

    def written(self, kind: str, size: int) -> None:
        self.unwritten[kind] = max(0, self.unwritten[kind] - 1)
        self.unwritten_bytes = max(0, self.unwritten_bytes - size)

    def cut_off(self, reason: str, code: grpc.StatusCode = grpc.StatusCode.RESOURCE_EXHAUSTED) -> None:
        """The RM must resync: its streams end, nothing more is held for this registration."""
        if self.resync is not None:
            return
        self.resync = reason
        # a backlog overflow is the RM failing to keep up; a broken stream is as often an RM leaving
        # (its process ends) as a failing network: the RM hears of it on its next call either way
        level = logging.ERROR if code == grpc.StatusCode.RESOURCE_EXHAUSTED else logging.INFO
        log.log(level, "%s", reason)
        self._detach(Abort(code, reason, resync=True))

    def leave(self) -> None:
        """The RM left: its streams end (OK, after what they hold); nothing more is held or sent."""
        self.resync = f"RmID={self.rm_id} left"
        for stream in list(self.open):
            stream.close()
        self.open.clear()
        self.held.clear()
        for kind in KINDS:
            self.streams[kind] = None

    def _detach(self, abort: Abort) -> None:
        for stream in list(self.open):
            stream.close(abort, drop=True)
        self.open.clear()
        self.held.clear()
        for kind in KINDS:
            self.streams[kind] = None
            self.unwritten[kind] = 0
        self.unwritten_bytes = 0

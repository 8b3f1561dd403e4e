"""Registrations of one RM reach the core one at a time, in the order they reached the server.

A registration's core call runs on the event loop's executor and cannot be stopped once started: when
its caller gives up (its deadline passes, it cancels, its connection breaks) the handler ends but the
core call runs on. Unordered, such an earlier registration could land in the core after a later one of
the same RM, and the core would then send that RM's responses to a session nobody reads. So each
registration waits until the one before it of the same RM has ended in the core, even one whose caller
has gone. A turn is kept only while a registration of its RM is pending, so what this holds is bounded
by the calls open at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from korral import log_text

log = log_text.logger("korral.grpc")


class Turn:
    """One registration's turn: it ends when the registration's core call has ended, or, when no core
    call was started, when the handler is done."""

    def __init__(self, turns: RegistrationTurns, rm_id: str, ended: asyncio.Future[None]) -> None:
        self._turns = turns
        self.rm_id = rm_id
        self.ended = ended
        self._held_by_core_call = False

    def hold_until(self, core_call: asyncio.Future[Any]) -> asyncio.Future[Any]:
        """core_call, shielded: a caller giving up ends its handler, not its turn, which ends with the
        core call."""
        self._held_by_core_call = True
        core_call.add_done_callback(lambda _: self.end())
        return asyncio.shield(core_call)

    def release(self) -> None:
        """The handler is done: the turn ends now unless a core call holds it."""
        if not self._held_by_core_call:
            self.end()

    def end(self) -> None:
        if not self.ended.done():
            self.ended.set_result(None)
        self._turns.forget(self)


class RegistrationTurns:
    """The latest registration's turn of each RM with one pending (used on the event loop only)."""

    def __init__(self) -> None:
        self._latest: dict[str, Turn] = {}

    async def wait(self, rm_id: str) -> Turn:
        """This registration's turn, once the one before it of the same RM has ended in the core."""
        before = self._latest.get(rm_id)
        turn = Turn(self, rm_id, asyncio.get_running_loop().create_future())
        self._latest[rm_id] = turn
        if before is None or before.ended.done():
            return turn
        log.debug("a registration of RmID=%s waits for the one before it to end in the core", rm_id)
        try:
            await asyncio.shield(before.ended)
        except asyncio.CancelledError:
            # this caller has gone; registrations after it still wait for the one before it
            before.ended.add_done_callback(lambda _: turn.end())
            raise
        return turn

    def forget(self, turn: Turn) -> None:
        if self._latest.get(turn.rm_id) is turn:
            del self._latest[turn.rm_id]

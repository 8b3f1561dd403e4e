"""The Registrar actor: registrations, configuration updates and departures of RMs, one at a time.

``korral.Core`` asks it and waits for its one answer; everything it does goes down the ranks from there.
It asks the RMProxy to admit the RM (``Admit``: bounds checked, the RM's requests held from then on),
stops the partitions a registration replaces, starts the new ones on its own thread (the work that
costs in proportion to a configuration: 100,000 queues take seconds, and the RMProxy, which routes
every RM's requests, never does it), and ``Install``s them in the RMProxy, which routes the held
requests in order. A partition that cannot start undoes the registration (``Withdraw``) and stops
what had started: nothing is left behind. One registrar serves the core, so two registrations of one
RM never overlap: the later one replaces the earlier one once that has finished.
"""

from __future__ import annotations

import contextlib
from types import MappingProxyType
from typing import Any

import pykka

from korral import si
from korral.actors.base import Handle, Rank, ThreadedActor
from korral.actors.partition.actor import PartitionSettings
from korral.actors.queue_board import QueueBoard
from korral.actors.registration import start_partition, stop_partition
from korral.actors.rm_messages import (
    Admit,
    Admitted,
    Detach,
    Install,
    Reconfigure,
    Register,
    Unregister,
    UpdateConfiguration,
    Withdraw,
)
from korral.actors.tracker import Tracker
from korral.errors import KorralError, SchedulerError

# how long the registrar waits on the RMProxy: it answers at once (it never starts a partition)
PROXY_TIMEOUT = 60.0


class Registrar(ThreadedActor):
    rank = Rank.REGISTRAR

    def __init__(
        self,
        tracker: Tracker,
        name: str,
        proxy: Handle,
        timer: Any,
        settings: PartitionSettings,
        engine: Any = None,
    ) -> None:
        super().__init__(tracker, name)
        self.rm_proxy = proxy
        self.timer = timer
        self.settings = settings
        # engine="ray": a ``RayEngine`` that starts each partition in a Ray actor process (None: threads)
        self.engine = engine

    def _proxy_answer(self, message: Any) -> Any:
        """The RMProxy's answer; a refusal when it has stopped (the core is stopping)."""
        try:
            return self.ask(self.rm_proxy, message, timeout=PROXY_TIMEOUT)
        except pykka.ActorDeadError:
            return SchedulerError("the core stopped before the registration was carried out")

    def _ask_proxy(self, message: Any) -> Any:
        answer = self._proxy_answer(message)
        if isinstance(answer, KorralError):
            raise answer
        return answer

    def _stop_partition(self, handle: Handle) -> None:
        stop_partition(handle, self.rank, ray=self.engine is not None)

    def on_Register(self, message: Register) -> Any:
        admitted = self._proxy_answer(
            Admit(request=message.request, callback=message.callback, config=message.config)
        )
        if not isinstance(admitted, Admitted):
            return admitted  # the refusal, for the caller to raise
        try:
            self._build(admitted)
        except KorralError as refused:  # overtaken by the core's stop
            return refused
        return si.RegisterResourceManagerResponse()

    def on_UpdateConfiguration(self, message: UpdateConfiguration) -> Any:
        admitted = self._proxy_answer(
            Reconfigure(request=message.request, config=message.config, placements=message.placements)
        )
        if isinstance(admitted, Admitted):
            try:
                self._build(admitted)
            except KorralError as refused:
                return refused
            return None
        return admitted  # None (applied by the proxy alone) or the refusal

    def on_Unregister(self, message: Unregister) -> Any:
        retired = self._proxy_answer(Detach(rm_id=message.rm_id))
        if not isinstance(retired, tuple):
            return retired  # the refusal
        for handle in retired:
            self._stop_partition(handle)
        return None

    def _build(self, admitted: Admitted) -> None:
        """Stop what the registration or update drops, start what it adds, install those. A failure is
        raised (the caller gets it) once nothing it started is left running."""
        for handle in admitted.retired:
            self._stop_partition(handle)
        if admitted.update and not admitted.start:
            return
        started: dict[str, Handle] = {}
        boards: dict[str, QueueBoard] = {}
        installed = False
        try:
            for partition_config in admitted.start:
                name, handle, board = start_partition(
                    admitted.rm,
                    partition_config,
                    tracker=self.tracker,
                    timer=self.timer,
                    settings=self.settings,
                    engine=self.engine,
                )
                started[name] = handle
                if board is not None:
                    boards[name] = board
        except BaseException:
            with contextlib.suppress(Exception):  # a stopped core has removed the RM already
                # an update keeps what it could start (the RM is served); a registration is undone
                if admitted.update:
                    self._ask_proxy(
                        Install(
                            rm=admitted.rm,
                            partitions=MappingProxyType(started),
                            queue_boards=MappingProxyType(boards),
                        )
                    )
                    installed = True
                else:
                    self._ask_proxy(Withdraw(rm=admitted.rm))
            if not installed:
                for handle in started.values():
                    self._stop_partition(handle)
            raise
        try:
            self._ask_proxy(
                Install(
                    rm=admitted.rm,
                    partitions=MappingProxyType(started),
                    queue_boards=MappingProxyType(boards),
                )
            )
        except BaseException:
            for handle in started.values():
                self._stop_partition(handle)
            raise


__all__ = ["PROXY_TIMEOUT", "Registrar"]

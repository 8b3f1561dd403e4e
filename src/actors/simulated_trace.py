"""What a simulated core delivered (``Core.trace``): each RM callback kept as delivered and written out
only when read (a clean seed's trace is never read, and writing out its events' reprs cost a tenth of
its run), and, once asked for (``record_full_trace``), every delivery written out as it happens."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from korral.actors.messages import Deliver

if TYPE_CHECKING:
    from korral.actors.simulated import Simulation

# (step, virtual time, dispatcher, method, argument): one RM callback delivered
CallbackRecord = tuple[int, float, str, str, Any]

_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def callback_line(record: CallbackRecord) -> str:
    """One RM callback as ``Core.trace()`` writes it (SI values are immutable: the same when read)."""
    step, now, actor, method, argument = record
    return f"{step} {now:.6f} {actor} {method} {argument!r}"


class DeliveryTrace:
    """The ``Simulation.on_deliver`` hook of a simulated core; ``simulation.delivery_trace``."""

    def __init__(self, simulation: Simulation) -> None:
        self.simulation = simulation
        self.callbacks: list[CallbackRecord] = []
        self.full: list[str] | None = None  # every delivery, once asked for
        simulation.on_deliver = self.delivered
        simulation.delivery_trace = self

    def delivered(self, actor: str, message: Any) -> None:
        simulation = self.simulation
        if type(message) is Deliver:
            self.callbacks.append((simulation.steps, simulation.now, actor, message.method, message.argument))
        if self.full is not None:
            # without memory addresses (an RM callback's default repr): the same in every process
            text = _ADDRESS.sub("", repr(message))
            self.full.append(f"{simulation.steps} {simulation.now:.6f} {actor} <- {text}")

    def lines(self, *, full: bool = False) -> list[str]:
        """The callbacks written out, or (``full``) every delivery since the full trace was asked for."""
        if full:
            return list(self.full or [])
        return [callback_line(record) for record in self.callbacks]

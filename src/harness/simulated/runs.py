"""The cores of one ``korral stress --simulated`` run, and what a replay's RMs learn from its operations.

``Cores``: a seed's run may restart its core (``--env-faults restarts``); what each stopped core did
(deliveries, traces, injected failures) is kept for the outcome. ``learn``: a replay rebuilds each
RM's ledger (``ScenarioDriver``) from the recorded operations, as the RM that issued them knew it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from korral import si
from korral.actors.simulated_trace import CallbackRecord
from korral.core import Core
from korral.harness.simulated import restart as simulated_restart
from korral.harness.simulated.injected import Injector
from korral.harness.simulated.scenarios import ScenarioDriver, SeedSettings
from korral.harness.stress import Driver, Op

if TYPE_CHECKING:
    from korral.harness.simulated.stress import SimulatedStress


class Cores:
    """The cores of one seed's run, one after the other (a restart stops one and starts the next),
    and what the stopped ones did: deliveries, traces, injected failures."""

    def __init__(
        self, harness: SimulatedStress, schedule: int, full_trace: bool, settings: SeedSettings
    ) -> None:
        self.harness = harness
        self.schedule = schedule
        self.full_trace = full_trace
        self.settings = settings
        self.restarts = 0
        self.steps = 0
        # the stopped cores' RM callbacks as delivered (written out when read), restarts marked
        self.callbacks: list[str | CallbackRecord] = []
        self.trace: list[str] = []
        self.raised = self.cut = 0
        self.core = harness._start(schedule, full_trace, settings)

    def restart(self) -> None:
        """Stop the core (what is queued is delivered, as stopping does) and start a new one with the
        same settings on a schedule seed of its own: its partitions take fresh uuid tokens."""
        old = self.core
        old.stop()
        self._keep(old)
        self.restarts += 1
        marker = f"---- core restart {self.restarts} ----"
        self.callbacks.append(marker)
        self.trace.append(marker)
        seed = self.schedule + 1_000_003 * self.restarts
        self.core = self.harness._start(seed, self.full_trace, self.settings)

    def _keep(self, core: Core) -> None:
        simulation = core.simulation
        assert simulation is not None
        self.steps += simulation.steps
        self.callbacks += simulation.delivery_trace.callbacks
        self.trace += core.trace(full=True)
        injector: Injector | None = simulation.injector
        if injector is not None:
            self.raised += injector.raised
            self.cut += injector.cut

    def stop(self) -> None:
        self.core.stop()


def initial_registrations(ops: Sequence[Op]) -> set[int]:
    """The sequence numbers of each RM's initial registration: its first operation, a register."""
    first: dict[int, Op] = {}
    for op in ops:
        first.setdefault(op.rm, op)
    return {op.seq for op in first.values() if op.kind == "register"}


def learn(ledger: Driver, op: Op) -> None:
    """What the RM that issued ``op`` knows after it, as its ``Driver`` keeps it: the asks it must
    account for, those it released, its gangs' real asks; a registration starts afresh."""
    request = op.request
    if isinstance(ledger, ScenarioDriver):
        if op.kind == "recover":
            simulated_restart.forget_for_restart(ledger, believed={})
            return
        if op.kind == "nodes" and op.description.startswith("recover:"):
            simulated_restart.believe(ledger, request)
        if op.kind in ("config", "register", "recover") and not op.expect_error:
            ledger.config = request.config  # what the checks expect follows the config
        if op.kind == "register":
            ledger.app_requests.clear()
            ledger.node_capacity.clear()
            ledger.ask_requests.clear()
            ledger.ask_rules.reset(ledger.rm)
        simulated_restart.remember(ledger, op.kind, request)
    if op.kind == "register":
        ledger.asks.clear()
        ledger.asks_released.clear()
        ledger.gang_asks.clear()
        with ledger.rm.lock:
            ledger.rm.live.clear()
            ledger.rm.to_confirm.clear()
    elif isinstance(request, si.ApplicationRequest):
        removed = {remove.application_id for remove in request.remove}
        ledger.asks = {key: app for key, app in ledger.asks.items() if app not in removed}
    elif isinstance(request, si.AllocationRequest):
        for ask in request.asks:
            ledger.asks[ask.allocation_key] = ask.application_id
            if ask.task_group_name and not ask.placeholder:
                ledger.gang_asks.add(ask.allocation_key)
        if request.releases is not None:
            ledger.asks_released.update(r.allocation_key for r in request.releases.allocation_asks_to_release)
            # a confirmation of the core's own releases, as ``take_confirmations`` sends it: confirmed
            confirmed = {r.uuid for r in request.releases.allocations_to_release}
            if confirmed:
                with ledger.rm.lock:
                    ledger.rm.to_confirm = [r for r in ledger.rm.to_confirm if r.uuid not in confirmed]

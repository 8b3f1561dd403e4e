"""A core restart with recovery in ``korral stress --simulated`` (``--env-faults restarts``).

The harness stops the simulated core between two SI calls (whatever is in flight: stopping delivers
what is queued, as the threaded runtime does) and starts a new one with the same settings, on a
schedule seed of its own (so its partitions take fresh uuid tokens). Each RM then does what
YuniKorn's shim does after a scheduler restart, and what the threaded hostile stress does
(``korral.harness.stress.hostile``): it registers again with a fresh callback object, re-adds its
applications, re-adds its nodes with the allocations it believes live on them (the SI's recovery
path: ``existing_allocations``), and once the core is quiet resubmits the asks still waiting.

What an RM believes live is what it was told: allocations the old core made but never reported are
not recovered (their asks are resubmitted instead), releases it was told of are gone. At the first
quiescent point after the recovery each RM checks (``ScenarioDriver.check``) that every allocation
it recovered came back live (told as new), was refused with a reason, or was released by the core;
after that the usual checks run on the new core.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from korral import si
from korral import testing as t
from korral.harness.simulated import workloads as simulated_workloads
from korral.harness.stress import Op
from korral.harness.stress.common import recovery_nodes

if TYPE_CHECKING:
    from korral.core import Core
    from korral.harness.simulated.scenarios import ScenarioDriver

RESTART_PROBABILITY = 0.015  # the share of SI calls replaced by a core restart


def remember(driver: ScenarioDriver, kind: str, request: Any) -> None:
    """What a recovery re-sends, kept as the RM sends it: its applications' requests, its nodes'
    capacities, its asks (the latest version of each)."""
    if kind == "apps" and isinstance(request, si.ApplicationRequest):
        for app in request.new:
            driver.app_requests[app.application_id] = app
    elif kind == "nodes" and isinstance(request, si.NodeRequest):
        for info in request.nodes:
            if info.action is si.NodeAction.CREATE and info.schedulable_resource is not None:
                driver.node_capacity[info.node_id] = dict(info.schedulable_resource)
            elif info.action is si.NodeAction.UPDATE and info.schedulable_resource:
                if info.node_id in driver.node_capacity:
                    driver.node_capacity[info.node_id] = dict(info.schedulable_resource)
            elif info.action is si.NodeAction.DECOMISSION:
                driver.node_capacity.pop(info.node_id, None)
    elif kind == "allocations" and isinstance(request, si.AllocationRequest):
        for ask in request.asks:
            driver.ask_requests[ask.allocation_key] = ask
    driver.ask_rules.sent(kind, request)


def forget_for_restart(
    driver: ScenarioDriver, believed: dict[str, si.Allocation] | None = None
) -> dict[str, si.Allocation]:
    """The RM's side of a restart: it keeps what it believes live (returned, and checked at the next
    quiescent point), takes a fresh callback object, and from now on accounts only for the asks of
    those allocations (the asks it resubmits are added as it sends them). A replay passes ``{}`` and
    learns what is recovered from the recorded recovery (``believe``): its own run may have told the
    RM of other uuids."""
    if believed is None:
        with driver.rm.lock:
            believed = dict(driver.rm.live)
        known = driver.node_capacity
        gone = {uuid for uuid, allocation in believed.items() if allocation.node_id not in known}
        for uuid in gone:  # on a node the RM itself took away: its pod is gone with it
            del believed[uuid]
    driver.ask_rules.restarted(driver.rm, set(believed))
    simulated_workloads.forget_spare(driver)  # its nodes are not re-added: their work is gone
    driver.fresh_rm()
    driver.believed = believed
    driver.asks = {a.allocation_key: a.application_id for a in believed.values()}
    driver.asks_released.clear()
    driver.generation += 1
    return believed


def believe(driver: ScenarioDriver, request: si.NodeRequest) -> None:
    """A replay's RM learns what its recorded recovery recovers: the nodes' existing allocations."""
    recovered = driver.believed if driver.believed is not None else {}
    for info in request.nodes:
        for allocation in info.existing_allocations:
            recovered[allocation.uuid] = allocation
            driver.ask_rules.recovered.add(allocation.uuid)
            driver.asks[allocation.allocation_key] = allocation.application_id
    driver.believed = recovered


def recover(driver: ScenarioDriver, core: Core) -> list[si.AllocationAsk]:
    """Register again, re-add the applications and the nodes with what the RM believes live on them;
    returns the asks to resubmit once the core is quiet (``resubmit``)."""
    with driver.rm.lock:
        rejected_keys = {r.allocation_key for r in driver.rm.rejected_asks}
        released_keys = {r.allocation_key for r in driver.rm.released}
        released_keys |= {r.allocation_key for r in driver.rm.released_asks}
        rejected_apps = set(driver.rm.rejected_apps)
    wanted = dict(driver.asks)
    believed = forget_for_restart(driver)
    live_keys = {a.allocation_key for a in believed.values()}
    app_ids = (driver.apps | {a.application_id for a in believed.values()}) - rejected_apps
    apps = {
        app_id: driver.app_requests[app_id] for app_id in sorted(app_ids) if app_id in driver.app_requests
    }
    waiting = [
        driver.ask_requests[key]
        for key, app_id in sorted(wanted.items())
        if key in driver.ask_requests
        and key not in live_keys
        and key not in rejected_keys
        and key not in released_keys
        and app_id in apps
    ]
    request = t.register(driver.rm_id, driver.config)
    driver.record(
        Op(seq=0, rm=driver.index, kind="recover", request=request, description=f"{driver.rm_id}: recover")
    )
    core.register_resource_manager(request, driver.rm)
    driver.apps = set(apps)
    driver.preemptor_app = driver.preemptor_app if driver.preemptor_app in apps else None
    if apps:
        new = si.ApplicationRequest(rm_id=driver.rm_id, new=list(apps.values()))
        driver.send_request(core, "apps", new, f"recover: re-add {len(apps)} applications")
    infos, _ = recovery_nodes(driver.node_capacity, believed)
    driver.nodes = {node_id: True for node_id in driver.node_capacity}
    if infos:
        nodes = si.NodeRequest(rm_id=driver.rm_id, nodes=infos)
        driver.send_request(
            core, "nodes", nodes, f"recover: re-add {len(infos)} nodes with {len(believed)} allocations"
        )
    return waiting


def resubmit(driver: ScenarioDriver, core: Core, waiting: list[si.AllocationAsk]) -> None:
    """The asks still waiting when the core went, sent again to the new one."""
    if waiting:
        request = si.AllocationRequest(rm_id=driver.rm_id, asks=waiting)
        driver.send_request(core, "allocations", request, f"recover: resubmit {len(waiting)} waiting asks")


def check_recovered(driver: ScenarioDriver) -> list[str]:
    """At the first quiescent point after a recovery: each allocation the RM recovered is live again
    (the core told it as new), was refused with a reason, or was released by the core since."""
    believed, driver.believed = driver.believed, None
    if not believed:
        return []
    with driver.rm.lock:
        live = set(driver.rm.live)
        refused = {r.allocation_key for r in driver.rm.rejected_asks if r.reason}
        released = {r.uuid for r in driver.rm.released}
    problems = []
    for uuid, allocation in sorted(believed.items()):
        if uuid in live or uuid in released or allocation.allocation_key in refused:
            continue
        problems.append(
            f"{driver.rm_id}: allocation {uuid} ({allocation.application_id}/{allocation.allocation_key} "
            f"on {allocation.node_id}) lost in the restart: neither live, refused nor released"
        )
    return problems

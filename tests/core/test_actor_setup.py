"""How a core makes its actors and which clock they read reach it through one typed record,
``ActorSetup`` (``korral.start(setup=...)``): the harness's broken actors, a test's clock, the node
actor warmup. The old loose seams are refused, the record checks itself, and the clocks live in the
tracker's ``Clocks`` from the start (nothing patched onto a ``Tracker`` afterwards)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from core_helpers import NODE, SINGLE_LEAF, SMALL, add_apps, add_nodes, running

import korral
from korral import testing as t
from korral.actors.application import ApplicationActor
from korral.actors.messages import Placed
from korral.actors.node import NodeActor
from korral.actors.scheduler.actor import SchedulerActor
from korral.actors.setup import ActorSetup
from korral.actors.tracker import Tracker
from korral.harness import faults

PLACED: list[str] = []


class CountingApplication(ApplicationActor):
    """An application actor that notes each placement it is told of."""

    def on_Placed(self, message: Placed) -> None:
        PLACED.append(self.name)
        super().on_Placed(message)


def test_the_actor_classes_in_the_setup_are_the_ones_the_partition_starts() -> None:
    PLACED.clear()
    with running(SINGLE_LEAF, setup=ActorSetup(application_actor=CountingApplication)) as (core, rm):
        add_nodes(core, rm, ["node-1"], NODE)
        add_apps(core, rm, {"app-1": "root.singleleaf"})
        core.update_allocation(t.asks("rm", "app-1", 2, SMALL))
        core.wait_until_idle()
        assert len(rm.live) == 2
    assert len(PLACED) >= 1  # one Placed may carry both


def test_the_harness_hands_its_faults_over_as_one_setup() -> None:
    assert faults.start_options() == {}
    faults.enable("node-keeps-released")
    try:
        options = faults.start_options()
    finally:
        faults.disable_all()
    assert set(options) == {"setup"}
    setup = options["setup"]
    assert isinstance(setup, ActorSetup) and issubclass(setup.scheduler_actor, SchedulerActor)
    assert setup.scheduler_actor is not SchedulerActor
    assert setup.node_actor is NodeActor and setup.application_actor is ApplicationActor
    with korral.start(**options) as core:
        assert core.settings.actors is setup


@pytest.mark.parametrize("seam", ["node_actor", "application_actor", "node_actor_warmup"])
def test_the_old_loose_seams_are_refused(seam: str) -> None:
    value: Any = {"node_actor": NodeActor, "application_actor": ApplicationActor}.get(seam, 0)
    with pytest.raises(TypeError, match=f"unknown korral setting.*{seam}"):
        korral.start(**{seam: value})


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ({"node_actor": ApplicationActor}, TypeError, "node_actor must be NodeActor"),
        ({"application_actor": object}, TypeError, "application_actor must be ApplicationActor"),
        ({"node_actor_warmup": -1}, ValueError, "node_actor_warmup must be an int >= 0"),
        ({"node_actor_warmup": 1.5}, ValueError, "node_actor_warmup must be an int >= 0"),
        ({"clock": 3.0}, TypeError, "clock must be callable"),
    ],
)
def test_a_bad_setup_says_which_field(fields: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        ActorSetup(**fields)


def test_a_setup_that_is_not_one_is_refused() -> None:
    with pytest.raises(TypeError, match=r"setup must be a korral\.actors\.setup\.ActorSetup"):
        korral.start(setup={"node_actor_warmup": 0})  # type: ignore[arg-type]


def test_the_clock_setting_is_the_setups_clock_and_lives_in_the_trackers_runtime() -> None:
    now = [100.0]

    def clock() -> float:
        return now[0]

    with korral.start(clock=clock) as core:
        assert core.tracker.clocks.clock is clock
        assert core.settings.actors.clock is clock
    with korral.start(setup=ActorSetup(clock=clock)) as core:
        assert core.tracker.clocks.clock is clock
    with pytest.raises(ValueError, match="clock is given twice"):
        korral.start(clock=clock, setup=ActorSetup(clock=time.monotonic))
    with pytest.raises(ValueError, match="virtual clock"):
        korral.start(runtime="simulated", setup=ActorSetup(clock=clock))


def test_a_simulated_core_reads_every_clock_and_token_of_its_simulation() -> None:
    with korral.start(runtime="simulated", seed=3) as core:
        clocks = core.tracker.clocks
        assert clocks.simulation is core.simulation and core.simulation is not None
        assert clocks.clock() == core.simulation.clock()
        assert clocks.wall_clock_ns() == core.simulation.wall_clock_ns()
    # the tracker's other jobs are parts of their own, not attributes patched onto it
    tracker = Tracker()
    assert not hasattr(tracker, "clock") and not hasattr(tracker, "simulation")
    assert tracker.clocks.simulation is None and tracker.timing.on is False


def test_registration_is_recorded_once_by_the_rmproxy() -> None:
    with running(SINGLE_LEAF) as (core, _rm):
        assert set(core.configurations()) == {"rm"}
        with pytest.raises(korral.SchedulerError, match='RmID="other" not registered'):
            core.update_node(t.nodes("other", ["node-1"], NODE))
        core.register_resource_manager(t.register("other", SINGLE_LEAF), t.RecordingRM("other"))
        assert set(core.configurations()) == {"rm", "other"}
        core.update_node(t.nodes("other", ["node-1"], NODE))
        core.wait_until_idle()


def test_an_rm_whose_registration_again_failed_is_not_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    # the registrar undoes a registration whose partitions could not start; the RM is not left
    # registered with its requests accepted and silently dropped
    from korral.actors import registrar

    with running(SINGLE_LEAF, allow_errors=True) as (core, _rm):

        def broken(*_args: Any, **_kwargs: Any) -> Any:
            raise RuntimeError("partition start failed")

        monkeypatch.setattr(registrar, "start_partition", broken)
        with pytest.raises(korral.SchedulerError, match="partition start failed"):
            core.register_resource_manager(t.register("rm", SINGLE_LEAF), t.RecordingRM("rm"))
        assert core.configurations() == {}
        with pytest.raises(korral.SchedulerError, match='RmID="rm" not registered'):
            core.update_node(t.nodes("rm", ["node-1"], NODE))

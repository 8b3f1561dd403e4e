"""YuniKorn's try-node, try-preemption and sorting latency histograms and the ``preempting`` queue
resource state at ``/ws/v1/metrics``, parsed with prometheus_client's parser:
names, types, labels and buckets of yunikorn-core be3bb487, counts the scenario implies."""

from __future__ import annotations

import urllib.request

import attrs
import pytest
from core_helpers import FAST, NODE, SMALL, TWO_LEAVES, add_apps, add_nodes, eventually, part, running
from prometheus_client.parser import text_string_to_metric_families

import korral
from korral import si
from korral import testing as t

pytest.importorskip("aiohttp")

PREFIX = "yunikorn_scheduler_"
BUCKETS = {"0.0001", "0.001", "0.01", "0.1", "1.0", "10.0", "100.0", "1000.0", "+Inf"}


def scrape(url: str) -> tuple[dict[tuple[str, tuple[tuple[str, str], ...]], float], dict[str, str]]:
    with urllib.request.urlopen(url + "/ws/v1/metrics", timeout=30) as response:
        text = response.read().decode()
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, types


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def buckets(samples: dict, name: str, **labels: str) -> set[str]:
    return {
        dict(key)["le"]
        for (sample, key) in samples
        if sample == name + "_bucket" and {k: v for k, v in key if k != "le"} == labels
    }


def test_each_node_the_rms_predicates_check_is_a_try_node_latency() -> None:
    calls: list[si.PredicatesArgs] = []

    def predicate(args: si.PredicatesArgs) -> bool:
        calls.append(args)
        return args.node_id != "n1"  # n1 refused: every ask is tried on n1 and n2

    rm = t.RecordingRM("rm", predicate=predicate)
    with running(TWO_LEAVES, rm=rm) as (core, rm):
        url = core.serve_rest("127.0.0.1:0")
        add_nodes(core, rm, ["n1", "n2"])
        add_apps(core, rm, {"app": "root.a"})
        core.update_allocation(t.asks("rm", "app", 3, SMALL))
        assert rm.wait_for_allocations(3)
        core.wait_until_idle()
        name = PREFIX + "trynode_latency_milliseconds"
        samples, types = eventually(lambda: (s := scrape(url)) and value(s[0], name + "_count") and s)
        assert types[name] == "histogram" and buckets(samples, name) == BUCKETS
        assert value(samples, name + "_count") == len(calls) >= 6  # each node put to the predicates
        assert value(samples, name + "_bucket", le="+Inf") == len(calls)
        # no preemption tried: declared, no observation
        assert value(samples, PREFIX + "trypreemption_latency_milliseconds_count") == 0


@pytest.mark.parametrize("with_predicates", [False, True])
def test_every_node_walk_for_an_ask_is_a_try_node_evaluation(with_predicates: bool) -> None:
    # yunikorn-core times each ask's walk over the nodes (tryNodes), allocated or not
    predicate = (lambda args: args.node_id != "n1") if with_predicates else None
    rm = t.RecordingRM("rm", predicate=predicate)
    with running(TWO_LEAVES, rm=rm) as (core, rm):
        url = core.serve_rest("127.0.0.1:0")
        add_nodes(core, rm, ["n1", "n2"])
        add_apps(core, rm, {"app": "root.a"})
        core.update_allocation(t.asks("rm", "app", 3, SMALL))
        assert rm.wait_for_allocations(3)
        core.wait_until_idle()
        name = PREFIX + "trynode_evaluation_milliseconds"
        samples, types = eventually(
            lambda: (s := scrape(url)) and (value(s[0], name + "_count") or 0) >= 3 and s
        )
        assert types[name] == "histogram" and buckets(samples, name) == BUCKETS
        assert value(samples, name + "_bucket", le="+Inf") == value(samples, name + "_count")


def test_without_predicates_each_allocations_node_walk_is_one_try_node_and_one_evaluation() -> None:
    # an RM without predicates: the walk to the node that takes the ask is both the try and the
    # evaluation, one of each per allocation, every observation in a bucket and in the sum
    with running(TWO_LEAVES, rm=t.PassivePredicateRM("rm")) as (core, rm):
        url = core.serve_rest("127.0.0.1:0")
        add_nodes(core, rm, ["n1", "n2"])
        add_apps(core, rm, {"app": "root.a"})
        core.update_allocation(t.asks("rm", "app", 5, SMALL))
        assert rm.wait_for_allocations(5)
        core.wait_until_idle()
        names = [PREFIX + "trynode_latency_milliseconds", PREFIX + "trynode_evaluation_milliseconds"]
        samples, _ = eventually(lambda: (s := scrape(url)) and value(s[0], names[1] + "_count") and s)
        for name in names:
            assert value(samples, name + "_count") == 5
            assert value(samples, name + "_bucket", le="+Inf") == 5
            assert (value(samples, name + "_sum") or 0.0) > 0.0
        assert value(samples, names[0] + "_sum") == value(samples, names[1] + "_sum")


PREEMPT = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: high
            resources:
              guaranteed: {memory: 500}
            properties:
              preemption.delay: 10s
          - name: low
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fill_the_node_and_ask_to_preempt(core: korral.Core, rm: t.RecordingRM) -> None:
    """root.low fills the one node; an urgent ask in root.high that may preempt then waits for room."""
    core.register_resource_manager(t.register("rm", PREEMPT), rm)
    add_nodes(core, rm, ["n1"], {"memory": 1000, "vcore": 10})
    add_apps(core, rm, {"low-app": "root.low", "hi": "root.high"})
    core.update_allocation(t.asks("rm", "low-app", 10, {"memory": 100}))
    assert rm.wait_for_allocations(10)
    urgent = t.asks("rm", "hi", 1, {"memory": 300}, prefix="urgent-")
    policy = si.PreemptionPolicy(allow_preempt_self=True, allow_preempt_other=True)
    core.update_allocation(
        attrs.evolve(urgent, asks=[attrs.evolve(urgent.asks[0], preemption_policy=policy)])
    )
    core.wait_until_idle()


def test_a_preemption_attempt_is_timed_and_its_victims_are_preempting() -> None:
    clock = Clock()
    rm = t.RecordingRM("rm")
    with korral.start(**FAST, clock=clock) as core:
        url = core.serve_rest("127.0.0.1:0")
        fill_the_node_and_ask_to_preempt(core, rm)
        cycles = core.scheduler_stats(part())["cycles"]
        clock.now += 11.0  # past the preemption delay
        core.poke_timers()
        eventually(lambda: core.scheduler_stats(part())["cycles"] > cycles)

        def preempted() -> int:
            with rm.lock:
                return sum(
                    r.termination_type == si.TerminationType.PREEMPTED_BY_SCHEDULER for r in rm.released
                )

        assert rm.wait_for(lambda r: preempted() == 3)
        name = PREFIX + "trypreemption_latency_milliseconds"
        low = {"partition": part(), "queue": "root.low", "state": "preempting", "resource": "memory"}
        samples, types = eventually(
            lambda: (s := scrape(url)) and value(s[0], "yunikorn_queue_resource", **low) == 300 and s
        )
        assert types[name] == "histogram" and buckets(samples, name) == BUCKETS
        assert value(samples, name + "_count") >= 1
        root = {**low, "queue": "root"}
        assert value(samples, "yunikorn_queue_resource", **root) == 300  # counted up to the root
        # the RM confirms the victims gone: nothing is preempting
        core.update_allocation(rm.take_confirmations())
        core.wait_until_idle()
        eventually(lambda: value(scrape(url)[0], "yunikorn_queue_resource", **low) == 0)


def test_queues_and_applications_re_sorted_after_a_limit_change_are_sorting_latencies() -> None:
    with running(TWO_LEAVES) as (core, rm):
        url = core.serve_rest("127.0.0.1:0")
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app": "root.a"})
        core.update_allocation(t.asks("rm", "app", 1, SMALL, prefix="first-"))  # a cycle before
        assert rm.wait_for_allocations(1)
        core.wait_until_idle()
        name = PREFIX + "node_sorting_latency_milliseconds"
        before, types = scrape(url)
        assert types[name] == "histogram"
        apps_before = value(before, name + "_count", level="app") or 0
        queues_before = value(before, name + "_count", level="queue") or 0
        changed = TWO_LEAVES.replace(
            "          - name: b\n",
            "          - name: b\n            resources:\n              max: {memory: 70M}\n",
        )
        assert changed != TWO_LEAVES
        # an ask no node can hold stays pending: root.a's order and the root's hold something to re-sort
        core.update_allocation(t.asks("rm", "app", 1, {"memory": 2 * NODE["memory"]}, prefix="big-"))
        core.wait_until_idle()
        core.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", config=changed))
        core.update_allocation(t.asks("rm", "app", 1, SMALL))  # a cycle after the change
        assert rm.wait_for_allocations(2)
        core.wait_until_idle()
        samples, _ = eventually(
            lambda: (
                (s := scrape(url)) and (value(s[0], name + "_count", level="app") or 0) > apps_before and s
            )
        )
        assert buckets(samples, name, level="queue") == buckets(samples, name, level="app") == BUCKETS
        # the change re-sorts every order holding anything: root.a's application, the root's children
        # (root.b has nothing to sort, and an order left empty is not timed)
        assert value(samples, name + "_count", level="app") >= apps_before + 1
        assert value(samples, name + "_count", level="queue") >= queues_before + 1


def test_only_a_preemption_attempt_past_its_preconditions_is_a_try_preemption_latency() -> None:
    # YuniKorn times tryPreemption once its preconditions pass (the delay waited, an attempt taken):
    # an ask inside its preemption delay, looked at every cycle, adds nothing to the histogram
    clock = Clock()
    rm = t.RecordingRM("rm")
    with korral.start(**FAST, clock=clock) as core:
        url = core.serve_rest("127.0.0.1:0")
        fill_the_node_and_ask_to_preempt(core, rm)
        for i in range(3):  # cycles while the urgent ask waits out its delay
            cycles = core.scheduler_stats(part())["cycles"]
            core.update_allocation(t.asks("rm", "low-app", 1, {"memory": 100}, prefix=f"more{i}-"))
            eventually(lambda before=cycles: core.scheduler_stats(part())["cycles"] > before)
            core.wait_until_idle()
        name = PREFIX + "trypreemption_latency_milliseconds"
        assert value(scrape(url)[0], name + "_count") == 0
        clock.now += 11.0  # past the preemption delay: one attempt, which preempts
        core.poke_timers()
        assert rm.wait_for(
            lambda r: (
                sum(x.termination_type == si.TerminationType.PREEMPTED_BY_SCHEDULER for x in r.released) == 3
            )
        )
        core.wait_until_idle()
        assert eventually(lambda: value(scrape(url)[0], name + "_count") == 1)

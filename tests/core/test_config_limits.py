"""Issue 22, point 4, in-process: a configuration never stalls other RMs or the process.

Every bound of a configuration (docs/api.md, "Bounds of a configuration") is a ``ConfigLimitError`` (a
``ConfigError``) naming the bound, the same from ``load_config``, a registration and a configuration
update, cheap to reach (an alias bomb is refused after reading its few lines), and the core goes on as
before. Parsing and starting an RM's partitions happen on the registering caller's thread, so another
RM is served while one registers 100,000 queues.
"""

from __future__ import annotations

import threading
import time
import tracemalloc

import pytest
from core_helpers import NODE, ROOT_ONLY, TWO_LEAVES, collect_errors, eventually, running
from hostile_configs import HOSTILE, LIMIT_WORDS, alias_bomb, many_queues

import korral
from korral import si
from korral import testing as t
from korral.config import MAX_QUEUES, load_config


def refusal(text: str) -> korral.ConfigLimitError:
    with pytest.raises(korral.ConfigLimitError) as refused:
        load_config(text)
    return refused.value


@pytest.mark.parametrize("name", HOSTILE)
def test_load_config_refuses_each_bound_with_an_error_that_names_it(name: str) -> None:
    error = refusal(HOSTILE[name]())
    assert isinstance(error, korral.ConfigError)
    assert LIMIT_WORDS[name] in str(error) and "limit" in str(error)
    assert "\n" not in str(error)  # one line, wherever it is shown


def test_an_alias_bomb_is_refused_small() -> None:
    text = alias_bomb()
    assert len(text) < 700  # the was 626 bytes, 16 s and 590 MB to accept
    tracemalloc.start()
    try:
        refusal(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10 * 1024 * 1024, f"{peak:,} bytes to refuse {len(text)} bytes"


def test_an_alias_to_a_node_that_contains_it_is_refused() -> None:
    error = refusal("partitions: &p\n  - name: default\n    queues: *p\n")
    assert "refers to a node that contains it" in str(error)


def test_aliases_within_the_budget_still_work() -> None:
    # YAML's anchors and merge keys are YAML: a config that uses them modestly is accepted
    text = """
partitions:
  - name: default
    queues:
      - name: root
        queues:
          - name: a
            resources: &res {guaranteed: {memory: 1000}, max: {memory: 2000}}
          - name: b
            resources: *res
          - name: c
            resources: {<<: *res, max: {memory: 3000}}
"""
    config = load_config(text)
    queues = {q.name: q for q in config.partitions[0].queues[0].queues}
    assert queues["b"].resources == queues["a"].resources
    assert queues["c"].resources.max == {"memory": 3000}


@pytest.mark.no_cover  # a long run over code other tests cover (pyproject.toml: no_cover)
def test_as_many_queues_as_the_bound_allow_are_accepted_up_to_it() -> None:
    # the bound counts what the parse would build: a list shared by alias counts each time it appears
    shared = [f"          - {{name: p{n}, queues: *leaves}}" for n in range(1, MAX_QUEUES // 1000 - 1)]
    head = "partitions:\n  - name: default\n    queues:\n      - name: root\n        queues:\n"
    leaves = "".join(f"              - name: q{n}\n" for n in range(999))
    text = head + "          - name: p0\n            queues: &leaves\n" + leaves + "\n".join(shared) + "\n"
    config = load_config(text)  # 198 x 1,000 = 198,000 queues besides root
    assert len(config.partitions[0].queues[0].queues) == MAX_QUEUES // 1000 - 1


@pytest.mark.parametrize("name", HOSTILE)
def test_registration_and_update_give_the_same_error_and_the_core_goes_on(name: str) -> None:
    text = HOSTILE[name]()
    expected = str(refusal(text))
    with running(TWO_LEAVES) as (core, rm), collect_errors() as errors:
        with pytest.raises(korral.ConfigError) as registering:
            core.register_resource_manager(t.register("other", text), t.RecordingRM("other"))
        assert str(registering.value) == expected
        with pytest.raises(korral.ConfigError) as updating:
            core.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", config=text))
        assert str(updating.value) == expected
        # nothing changed, nothing was logged, and the registered RM is served as before
        assert core.partition_names() == ["[rm]default"]
        assert core.configurations()["rm"] == load_config(TWO_LEAVES)
        core.update_node(t.nodes("rm", ["n1"], NODE))
        assert rm.wait_for(lambda r: r.accepted_nodes == ["n1"])
        assert errors.messages() == []


def _serve_b_while(core: korral.Core, rm_b: t.RecordingRM, busy: threading.Event) -> list[tuple[float, bool]]:
    """Rounds of RM B's requests (a node update, answered through its callback, then a node query) for
    as long as ``busy`` is set: each round's seconds, and whether ``busy`` still held when it ended."""
    rounds: list[tuple[float, bool]] = []
    number = 0
    while busy.is_set() or not rounds:
        number += 1
        node_id = f"b-node-{number}"
        began = time.perf_counter()
        core.update_node(t.nodes("b", [node_id], NODE))
        assert rm_b.wait_for(lambda r, n=node_id: n in r.accepted_nodes, timeout=120)
        assert core.node("[b]default", node_id) is not None
        rounds.append((time.perf_counter() - began, busy.is_set()))
    return rounds


def _registering(core: korral.Core, rm_id: str, text: str) -> tuple[threading.Thread, threading.Event, list]:
    busy = threading.Event()
    busy.set()
    failures: list[BaseException] = []

    def register() -> None:
        try:
            core.register_resource_manager(t.register(rm_id, text), t.RecordingRM(rm_id))
        except BaseException as error:  # reported by the test
            failures.append(error)
        finally:
            busy.clear()

    thread = threading.Thread(target=register, name=f"register {rm_id}")
    thread.start()
    return thread, busy, failures


@pytest.mark.no_cover  # a long run over code other tests cover (pyproject.toml: no_cover)
def test_rm_b_is_served_while_rm_a_registers_20000_queues() -> None:
    # the property at a size the suite affords; bench/config_stall.py measures it at 100,000 queues
    text = many_queues(20_000)
    with korral.start() as core:  # default timings: 20,000 queues swept every 0.2 s would keep it busy
        rm_b = t.RecordingRM("b")
        core.register_resource_manager(t.register("b", ROOT_ONLY), rm_b)
        thread, busy, failures = _registering(core, "a", text)
        rounds = _serve_b_while(core, rm_b, busy)
        thread.join(300)
        assert not failures, failures
        assert [during for _, during in rounds].count(True) >= 1, rounds
        assert "[a]default" in core.partition_names()


@pytest.mark.slow
def test_requests_of_an_rm_that_registers_again_wait_for_its_new_partitions() -> None:
    # re-registration: the RM's own requests sent meanwhile go to its new partitions, none lost
    with korral.start() as core:  # default timings: 20,000 queues swept every 0.2 s would keep it busy
        rm = t.RecordingRM("a")
        core.register_resource_manager(t.register("a", ROOT_ONLY), rm)
        # (a node update costs a partition time in proportion to its queues: 3,000 keep it short)
        thread, busy, failures = _registering(core, "a", many_queues(3_000))
        sent = 0
        while busy.is_set():
            sent += 1
            core.update_node(t.nodes("a", [f"n{sent}"], NODE))
            time.sleep(0.02)
        thread.join(300)
        assert not failures, failures
        core.wait_until_idle(60)
        nodes = {info.node_id for info in core.nodes("[a]default")}
        # a node sent before the registration reached the core went to the old partitions (gone with
        # them, as in YuniKorn); every one sent after it is in the new partition
        assert nodes and nodes == {f"n{n}" for n in range(sent - len(nodes) + 1, sent + 1)}


@pytest.mark.no_cover  # a long run over code other tests cover (pyproject.toml: no_cover)
def test_rm_b_is_served_while_rm_a_reloads_a_config_that_adds_a_20000_queue_partition() -> None:
    big = many_queues(20_000).replace("  - name: default", "  - name: big")
    both = ROOT_ONLY.rstrip("\n") + "\n" + big.split("\n", 1)[1]  # partitions default and big
    with korral.start() as core:  # default timings: 20,000 queues swept every 0.2 s would keep it busy
        rm_b = t.RecordingRM("b")
        core.register_resource_manager(t.register("b", ROOT_ONLY), rm_b)
        core.register_resource_manager(t.register("a", ROOT_ONLY), t.RecordingRM("a"))
        busy = threading.Event()
        busy.set()
        failures: list[BaseException] = []

        def reload() -> None:
            try:
                core.update_configuration(si.UpdateConfigurationRequest(rm_id="a", config=both))
            except BaseException as error:  # reported below
                failures.append(error)
            finally:
                busy.clear()

        thread = threading.Thread(target=reload)
        thread.start()
        rounds = _serve_b_while(core, rm_b, busy)
        thread.join(300)
        assert not failures, failures
        assert [during for _, during in rounds].count(True) >= 1, rounds
        assert set(core.partition_names()) == {"[a]default", "[a]big", "[b]default"}
        assert len(core.published_queues("[a]big") or []) == 20_001
        # and back: the dropped partition drains, and being empty it goes; A's default partition serves on
        core.update_configuration(si.UpdateConfigurationRequest(rm_id="a", config=ROOT_ONLY))
        expected = {"[a]default", "[b]default"}
        assert eventually(lambda: set(core.partition_names()) == expected, timeout=120)
        rm_a = t.RecordingRM("a")
        core.register_resource_manager(t.register("a", ROOT_ONLY), rm_a)
        core.update_node(t.nodes("a", ["a1"], NODE))
        assert rm_a.wait_for(lambda r: r.accepted_nodes == ["a1"])


@pytest.mark.slow
def test_two_registrations_of_one_rm_at_once_leave_one_set_of_partitions() -> None:
    # the registrar takes them one after the other: both are answered, the later one replaces the
    # earlier one's partitions, which stop; nothing else is left running, nothing logged
    with korral.start() as core, collect_errors() as errors:
        outcomes: list[str] = []
        texts = [many_queues(3_000), many_queues(3_000).replace("name: p0\n", "name: first\n")]

        def register(text: str) -> None:
            core.register_resource_manager(t.register("a", text), t.RecordingRM("a"))
            outcomes.append("registered")

        threads = [threading.Thread(target=register, args=(text,)) for text in texts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        assert outcomes == ["registered", "registered"]
        core.wait_until_idle(60)
        assert core.partition_names() == ["[a]default"]
        assert len(core.published_queues("[a]default") or []) == 3_001
        rm = t.RecordingRM("a")
        core.register_resource_manager(t.register("a", ROOT_ONLY), rm)
        core.update_node(t.nodes("a", ["n1"], NODE))
        assert rm.wait_for(lambda r: r.accepted_nodes == ["n1"])
        assert core.tracker.errors == 0 and errors.messages() == []


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_refusal_past_one_of_korrals_bounds_says_it_is_korrals(name: str) -> None:
    # stricter than YuniKorn, whose validator has no such check: the refusal says so
    with pytest.raises(korral.ConfigLimitError) as refused:
        load_config(HOSTILE[name]())
    assert str(refused.value).endswith("(a bound of korral's, stricter than YuniKorn's validator)")

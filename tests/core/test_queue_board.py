"""The published queue tree (korral.actors.queue_board): plain code, then end to end through korral.Core."""

from __future__ import annotations

from core_helpers import NODE, SMALL, TWO_LEAVES, add_apps, add_nodes, part, running

from korral import si
from korral import testing as t
from korral.actors.queue_board import QueueBoard
from korral.info import QueueInfo


def info(path: str, children: list[str], applications: list[str]) -> QueueInfo:
    return QueueInfo(
        path=path,
        is_leaf=not children,
        is_managed=True,
        state="Active",
        guaranteed={},
        max={},
        allocated={},
        pending={},
        max_applications=0,
        properties={},
        children=children,
        applications=applications,
    )


def test_running_applications_count_the_subtree_and_usage_is_each_queues_own() -> None:
    board = QueueBoard()
    board.structure = (
        info("root", ["root.a", "root.b"], []),
        info("root.a", [], ["app-1", "app-2"]),
        info("root.b", [], ["app-3"]),
    )
    board.app_states.update({"app-1": "Running", "app-2": "Accepted", "app-3": "Running"})
    board.usage["root.a"] = ({"memory": 5}, {"memory": 7})
    queues = {q.path: q for q in board.queues()}
    assert [q.path for q in board.queues()] == ["root", "root.a", "root.b"]
    assert {p: q.running_applications for p, q in queues.items()} == {"root": 2, "root.a": 1, "root.b": 1}
    assert queues["root.a"].allocated == {"memory": 5} and queues["root.a"].pending == {"memory": 7}
    assert queues["root"].allocated == {} and queues["root.b"].pending == {}
    queues["root.a"].allocated["memory"] = 99  # a reader's copy: the board keeps what was published
    assert board.usage["root.a"][0] == {"memory": 5}


def test_core_publishes_structure_states_and_usage_as_they_change() -> None:
    with running(TWO_LEAVES) as (core, rm):
        add_nodes(core, rm, ["n1"], NODE)
        add_apps(core, rm, {"app-1": "root.a"})
        before = {q.path: q for q in core.published_queues(part())}
        assert before["root.a"].applications == ["app-1"] and before["root"].running_applications == 0
        core.update_allocation(t.asks("rm", "app-1", 2, SMALL))
        assert rm.wait_for_allocations(2)
        core.wait_until_idle()
        now = {q.path: q for q in core.published_queues(part())}
        assert now["root.a"].running_applications == now["root"].running_applications == 1
        assert now["root.a"].allocated == core.queue(part(), "root.a").allocated != {}
        assert now == {q.path: q for q in core.queues(part())}
        # the application leaves: it no longer counts, and its queue no longer lists it
        core.update_application(t.remove_applications("rm", ["app-1"]))
        core.wait_until_idle()
        gone = {q.path: q for q in core.published_queues(part())}
        assert gone["root.a"].applications == [] and gone["root"].running_applications == 0
        assert core.published_queues("[rm]nope") is None


def test_a_new_queue_is_published_once_the_configuration_is_applied() -> None:
    with running(TWO_LEAVES) as (core, _):
        config = TWO_LEAVES.replace("          - name: b\n", "          - name: b\n          - name: c\n")
        assert "name: c" in config
        core.update_configuration(
            si.UpdateConfigurationRequest(rm_id="rm", policy_group="queues", config=config)
        )
        core.wait_until_idle()
        assert "root.c" in [q.path for q in core.published_queues(part())]
        assert core.published_queues(part()) == core.queues(part())

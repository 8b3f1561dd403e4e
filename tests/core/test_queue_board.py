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
    states = {"app-1": "Running", "app-2": "Accepted", "app-3": "Running"}
    for owner, (app_id, state) in enumerate(states.items()):
        board.claim_app(app_id, state, owner)
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


def test_an_application_entry_is_changed_and_dropped_only_by_its_own_actor() -> None:
    board = QueueBoard()
    board.claim_app("app", "New", owner=1)
    board.publish_app("app", "Accepted", owner=1)
    board.claim_app("app", "New", owner=2)  # removed, and added again under the same id
    board.publish_app("app", "Running", owner=1)  # the old actor, still answering earlier messages
    board.forget_app("app", owner=1)
    assert board.app_states == {"app": ("New", 2)}
    board.forget_app("app", owner=2)
    assert board.app_states == {}


def test_applications_removed_right_after_their_asks_leave_no_entry_behind() -> None:
    """Issue 22: an application removed right after its ask left its state on the board for good
    (9,993 of 10,000): its actor published the ask's state change after the partition had dropped
    the entry."""
    apps = [f"app-{i}" for i in range(300)]
    with running(TWO_LEAVES) as (core, rm):
        add_nodes(core, rm, ["n1"], NODE)
        board = core._board.queue_boards[part()]
        for app_id in apps:
            core.update_application(t.applications("rm", {app_id: "root.a"}))
            core.update_allocation(t.asks("rm", app_id, 1, SMALL))
            core.update_application(t.remove_applications("rm", [app_id]))
        core.wait_until_idle()
        assert board.app_states == {}
        # the same ids added again: each counts once more, with the new actor's state
        add_apps(core, rm, {app_id: "root.b" for app_id in apps[:3]})
        core.update_allocation(t.asks("rm", "app-0", 2, SMALL))
        assert rm.wait_for(lambda r: "Running" in r.app_states["app-0"])
        core.wait_until_idle()
        assert board.app_states.keys() == set(apps[:3])
        assert board.app_states["app-0"][0] == "Running"
        assert {q.path: q.running_applications for q in core.published_queues(part())}["root.b"] == 1

"""Checks of ``korral stress --simulated`` beyond ``korral.harness.invariants``' partition laws.

- **reservation holders**: a node is reserved only for an ask that is still pending in a live
  application of its partition;
- **unique uuids** across every RM's partition (an allocation booked twice);
- **user limits**: no user or limited group above a ``maxresources`` / ``maxapplications`` that
  applies to it, unless recovered allocations (accepted whatever the limits) put it there.

Each takes the quiescent states ``korral.harness.invariants.collect`` read (virtual time frozen) and
returns violations in a stable order.
"""

from __future__ import annotations

from collections.abc import Iterable

from korral.core import Core
from korral.harness import invariants
from korral.harness.stress import LIMITED_GROUPS, USERS

RECOVERED_MARK = "-recovered-"  # in the uuid of every allocation a ScenarioDriver recovers


def check_reservation_holders(state: invariants.PartitionState) -> list[str]:
    """Every node's reservation holder is a pending ask of an application of the partition."""
    pending = {(app.application_id, key) for app in state.applications for key in app.pending_asks}
    problems = []
    for node in sorted(state.nodes, key=lambda n: n.node_id):
        for holder in zip(node.reservations, node.reserved_asks, strict=False):
            if holder not in pending:
                problems.append(
                    f"{state.info.name} node {node.node_id}: reserved for ask {holder[1]} of "
                    f"{holder[0]}, which is not pending there"
                )
    return problems


def recovered_queues(state: invariants.PartitionState) -> set[str]:
    """The queues of applications holding recovered allocations: those may be above a max."""
    return {app.queue for app in state.applications if any(RECOVERED_MARK in a.uuid for a in app.allocations)}


def check_user_limits(core: Core, state: invariants.PartitionState) -> list[str]:
    """``invariants.check_user_limits`` with the owners of recovered allocations exempt."""
    groups_of = dict(USERS)
    users = {app.user for app in state.applications if any(RECOVERED_MARK in a.uuid for a in app.allocations)}
    groups = {group for user in users for group in groups_of.get(user, ())}
    return invariants.check_user_limits(
        core, state, LIMITED_GROUPS, recovered_users=users, recovered_groups=groups
    )


def check_all(core: Core, states: Iterable[invariants.PartitionState]) -> list[str]:
    """The checks above over every RM's partition."""
    states = list(states)
    problems = invariants.check_unique_uuids(states)
    for state in states:
        problems.extend(check_reservation_holders(state))
        problems.extend(check_user_limits(core, state))
    return problems

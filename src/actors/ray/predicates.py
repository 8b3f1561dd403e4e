"""engine="ray", in the driver: the RM's ``predicates`` callback answered for a partition's process.

The callback object lives in the driver. A host's scheduler sends the candidate nodes of one
decision in one call (through its outbox); here the RM is asked node by node in that order, exactly
the calls it would get with threads: up to the first accepted node for an allocation, every node for
a reservation. The calls run on the poller's thread, marked as inside predicates (so
``scheduler_stats`` fails at once and node snapshots work, as with threads). A call that raises means
"not this node", as with threads.
"""

from __future__ import annotations

import threading
from typing import Any

from korral import log_text, si
from korral.actors.base import inside_predicates

log = log_text.logger("korral.ray")


def answer_predicates(
    callback: Any,
    closed: threading.Event,
    allocation_key: str,
    node_ids: tuple[str, ...],
    allocate: bool,
    first: bool,
    partition: str,
) -> tuple[bool, ...]:
    """Whether each node may take the ask, in order; with ``first``, up to the first accepted one."""
    answers: list[bool] = []
    with inside_predicates():
        for node_id in node_ids:
            if closed.is_set():
                break  # the registration ended: its RM is not asked anything any more (refused)
            try:
                accepted = bool(
                    callback.predicates(
                        si.PredicatesArgs(allocation_key=allocation_key, node_id=node_id, allocate=allocate)
                    )
                )
            except Exception as error:  # a failing RM plugin means "not this node", as with threads
                log.warning("%s: predicates callback raised %r: node %s refused", partition, error, node_id)
                accepted = False
            answers.append(accepted)
            if accepted and first:
                break
    return tuple(answers)

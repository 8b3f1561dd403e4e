"""Each question a partition answers (``PartitionQuery``) names its answer's type, which ``Core``'s
snapshot methods return as is: the partition's handler for it must return that very type, or Core would
hand its callers something its signature does not promise (mypy cannot see across the mailbox)."""

from __future__ import annotations

import typing

import pytest

from korral.actors import messages
from korral.actors.dispatch import ensure_handlers
from korral.actors.partition.actor import PartitionActor


def queries() -> list[type[messages.PartitionQuery[object]]]:
    return sorted(messages.PartitionQuery.__subclasses__(), key=lambda cls: cls.__name__)


def declared_answer(query: type) -> object:
    (base,) = (base for base in query.__orig_bases__ if typing.get_origin(base) is messages.PartitionQuery)
    (answer,) = typing.get_args(base)
    return answer


def test_every_query_is_looked_at() -> None:
    names = {cls.__name__ for cls in queries()}
    assert {"PartitionSummary", "QueueQuery", "NodesQuery", "SchedulerStatsQuery"} <= names


@pytest.mark.parametrize("query", queries(), ids=lambda cls: cls.__name__)
def test_the_partitions_handler_returns_the_answer_the_query_names(query: type) -> None:
    ensure_handlers(PartitionActor)  # the table dispatch reads, keyed by message class
    handler = PartitionActor.handlers.get(query)
    assert handler is not None, f"the partition has no handler for {query.__name__}"
    returned = typing.get_type_hints(handler)["return"]
    assert returned == declared_answer(query), (
        f"{query.__name__} promises {declared_answer(query)}, its handler returns {returned}"
    )


def test_the_check_sees_a_mismatch() -> None:
    class Wrong(messages.PartitionQuery[list[int]]):
        pass

    assert (
        declared_answer(Wrong) == list[int] != typing.get_type_hints(PartitionActor.on_NodesQuery)["return"]
    )

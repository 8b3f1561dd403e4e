"""korral beside YuniKorn: every recorded scenario replayed through ``korral.Core`` gives YuniKorn's outcome.

The scenarios (tests/data/differential, format and comparison in its README) hold what yunikorn-core
answered for the same input: ``recorded/`` as YuniKorn's own run recorded it, ``from-code/`` as its code and
tests decide it. A scenario where korral deviates on purpose is listed in ``DEVIATIONS`` with korral's own
outcome, and docs/api.md names the deviation and its reason; the test then holds korral to that outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from differential_helpers import clock_driven, compare, load, replay, scenario_files, started

API_MD = Path(__file__).resolve().parents[2] / "docs" / "api.md"

Outcome = dict[str, Any] | list[dict[str, Any]]


def _accepted_and_placed_in_prod(_: Outcome) -> Outcome:
    return [
        {
            "apps": {"app-1": {"state": "New", "queue": "root.prod", "allocs": {}}},
            "rejected_apps": {},
            "rejected_asks": {},
            "queues": {
                "root": {"allocated": {}, "leaf": False, "managed": True},
                "root.prod": {"allocated": {}, "leaf": True, "managed": True},
            },
        }
    ]


def _rejected_by_placement(_: Outcome) -> Outcome:
    return [
        {
            "apps": {},
            "rejected_apps": {"app-1": "application rejected: no placement rule matched"},
            "rejected_asks": {},
            "queues": {"root": {"allocated": {}, "leaf": False, "managed": True}},
        }
    ]


# scenario name -> (the words of docs/api.md that document the deviation, korral's outcome from YuniKorn's)
DEVIATIONS: dict[str, tuple[str, Callable[[Outcome], Outcome]]] = {
    "c5-placement-check-matches-queue-names-case-sensitively": (
        "**Placement rule paths in the config check: any case.**",
        _accepted_and_placed_in_prod,
    ),
    "c8-provided-names-the-recovery-queue": (
        "**The recovery queue is reserved.**",
        _rejected_by_placement,
    ),
}


def _ids(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def test_the_scenarios_are_there() -> None:
    files = scenario_files()
    assert {path.parent.name for path in files} == {"recorded", "from-code"}
    assert len(files) >= 15


@pytest.mark.parametrize("path", scenario_files(), ids=_ids)
def test_korral_gives_yunikorns_outcome(path: Path) -> None:
    scenario = load(path)
    expected: Outcome = scenario["yunikorn"]
    deviation = DEVIATIONS.get(scenario["name"])
    if deviation is not None:
        documented, korral_outcome = deviation
        assert documented in API_MD.read_text(), f"docs/api.md does not document: {documented}"
        expected = korral_outcome(expected)
    with started(simulated=clock_driven(scenario)) as core:
        actual = replay(core, scenario)
    differences = compare(expected, actual)
    assert not differences, "\n".join([scenario.get("difference") or scenario["name"], *differences])

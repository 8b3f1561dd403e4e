"""The completed applications a partition keeps: expiry after YuniKorn's terminatedTimeout, a cap."""

from __future__ import annotations

import pytest

from korral.model.completed import MAX_KEPT, TERMINATED_TIMEOUT, CompletedApplications


def test_yunikorns_timeout_and_a_cap_by_default() -> None:
    kept: CompletedApplications[str] = CompletedApplications()
    assert kept.timeout == TERMINATED_TIMEOUT == 3 * 24 * 3600 and kept.max_kept == MAX_KEPT


@pytest.mark.parametrize(
    ("ended", "now", "left"),
    [
        ({"a": 0.0, "b": 10.0}, 99.0, ["a", "b"]),  # nothing old enough
        ({"a": 0.0, "b": 10.0}, 100.0, ["b"]),  # exactly the timeout: expired
        ({"a": 0.0, "b": 10.0}, 110.0, []),
        ({"a": 5.0, "b": 0.0}, 104.0, ["a"]),  # b ended first: it goes first
    ],
)
def test_expiry(ended: dict[str, float], now: float, left: list[str]) -> None:
    kept: CompletedApplications[str] = CompletedApplications(timeout=100.0)
    for application_id, at in sorted(ended.items(), key=lambda item: item[1]):
        kept.add(application_id, application_id.upper(), at)
    kept.expire(now)
    assert sorted(kept) == left and sorted(kept.values()) == [x.upper() for x in left]


def test_past_the_cap_the_oldest_goes_at_once() -> None:
    kept: CompletedApplications[int] = CompletedApplications(max_kept=3)
    for number in range(5):
        kept.add(f"app-{number}", number, float(number))
    assert list(kept) == ["app-2", "app-3", "app-4"] and kept.get("app-0") is None and len(kept) == 3


def test_an_application_that_ends_again_is_the_newest_and_a_live_one_is_not_shown() -> None:
    kept: CompletedApplications[str] = CompletedApplications(timeout=100.0)
    kept.add("a", "first", 0.0)
    kept.add("b", "b", 1.0)
    kept.discard("b")  # re-added: live again
    assert kept.get("b") is None
    kept.add("a", "second", 50.0)
    assert kept.expire(120.0) == [] and kept.get("a") == "second"


def test_a_cap_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_kept"):
        CompletedApplications(max_kept=0)

"""Test-only fault injection: deliberately broken behaviour that ``korral stress`` must catch.

Nothing is enabled unless a test or ``korral stress --inject-fault`` turns it on; the check on the
code path is a set lookup on an empty set.
"""

from __future__ import annotations

KNOWN = {
    # the node keeps an allocation its application released: an orphan on the node
    "node-keeps-released": "a node ignores the release of every allocation whose uuid ends in 0",
    # one rare message order only: a Placed that reaches an application after its removal did. The
    # allocation stays booked on the node, owned by nobody (korral stress --simulated must find it)
    "removed-app-keeps-placed": "a removed application neither confirms nor hands back a placement",
}

active: set[str] = set()


def enable(name: str) -> None:
    if name not in KNOWN:
        raise ValueError(f"unknown fault {name!r}; known: {', '.join(sorted(KNOWN))}")
    active.add(name)


def disable_all() -> None:
    active.clear()

"""When a deadline counts as reached.

A timer set for a deadline fires at a moment computed as ``now + (deadline - now)``, which floats may
round a hair short of the deadline itself; a check that then found the deadline not yet reached would
ask for the same wake-up again and never end the state. Every check of a deadline allows this much.
"""

TIME_EPSILON = 1e-9  # seconds


def reached(now: float, deadline: float) -> bool:
    """Has ``now`` reached ``deadline`` (within ``TIME_EPSILON``)?"""
    return now >= deadline - TIME_EPSILON

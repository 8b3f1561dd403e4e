"""``korral stress --preemption``: the run, its driver and its setup."""

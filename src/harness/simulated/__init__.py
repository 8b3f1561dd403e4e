"""``korral stress --simulated``: seeds on the simulated runtime, their workload, checks, faults,
replay and shrinking."""

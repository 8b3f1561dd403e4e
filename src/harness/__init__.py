"""korral's own test and measurement harness, kept apart from the product.

- ``reference``: the sequential reference scheduler (the oracle of the equivalence tests and benchmarks);
- ``stress``: ``korral stress``: hostile RMs, restarts, invariants, a shrinker for what fails;
- ``simulate``: ``korral simulate``: a small scripted cluster run for the command line;
- ``faults``: deliberately broken actors that ``korral stress`` must catch;
- ``invariants``: what must hold in a quiet core, read through the public snapshots;
- ``benchmark``: ``korral bench``: workloads, the runner, sweeps, multi-RM and remote-RM runs.

The product (``korral`` outside this package) never imports it; ``tests/unit/test_layering.py`` checks.
The public test kit for RMs stays ``korral.testing``.
"""

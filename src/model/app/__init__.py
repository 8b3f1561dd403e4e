"""An application: as placed (spec), its state machine, asks and allocations, the owner's decisions,
its summary."""

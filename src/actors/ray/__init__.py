"""engine="ray": each partition in its own Ray actor process (docs/architecture.md, "Beyond one
process"). The only modules of korral that import Ray; ``korral.start(engine="ray")`` imports them."""

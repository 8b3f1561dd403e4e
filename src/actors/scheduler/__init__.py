"""The Scheduler actor: the partition's one stream of decisions, and what it publishes per batch."""

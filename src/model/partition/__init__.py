"""A partition's model, composed of parts (registry, applications, allocations, walk, effects)."""

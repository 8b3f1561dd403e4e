"""Partition naming shared by every driver: the RM's name for a partition -> the core's name."""

from __future__ import annotations

from functools import lru_cache

DEFAULT_PARTITION = "default"


def normalize_partition_name(name: str, rm_id: str) -> str:
    """``[rm_id]name`` (YuniKorn's GetNormalizedPartitionName): "" means default; "[..." is kept."""
    if name.startswith("["):
        return name
    return f"[{rm_id}]{(name or DEFAULT_PARTITION).lower()}"


@lru_cache(maxsize=256)  # a handful of partitions, asked once per allocation reported to an RM
def partition_without_rm(name: str) -> str:
    """The RM's own name of a core partition name: ``[rm1]default`` -> ``default``."""
    if name.startswith("[") and "]" in name:
        return name[name.index("]") + 1 :]
    return name

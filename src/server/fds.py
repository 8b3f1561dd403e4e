"""The file descriptors a server may hold for its clients: a share of the process's limit.

Each server (gRPC, REST) takes at most a quarter of the soft ``RLIMIT_NOFILE`` (at most 1,024
connections) by default, so that clients of one server, or both together, never take the descriptors
the other, the core's threads and pipes and the log need.
"""

from __future__ import annotations

import resource

DEFAULT_FD_SHARE = 4  # a server's clients hold at most 1/4 of the limit by default
DEFAULT_MAX_CONNECTIONS = 1024


def fd_limit() -> int:
    """The process's soft limit of open file descriptors."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def default_max_connections() -> int:
    return max(16, min(DEFAULT_MAX_CONNECTIONS, fd_limit() // DEFAULT_FD_SHARE))

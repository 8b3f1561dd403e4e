"""korral: Apache YuniKorn's scheduler core rebuilt in Python as an actor system."""

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from korral import si
from korral.callback import ResourceManagerCallback
from korral.config import load_config
from korral.config.schema import SchedulerConfig
from korral.core import Core, start
from korral.errors import (
    CallTimeoutError,
    CapacityError,
    ConfigError,
    ConfigLimitError,
    InvalidRequestError,
    KorralError,
    MissingExtraError,
    SchedulerError,
)
from korral.info import (
    AllocationInfo,
    ApplicationInfo,
    GroupUsageInfo,
    LimitUsageInfo,
    NodeInfo,
    PartitionInfo,
    QueueInfo,
    UserUsageInfo,
)

if TYPE_CHECKING:
    from korral.server.client import RemoteCore, ResyncRequired, connect

try:
    # one source for the version: pyproject.toml, as installed
    __version__ = version("korral")
except PackageNotFoundError:  # pragma: no cover - run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "AllocationInfo",
    "ApplicationInfo",
    "CallTimeoutError",
    "CapacityError",
    "ConfigError",
    "ConfigLimitError",
    "Core",
    "GroupUsageInfo",
    "InvalidRequestError",
    "KorralError",
    "LimitUsageInfo",
    "MissingExtraError",
    "NodeInfo",
    "PartitionInfo",
    "QueueInfo",
    "RemoteCore",
    "ResourceManagerCallback",
    "ResyncRequired",
    "SchedulerConfig",
    "SchedulerError",
    "UserUsageInfo",
    "connect",
    "load_config",
    "si",
    "start",
]


def __getattr__(name: str) -> Any:
    """The gRPC client (``connect``, ``RemoteCore``, ``ResyncRequired``), imported on first use: ``import
    korral`` does not import grpc, so that the command line can quiet gRPC's own C-core log lines (set
    before grpc is imported: korral.cli) and a program that never connects does not pay for it."""
    if name in ("RemoteCore", "ResyncRequired", "connect"):
        from korral.server import client

        return getattr(client, name)
    raise AttributeError(f"module 'korral' has no attribute {name!r}")

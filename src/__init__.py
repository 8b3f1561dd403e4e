"""korral: Apache YuniKorn's scheduler core rebuilt in Python as an actor system."""

from importlib.metadata import PackageNotFoundError, version

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

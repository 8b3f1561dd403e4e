"""korral: Apache YuniKorn's scheduler core rebuilt in Python as an actor system."""

from korral import si
from korral.callback import ResourceManagerCallback
from korral.config import load_config
from korral.config.schema import SchedulerConfig
from korral.core import Core, start
from korral.errors import ConfigError, KorralError, SchedulerError
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

__all__ = [
    "AllocationInfo",
    "ApplicationInfo",
    "ConfigError",
    "Core",
    "GroupUsageInfo",
    "KorralError",
    "LimitUsageInfo",
    "NodeInfo",
    "PartitionInfo",
    "QueueInfo",
    "ResourceManagerCallback",
    "SchedulerConfig",
    "SchedulerError",
    "UserUsageInfo",
    "load_config",
    "si",
    "start",
]

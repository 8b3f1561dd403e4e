"""korral: Apache YuniKorn's scheduler core rebuilt in Python as an actor system."""

from korral import si
from korral.callback import ResourceManagerCallback
from korral.config import load_config
from korral.config.schema import SchedulerConfig
from korral.core import Core, start
from korral.errors import ConfigError, KorralError, SchedulerError
from korral.info import AllocationInfo, ApplicationInfo, NodeInfo, PartitionInfo, QueueInfo
from korral.server.client import RemoteCore, connect

__all__ = [
    "AllocationInfo",
    "ApplicationInfo",
    "ConfigError",
    "Core",
    "KorralError",
    "NodeInfo",
    "PartitionInfo",
    "QueueInfo",
    "RemoteCore",
    "ResourceManagerCallback",
    "SchedulerConfig",
    "SchedulerError",
    "connect",
    "load_config",
    "si",
    "start",
]

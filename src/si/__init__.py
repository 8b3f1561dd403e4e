"""The scheduler interface (SI): messages, enums and constants exchanged between an RM and the core."""

from korral.si.messages import *  # noqa: F403
from korral.si.messages import __all__ as __all__

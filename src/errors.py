"""korral's exception hierarchy (api.md: Errors)."""


class KorralError(Exception):
    """Base of every error korral raises on purpose."""


class ConfigError(KorralError):
    """A configuration that YuniKorn's validator would reject; the message names the offending part."""


class SchedulerError(KorralError):
    """A request the core cannot take at all (for example from an unregistered resource manager)."""

"""korral's exception hierarchy (api.md: Errors)."""


class KorralError(Exception):
    """Base of every error korral raises on purpose."""


class ConfigError(KorralError):
    """A configuration that YuniKorn's validator would reject; the message names the offending part."""


class ConfigLimitError(ConfigError):
    """A configuration refused before it was judged: past one of the bounds of docs/api.md ("Bounds of a
    configuration": size, nesting, alias expansion, queues); the message names the bound, and says it
    is korral's: YuniKorn's validator has no such check."""

    def __init__(self, message: str) -> None:
        super().__init__(message if message.endswith(KORRAL_BOUND) else message + KORRAL_BOUND)


# what every refusal past one of korral's own bounds ends with (a config refused before it reaches a
# ConfigLimitError, as REST's validate-conf does for a body too large, too)
KORRAL_BOUND = " (a bound of korral's, stricter than YuniKorn's validator)"


class SchedulerError(KorralError):
    """A request the core cannot take at all (for example from an unregistered resource manager)."""

    grpc_status = "FAILED_PRECONDITION"  # the status the gRPC SI answers it with


class InvalidRequestError(SchedulerError):
    """A request the SI does not allow whoever sends it, such as one with an empty rmID (over gRPC:
    ``INVALID_ARGUMENT``, where a request the core cannot take now is ``FAILED_PRECONDITION``)."""

    grpc_status = "INVALID_ARGUMENT"


class CallTimeoutError(SchedulerError):
    """The core did not answer a call within its time (a registration whose partitions are slow to
    start on a loaded machine); what was asked may still be carried out."""

    grpc_status = "DEADLINE_EXCEEDED"


class CapacityError(SchedulerError):
    """A registration or configuration past one of the core's bounds on what clients make it hold
    (``max_rms`` resource managers, ``max_partitions`` partitions: docs/security.md); over gRPC
    ``RESOURCE_EXHAUSTED``."""

    grpc_status = "RESOURCE_EXHAUSTED"


class MissingExtraError(KorralError, ImportError):
    """A feature called whose optional dependencies are not installed; the message names the
    ``pip install 'korral[EXTRA]'`` that adds them (an ImportError too, for code that catches those)."""

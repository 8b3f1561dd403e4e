"""``korral serve``'s log: who registered (or was refused), once; where it listens, once.

At INFO (serve's default) an operator reads who registered, with the partitions the registration
created or wiped and replaced, and who was refused and why. An RM cut off for not reading its
responses is logged where that happens (``korral.grpc``, as an error naming the RM and the reason).
The gRPC server's own "listening" line is left out: ``korral serve`` prints the address on stdout,
where scripts read it, and the log would say it a second time.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from korral import log_text, si

if TYPE_CHECKING:
    from korral.core import Core

log = log_text.logger("korral.serve")


def _not_listening_again(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("gRPC SI listening on")


def configure() -> None:
    logging.getLogger("korral.grpc").addFilter(_not_listening_again)


def _partitions(core: Core, rm_id: str) -> list[str]:
    return [name for name in core.partition_names() if name.startswith(f"[{rm_id}]")]


def logging_registrations(core: Core) -> Core:
    """``core`` with every registration logged (INFO; a refused one as a WARNING with the reason)."""
    register = core.register_resource_manager

    def logged(request: si.RegisterResourceManagerRequest, callback: Any = None) -> Any:
        rm_id = getattr(request, "rm_id", "?")
        again = bool(_partitions(core, rm_id)) if isinstance(rm_id, str) else False
        try:
            response = register(request, callback)
        except Exception as error:
            log.warning("RmID=%s: registration refused: %s", rm_id, error)
            raise
        log.info(
            "RmID=%s registered%s: partitions %s",
            rm_id,
            " again (its earlier state wiped)" if again else "",
            ", ".join(_partitions(core, rm_id)) or "none",
        )
        return response

    core.register_resource_manager = logged  # type: ignore[method-assign]
    return core

"""The optional extras korral runs with: each checked where it is first needed, and refused in one
sentence naming the pip install, where a failed import deep inside would give a traceback."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from korral.errors import MissingExtraError, SchedulerError

if TYPE_CHECKING:
    from korral.actors.tracker import Tracker


def ray_engine(ray_address: str | None, tracker: Tracker) -> Any:
    try:
        from korral.actors.ray.engine import RayEngine
    except ImportError as error:
        raise SchedulerError(f'engine="ray" needs Ray: pip install "korral[ray]" ({error})') from error
    return RayEngine(ray_address, tracker)


def require_serve_extra() -> None:
    """MissingExtraError unless the ``serve`` extra (aiohttp) can be imported: one sentence saying
    what to install, where the import deep inside the REST server would give a traceback."""
    try:
        found = importlib.util.find_spec("aiohttp") is not None
    except ImportError:  # a finder that refuses the name, or a broken install
        found = False
    if not found:
        raise MissingExtraError(
            "serving the REST API needs aiohttp, which is not installed: pip install 'korral[serve]'"
        )

"""Typed dispatch: each actor class's handler table, keyed by message class, built and checked once.

An actor handles a message class ``X`` with a method ``on_X(self, message: X)``. The table maps the
class itself (not its name) to the function, so a handler is one dict lookup and a call per message,
with no string formatting or ``getattr``. It is built when the first actor of a class starts
(``ensure_handlers``), and the build refuses a class whose handlers do not say what they handle: a
handler whose ``message`` parameter is unannotated, ``Any`` or not a class, or whose annotation
names another class than its method name (a renamed message or a copied handler would otherwise
go quiet). A message with no entry in the table is an error the core counts (``Tracker.errors``),
not only a log line.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any

# a handler as stored in a table: the plain function, called with the actor and the message
Handler = Callable[[Any, Any], Any]

PREFIX = "on_"


class HandlerTableError(TypeError):
    """An actor class whose handlers do not each name the one message class they handle."""


def _handler_names(actor_class: type) -> list[str]:
    """``on_X`` methods of the class and its bases, ``X`` a class name (``on_start``, ``on_stop``,
    ``on_failure``, ``on_receive`` are pykka's hooks, not handlers)."""
    return sorted(
        name
        for name in dir(actor_class)
        if name.startswith(PREFIX) and name[len(PREFIX) : len(PREFIX) + 1].isupper()
    )


def _message_class(actor_class: type, name: str, function: Any) -> type:
    """The class a handler's ``message`` parameter is annotated with (resolved in its own module)."""
    parameters = list(inspect.signature(function).parameters.values())
    if len(parameters) != 2:
        raise HandlerTableError(
            f"{actor_class.__name__}.{name} must take (self, message), not {len(parameters) - 1} arguments"
        )
    try:
        hints = typing.get_type_hints(function)
    except NameError as error:
        raise HandlerTableError(
            f"{actor_class.__name__}.{name}: its message annotation does not resolve ({error})"
        ) from error
    annotation = hints.get(parameters[1].name)
    if not isinstance(annotation, type) or annotation in (object, Any):
        raise HandlerTableError(
            f"{actor_class.__name__}.{name} must annotate its message with the message class, "
            f"not {annotation!r}"
        )
    expected = name[len(PREFIX) :]
    if annotation.__name__ != expected:
        raise HandlerTableError(
            f"{actor_class.__name__}.{name} is annotated to handle {annotation.__name__}: a handler of "
            f"{annotation.__name__} is named on_{annotation.__name__}"
        )
    return annotation


def handler_table(actor_class: type) -> Mapping[type, Handler]:
    """Message class -> handler for an actor class (its own and inherited ``on_X`` methods)."""
    table: dict[type, Handler] = {}
    for name in _handler_names(actor_class):
        function = getattr(actor_class, name)
        if not callable(function):
            raise HandlerTableError(f"{actor_class.__name__}.{name} is not a method")
        table[_message_class(actor_class, name, function)] = function
    return table


def ensure_handlers(actor_class: type) -> None:
    """Build (and check) the class's table the first time one of its actors is made. A runtime's
    wrapper class (the simulated runtime's) names the class it runs as ``runs``, and shares its table."""
    target: type = actor_class.__dict__.get("runs", actor_class)
    if "handlers" not in target.__dict__:
        setattr(target, "handlers", handler_table(target))  # noqa: B010  (a ClassVar of KorralActor's)

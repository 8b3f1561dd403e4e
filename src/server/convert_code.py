"""Straight-line conversion code for one SI message type, generated once at import from its field table.

``korral.server.convert`` derives each message's fields (attribute, proto name, kind) from the attrs
classes and the proto's descriptors. Walking that table for every item of a request or response costs a
loop, a branch on the field's kind and a ``getattr`` by name per field: about half of what converting an
ask or an allocation costs. The functions made here do the same steps for one message type with the
table unrolled (what attrs does for ``__init__``): each field read or written by its own line.

- ``reader``: protobuf -> korral, for a message that holds no unknown fields (``convert`` checks the
  whole message once). A field at its proto3 default is absent, as ``ListFields`` has it, and takes
  the attrs default; a sub-message is present when set. An enum number korral does not know raises
  ``ValueError``: the caller then reads the message field by field for the path and reason.
- ``writer``: korral -> protobuf. Fields at their default are left unset (proto3 does not send them);
  an empty sub-message is still present, as in korral.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# field kinds
SCALAR, ENUM, RESOURCE, MAP, MESSAGE, REPEATED_MESSAGE, REPEATED_SCALAR = range(7)

# (proto field, kind, slot setter, default, factory, sub-message converter, enum class) of each field of a
# korral message, in its attrs order; a sub-message converter has ``read`` and ``write`` once built
ReadField = tuple[str, int, Any, Any, Any, Any, Any]
# (attribute, proto field, kind, sub-message converter, the protobuf Resource class of a resource field)
WriteField = tuple[str, str, int, Any, Any]


# Resources decoded, by their bytes on the wire: the items of a request or response mostly share a
# few (one per kind of pod), and reading a map entry by entry costs several times a lookup. Bounded:
# past RESOURCE_CACHE different ones, new ones are decoded and not kept.
RESOURCE_CACHE = 1024
# and only resources of at most this many bytes on the wire (an RM's few kinds take tens): one request
# may carry a resource of 60 MiB, which the caches would otherwise hold as long as the process runs
RESOURCE_CACHE_BYTES = 1024
_resources: dict[bytes, dict[str, int]] = {}


def resource_map(resource: Any) -> dict[str, int]:
    """A protobuf Resource (holding no unknown field) as korral's map: a private copy each time."""
    wire = resource.SerializeToString()
    known = _resources.get(wire)
    if known is None:
        entries = resource.resources
        known = {name: entries[name].value for name in entries}
        if len(_resources) < RESOURCE_CACHE and len(wire) <= RESOURCE_CACHE_BYTES:
            _resources[wire] = known
    return dict(known)


# Resources encoded, by their items: the same few recur across a response's allocations, and filling
# a map entry by entry costs more than copying a finished message in. Bounded like the decoding's.
_resource_messages: dict[tuple[tuple[str, int], ...], Any] = {}


def resource_message(resource: dict[str, int], proto_type: Any) -> Any:
    """The protobuf Resource of korral's map, shared: the caller copies it into its message (CopyFrom)."""
    key = tuple(resource.items())
    known = _resource_messages.get(key)
    if known is None:
        known = proto_type()
        quantities = known.resources
        for name, value in resource.items():
            quantities[name].value = value  # TypeError / ValueError for a value the proto cannot hold
        if len(_resource_messages) < RESOURCE_CACHE and known.ByteSize() <= RESOURCE_CACHE_BYTES:
            _resource_messages[key] = known
    return known


def _absent(index: int, factory: Any) -> str:
    return f"F{index}()" if factory is not None else f"D{index}"


def reader(korral_type: type, fields: Sequence[ReadField]) -> Callable[[Any], Any]:
    """The function that makes ``korral_type`` from a protobuf message holding no unknown fields."""
    names: dict[str, Any] = {"NEW": object.__new__, "K": korral_type, "RESOURCE": resource_map}
    lines = ["def read(source):", "    made = NEW(K)"]
    for index, (proto, kind, set_slot, default, factory, sub, enum_type) in enumerate(fields):
        names[f"S{index}"], names[f"D{index}"], names[f"F{index}"] = set_slot, default, factory
        names[f"C{index}"], names[f"E{index}"] = sub, enum_type
        absent = _absent(index, factory)
        if kind not in (RESOURCE, MESSAGE):  # a sub-message is read only when present
            lines.append(f"    v = source.{proto}")
        if kind == SCALAR:
            lines.append(f"    S{index}(made, v if v else {absent})")
        elif kind == ENUM:
            lines.append(f"    S{index}(made, E{index}(v) if v else {absent})")
        elif kind == RESOURCE:
            lines += [
                f"    if source.HasField({proto!r}):",
                f"        S{index}(made, RESOURCE(source.{proto}))",
                "    else:",
                f"        S{index}(made, {absent})",
            ]
        elif kind == MAP:
            lines.append(f"    S{index}(made, dict(v) if v else {absent})")
        elif kind == REPEATED_SCALAR:
            lines.append(f"    S{index}(made, tuple(v) if v else {absent})")
        elif kind == REPEATED_MESSAGE:
            lines += [
                "    if v:",
                f"        r = C{index}.read",
                f"        S{index}(made, tuple([r(x) for x in v]))",
                "    else:",
                f"        S{index}(made, {absent})",
            ]
        else:  # MESSAGE
            present = f"C{index}.read(source.{proto})"
            lines.append(f"    S{index}(made, {present} if source.HasField({proto!r}) else {absent})")
    lines.append("    return made")
    read: Callable[[Any], Any] = _compiled(lines, names, "read", korral_type.__name__)
    return read


def writer(korral_type: type, fields: Sequence[WriteField]) -> Callable[[Any, Any], None]:
    """The function that fills a fresh protobuf message from a ``korral_type`` message."""
    names: dict[str, Any] = {"RESOURCE": resource_message}
    lines = ["def write(target, message):"]
    for index, (attr, proto, kind, sub, resource_type) in enumerate(fields):
        names[f"C{index}"], names[f"P{index}"] = sub, resource_type
        lines.append(f"    v = message.{attr}")
        if kind in (SCALAR, ENUM):
            lines.append(f"    if v: target.{proto} = v")
        elif kind == RESOURCE:
            lines.append(f"    if v: target.{proto}.CopyFrom(RESOURCE(v, P{index}))")
        elif kind == MAP:
            lines.append(f"    if v: target.{proto}.update(v)")
        elif kind == REPEATED_SCALAR:
            lines.append(f"    if v: target.{proto}.extend(v)")
        elif kind == REPEATED_MESSAGE:
            lines += [
                "    if v:",
                f"        add, w = target.{proto}.add, C{index}.write",
                "        for x in v: w(add(), x)",
            ]
        else:  # MESSAGE: an empty sub-message is still present
            lines += [
                "    if v is not None:",
                f"        s = target.{proto}",
                "        s.SetInParent()",
                f"        C{index}.write(s, v)",
            ]
    lines.append("    return None")
    write: Callable[[Any, Any], None] = _compiled(lines, names, "write", korral_type.__name__)
    return write


def _compiled(lines: list[str], names: dict[str, Any], function: str, message: str) -> Any:
    source = "\n".join(lines) + "\n"
    code = compile(source, f"<korral.server.convert_code {function} {message}>", "exec")
    exec(code, names)  # the source is built above from the field tables: names only, no input
    return names[function]

"""The one conversion between the wire's protobuf messages (korral/si/si.proto) and ``korral.si``'s.

Every ``korral.si`` message class has the protobuf message of the same name; its snake_case fields map
to the proto's camelCase ones (``rm_id`` <-> ``rmID``; the seed's own spellings, such as ``UUID``,
``Originator`` and ``applicartionID``, are listed in ``_SPECIAL_NAMES``). A protobuf ``Resource`` is a
``dict[str, int]``. The field tables are derived once from the attrs classes and the proto's descriptors
and checked against each other at import, so a field added on one side only fails loudly, never drops.

Decoding is strict where the proto is open: an enum number korral does not know, or a known field sent
with the wrong wire type, raises :class:`ConversionError` naming the message and field (the server
answers ``INVALID_ARGUMENT``). Unknown field numbers are ignored, as proto3 does. Inside a resource map
the check is per item: a quantity or map entry with the wrong wire type decodes to an ``Undecodable``
that rejects the ask, node or allocation holding it (with the reason, through the RM's callback) and
lets the rest of the request go on.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import attrs
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from korral import si
from korral.server import convert_code
from korral.si import si_pb2
from korral.si.messages import slot_setters
from korral.si.validate import Undecodable

__all__ = [
    "ConversionError",
    "from_pb",
    "parse",
    "parse_ordered",
    "parse_ordered_typed",
    "parse_typed",
    "resource_from_pb",
    "resource_to_pb",
    "serialize",
    "to_pb",
]


class ConversionError(ValueError):
    """A protobuf message korral cannot take: undecodable bytes or a value outside the SI."""


# (korral class name, attrs field) -> proto field, where the camelCase rule does not give the seed's name
_SPECIAL_NAMES: dict[tuple[str, str], str] = {
    ("Allocation", "uuid"): "UUID",
    ("AllocationRelease", "uuid"): "UUID",
    ("AllocationAsk", "originator"): "Originator",
    ("AllocationAsk", "execution_timeout_milliseconds"): "executionTimeoutMilliSeconds",
    ("AddApplicationRequest", "execution_timeout_milliseconds"): "executionTimeoutMilliSeconds",
    ("UpdateContainerSchedulingStateRequest", "application_id"): "applicartionID",
}

# The korral enum behind each proto enum, by the proto enum's full name.
_ENUMS: dict[str, type[enum.IntEnum]] = {
    "si.v1.TerminationType": si.TerminationType,
    "si.v1.NodeInfo.ActionFromRM": si.NodeAction,
    "si.v1.UpdateContainerSchedulingStateRequest.SchedulingState": si.SchedulingState,
    "si.v1.EventRecord.Type": si.EventRecordType,
    "si.v1.EventRecord.ChangeType": si.EventChangeType,
    "si.v1.EventRecord.ChangeDetail": si.EventChangeDetail,
}

# field kinds
_SCALAR, _ENUM, _RESOURCE, _MAP = (
    convert_code.SCALAR,
    convert_code.ENUM,
    convert_code.RESOURCE,
    convert_code.MAP,
)
_MESSAGE, _REPEATED_MESSAGE = convert_code.MESSAGE, convert_code.REPEATED_MESSAGE
_REPEATED_SCALAR = convert_code.REPEATED_SCALAR


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join("ID" if part == "id" else part.capitalize() for part in rest)


@attrs.frozen
class _Field:
    attr: str
    proto: str
    kind: int
    enum_type: type[enum.IntEnum] | None = None
    message: type | None = None  # the korral class of a (repeated) sub-message


_ABSENT = object()


@attrs.frozen
class _Spec:
    korral_type: type
    proto_type: type[Message]
    fields: tuple[_Field, ...]
    by_proto: dict[str, _Field] = attrs.field(init=False)
    # (attribute, its slot's setter, default, factory) of every attrs field, in order: ``construct``
    slots: tuple[tuple[str, Any, Any, Any], ...] = attrs.field(init=False)
    # the message's own conversion code (``convert_code``), made once every spec is built (``_compile``):
    # protobuf holding no unknown field -> korral, and korral -> a fresh protobuf
    read: Callable[[Message], Any] = attrs.field(init=False, default=None)
    write: Callable[[Message, Any], None] = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "by_proto", {field.proto: field for field in self.fields})
        slots = []
        setters = slot_setters(self.korral_type)
        for attribute in attrs.fields(self.korral_type):
            default = attribute.default
            factory = default.factory if isinstance(default, attrs.Factory) else None  # type: ignore[arg-type]
            slots.append((attribute.name, setters[attribute.name], None if factory else default, factory))
        object.__setattr__(self, "slots", tuple(slots))

    def construct(self, values: dict[str, Any]) -> Any:
        """The korral message of decoded ``values`` (each already in its converted form: fresh dicts,
        tuples, enum members), set through its slots: attrs' ``__init__`` would run its converters
        again (1.85 -> ~1 µs an ask decoded from the wire)."""
        made: Any = object.__new__(self.korral_type)
        for name, set_slot, default, factory in self.slots:
            value = values.get(name, _ABSENT)
            if value is _ABSENT:
                value = factory() if factory is not None else default
            set_slot(made, value)
        return made


_BY_KORRAL: dict[type, _Spec] = {}
_BY_PROTO: dict[type, _Spec] = {}


def _field_kind(descriptor: FieldDescriptor) -> tuple[int, Any]:
    message_type = descriptor.message_type
    if descriptor.is_repeated:
        if message_type is not None and message_type.GetOptions().map_entry:
            return _MAP, None
        if message_type is not None:
            return _REPEATED_MESSAGE, message_type.name
        return _REPEATED_SCALAR, None
    if message_type is not None:
        return (
            (_RESOURCE, None) if message_type.full_name == "si.v1.Resource" else (_MESSAGE, message_type.name)
        )
    if descriptor.enum_type is not None:
        return _ENUM, _ENUMS[descriptor.enum_type.full_name]
    return _SCALAR, None


def _build_specs() -> None:
    for name in si.__all__:
        korral_type = getattr(si, name)
        if not (isinstance(korral_type, type) and attrs.has(korral_type)):
            continue
        proto_type = getattr(si_pb2, name)
        by_proto_name = proto_type.DESCRIPTOR.fields_by_name
        fields = []
        for attribute in attrs.fields(korral_type):
            proto_name = _SPECIAL_NAMES.get((name, attribute.name), _camel(attribute.name))
            if proto_name not in by_proto_name:
                raise RuntimeError(f"si.{name}.{attribute.name}: no field {proto_name} in si.proto")
            kind, extra = _field_kind(by_proto_name[proto_name])
            fields.append(
                _Field(
                    attribute.name,
                    proto_name,
                    kind,
                    enum_type=extra if kind == _ENUM else None,
                    message=getattr(si, extra) if kind in (_MESSAGE, _REPEATED_MESSAGE) else None,
                )
            )
        missing = set(by_proto_name) - {field.proto for field in fields}
        if missing:
            raise RuntimeError(f"si.proto {name} fields without a korral field: {sorted(missing)}")
        spec = _Spec(korral_type, proto_type, tuple(fields))
        _BY_KORRAL[korral_type] = spec
        _BY_PROTO[proto_type] = spec


def _compile() -> None:
    for spec in _BY_KORRAL.values():
        by_attr = {field.attr: field for field in spec.fields}
        read_fields = []
        for name, set_slot, default, factory in spec.slots:
            field = by_attr[name]
            sub = _BY_KORRAL[field.message] if field.message is not None else None
            read_fields.append((field.proto, field.kind, set_slot, default, factory, sub, field.enum_type))
        write_fields = [
            (
                field.attr,
                field.proto,
                field.kind,
                _BY_KORRAL[field.message] if field.message else None,
                si_pb2.Resource if field.kind == _RESOURCE else None,
            )
            for field in spec.fields
        ]
        object.__setattr__(spec, "read", convert_code.reader(spec.korral_type, read_fields))
        object.__setattr__(spec, "write", convert_code.writer(spec.korral_type, write_fields))


_build_specs()
_compile()


# ---- korral -> protobuf ----------------------------------------------------------------------------------


def resource_to_pb(resource: si.Resource, target: si_pb2.Resource | None = None) -> si_pb2.Resource:
    target = si_pb2.Resource() if target is None else target
    quantities = target.resources
    for name, value in resource.items():
        quantities[name].value = value
    return target


def to_pb(message: Any) -> Message:
    """The protobuf message for a ``korral.si`` message (TypeError/ValueError for out-of-range values)."""
    spec = _BY_KORRAL.get(type(message))
    if spec is None:
        raise TypeError(f"not a korral.si message: {type(message).__name__}")
    target = spec.proto_type()
    spec.write(target, message)
    return target


def serialize(message: Any) -> bytes:
    """A ``korral.si`` message's wire bytes."""
    data: bytes = to_pb(message).SerializeToString()
    return data


# ---- protobuf -> korral ----------------------------------------------------------------------------------


def _mistyped(message: Message) -> bool:
    """Whether field 1 (``Resource.resources``, ``Quantity.value``) came with the wrong wire type;
    other unknown field numbers are a newer client's additions and ignored."""
    unknown = UnknownFieldSet(message)
    return bool(len(unknown)) and any(item.field_number == 1 for item in unknown)


def resource_from_pb(resource: si_pb2.Resource) -> si.Resource:
    """The resource map; a map entry or a quantity sent with the wrong wire type (protobuf keeps it as
    an unknown field and reads 0) becomes an :class:`Undecodable` in its place, so that the item that
    holds it is rejected with the reason, alone, where a silent 0 would drop that resource."""
    quantities: dict[str, Any] = {}
    if _mistyped(resource):  # the entry's name is lost with it
        quantities["(entry)"] = Undecodable("a resource map entry has the wrong wire type")
    entries = resource.resources
    for name in entries:  # by key: a message map's items() costs half as much again
        quantity = entries[name]
        if _mistyped(quantity):
            reason = f"quantity of {name!r} has the wrong wire type (an int64 varint expected)"
            quantities[name] = Undecodable(reason)
        else:
            quantities[name] = quantity.value
    return quantities


class _Invalid(Exception):
    """A value korral cannot take, raised deep in a message; each enclosing level adds its part of the
    field's path on the way out."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason


def _read(source: Message, spec: _Spec) -> Any:
    values: dict[str, Any] = {}
    by_proto = spec.by_proto
    unknown = UnknownFieldSet(source)
    if len(unknown):
        # proto3 keeps a field it does not know as unknown, and so a known field sent with the wrong
        # wire type: that one is a malformed message, not a newer client's addition
        numbers = spec.proto_type.DESCRIPTOR.fields_by_number
        for item in unknown:
            known = numbers.get(item.field_number)
            if known is not None:
                raise _Invalid(
                    f".{known.name}", f"wrong wire type {item.wire_type} for field {item.field_number}"
                )
    # only the fields set on the wire (absent ones take the attrs defaults, which are proto3's): the
    # fast path for asks and allocations, which set a few of their fields
    for descriptor, value in source.ListFields():
        field = by_proto[descriptor.name]
        kind = field.kind
        if kind == _SCALAR:
            values[field.attr] = value
        elif kind == _ENUM:
            try:
                values[field.attr] = field.enum_type(value)  # type: ignore[misc]
            except ValueError:
                reason = f"unknown {field.enum_type.__name__} value {value}"  # type: ignore[union-attr]
                raise _Invalid(f".{field.proto}", reason) from None
        elif kind == _RESOURCE:
            values[field.attr] = resource_from_pb(value)
        elif kind == _MAP:
            values[field.attr] = dict(value)
        elif kind == _REPEATED_MESSAGE:
            sub_spec = _BY_KORRAL[field.message]  # type: ignore[index]
            try:
                values[field.attr] = tuple([_read(item, sub_spec) for item in value])
            except _Invalid as error:
                index = next(i for i, item in enumerate(value) if _is_invalid(item, sub_spec))
                raise _Invalid(f".{field.proto}[{index}]{error.path}", error.reason) from None
        elif kind == _REPEATED_SCALAR:
            values[field.attr] = tuple(value)
        else:  # _MESSAGE, present
            try:
                values[field.attr] = _read(value, _BY_KORRAL[field.message])  # type: ignore[index]
            except _Invalid as error:
                raise _Invalid(f".{field.proto}{error.path}", error.reason) from None
    return spec.construct(values)


def _is_invalid(message: Message, spec: _Spec) -> bool:
    try:
        _read(message, spec)
    except _Invalid:
        return True
    return False


def from_pb(message: Message) -> Any:
    """The ``korral.si`` message for a protobuf one; ConversionError for a value korral does not know."""
    spec = _BY_PROTO.get(type(message))
    if spec is None:
        raise TypeError(f"not an si.v1 message korral converts: {type(message).__name__}")
    try:
        return _read(message, spec)
    except _Invalid as error:
        raise ConversionError(f"{spec.proto_type.__name__}{error.path}: {error.reason}") from None


def _decode(proto_type: type[Message], data: bytes) -> Message:
    message = proto_type()
    try:
        message.ParseFromString(data)
    except DecodeError as error:
        raise ConversionError(f"malformed {proto_type.__name__}: {error}") from None
    return message


def _holds_unknown(message: Message) -> bool:
    """Whether any field of the message, at any depth, is unknown to the proto (or came with the wrong
    wire type, which protobuf keeps as unknown). False leaves the message without them: protobuf
    re-encodes them with it, so it is the same size without them only if there were none."""
    size: int = message.ByteSize()
    message.DiscardUnknownFields()
    after: int = message.ByteSize()
    return after != size


def _converted(proto_type: type[Message], data: bytes) -> tuple[Message, bool]:
    """The decoded message, and whether it may be read plainly (its spec's ``read``): nothing in it is
    unknown, the case of every request korral's own clients and YuniKorn's shims send. One that holds
    unknown fields is decoded again and read field by field, so each is told apart (a newer client's
    addition, ignored, or a known field mistyped, refused with its path)."""
    message = _decode(proto_type, data)
    if not _holds_unknown(message):
        return message, True
    return _decode(proto_type, data), False


def _from_decoded(message: Message, plain: bool) -> tuple[Any, bool]:
    """The korral message, and whether the plain reader made it (see ``parse_ordered_typed``)."""
    if not plain:
        return from_pb(message), False
    try:
        return _BY_PROTO[type(message)].read(message), True
    except ValueError:  # an enum number korral does not know: the careful reading says where
        return from_pb(message), False


def parse(proto_type: type[Message], data: bytes) -> Any:
    """Decode wire bytes into the ``korral.si`` message; ConversionError says why it cannot be."""
    return _from_decoded(*_converted(proto_type, data))[0]


def parse_typed(proto_type: type[Message], data: bytes) -> tuple[Any, bool]:
    """``parse``, and whether the plain reader made the message (see ``parse_ordered_typed``)."""
    return _from_decoded(*_converted(proto_type, data))


def parse_ordered(proto_type: type[Message], data: bytes) -> tuple[str, Any]:
    """Decode an OrderedRequest or OrderedResponse: (the kind it holds, the ``korral.si`` message)."""
    kind, message, _ = parse_ordered_typed(proto_type, data)
    return kind, message


def parse_ordered_typed(proto_type: type[Message], data: bytes) -> tuple[str, Any, bool]:
    """``parse_ordered``, and whether every field of the message came through the plain reader.

    Then each field holds the type its proto gives it, in its range (a string, an int32 or int64, a
    bool, a map of strings, a resource of int64 quantities, a known enum member): what
    ``korral.si.validate`` checks of an item's fields holds by construction. False: the message held
    unknown fields, and was read field by field."""
    message, plain = _converted(proto_type, data)
    kind = message.WhichOneof(message.DESCRIPTOR.oneofs[0].name)
    if kind is None:
        raise ConversionError(
            f"an {proto_type.__name__} carries one of allocation, application or node: it has none"
        )
    return kind, *_from_decoded(getattr(message, kind), plain)

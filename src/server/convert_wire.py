"""Straight-line code between an SI message's wire bytes and ``korral.si``'s, without protobuf's objects.

``korral.server.convert_code`` goes through protobuf's Python messages: the C parser is quick, but every
field read or written through its Python object costs an object made or taken apart (~0.1-0.4 µs a
field, ~3.5 µs an ask decoded). The functions made here, one reader and one writer per message type
from the same field tables, read and write the protobuf encoding itself:

- ``wire_reader``: bytes -> korral, for the encoding every conforming writer produces (fields in
  number order, each once, nothing unknown). Anything else (an unknown or repeated field, fields out
  of order, a wire type, varint, length or UTF-8 that is not plain, an enum number korral does not
  know) raises ``NotPlain`` or the error the slice met: the caller then decodes with protobuf
  (``convert.parse``), which accepts or refuses it with the reason. What it returns is what the plain
  reader returns for those bytes: every field of its proto's type and range.
- ``wire_writer``: korral -> bytes, fields in number order, those at their proto3 default left out, an
  empty sub-message kept. A value of another type than its field's raises ``NotPlain``: the caller
  then writes through protobuf, which converts it or says why not.

Resources, the same few in most items of a request or response, are read and written by their bytes
through bounded caches (``RESOURCE_CACHE`` each).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.message import DecodeError, Message

from korral.server.convert_code import (
    ENUM,
    MAP,
    MESSAGE,
    REPEATED_MESSAGE,
    REPEATED_SCALAR,
    RESOURCE,
    RESOURCE_CACHE,
    SCALAR,
    resource_message,
)

# the proto scalar types a SCALAR field has
STRING, INT32, INT64, BOOL = "string", "int32", "int64", "bool"
_VARINT, _LENGTH = 0, 2

# (field number, kind, scalar type, slot setter, default, factory, sub-message converter, enum class)
WireReadField = tuple[int, int, str, Any, Any, Any, Any, Any]
# (attribute, field number, kind, scalar type, sub-message converter, enum class)
WireWriteField = tuple[str, int, int, str, Any, Any]


class NotPlain(ValueError):
    """Bytes or a value the straight-line code does not take: protobuf's path decides."""


def varint(data: bytes, pos: int, first: int) -> tuple[int, int]:
    """The varint whose first byte (``first``, >= 0x80) was at ``pos - 1``, and where it ends."""
    result = first & 0x7F
    shift = 7
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result >> 64:
                raise NotPlain("a varint past 64 bits")
            return result, pos
        shift += 7
        if shift > 63:
            raise NotPlain("a varint of more than ten bytes")


def signed32(value: int) -> int:
    """An int32 read as a varint: negative ones come sign-extended to 64 bits."""
    if value < 0x80000000:
        return value
    if value >= 0xFFFFFFFF80000000:
        return value - (1 << 64)
    raise NotPlain("an int32 past its range")


def signed64(value: int) -> int:
    return value - (1 << 64) if value >> 63 else value


def varint_bytes(value: int) -> bytes:
    """The varint of a non-negative value below 2**64."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# the length prefix of a length-delimited field, by length: one byte below 128
_LENGTHS = tuple(bytes((n,)) for n in range(128))


def length(size: int) -> bytes:
    return _LENGTHS[size] if size < 128 else varint_bytes(size)


def _string(data: bytes, pos: int, end: int) -> tuple[str, int]:
    size = data[pos]
    pos += 1
    if size >= 0x80:
        size, pos = varint(data, pos, size)
    stop = pos + size
    if stop > end:
        raise NotPlain("a length past its message's end")
    return data[pos:stop].decode(), stop


def map_entry(data: bytes, pos: int, end: int) -> tuple[str, str]:
    """A map<string, string> entry: its key (field 1) and value (field 2), each absent or once."""
    key = value = ""
    if pos < end and data[pos] == 0x0A:
        key, pos = _string(data, pos + 1, end)
    if pos < end and data[pos] == 0x12:
        value, pos = _string(data, pos + 1, end)
    if pos != end:
        raise NotPlain("a map entry with other fields")
    return key, value


# Resources by their bytes (decoded) and by their items (encoded); bounded, like convert_code's.
_resources_read: dict[bytes, dict[str, int]] = {}
_resources_written: dict[tuple[tuple[str, int], ...], bytes] = {}


def resource_from_wire(wire: bytes, resource_type: type[Message]) -> dict[str, int]:
    """A Resource's bytes as korral's map: a private copy each time."""
    known = _resources_read.get(wire)
    if known is None:
        resource = resource_type()
        try:
            resource.ParseFromString(wire)
        except DecodeError:
            raise NotPlain("a resource protobuf cannot read") from None
        size = resource.ByteSize()
        resource.DiscardUnknownFields()
        if resource.ByteSize() != size:
            raise NotPlain("a resource holding unknown fields")
        entries = resource.resources
        known = {name: entries[name].value for name in entries}
        if len(_resources_read) < RESOURCE_CACHE:
            _resources_read[wire] = known
    return dict(known)


def resource_to_wire(resource: dict[str, int], resource_type: type[Message]) -> bytes:
    """korral's resource map as a Resource's bytes (protobuf checks each value once per distinct map)."""
    key = tuple(resource.items())
    known = _resources_written.get(key)
    if known is None:
        known = resource_message(resource, resource_type).SerializeToString()
        if len(_resources_written) < RESOURCE_CACHE:
            _resources_written[key] = known
    return known


def _tag(number: int, wire_type: int) -> int:
    tag = number << 3 | wire_type
    if tag >= 0x80:
        raise ValueError(f"field {number}: the straight-line code takes field numbers below 16")
    return tag


def wire_reader(korral_type: type, fields: Sequence[WireReadField], resource_type: type[Message]) -> Any:
    """The function ``read(data, pos, end)`` that makes ``korral_type`` from its bytes
    ``data[pos:end]``."""
    names: dict[str, Any] = {
        "NEW": object.__new__,
        "K": korral_type,
        "VARINT": varint,
        "STRING": _string,
        "ENTRY": map_entry,
        "RESOURCE": resource_from_wire,
        "READ": _resources_read,
        "RT": resource_type,
        "S32": signed32,
        "S64": signed64,
        "NOT_PLAIN": NotPlain,
    }
    fields = sorted(fields, key=lambda field: field[0])  # in number order, as written
    lines = [
        "def read(data, pos, end):",
        "    made = NEW(K)",
        "    t = data[pos] if pos < end else -1",
    ]
    step = "t = data[pos] if pos < end else -1"
    for index, (number, kind, scalar, set_slot, default, factory, sub, enum_type) in enumerate(fields):
        names[f"S{index}"], names[f"D{index}"], names[f"F{index}"] = set_slot, default, factory
        names[f"C{index}"], names[f"E{index}"] = sub, enum_type
        absent = f"F{index}()" if factory is not None else f"D{index}"
        tag = _tag(number, _wire_type(kind, scalar))
        body: list[str]
        if kind in (REPEATED_MESSAGE, REPEATED_SCALAR, MAP):
            if kind == REPEATED_SCALAR:
                each = ["v, pos = STRING(data, pos + 1, end)", "items.append(v)"]
            elif kind == MAP:
                each = [*_length_lines(), "k, v = ENTRY(data, pos, stop)", "items[k] = v", "pos = stop"]
            else:
                each = [*_length_lines(), f"items.append(C{index}.wire_read(data, pos, stop))", "pos = stop"]
            body = [
                "items = {}" if kind == MAP else "items = []",
                f"while t == {tag}:",
                *("    " + line for line in [*each, step]),
                f"S{index}(made, {'items' if kind == MAP else 'tuple(items)'})",
            ]
        elif kind == RESOURCE:
            body = [
                *_length_lines(),
                "r = READ.get(data[pos:stop])",  # a resource seen before: a copy of its map
                f"S{index}(made, dict(r) if r is not None else RESOURCE(data[pos:stop], RT))",
                "pos = stop",
                step,
            ]
        elif kind == MESSAGE:
            body = [
                *_length_lines(),
                f"S{index}(made, C{index}.wire_read(data, pos, stop))",
                "pos = stop",
                step,
            ]
        elif scalar == STRING:
            body = [
                *_length_lines(),
                "v = data[pos:stop].decode()",
                "pos = stop",
                f"S{index}(made, v if v else {absent})",
                step,
            ]
        else:
            body = [
                "v = data[pos + 1]",
                "pos += 2",
                "if v >= 128: v, pos = VARINT(data, pos, v)",
                "if pos > end: raise NOT_PLAIN('a varint past its message')",
            ]
            if scalar == BOOL:
                body += [
                    "if v > 1: raise NOT_PLAIN('a bool other than 0 or 1')",
                    f"S{index}(made, True if v else {absent})",
                ]
            elif scalar == INT64:
                body.append(f"S{index}(made, S64(v) if v else {absent})")
            else:  # int32 and enums
                converted = f"E{index}(S32(v))" if kind == ENUM else "S32(v)"
                body.append(f"S{index}(made, {converted} if v else {absent})")
            body.append(step)
        lines += [
            f"    if t == {tag}:",
            *("        " + line for line in body),
            "    else:",
            f"        S{index}(made, {absent})",
        ]
    lines += [
        "    if pos != end: raise NOT_PLAIN('fields out of order, repeated or unknown')",
        "    return made",
    ]
    return _compiled(lines, names, "read", korral_type.__name__)


def _length_lines() -> list[str]:
    """A length-delimited field's length read: its bytes are ``data[pos:stop]``."""
    return [
        "size = data[pos + 1]",
        "pos += 2",
        "if size >= 128: size, pos = VARINT(data, pos, size)",
        "stop = pos + size",
        "if stop > end: raise NOT_PLAIN('a length past its message')",
    ]


def _wire_type(kind: int, scalar: str) -> int:
    if kind == SCALAR and scalar not in (STRING, INT32, INT64, BOOL):
        raise ValueError(f"a scalar type the straight-line code does not take: {scalar or 'unnamed'}")
    if kind in (RESOURCE, MAP, MESSAGE, REPEATED_MESSAGE, REPEATED_SCALAR) or scalar == STRING:
        return _LENGTH
    return _VARINT


def _heads(tag: int) -> tuple[bytes, ...]:
    """A field's tag and a one-byte length or varint, by that length or value (0-127): shared by
    every field of the same tag."""
    heads = _HEADS.get(tag)
    if heads is None:
        heads = _HEADS[tag] = tuple(bytes((tag, n)) for n in range(128))
    return heads


_HEADS: dict[int, tuple[bytes, ...]] = {}
# Strings written, with their field's tag and length, per field: node, application and partition
# names recur through a response; bounded per field (past the bound, new ones are encoded each time).
STRING_CACHE = 256


def wire_writer(korral_type: type, fields: Sequence[WireWriteField], resource_type: type[Message]) -> Any:
    """The function ``write(message) -> bytes`` of ``korral_type``'s encoding."""
    names: dict[str, Any] = {
        "VARINT": varint_bytes,
        "RESOURCE": resource_to_wire,
        "RT": resource_type,
        "NOT_PLAIN": NotPlain,
        "CACHE": STRING_CACHE,
    }
    lines = ["def write(message):", "    out = bytearray()"]

    def length_delimited(index: int, value: str, indent: str) -> list[str]:
        """``value`` (bytes) written with field ``index``'s tag and its length."""
        return [
            f"{indent}n = len({value})",
            f"{indent}out += H{index}[n] if n < 128 else T{index} + VARINT(n)",
            f"{indent}out += {value}",
        ]

    for index, (attr, number, kind, scalar, sub, enum_type) in sorted(
        enumerate(fields), key=lambda f: f[1][1]
    ):
        tag = _tag(number, _wire_type(kind, scalar))
        names[f"C{index}"], names[f"E{index}"] = sub, enum_type
        names[f"T{index}"], names[f"H{index}"], names[f"Q{index}"] = bytes((tag,)), _heads(tag), {}
        lines.append(f"    v = message.{attr}")
        if kind == MESSAGE:
            lines += ["    if v is not None:", f"        b = C{index}.wire_write(v)"]
            lines += length_delimited(index, "b", "        ")
        elif kind in (REPEATED_MESSAGE, REPEATED_SCALAR):
            each = "w(x)" if kind == REPEATED_MESSAGE else "x.encode()"
            lines += [
                f"    if type(v) is not tuple: raise NOT_PLAIN('{attr}')",
                f"    w = C{index}.wire_write",
                "    for x in v:",
                f"        b = {each}",
            ]
            lines += length_delimited(index, "b", "        ")
        elif kind == MAP:
            lines += [
                f"    if type(v) is not dict: raise NOT_PLAIN('{attr}')",
                "    for k, x in v.items():",
                "        if type(k) is not str or type(x) is not str: raise NOT_PLAIN('a map entry')",
                "        k = k.encode()",
                "        x = x.encode()",
                "        b = b'\\x0a' + LENGTH(len(k)) + k + b'\\x12' + LENGTH(len(x)) + x",
            ]
            names["LENGTH"] = length
            lines += length_delimited(index, "b", "        ")
        elif kind == RESOURCE:
            lines += [
                f"    if type(v) is not dict: raise NOT_PLAIN('{attr}')",
                "    if v:",
                "        b = RESOURCE(v, RT)",
            ]
            lines += length_delimited(index, "b", "        ")
        elif scalar == STRING:
            # the encoded field of a recurring string, or the string encoded (and kept, within bounds)
            lines += [
                "    if v:",
                "        b = v.encode()",  # AttributeError: not a string
                "        n = len(b)",
                f"        out += H{index}[n] if n < 128 else T{index} + VARINT(n)",
                "        out += b",
                f"    elif v != '': raise NOT_PLAIN('{attr}')",
            ]
        elif scalar == BOOL:
            lines += [
                f"    if type(v) is not bool: raise NOT_PLAIN('{attr}')",
                f"    if v: out += H{index}[1]",
            ]
        else:
            check = f"type(v) is not E{index}" if kind == ENUM else "type(v) is not int"
            low, high = (-(1 << 63), (1 << 63) - 1) if scalar == INT64 else (-(1 << 31), (1 << 31) - 1)
            lines += [
                f"    if {check} or not {low} <= v <= {high}: raise NOT_PLAIN('{attr}')",
                f"    if 0 < v < 128: out += H{index}[v]",
                f"    elif v: out += T{index} + VARINT(v & 0xFFFFFFFFFFFFFFFF)",
            ]
    lines.append("    return bytes(out)")
    return _compiled(lines, names, "write", korral_type.__name__)


def _compiled(lines: list[str], names: dict[str, Any], function: str, message: str) -> Callable[..., Any]:
    source = "\n".join(lines) + "\n"
    code = compile(source, f"<korral.server.convert_wire {function} {message}>", "exec")
    exec(code, names)  # the source is built above from the field tables: names only, no input
    made: Callable[..., Any] = names[function]
    return made

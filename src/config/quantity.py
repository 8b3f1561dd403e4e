"""Resource quantities and durations as YuniKorn writes them in queues.yaml (`resources/quantity.go`,
Go's ``time.ParseDuration``).

A quantity is a number with an optional suffix: ``k M G T P E`` (powers of 10) or ``Ki Mi Gi Ti Pi Ei``
(powers of 2). Only ``vcore`` takes ``m`` (milli); ``vcore`` is stored in millicores, so ``"1"`` is 1000 and
``"500m"`` is 500. Memory is bytes and every other type a plain count.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction

from korral.errors import ConfigError

VCORE = "vcore"
MAX_QUANTITY = 2**63 - 1  # YuniKorn quantities are int64
# digits past which a quantity's integer part overflows an int64 whatever its suffix, and past which
# its fraction can never scale to a whole number (the largest suffix is below 10**22)
_QUANTITY_DIGITS = 40

_MULTIPLIERS: dict[str, int] = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY = re.compile(r"^(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?P<suffix>[A-Za-z]*)$")
_WHITESPACE = re.compile(r"\s+")


def parse_quantity(value: str | int, resource_name: str) -> int:
    """Convert one configured quantity to YuniKorn's integer form; raise ValueError when it is not valid."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(
            f"invalid quantity {value!r} for resource {resource_name!r}: not a string or integer"
        )
    is_vcore = resource_name == VCORE
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"invalid quantity {value!r} for resource {resource_name!r}: negative value")
        result = value * 1000 if is_vcore else value
        return _check_range(result, value, resource_name)

    # YuniKorn strips all whitespace before parsing ("1 Gi" is accepted)
    text = _WHITESPACE.sub("", value)
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(
            f"invalid quantity {value!r} for resource {resource_name!r}: not a number with a suffix"
        )
    suffix = match["suffix"]
    if suffix == "m":
        if not is_vcore:
            raise ValueError(
                f"invalid quantity {value!r} for resource {resource_name!r}: "
                "suffix 'm' is only allowed for vcore"
            )
        scale = 1
    elif suffix in _MULTIPLIERS:
        scale = _MULTIPLIERS[suffix] * (1000 if is_vcore else 1)
    else:
        raise ValueError(
            f"invalid quantity {value!r} for resource {resource_name!r}: unknown suffix {suffix!r}"
        )
    whole, _, fraction = match["number"].partition(".")
    if len(whole.lstrip("0")) > _QUANTITY_DIGITS:
        raise ValueError(f"invalid quantity {_shown(value)} for resource {resource_name!r}: overflow")
    if len(fraction.rstrip("0")) > _QUANTITY_DIGITS:
        raise ValueError(
            f"invalid quantity {_shown(value)} for resource {resource_name!r}: fraction is not a whole number"
        )
    # judged by length first: the digits converted are bounded, however long the text
    amount = Fraction(f"{whole.lstrip('0') or '0'}.{fraction.rstrip('0') or '0'}") * scale
    if match["sign"] == "-" and amount != 0:
        raise ValueError(f"invalid quantity {value!r} for resource {resource_name!r}: negative value")
    if amount.denominator != 1:
        raise ValueError(
            f"invalid quantity {value!r} for resource {resource_name!r}: fraction is not a whole number"
        )
    return _check_range(int(amount), value, resource_name)


def _check_range(result: int, value: str | int, resource_name: str) -> int:
    if result > MAX_QUANTITY:
        raise ValueError(f"invalid quantity {_shown(value)} for resource {resource_name!r}: overflow")
    return result


def _shown(value: str | int) -> str:
    """A quantity as an error names it: a number past any int64 cut to its first digits."""
    text = value if isinstance(value, str) else (str(value) if value.bit_length() < 200 else "")
    if isinstance(value, int) and not text:
        return f"(an integer of {value.bit_length()} bits)"
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text):,} characters)"


def parse_resources(
    mapping: Mapping[str, object] | None, where: str, *, keep_zero: bool = False
) -> dict[str, int]:
    """Parse a YAML resources map (``{memory: 1G, vcore: 500m}``) into raw integers.

    Zero entries are dropped unless ``keep_zero`` is set; the loader keeps them because for a max
    or a limit an explicit zero means "none of this type" while an absent type is unlimited.
    """
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{where}: expected a map of resource quantities, got {type(mapping).__name__}")
    parsed: dict[str, int] = {}
    for key, raw in mapping.items():
        name = str(key)
        value: str | int
        if raw is None:
            value = ""
        elif isinstance(raw, float):
            value = repr(raw)
        elif isinstance(raw, str | int):
            value = raw  # a bool is an int here and parse_quantity rejects it
        else:
            raise ConfigError(f"{where}: invalid quantity {raw!r} for resource {name!r}: not a scalar")
        try:
            quantity = parse_quantity(value, name)
        except ValueError as err:
            raise ConfigError(f"{where}: {err}") from None
        if quantity != 0 or keep_zero:
            parsed[name] = quantity
    return parsed


# Go's time.ParseDuration: each unit in nanoseconds; a duration is an int64 of nanoseconds
_GO_DURATION_UNITS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_NS_LIMIT = 1 << 63  # past it Go's parse fails ("invalid duration")
_DIGITS = frozenset("0123456789")
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
UINT64_MAX = (1 << 64) - 1


def parse_go_duration(text: str) -> float | None:
    """A Go duration (``30s``, ``1m30s``, ``1.5h``, ``250ms``) in seconds; None when Go's
    ``time.ParseDuration`` refuses it, a duration past an int64 of nanoseconds (about 292 years)
    included. Never raises, however long the text."""
    text = text.strip()
    negative = text.startswith("-")
    body = text[1:] if text[:1] in ("-", "+") else text
    if body == "0":
        return 0.0
    if not body:
        return None
    total, at, size = 0, 0, len(body)
    while at < size:
        whole, at, whole_digits = _leading_int(body, at)
        if whole is None:
            return None  # the integer part overflows
        fraction, scale, fraction_digits = 0, 1, False
        if at < size and body[at] == ".":
            fraction, scale, at, fraction_digits = _leading_fraction(body, at + 1)
        if not whole_digits and not fraction_digits:
            return None
        unit_start = at
        while at < size and body[at] != "." and body[at] not in _DIGITS:
            at += 1
        unit = _GO_DURATION_UNITS.get(body[unit_start:at])
        if unit is None:
            return None  # a unit missing or unknown
        if whole > _NS_LIMIT // unit:
            return None
        nanoseconds = whole * unit
        if fraction:
            nanoseconds += int(float(fraction) * (float(unit) / scale))  # Go's float64 arithmetic
        total += nanoseconds
        if nanoseconds > _NS_LIMIT or total > _NS_LIMIT:
            return None
    if negative:
        return -total / 1e9
    return None if total > _NS_LIMIT - 1 else total / 1e9


def _leading_int(text: str, at: int) -> tuple[int | None, int, bool]:
    """Go's leadingInt: the digits from ``at`` as an int (None on overflow), where they end, any?"""
    start, value = at, 0
    while at < len(text) and text[at] in _DIGITS:
        value = value * 10 + ord(text[at]) - 48
        if value > _NS_LIMIT:
            return None, at, True
        at += 1
    return value, at, at > start


def _leading_fraction(text: str, at: int) -> tuple[int, int, int, bool]:
    """Go's leadingFraction: the digits from ``at`` as a fraction ``value / scale``, precision past an
    int64 dropped; where they end, any?"""
    start, value, scale, overflow = at, 0, 1, False
    while at < len(text) and text[at] in _DIGITS:
        if not overflow:
            if value > (_NS_LIMIT - 1) // 10:
                overflow = True
            else:
                following = value * 10 + ord(text[at]) - 48
                if following > _NS_LIMIT:
                    overflow = True
                else:
                    value, scale = following, scale * 10
        at += 1
    return value, scale, at, at > start


def _decimal_digits(text: str) -> str | None:
    """The digits of an optionally signed decimal integer without leading zeros ("0" for zero); None
    when the text is not one. Bounds what is converted: a number is judged by its length first."""
    body = text[1:] if text[:1] in ("-", "+") else text
    if not body or not all(char in _DIGITS for char in body):
        return None
    return body.lstrip("0") or "0"


def parse_go_int32(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, 32)``: the value, or None when not an int32."""
    digits = _decimal_digits(text)
    if digits is None or len(digits) > 10:
        return None
    value = -int(digits) if text.startswith("-") else int(digits)
    return value if INT32_MIN <= value <= INT32_MAX else None


def parse_go_uint64(text: str) -> int | None:
    """Go's ``strconv.ParseUint(text, 10, 64)``: the value, or None when not a uint64 (no sign)."""
    digits = _decimal_digits(text)
    if digits is None or text[:1] in ("-", "+") or len(digits) > 20:
        return None
    value = int(digits)
    return value if value <= UINT64_MAX else None

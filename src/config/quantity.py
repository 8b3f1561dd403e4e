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
    amount = Fraction(match["number"]) * scale
    if match["sign"] == "-" and amount != 0:
        raise ValueError(f"invalid quantity {value!r} for resource {resource_name!r}: negative value")
    if amount.denominator != 1:
        raise ValueError(
            f"invalid quantity {value!r} for resource {resource_name!r}: fraction is not a whole number"
        )
    return _check_range(int(amount), value, resource_name)


def _check_range(result: int, value: str | int, resource_name: str) -> int:
    if result > MAX_QUANTITY:
        raise ValueError(f"invalid quantity {value!r} for resource {resource_name!r}: overflow")
    return result


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


_GO_DURATION_PART = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)")
_GO_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text: str) -> float | None:
    """A Go duration (``30s``, ``1m30s``, ``250ms``) in seconds; None when it is not one."""
    text = text.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if body == "0":
        return 0.0
    total, at = 0.0, 0
    while at < len(body):
        match = _GO_DURATION_PART.match(body, at)
        if match is None:
            return None
        total += float(match.group(1)) * _GO_DURATION_UNITS[match.group(2)]
        at = match.end()
    return sign * total if body else None

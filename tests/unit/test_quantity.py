"""Resource quantities: YuniKorn's suffixes, vcore millicores and the values it refuses."""

from __future__ import annotations

import pytest

from korral.config.quantity import MAX_QUANTITY, parse_quantity, parse_resources
from korral.errors import ConfigError


@pytest.mark.parametrize(
    ("value", "resource", "expected"),
    [
        pytest.param("0", "memory", 0, id="zero"),
        pytest.param("12", "memory", 12, id="plain-bytes"),
        pytest.param("+12", "memory", 12, id="explicit-plus"),
        pytest.param(" 1 G ", "memory", 10**9, id="whitespace-removed"),
        pytest.param("1k", "memory", 10**3, id="suffix-k"),
        pytest.param("1M", "memory", 10**6, id="suffix-M"),
        pytest.param("1G", "memory", 10**9, id="suffix-G"),
        pytest.param("1T", "memory", 10**12, id="suffix-T"),
        pytest.param("1P", "memory", 10**15, id="suffix-P"),
        pytest.param("1E", "memory", 10**18, id="suffix-E"),
        pytest.param("1Ki", "memory", 2**10, id="suffix-Ki"),
        pytest.param("1Mi", "memory", 2**20, id="suffix-Mi"),
        pytest.param("1Gi", "memory", 2**30, id="suffix-Gi"),
        pytest.param("1Ti", "memory", 2**40, id="suffix-Ti"),
        pytest.param("1Pi", "memory", 2**50, id="suffix-Pi"),
        pytest.param("1Ei", "memory", 2**60, id="suffix-Ei"),
        pytest.param("7", "nvidia.com/gpu", 7, id="other-type-plain"),
        pytest.param("2k", "pods", 2000, id="other-type-suffix"),
        pytest.param("1.5Ki", "memory", 1536, id="fraction-whole-after-suffix"),
        pytest.param("0.5G", "memory", 500_000_000, id="fraction-decimal-suffix"),
        pytest.param(1024, "memory", 1024, id="int-memory"),
        pytest.param("10", "vcore", 10_000, id="vcore-to-millicores"),
        pytest.param("500m", "vcore", 500, id="vcore-milli"),
        pytest.param("1k", "vcore", 1_000_000, id="vcore-k"),
        pytest.param("1Ki", "vcore", 1_024_000, id="vcore-Ki"),
        pytest.param("0.5", "vcore", 500, id="vcore-half"),
        pytest.param("0.25", "vcore", 250, id="vcore-quarter"),
        pytest.param(".5", "vcore", 500, id="vcore-leading-dot"),
        pytest.param(2, "vcore", 2000, id="int-vcore"),
        pytest.param("-0", "memory", 0, id="negative-zero"),
        pytest.param(str(MAX_QUANTITY), "memory", MAX_QUANTITY, id="int64-max"),
    ],
)
def test_parse_quantity_accepts(value: str | int, resource: str, expected: int) -> None:
    assert parse_quantity(value, resource) == expected


@pytest.mark.parametrize(
    ("value", "resource", "reason"),
    [
        pytest.param("", "memory", "not a number", id="empty"),
        pytest.param("   ", "memory", "not a number", id="blank"),
        pytest.param("abc", "memory", "not a number", id="garbage"),
        pytest.param("1 0x", "memory", "unknown suffix", id="bad-suffix"),
        pytest.param("1K", "memory", "unknown suffix", id="upper-K-not-a-suffix"),
        pytest.param("1m", "memory", "only allowed for vcore", id="milli-on-memory"),
        pytest.param("1m", "pods", "only allowed for vcore", id="milli-on-other"),
        pytest.param("1mi", "memory", "unknown suffix", id="lowercase-mi"),
        pytest.param("-1", "memory", "negative", id="negative-string"),
        pytest.param("-1G", "memory", "negative", id="negative-suffix"),
        pytest.param(-5, "vcore", "negative", id="negative-int"),
        pytest.param("1.5", "memory", "not a whole number", id="fraction-memory"),
        pytest.param("0.0005", "vcore", "not a whole number", id="fraction-below-millicore"),
        pytest.param("1.5m", "vcore", "not a whole number", id="fraction-millicore"),
        pytest.param("1e3", "memory", "not a number", id="exponent-notation"),
        pytest.param("1..5", "memory", "not a number", id="two-dots"),
        pytest.param("16Ei", "memory", "overflow", id="overflow-binary"),
        pytest.param(str(MAX_QUANTITY + 1), "memory", "overflow", id="overflow-plain"),
        pytest.param("10E", "vcore", "overflow", id="overflow-vcore-scaling"),
        pytest.param(2**63, "memory", "overflow", id="overflow-int"),
        pytest.param(True, "memory", "not a string or integer", id="bool"),
        pytest.param(1.5, "memory", "not a string or integer", id="float-direct"),
    ],
)
def test_parse_quantity_rejects(value: object, resource: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as caught:
        parse_quantity(value, resource)  # type: ignore[arg-type]
    message = str(caught.value)
    assert resource in message
    assert repr(value) in message


def test_parse_resources_parses_every_entry_and_drops_zero() -> None:
    parsed = parse_resources({"memory": "1Gi", "vcore": 2, "pods": "0", "gpu": 1.0}, "queue root.a")
    assert parsed == {"memory": 2**30, "vcore": 2000, "gpu": 1}


def test_parse_resources_keep_zero() -> None:
    assert parse_resources({"vcore": "0", "memory": "1"}, "x", keep_zero=True) == {"vcore": 0, "memory": 1}


def test_parse_resources_vcore_float_from_yaml() -> None:
    assert parse_resources({"vcore": 0.5}, "x") == {"vcore": 500}


@pytest.mark.parametrize("mapping", [None, {}], ids=["none", "empty"])
def test_parse_resources_empty(mapping: dict[str, object] | None) -> None:
    assert parse_resources(mapping, "x") == {}


@pytest.mark.parametrize(
    ("mapping", "reason"),
    [
        pytest.param({"memory": "1X"}, "unknown suffix", id="bad-suffix"),
        pytest.param({"memory": "-1"}, "negative", id="negative"),
        pytest.param({"memory": None}, "not a number", id="null-value"),
        pytest.param({"memory": True}, "not a string or integer", id="bool-value"),
        pytest.param({"memory": [1]}, "not a scalar", id="list-value"),
        pytest.param(["memory"], "expected a map", id="not-a-map"),
    ],
)
def test_parse_resources_rejects_naming_where(mapping: object, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason) as caught:
        parse_resources(mapping, "partition 'default': queue 'root.a': resources: max")  # type: ignore[arg-type]
    assert "queue 'root.a': resources: max" in str(caught.value)

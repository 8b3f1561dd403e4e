"""A client cannot write lines of its choosing into korral's log, with or without credentials.

Everything a client names (its rmID above all, logged when a call is refused before it authenticates)
reaches the log escaped and cut: a newline, NUL, ESC or other control character shows as an escape, and a
value is at most ``MAX_LOGGED_CHARS`` long.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import grpc
import pytest
from hostile_serve import LOG_LINE, WAIT, korral_serve

from korral.log_text import MAX_LOGGED_CHARS
from korral.si import si_pb2

SERVICE = "/si.v1.Scheduler/"
TOKENS = {"rm-a": "a-secret-of-rm-a-0123456789"}
FORGED = "RmID=victim registered again: partitions [victim]default"
HOSTILE_IDS = [
    f"evil\n2026-01-01 00:00:00,000 INFO korral.serve: {FORGED}",
    f"evil\r{FORGED}",
    f"evil\x00\x1b[2J\x1b[1;1H{FORGED}",
    f"evil\u2028{FORGED}\x85\x9b",
    "x" * 200_000 + f"\n{FORGED}",
]


def _call_with_another_rms_token(address: str, rm_id: str) -> None:
    """A client holding rm-a's token names another rmID: refused by that RM's check, which logs it (a
    call with no valid token at all is refused before its rmID is read: test_hostile_call_auth)."""
    channel = grpc.insecure_channel(address)
    metadata = (("authorization", "Bearer " + TOKENS["rm-a"]),)
    try:
        register = channel.unary_unary(SERVICE + "RegisterResourceManager")
        request = si_pb2.RegisterResourceManagerRequest(rmID=rm_id, config="")
        with pytest.raises(grpc.RpcError) as refused:
            register(request.SerializeToString(), timeout=WAIT, metadata=metadata)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        stream = channel.stream_stream(SERVICE + "UpdateNode")
        first = si_pb2.NodeRequest(rmID=rm_id).SerializeToString()
        with pytest.raises(grpc.RpcError):
            for _ in stream(iter([first]), timeout=WAIT, metadata=metadata):
                pass
    finally:
        channel.close()


def _register_without_credentials(address: str, rm_id: str) -> None:
    channel = grpc.insecure_channel(address)
    try:
        register = channel.unary_unary(SERVICE + "RegisterResourceManager")
        request = si_pb2.RegisterResourceManagerRequest(rmID=rm_id, config="")
        # refused or accepted: either is logged, and neither may forge a line
        with contextlib.suppress(grpc.RpcError):
            register(request.SerializeToString(), timeout=WAIT)
    finally:
        channel.close()


def _assert_unforged(log: str) -> None:
    assert "\x00" not in log and "\x1b" not in log and "\x85" not in log and "\u2028" not in log
    for line in log.splitlines():
        # every line is one of korral's (or a traceback's), none starts with the client's text
        assert not line.startswith("RmID=victim"), line
        assert FORGED not in line or "evil" in line, line
        if LOG_LINE.match(line):
            assert len(line) < 4 * MAX_LOGGED_CHARS, line[:300]
    assert log.count(FORGED) >= 1  # the refused text is still there, escaped, for the operator


def test_an_unauthenticated_client_cannot_forge_log_lines(tmp_path: Path) -> None:
    token_file = tmp_path / "tokens.json"
    token_file.write_text(json.dumps(TOKENS))
    with korral_serve("--grpc-token-file", str(token_file)) as served:
        for rm_id in HOSTILE_IDS:
            _call_with_another_rms_token(served.grpc, rm_id)
        log = served.stop()
    _assert_unforged(log)
    assert not any(line.startswith(("2026-01-01", "\r")) for line in log.splitlines())


def test_a_registration_without_tokens_cannot_forge_log_lines() -> None:
    with korral_serve() as served:
        for rm_id in HOSTILE_IDS:
            _register_without_credentials(served.grpc, rm_id)
        log = served.stop()
    _assert_unforged(log)
    assert not any(line.startswith("2026-01-01") for line in log.splitlines())

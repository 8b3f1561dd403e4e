"""Who may speak for an RM over gRPC: TLS credentials (grpcio's own) and per-RM tokens.

- TLS: ``ServerTls(cert_file, key_file, client_ca_file=None)``; with a client CA the server asks for and
  checks client certificates (mutual TLS), and a client certificate's identity is that connection's
  credential.
- Tokens: a file (YAML or JSON) mapping rmID -> secret. When given, every call for an RM must carry
  its secret as ``authorization: Bearer <secret>`` call metadata, or it is ``UNAUTHENTICATED``; an RM
  with no entry cannot be registered at all.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import grpc
import yaml

from korral import log_text

TOKEN_METADATA = "authorization"
TOKEN_SCHEME = "Bearer "
MIN_TOKEN_LENGTH = 16
MAX_TOKEN_FILE_BYTES = 1024 * 1024


def _read(path: str | Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise ValueError(f"cannot read the {what} {path}: {error.strerror or error}") from None


@attrs.frozen(kw_only=True)
class ServerTls:
    """The server's certificate chain and key (PEM files); with client_ca_file, mutual TLS."""

    cert_file: str | Path
    key_file: str | Path
    client_ca_file: str | Path | None = None

    def credentials(self) -> grpc.ServerCredentials:
        cert = _read(self.cert_file, "TLS certificate")
        key = _read(self.key_file, "TLS key")
        client_ca = _read(self.client_ca_file, "client CA") if self.client_ca_file is not None else None
        for pem, what, marker in (
            (cert, "TLS certificate", b"-----BEGIN CERTIFICATE"),
            (key, "TLS key", b"PRIVATE KEY-----"),
            (client_ca, "client CA", b"-----BEGIN CERTIFICATE"),
        ):
            if pem is not None and marker not in pem:
                raise ValueError(f"the {what} is not PEM (no {marker.decode()!r})")
        return grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
        )

    @property
    def mutual(self) -> bool:
        return self.client_ca_file is not None

    @classmethod
    def of(cls, tls: ServerTls | Mapping[str, Any]) -> ServerTls:
        """A ServerTls, or one from ``{"cert": F, "key": F, "client_ca": F}`` (as serve_rest takes it)."""
        if isinstance(tls, ServerTls):
            return tls
        if not isinstance(tls, Mapping):
            raise ValueError(f"tls must be a ServerTls or a mapping of cert, key, client_ca; got {tls!r}")
        unknown = sorted(set(tls) - {"cert", "key", "client_ca"})
        if unknown:
            raise ValueError(
                f"unknown TLS setting(s) {', '.join(map(str, unknown))}: "
                "the settings are cert, key, client_ca"
            )
        if not tls.get("cert") or not tls.get("key"):
            raise ValueError("TLS needs both a certificate (cert) and its private key (key)")
        return cls(cert_file=tls["cert"], key_file=tls["key"], client_ca_file=tls.get("client_ca") or None)


def load_tokens(source: str | Path | Mapping[str, str]) -> dict[str, str]:
    """rmID -> secret from a mapping or a YAML/JSON file; every bad entry is named in one ValueError."""
    if isinstance(source, Mapping):
        entries: Any = dict(source)
        name = "tokens"
    else:
        data = _read(source, "token file")
        if len(data) > MAX_TOKEN_FILE_BYTES:
            raise ValueError(f"token file {source}: over {MAX_TOKEN_FILE_BYTES} bytes")
        name = f"token file {source}"
        try:
            entries = yaml.safe_load(data.decode("utf-8"))
        except (UnicodeDecodeError, yaml.YAMLError) as error:
            raise ValueError(f"{name}: not YAML or JSON: {error}") from None
    if not isinstance(entries, dict) or not entries:
        raise ValueError(f"{name}: must be a non-empty mapping of rmID to secret")
    problems = []
    for rm_id, secret in entries.items():
        if not isinstance(rm_id, str) or not rm_id:
            problems.append(f"{rm_id!r}: the rmID must be a non-empty string")
        elif not isinstance(secret, str):
            problems.append(f"{rm_id}: the secret must be a string")
        elif len(secret) < MIN_TOKEN_LENGTH:
            problems.append(f"{rm_id}: the secret is shorter than {MIN_TOKEN_LENGTH} characters")
        elif not secret.isascii() or not secret.isprintable() or secret != secret.strip():
            problems.append(f"{rm_id}: the secret must be printable ASCII without surrounding spaces")
    if problems:
        raise ValueError(f"{name}: " + "; ".join(problems))
    return dict(entries)


def _call_token(context: grpc.aio.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == TOKEN_METADATA and isinstance(value, str) and value.startswith(TOKEN_SCHEME):
            return value[len(TOKEN_SCHEME) :]
    return None


class Authenticator:
    """The server's checks: the token of a call, the identity of its connection (loop thread)."""

    def __init__(self, tls: ServerTls | None, tokens: Mapping[str, str] | None) -> None:
        self.tls = tls
        self.tokens = dict(tokens) if tokens is not None else None

    @property
    def open(self) -> bool:
        """Neither TLS nor tokens: any process that reaches the port may act as any RM."""
        return self.tls is None and self.tokens is None

    def refusal(self, rm_id: str, context: grpc.aio.ServicerContext) -> str | None:
        """Why this call may not speak for rm_id (UNAUTHENTICATED), or None."""
        if self.tokens is None:
            return None
        secret = self.tokens.get(rm_id)
        shown = log_text.escaped(rm_id)  # the refusal echoes what an unauthenticated client named
        if secret is None:
            return f"RmID={shown} has no token on this server: it cannot be registered or served"
        token = _call_token(context)
        if token is None:
            return f"RmID={shown}: no token in the call's '{TOKEN_METADATA}: {TOKEN_SCHEME}...' metadata"
        if not hmac.compare_digest(token.encode(), secret.encode()):
            return f"RmID={shown}: wrong token"
        return None

    def carries_credentials(self, identity: tuple[bytes, ...], context: grpc.aio.ServicerContext) -> bool:
        """The call carries the RM's own credentials: its token (checked by ``refusal``), or the client
        certificate identity it registered with."""
        if self.tokens is not None:
            return True
        if self.tls is not None and self.tls.mutual:
            return bool(identity) and self.identity(context) == identity
        return False

    def identity(self, context: grpc.aio.ServicerContext) -> tuple[bytes, ...]:
        """The client certificate's identities (mutual TLS), empty otherwise."""
        if self.tls is None or not self.tls.mutual:
            return ()
        return tuple(context.peer_identities() or ())


def channel_credentials(
    root_cert: str | Path | None, client_cert: str | Path | None, client_key: str | Path | None
) -> grpc.ChannelCredentials:
    """The client's TLS credentials: the CA that signed the server's certificate (None: the system's
    roots), and a client certificate and key for mutual TLS."""
    if (client_cert is None) != (client_key is None):
        raise ValueError("client_cert and client_key go together")
    return grpc.ssl_channel_credentials(
        root_certificates=_read(root_cert, "root certificate") if root_cert is not None else None,
        private_key=_read(client_key, "client key") if client_key is not None else None,
        certificate_chain=_read(client_cert, "client certificate") if client_cert is not None else None,
    )


def token_metadata(token: str) -> tuple[tuple[str, str], ...]:
    return ((TOKEN_METADATA, TOKEN_SCHEME + token),)

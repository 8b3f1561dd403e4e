"""With tokens configured, a gRPC call whose metadata carries none of them is refused before its message
is read.

gRPC reads a unary call's whole message (up to ``max_message_bytes``) before its handler runs, and the
rmID a token belongs to is inside that message: checked only there, every open call of a client with
no token could make the server hold a message of up to 64 MiB. This interceptor sees the call's method
and metadata alone, before any message: a call that carries no token of any RM ends there with
``UNAUTHENTICATED``, its message never read (HTTP/2 flow control holds the client back). A call that
carries some RM's token goes on to the handler, which checks it is the token of the RM its request
names (``korral.server.auth.Authenticator.refusal``).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import grpc

from korral import log_text
from korral.server.auth import TOKEN_METADATA, TOKEN_SCHEME

log = log_text.logger("korral.grpc")

NO_TOKEN = f"no token in the call's '{TOKEN_METADATA}: {TOKEN_SCHEME}...' metadata"
WRONG_TOKEN = "wrong token: it is no RM's"
READ_NOTHING = "refused before its message was read"


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


class TokenGate(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc is untyped here
    """Lets a call reach its handler only if its metadata carries the token of some RM."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        # digests, looked up by hash: how long a lookup takes says nothing of any secret's characters
        self._digests = frozenset(_digest(secret) for secret in tokens.values())

    def refusal(self, metadata: Sequence[tuple[str, Any]] | None) -> str | None:
        """Why a call with this metadata is refused before its message is read, or None."""
        tokens = [
            value[len(TOKEN_SCHEME) :]
            for key, value in metadata or ()
            if key == TOKEN_METADATA and isinstance(value, str) and value.startswith(TOKEN_SCHEME)
        ]
        if not tokens:
            return NO_TOKEN
        if any(_digest(token) in self._digests for token in tokens):
            return None
        return WRONG_TOKEN

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        refusal = self.refusal(handler_call_details.invocation_metadata)
        if refusal is None:
            return await continuation(handler_call_details)
        method = handler_call_details.method
        # a streaming handler for every method: gRPC starts it without reading a message, unary or not
        return grpc.stream_stream_rpc_method_handler(_refuse(method, f"{refusal}: {READ_NOTHING}"))


def _refuse(
    method: object, refusal: str
) -> Callable[[AsyncIterator[bytes], grpc.aio.ServicerContext], Awaitable[None]]:
    async def refuse(_requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> None:
        log.warning(
            "refused a call to %s from %s: %s", log_text.escaped(str(method)), context.peer(), refusal
        )
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, refusal)

    return refuse


def interceptors(tokens: Mapping[str, str] | None) -> list[grpc.aio.ServerInterceptor]:
    """The gRPC server's interceptors: the token gate when tokens are configured, none otherwise."""
    return [TokenGate(tokens)] if tokens is not None else []

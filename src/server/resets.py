"""HTTP/2 rapid reset (CVE-2023-44487's shape): a connection whose client keeps opening calls and
resetting them is closed; every other connection goes on.

gRPC's core bounds the streams open at once on a connection (``grpc.max_concurrent_streams``) and slows
a resetting client down, but keeps its connection, and grpcio offers no way to close one connection.
So the server counts, per connection (the peer address gRPC names it by), the streams its client
reset before sending a single request on them (an RST_STREAM right after the HEADERS: what rapid reset
sends; a unary call's handler never starts without its request). Past ``MAX_RESETS`` within
``RESET_WINDOW`` seconds, korral finds the connection's socket among the
process's own (Linux: /proc/net/tcp{,6} by address, then /proc/self/fd by inode) and shuts it down:
gRPC's core sees the connection end, the client sees it closed, and only that connection is touched.
An RM that cancels its streams now and then (reconnecting, re-registering) stays far below the bound,
and a stream that carried a request is never counted.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import time
from collections import deque
from pathlib import Path
from urllib.parse import unquote

from korral import log_text

log = log_text.logger("korral.grpc")

# calls a client may reset on one connection within the window before the connection is closed
MAX_RESETS = 200
RESET_WINDOW = 10.0
# connections tracked at once (~5 KB each at most): one whose resets are all older than the window goes
# first
MAX_TRACKED = 1_000

Address = tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]


def parse_peer(peer: str) -> Address | None:
    """(address, port) of a gRPC peer string ("ipv4:1.2.3.4:5", "ipv6:[::1]:5"), None for another
    kind (a Unix socket)."""
    kind, _, rest = unquote(peer).partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    try:
        return ipaddress.ip_address(host.strip("[]")), int(port)
    except ValueError:
        return None


def _proc_address(text: str) -> Address:
    """An address of /proc/net/tcp{,6}: hex of the address in host order words, then the port."""
    host, port = text.split(":")
    raw = bytes.fromhex(host)
    # each 32-bit word is written in the machine's order (little-endian on the machines korral runs on)
    words = b"".join(raw[index : index + 4][::-1] for index in range(0, len(raw), 4))
    address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(words)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address, int(port, 16)


def _same(a: Address, b: Address) -> bool:
    left, right = a[0], b[0]
    if isinstance(left, ipaddress.IPv6Address) and left.ipv4_mapped is not None:
        left = left.ipv4_mapped
    if isinstance(right, ipaddress.IPv6Address) and right.ipv4_mapped is not None:
        right = right.ipv4_mapped
    return left == right and a[1] == b[1]


def _socket_inode(local_port: int, remote: Address) -> int | None:
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10:
                continue
            try:
                local, peer = _proc_address(fields[1]), _proc_address(fields[2])
            except ValueError:
                continue
            if local[1] == local_port and _same(peer, remote):
                return int(fields[9])
    return None


def close_connection(local_port: int, remote: Address) -> bool:
    """Shut down this process's TCP connection from ``remote`` to ``local_port``; False when it is not
    found (gone already, or no /proc)."""
    inode = _socket_inode(local_port, remote)
    if not inode:
        return False
    target = f"socket:[{inode}]"
    try:
        descriptors = os.listdir("/proc/self/fd")
    except OSError:
        return False
    for name in descriptors:
        try:
            if os.readlink(f"/proc/self/fd/{name}") != target:
                continue
            duplicate = os.dup(int(name))
        except OSError:
            continue
        try:
            # the duplicate keeps the socket alive: it is still the one found, not a reused number
            if os.fstat(duplicate).st_ino != inode:
                continue
            with socket.socket(fileno=duplicate) as connection:
                duplicate = -1  # the socket object closes it
                connection.shutdown(socket.SHUT_RDWR)
            return True
        except OSError:
            continue
        finally:
            if duplicate >= 0:
                os.close(duplicate)
    return False


class ResetGuard:
    """Counts the calls each connection's client reset; closes a connection past the bound. Used on
    the server's event loop only."""

    def __init__(
        self, max_resets: int = MAX_RESETS, window: float = RESET_WINDOW, clock: object = time.monotonic
    ) -> None:
        self.max_resets = max_resets
        self.window = window
        self._clock = clock
        self.local_port = 0  # the server's port, once bound
        self._resets: dict[str, deque[float]] = {}
        self.closed = 0  # connections closed so far

    def reset(self, peer: str) -> None:
        """The client of ``peer``'s connection reset a stream before sending a request on it."""
        now: float = self._clock()  # type: ignore[operator]
        times = self._resets.get(peer)
        if times is None:
            if len(self._resets) >= MAX_TRACKED:
                self._forget_old(now)
            times = self._resets[peer] = deque()
        times.append(now)
        while times and times[0] < now - self.window:
            times.popleft()
        if len(times) <= self.max_resets:
            return
        del self._resets[peer]
        address = parse_peer(peer)
        closed = address is not None and self.local_port > 0 and close_connection(self.local_port, address)
        if closed:
            self.closed += 1
        log.warning(
            "%s connection from %s: its client reset %d calls within %.0fs (HTTP/2 rapid reset)",
            "closed the" if closed else "could not close the",
            log_text.escaped(peer),
            self.max_resets + 1,
            self.window,
        )

    def _forget_old(self, now: float) -> None:
        stale = [peer for peer, times in self._resets.items() if not times or times[-1] < now - self.window]
        for peer in stale:
            del self._resets[peer]
        if len(self._resets) >= MAX_TRACKED:  # every one is recent: the oldest goes
            oldest = min(self._resets, key=lambda peer: self._resets[peer][-1])
            del self._resets[oldest]

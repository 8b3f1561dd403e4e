"""The event log is bounded in bytes as well as in count: asks with huge keys, released and their
application removed, leave at most ``MAX_EVENT_LOG_BYTES`` of events behind."""

from __future__ import annotations

import json
import urllib.request

from core_helpers import NODE, SMALL, TWO_LEAVES, eventually

import korral
from korral import testing as t
from korral.server.events import MAX_EVENT_LOG_BYTES

KEY_BYTES = 1024 * 1024
ASKS = 96  # 96 MiB of keys, half again the bound
PER_REQUEST = 8


def held(url: str) -> tuple[int, int]:
    """(events kept, bytes of client text they carry) as /ws/v1/events/batch reads them."""
    with urllib.request.urlopen(url + "/ws/v1/events/batch?count=10000", timeout=120) as response:
        body = json.loads(response.read())
    records = body["EventRecords"]
    text = sum(
        len(r.get("objectID", "")) + len(r.get("referenceID", "")) + len(r.get("message", ""))
        for r in records
    )
    return len(records), text


def test_asks_with_huge_keys_leave_no_more_than_the_byte_bound_of_events() -> None:
    with korral.start() as core:
        address, url = core.serve_grpc("127.0.0.1:0"), core.serve_rest("127.0.0.1:0")
        with korral.connect(address) as remote:
            rm = t.RecordingRM("rm")
            remote.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
            remote.update_node(t.nodes("rm", ["n1"], NODE))
            remote.update_application(t.applications("rm", {"app": "root.a"}))
            assert rm.wait_for(lambda r: r.accepted_apps == ["app"])
            for first in range(0, ASKS, PER_REQUEST):
                # each key its own ({prefix}{index}): the events of different asks share no text
                prefix = "k" * KEY_BYTES
                remote.update_allocation(t.asks("rm", "app", PER_REQUEST, SMALL, prefix=prefix, start=first))
            eventually(lambda: held(url)[1] > MAX_EVENT_LOG_BYTES // 2, timeout=120)
            remote.update_allocation(t.release_asks("rm", "app"))
            remote.update_application(t.remove_applications("rm", ["app"]))
            eventually(lambda: core.applications("[rm]default") == [], timeout=120)
            count, text = held(url)
            assert count > 0
            assert text <= MAX_EVENT_LOG_BYTES, f"{count} events hold {text:,} bytes of keys"

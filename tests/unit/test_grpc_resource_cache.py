"""The resources the gRPC conversion keeps to convert the same bytes or map again are bounded by count
and by size: one request may carry a resource of 60 MiB, and 1,024 of them kept would hold 60 GiB for
as long as the process runs."""

from __future__ import annotations

from korral import si
from korral.server import convert, convert_code
from korral.si import si_pb2


def test_a_big_resource_is_converted_but_not_kept() -> None:
    big = {f"resource-{index:05}": index + 1 for index in range(100)}  # ~1,900 bytes on the wire
    small = {"memory": 7, "vcore": 3}
    asks = [
        si.AllocationAsk(allocation_key=key, resource_ask=resource, max_allocations=1)
        for key, resource in (("a", big), ("b", small))
    ]
    request = si.AllocationRequest(rm_id="rm", asks=tuple(asks))
    through_protobuf = convert.to_pb(request)
    assert through_protobuf.asks[0].resourceAsk.ByteSize() > convert_code.RESOURCE_CACHE_BYTES
    assert convert.parse(si_pb2.AllocationRequest, convert.serialize(request)) == request
    kept = [
        *convert_code._resources,
        *(message.SerializeToString() for message in convert_code._resource_messages.values()),
    ]
    assert kept, "the small resource is kept"
    assert all(len(wire) <= convert_code.RESOURCE_CACHE_BYTES for wire in kept)

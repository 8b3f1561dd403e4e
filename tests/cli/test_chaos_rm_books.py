"""The chaos run's RM (``korral.server.chaos.ResyncingRM``) keeps bounded books: the uuids it released
are kept only until it registers again, and its books still equal korral's after each resync."""

from __future__ import annotations

import korral
from korral import si
from korral.server.chaos import ResyncingRM

CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
"""


def test_released_uuids_are_forgotten_at_each_registration_and_the_books_still_agree() -> None:
    with korral.start() as core:
        rm = ResyncingRM("rm0", CONFIG, {"n0": {"memory": 100_000, "vcore": 100_000}}, {"app-a": "root.a"})
        rm.resync(core)
        for round_ in range(3):
            asks = [
                si.AllocationAsk(
                    allocation_key=f"k{round_}-{index}",
                    application_id="app-a",
                    resource_ask={"memory": 100, "vcore": 1},
                    max_allocations=1,
                )
                for index in range(10)
            ]
            rm.ask(core, asks)
            expected = 4 * round_ + 10  # four kept from each earlier round, and this round's ten
            with rm.lock:
                assert rm.lock.wait_for(lambda n=expected: len(rm.live) >= n, 30.0), rm.live
                uuids = sorted(rm.live)[:6]
            rm.release(core, uuids)
            with rm.lock:
                assert rm.lock.wait_for(lambda: not rm.unconfirmed, 30.0), rm.unconfirmed
                assert rm.released == set(uuids)
            rm.resync(core)  # a registration: the released uuids can no longer come back as new
            core.wait_until_idle(timeout=30.0)
            app = core.application("[rm0]default", "app-a")
            booked = {allocation.uuid for allocation in app.allocations} if app is not None else set()
            with rm.lock:
                assert rm.released == set()
                assert booked == set(rm.live) and len(booked) == 4 * (round_ + 1)

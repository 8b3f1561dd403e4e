"""What the REST tests (test_rest_api.py, test_rest_serving.py, test_rest_shapes.py) share: a served core.

Every answer is checked against the core's own snapshots (``korral.Core.partition/queue/nodes/...``)
and the metrics against what the RM was told.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import attrs
import pytest
from core_helpers import NODE, SMALL, add_apps, eventually, part, running

from korral import si
from korral import testing as t

LIMITED = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
            resources:
              guaranteed: {memory: 50M, vcore: 5}
              max: {memory: 150M, vcore: 15}
          - name: b
"""


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def ok(url: str) -> Any:
    status, body = get(url)
    assert status == 200, body
    return body


@pytest.fixture(scope="module")
def served():
    """One RM with two leaves: app-1 runs 3 allocations in root.a, app-2 waits in root.b with an
    ask too big for any node, app-done completed, app-bad rejected (unknown queue)."""
    with running(LIMITED) as (core, rm):
        request = t.nodes("rm", ["n1", "n2"], NODE)
        hosted = [attrs.evolve(n, attributes={si.HOST_NAME: f"host-{n.node_id}"}) for n in request.nodes]
        core.update_node(attrs.evolve(request, nodes=hosted))
        core.wait_until_idle()
        add_apps(core, rm, {"app-1": "root.a", "app-2": "root.b", "app-done": "root.b"})
        core.update_application(t.applications("rm", {"app-bad": "root.nope.deeper"}))
        core.update_allocation(t.asks("rm", "app-1", 3, SMALL))
        core.update_allocation(t.asks("rm", "app-2", 1, {"memory": 10**12}))
        core.update_allocation(t.asks("rm", "app-done", 1, SMALL))
        assert rm.wait_for_allocations(4)
        core.wait_until_idle()
        done = [a for a in rm.live.values() if a.application_id == "app-done"]
        core.update_allocation(t.release("rm", "app-done", uuid=done[0].uuid))
        eventually(lambda: core.completed_applications(part()))
        core.wait_until_idle()
        url = core.serve_rest("127.0.0.1:0")
        yield core, rm, url

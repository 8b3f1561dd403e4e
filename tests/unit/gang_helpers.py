"""What the gang scheduling tests (test_gang_*.py) share: the config and the cluster (their gang
requests are tests/gang_requests.py's, shared with the end-to-end tests).

Gang scheduling and timeouts in the plain model, on a fake clock (reference 2.12, 2.16, 2.17; api.md
"Time limits, gang scheduling").

Scenarios go through the sequential reference scheduler (the model driven by SI requests), so each
one reads as an RM would see it: admission, placeholders, replacement on the RM's confirmation,
placeholder timeouts (soft / hard), execution timeouts, recovery. The reference's partitions are
checked against the model's invariants (placeholder books included) when each test ends. The
application owner's side (what the Application actor runs) has its own file, test_gang_owner.py.
"""

from __future__ import annotations

import pytest
from gang_requests import RM

from korral import si
from korral import testing as t
from korral.harness.reference import ReferenceScheduler
from korral.model.app.application import Application, ApplicationState

T = si.TerminationType
S = ApplicationState

CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: gang
            resources:
              max: {memory: 1000, vcore: 10}
          - name: open
          - name: fair
            properties:
              application.sort.policy: fair
"""


def confirm(reference: ReferenceScheduler, releases) -> si.AllocationResponse:
    """The RM echoes the core's releases back (its containers stopped)."""
    return reference.update_allocation(
        si.AllocationRequest(
            rm_id=RM, releases=si.AllocationReleasesRequest(allocations_to_release=list(releases))
        )
    )


@pytest.fixture
def cluster(make_reference):
    """Two nodes of 1000 memory / 1000 vcore, the reference on the fake clock."""

    def make(**kwargs) -> ReferenceScheduler:
        reference = make_reference(CONFIG, rm_id=RM, **kwargs)
        reference.update_node(t.nodes(RM, ["n1", "n2"], {"memory": 1000, "vcore": 1000}))
        return reference

    return make


def app_of(reference: ReferenceScheduler, app_id: str = "g") -> Application:
    return reference.partition("default").applications[app_id]

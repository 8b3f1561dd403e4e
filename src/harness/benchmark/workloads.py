"""Seeded, deterministic benchmark workloads: SI requests ready to send to a core.

``yunikorn``: YuniKorn's own BenchmarkScheduling shape (pkg/scheduler/tests/performance_test.go):
root.a and root.b with guarantees, app-1 in a and app-2 in b, P asks of {memory: 10, vcore: 1} sent as
two AllocationRequests (half per application), N nodes of {memory: 10*(P/N+1), vcore: P/N+1} sent in
one NodeRequest. All asks are submitted at once, as YuniKorn's benchmark does.

``scale``: a 3-level queue tree with 50 leaf queues of mixed guarantees and max, 1,000 applications,
asks of mixed sizes and priorities, 10,000 nodes by default; asks arrive in waves at a set rate, so
latency measures the scheduler keeping up rather than a backlog's length. With ``user_limits`` every
other leaf carries user limits (a wildcard per-user maxresources and maxapplications, one named user),
set where this workload never reaches them: the same allocations are made, and every one made in
those leaves pays for the checks (what ``korral bench --workload scale --user-limits`` measures).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

import attrs

from korral import si

RM_ID = "bench"

YUNIKORN_CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
            resources:
              guaranteed: {memory: 100000, vcore: 10}
          - name: b
            resources:
              guaranteed: {memory: 1000000, vcore: 10}
"""


@attrs.frozen(kw_only=True)
class Wave:
    """Asks sent together at ``at`` seconds after the first wave."""

    at: float
    requests: tuple[si.AllocationRequest, ...]
    count: int


def submit_all(waves: Iterable[Wave], update_allocation: Callable[[si.AllocationRequest], object]) -> None:
    """Every request of ``waves`` in order, at once (no pacing): to a core or to the reference."""
    for wave in waves:
        for request in wave.requests:
            update_allocation(request)


@attrs.frozen(kw_only=True)
class Workload:
    name: str
    config: str
    nodes: si.NodeRequest
    applications: si.ApplicationRequest
    waves: tuple[Wave, ...]
    asks: int
    node_count: int
    # gang: the real asks that replace the placeholders (``waves``), sent once those are all allocated
    replacement_waves: tuple[Wave, ...] = ()

    @property
    def rm_id(self) -> str:
        return RM_ID


def _identical_nodes(count: int, resource: dict[str, int]) -> si.NodeRequest:
    """One request creating ``node-0`` .. ``node-{count-1}``, each with ``resource``."""
    return si.NodeRequest(
        rm_id=RM_ID,
        nodes=[
            si.NodeInfo(node_id=f"node-{index}", action=si.NodeAction.CREATE, schedulable_resource=resource)
            for index in range(count)
        ],
    )


def yunikorn(nodes: int = 1000, asks: int = 10_000) -> Workload:
    per_node = asks // nodes + 1
    node_request = _identical_nodes(nodes, {"memory": 10 * per_node, "vcore": per_node})
    apps = si.ApplicationRequest(
        rm_id=RM_ID,
        new=[
            si.AddApplicationRequest(
                application_id=app_id, queue_name=queue, ugi=si.UserGroupInformation(user="bench")
            )
            for app_id, queue in (("app-1", "root.a"), ("app-2", "root.b"))
        ],
    )
    half = asks // 2
    requests = tuple(
        si.AllocationRequest(
            rm_id=RM_ID,
            asks=[
                si.AllocationAsk(
                    allocation_key=f"{app_id}-ask-{index}",
                    application_id=app_id,
                    resource_ask={"memory": 10, "vcore": 1},
                    max_allocations=1,
                )
                for index in range(start, end)
            ],
        )
        for app_id, start, end in (("app-1", 0, half), ("app-2", half, asks))
    )
    return Workload(
        name="yunikorn",
        config=YUNIKORN_CONFIG,
        nodes=node_request,
        applications=apps,
        waves=(Wave(at=0.0, requests=requests, count=asks),),
        asks=asks,
        node_count=nodes,
    )


# on the even teams with --user-limits: never reached by the scale workload (at most one application
# per user and leaf, ~100 asks of <= 16 GiB each), so only the cost of checking them is measured
SCALE_USER_LIMITS = """                limits:
                  - limit: one user
                    users: [user0]
                    maxresources: {memory: 4Ti}
                    maxapplications: 2
                  - limit: every user
                    users: ["*"]
                    maxresources: {memory: 2Ti, vcore: 1000}
                    maxapplications: 1
"""


def _scale_config(rng: random.Random, user_limits: bool = False) -> tuple[str, list[str]]:
    """root -> 5 divisions -> 10 teams each = 50 leaves, with mixed guarantees and limits."""
    lines = [
        "partitions:",
        "  - name: default",
        "    queues:",
        "      - name: root",
        '        submitacl: "*"',
        "        queues:",
    ]
    leaves: list[str] = []
    for division in range(5):
        lines += [f"          - name: div{division}", "            parent: true"]
        lines += [
            "            resources:",
            f"              guaranteed: {{memory: {2 + division}Ti, vcore: {4000}}}",
        ]
        lines += ["            queues:"]
        for team in range(10):
            leaf = f"root.div{division}.team{team}"
            leaves.append(leaf)
            policy = "fair" if team % 3 == 0 else "fifo"
            guaranteed = rng.choice([64, 128, 256])
            lines += [f"              - name: team{team}"]
            lines += [
                "                resources:",
                f"                  guaranteed: {{memory: {guaranteed}Gi, vcore: 64}}",
            ]
            if team % 4 == 1:
                lines += [f"                  max: {{memory: {guaranteed * 3}Gi, vcore: 400}}"]
            lines += ["                properties:", f"                  application.sort.policy: {policy}"]
            if user_limits and team % 2 == 0:
                lines += SCALE_USER_LIMITS.rstrip("\n").split("\n")
    return "\n".join(lines) + "\n", leaves


def scale(
    nodes: int = 10_000,
    asks: int = 100_000,
    seed: int = 1,
    rate: float = 25_000.0,
    applications: int = 1000,
    user_limits: bool = False,
) -> Workload:
    rng = random.Random(seed)
    config, leaves = _scale_config(rng, user_limits)
    node_request = _identical_nodes(nodes, {"memory": 256 * 2**30, "vcore": 64_000})
    app_ids = [f"app-{index}" for index in range(applications)]
    apps = si.ApplicationRequest(
        rm_id=RM_ID,
        new=[
            si.AddApplicationRequest(
                application_id=app_id,
                queue_name=leaves[index % len(leaves)],
                ugi=si.UserGroupInformation(user=f"user{index % 37}"),
            )
            for index, app_id in enumerate(app_ids)
        ],
    )
    sizes = [(1, 2), (2, 4), (4, 8), (8, 16), (1, 8)]  # (vcore, GiB)
    wave_size = max(50, int(rate * 0.02))  # 20 ms of arrivals per request, like a shim batching updates
    waves: list[Wave] = []
    made = 0
    while made < asks:
        count = min(wave_size, asks - made)
        by_app: dict[str, list[si.AllocationAsk]] = {}
        for index in range(made, made + count):
            app_id = app_ids[rng.randrange(applications)]
            vcore, gib = rng.choice(sizes)
            by_app.setdefault(app_id, []).append(
                si.AllocationAsk(
                    allocation_key=f"{app_id}-ask-{index}",
                    application_id=app_id,
                    resource_ask={"memory": gib * 2**30, "vcore": vcore * 1000},
                    priority=rng.choice((0, 0, 0, 5, 10)),
                    max_allocations=1,
                )
            )
        # one request per wave, as a shim batches its updates; the core splits it per application
        wave_asks = [ask for app_asks in by_app.values() for ask in app_asks]
        requests = (si.AllocationRequest(rm_id=RM_ID, asks=wave_asks),)
        waves.append(Wave(at=made / rate, requests=requests, count=count))
        made += count
    return Workload(
        name="scale-user-limits" if user_limits else "scale",
        config=config,
        nodes=node_request,
        applications=apps,
        waves=tuple(waves),
        asks=asks,
        node_count=nodes,
    )


GANG_SIZE = 10


def gang(nodes: int = 1000, asks: int = 10_000) -> Workload:
    """YuniKorn's shape, as gangs: ``asks // 10`` gang applications of 10 placeholders each (task group
    "tg", {memory: 10, vcore: 1}) in root.a, then one real ask of the task group per placeholder. The
    placeholders are plain allocations; each real ask replaces one (the RM confirms every release)."""
    per_node = asks // nodes + 1
    node_request = _identical_nodes(nodes, {"memory": 10 * per_node, "vcore": per_node})
    app_ids = [f"gang-{index}" for index in range(max(1, asks // GANG_SIZE))]
    size = {"memory": 10, "vcore": 1}
    apps = si.ApplicationRequest(
        rm_id=RM_ID,
        new=[
            si.AddApplicationRequest(
                application_id=app_id,
                queue_name="root.a",
                ugi=si.UserGroupInformation(user="bench"),
                placeholder_ask={name: quantity * GANG_SIZE for name, quantity in size.items()},
            )
            for app_id in app_ids
        ],
    )

    def requests(placeholder: bool) -> tuple[si.AllocationRequest, ...]:
        kind = "ph" if placeholder else "real"
        return (
            si.AllocationRequest(
                rm_id=RM_ID,
                asks=[
                    si.AllocationAsk(
                        max_allocations=1,
                        allocation_key=f"{app_id}-{kind}-{index}",
                        application_id=app_id,
                        resource_ask=dict(size),
                        placeholder=placeholder,
                        task_group_name="tg",
                    )
                    for app_id in app_ids
                    for index in range(GANG_SIZE)
                ],
            ),
        )

    count = len(app_ids) * GANG_SIZE
    return Workload(
        name="gang",
        config=YUNIKORN_CONFIG,
        nodes=node_request,
        applications=apps,
        waves=(Wave(at=0.0, requests=requests(True), count=count),),
        asks=count,
        node_count=nodes,
        replacement_waves=(Wave(at=0.0, requests=requests(False), count=count),),
    )


def build(
    name: str,
    nodes: int | None = None,
    asks: int | None = None,
    seed: int = 1,
    rate: float | None = None,
    user_limits: bool = False,
) -> Workload:
    if name == "yunikorn":
        return yunikorn(nodes or 1000, asks or 10_000)
    if name == "gang":
        return gang(nodes or 1000, asks or 10_000)
    if name == "scale":
        return scale(
            nodes or 10_000, asks or 100_000, seed=seed, rate=rate or 25_000.0, user_limits=user_limits
        )
    raise ValueError(f"unknown workload {name!r} (yunikorn, scale)")


# ---- preemption: a full cluster of low-priority borrowers, then urgent asks that preempt ---------------

PREEMPTION_LOW_QUEUES = 4
PREEMPTION_VICTIMS_PER_ASK = 2  # an urgent ask is twice a running one: two victims on one node each
PREEMPTION_URGENT_PRIORITY = 100


@attrs.frozen(kw_only=True)
class PreemptionWorkload:
    """``korral bench --workload preemption``.

    ``allocations`` asks of {memory: 10, vcore: 1} at priority 0 fill ``nodes`` nodes exactly, spread
    over root.low0..low3, each guaranteed a tenth of its share (so all of them run above their
    guarantee, and every allocation is a possible victim). Then ``preemptors`` asks of twice that size,
    priority 100 with ``allow_preempt_other``, arrive in root.urgent (guaranteed room for all of them,
    holding nothing) at ``rate`` per second; each waits ``delay`` seconds (its queue's
    ``preemption.delay``) and then needs two victims on one node. Then ``burst`` more arrive at once:
    how many victims the core chooses per second with a backlog of urgent asks."""

    name: str
    config: str
    nodes: si.NodeRequest
    applications: si.ApplicationRequest
    fill: tuple[si.AllocationRequest, ...]
    preemptors: tuple[si.AllocationAsk, ...]  # paced at ``rate``: the latency
    burst: tuple[si.AllocationAsk, ...]  # then all at once: victims chosen per second under a backlog
    allocations: int
    node_count: int
    delay: float
    rate: float

    @property
    def rm_id(self) -> str:
        return RM_ID


def preemption(
    nodes: int = 500,
    allocations: int = 5000,
    preemptors: int = 50,
    rate: float = 10.0,
    delay: float = 0.5,
    burst: int = 50,
) -> PreemptionWorkload:
    per_node = max(1, allocations // nodes)
    allocations = per_node * nodes  # exactly full
    total = preemptors + burst
    if total * PREEMPTION_VICTIMS_PER_ASK > allocations // 2:
        raise ValueError(
            f"{total:,} urgent asks need {total * PREEMPTION_VICTIMS_PER_ASK:,} victims: more than "
            f"half of the {allocations:,} running allocations"
        )
    size = {"memory": 10, "vcore": 1}
    # the low queues' guarantees: a tenth of their share in memory units, so they stay above theirs
    share = allocations * size["memory"] // PREEMPTION_LOW_QUEUES
    low = "".join(
        f"""          - name: low{index}
            resources:
              guaranteed: {{memory: {max(10, share // 10)}}}
"""
        for index in range(PREEMPTION_LOW_QUEUES)
    )
    urgent_room = total * PREEMPTION_VICTIMS_PER_ASK * size["memory"]
    config = f"""
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: urgent
            resources:
              guaranteed: {{memory: {urgent_room}, vcore: {urgent_room // 10}}}
            properties:
              preemption.delay: {int(delay * 1000)}ms
{low}"""
    apps = si.ApplicationRequest(
        rm_id=RM_ID,
        new=[
            si.AddApplicationRequest(
                application_id=app_id, queue_name=queue, ugi=si.UserGroupInformation(user="bench")
            )
            for app_id, queue in [
                *((f"low-{index}", f"root.low{index}") for index in range(PREEMPTION_LOW_QUEUES)),
                ("urgent", "root.urgent"),
            ]
        ],
    )
    fill = tuple(
        si.AllocationRequest(
            rm_id=RM_ID,
            asks=[
                si.AllocationAsk(
                    max_allocations=1,
                    allocation_key=f"low-{queue}-{index}",
                    application_id=f"low-{queue}",
                    resource_ask=dict(size),
                    preemption_policy=si.PreemptionPolicy(allow_preempt_self=True),
                )
                for index in range(queue, allocations, PREEMPTION_LOW_QUEUES)
            ],
        )
        for queue in range(PREEMPTION_LOW_QUEUES)
    )
    urgent = tuple(
        si.AllocationAsk(
            max_allocations=1,
            allocation_key=f"urgent-{index}",
            application_id="urgent",
            resource_ask={name: quantity * PREEMPTION_VICTIMS_PER_ASK for name, quantity in size.items()},
            priority=PREEMPTION_URGENT_PRIORITY,
            preemption_policy=si.PreemptionPolicy(allow_preempt_other=True),
        )
        for index in range(total)
    )
    return PreemptionWorkload(
        name="preemption",
        config=config,
        nodes=_identical_nodes(nodes, {"memory": 10 * per_node, "vcore": per_node}),
        applications=apps,
        fill=fill,
        preemptors=urgent[:preemptors],
        burst=urgent[preemptors:],
        allocations=allocations,
        node_count=nodes,
        delay=delay,
        rate=rate,
    )

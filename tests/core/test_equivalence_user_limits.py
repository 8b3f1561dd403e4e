"""The actor system against the sequential reference on seeded workloads under user and group limits."""

from __future__ import annotations

import random
from typing import Any

import pytest
from equivalence_helpers import PARTITION, RM, SEEDS, SETTINGS, Pair, random_asks, random_config, random_node

import korral
from korral import si
from korral import testing as t
from korral.config import load_config
from korral.errors import ConfigError

# ---- user and group limits -----------------------------------------------------------------------------

USERS: dict[str, tuple[str, ...]] = {
    "alice": ("dev",),
    "bob": ("dev", "ops"),
    "carol": ("ops",),
    "dave": (),
}


def _limit_yaml(pad: str, entries: list[tuple[str, str, str, dict[str, int], int]]) -> list[str]:
    """``limits:`` lines: (description, users|groups, name, maxresources, maxapplications) each."""
    lines = [f"{pad}limits:"]
    for description, kind, name, resources, max_apps in entries:
        lines.append(f"{pad}  - limit: {description}")
        lines.append(f'{pad}    {kind}: ["{name}"]')
        if resources:
            body = ", ".join(f"{k}: {v}" for k, v in resources.items())
            lines.append(f"{pad}    maxresources: {{{body}}}")
        if max_apps:
            lines.append(f"{pad}    maxapplications: {max_apps}")
    return lines


def random_user_limits(rng: random.Random, config: str, leaves: list[str]) -> str:
    """``config`` with random user and group limits on root and on some leaves (valid, else redrawn)."""
    for _ in range(100):
        root: list[tuple[str, str, str, dict[str, int], int]] = [
            ("alice", "users", "alice", {"memory": rng.randrange(1000, 6001, 500)}, 0),
            ("dev", "groups", "dev", {"memory": rng.randrange(3000, 10001, 500)}, rng.choice([0, 3, 4])),
            ("any user", "users", "*", {"memory": rng.randrange(2000, 8001, 500)}, rng.choice([0, 3])),
        ]
        if rng.random() < 0.5:
            root.insert(2, ("ops", "groups", "ops", {}, rng.choice([1, 2])))
            root.append(("other groups", "groups", "*", {"vcore": rng.randint(4, 12)}, 0))
        lines = config.splitlines()
        at = lines.index('        submitacl: "*"') + 1
        lines[at:at] = _limit_yaml("        ", root)
        for leaf in leaves:
            if rng.random() < 0.5:
                continue
            name = leaf.rsplit(".", 1)[1]
            at = next(i for i, line in enumerate(lines) if line.strip() == f"- name: {name}")
            pad = lines[at][: lines[at].index("-")] + "  "
            entries = [("each user", "users", "*", {}, rng.choice([1, 2]))]
            if rng.random() < 0.5:
                entries.insert(0, ("bob", "users", "bob", {"memory": rng.randrange(500, 3001, 500)}, 1))
            lines[at + 1 : at + 1] = _limit_yaml(pad, entries)
        text = "\n".join(lines) + "\n"
        try:
            load_config(text)
        except ConfigError:
            continue
        return text
    raise AssertionError("no valid user limits in 100 draws")


def compare_user_usage(pair: Pair, where: str, *, within_limits: bool = True) -> None:
    """The actors' user and group usage equals the reference's; nobody is over a limit (until a reload
    lowers one: that blocks new work but evicts nothing)."""
    tracker = pair.model.ugm
    for user in USERS:
        info = pair.core.user_usage(PARTITION, user)
        rows = pair.model.user_group_usage("user", user)
        assert (info is None) == (rows is None), f"{where}: user {user} known"
        if info is not None and rows is not None:
            got = [(q.queue_path, q.resource, q.running_applications) for q in info.queues]
            assert got == [(r.queue_path, r.resource, list(r.running_applications)) for r in rows], where
    if within_limits:
        violations = tracker.violations()
        assert violations == [], f"{where}: {violations}"
    for group in ("dev", "ops", "*"):
        info = pair.core.group_usage(PARTITION, group)
        rows = pair.model.user_group_usage("group", group)
        assert (info is None) == (rows is None), f"{where}: group {group} tracked"
        if info is not None and rows is not None:
            assert [q.resource for q in info.queues] == [r.resource for r in rows], where


def run_user_limits_workload(seed: int, *, burst: bool) -> None:
    rng = random.Random(seed)
    config, leaves = random_config(rng, depth=2 + seed % 2)
    config = random_user_limits(rng, config, leaves)
    with korral.start(**SETTINGS) as core:
        pair = Pair(core, config)
        for index in range(rng.randint(2, 6)):
            pair.step(random_node(rng, f"node-{index}"))
        apps: dict[str, str] = {}
        for index in range(rng.randint(4, 10)):
            user = rng.choice(sorted(USERS))
            app_id = f"app-{index}"
            apps[app_id] = user
            pair.step(t.applications(RM, {app_id: rng.choice(leaves)}, user=user, groups=USERS[user]))
        first = [random_asks(rng, app_id, f"{app_id}-a", rng.randint(2, 10)) for app_id in apps]
        pair.feed(first, burst=burst)
        pair.compare("first asks")
        compare_user_usage(pair, "first asks")

        # releases ease user limits and end applications (maxapplications)
        steps: list[Any] = []
        for app_id, app in sorted(pair.model.applications.items()):
            if app.allocations and rng.random() < 0.3:
                steps.append(t.release(RM, app_id))
            elif app.allocations and rng.random() < 0.6:
                victim = rng.choice(sorted(app.allocations.values(), key=lambda a: a.uuid))
                steps.append(t.release(RM, app_id, uuid=victim.uuid))
        pair.feed(steps, burst=burst)
        pair.compare("releases")
        compare_user_usage(pair, "releases")

        # a reload with other limits (usage kept), more asks, a removed application
        reloaded = random_user_limits(rng, random_config(random.Random(seed), depth=2 + seed % 2)[0], leaves)
        core.update_configuration(si.UpdateConfigurationRequest(rm_id=RM, config=reloaded))
        pair.model.apply_config(load_config(reloaded).partitions[0])
        core.wait_until_idle()
        pair.ref.schedule()
        pair.compare("reload")
        for app_id in sorted(apps):
            pair.step(random_asks(rng, app_id, f"{app_id}-b", rng.randint(1, 4)))
        pair.compare("more asks")
        pair.step(t.remove_applications(RM, [rng.choice(sorted(apps))]))
        pair.compare("removed application")
        compare_user_usage(pair, "removed application", within_limits=False)


@pytest.mark.parametrize("seed", SEEDS[:8])
def test_user_limits_match_reference_step_by_step(seed: int) -> None:
    run_user_limits_workload(2000 + seed, burst=False)


@pytest.mark.parametrize("seed", SEEDS[:4])
def test_user_limits_match_reference_in_bursts(seed: int) -> None:
    run_user_limits_workload(3000 + seed, burst=True)

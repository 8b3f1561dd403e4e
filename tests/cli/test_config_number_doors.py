"""A number in queues.yaml gets one verdict at every door: ``load_config``, ``korral validate-config``,
REST ``validate-conf``, registration in-process and over gRPC, a reload, and every read after. A value
past what YuniKorn's Go types hold is what YuniKorn makes of it: a queue property (a Go string, parsed
later) runs with its documented default and a warning; a quantity or an integer field is refused with
the same ConfigError text everywhere. Never an exception past a door."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import flat, runner, write_config
from click.testing import CliRunner

import korral
from korral import si
from korral import testing as t
from korral.cli import main
from korral.config import load_config
from korral.config.defaulted import defaulted_values

__all__ = ["runner"]

HUGE = "9" * 5000

# property -> (value, what the queue runs with as REST shows it, or None when REST does not show it)
DEFAULTED = {
    "priority-offset-5000-digits": ("priority.offset", HUGE, ("priorityOffset", 0)),
    "priority-offset-past-int32": ("priority.offset", "2147483648", ("priorityOffset", 0)),
    "backoff-5000-digits": ("application.unschedasks.backoff", HUGE, None),
    "backoff-past-uint64": ("application.unschedasks.backoff", str(2**64), None),
    "preemption-delay-400-digits": ("preemption.delay", "9" * 400 + "s", ("preemptionDelay", "30s")),
    "preemption-delay-past-int64-ns": ("preemption.delay", "2562048h", ("preemptionDelay", "30s")),
    "backoff-delay-400-digits": ("application.unschedasks.backoff.delay", "9" * 400 + "s", None),
    "quota-delay-400-digits": ("quota.preemption.delay", "9" * 400 + "s", None),
}

REFUSED = {
    "max-5000-digits": f"            resources:\n              max: {{memory: {HUGE}}}\n",
    "max-past-int64": f"            resources:\n              max: {{memory: {2**63}}}\n",
    "maxapplications-5000-digits": f"            maxapplications: {HUGE}\n",
    "limit-maxresources-5000-digits": (
        "            limits:\n              - limit: x\n                users: [a]\n"
        f'                maxresources: {{memory: "{HUGE}"}}\n'
    ),
}


def config(block: str) -> str:
    return f"""
partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: q
{block}"""


def property_config(key: str, value: str) -> str:
    return config(f'            properties:\n              {key}: "{value}"\n')


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[korral.Core, str, str]]:
    with korral.start() as core:
        core.register_resource_manager(t.register("rm", config("")), t.RecordingRM("rm"))
        yield core, core.serve_grpc("127.0.0.1:0"), core.serve_rest("127.0.0.1:0")


def rest(url: str, body: str | None = None) -> tuple[int, object]:
    request = urllib.request.Request(url, data=None if body is None else body.encode())
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, json.loads(response.read())


@pytest.mark.parametrize("case", sorted(DEFAULTED))
def test_a_property_past_gos_types_runs_with_its_default_at_every_door(
    served, runner: CliRunner, tmp_path: Path, case: str
) -> None:
    core, address, base = served
    key, value, shown = DEFAULTED[case]
    text = property_config(key, value)
    # validation: accepted, with one warning naming the value's default
    (warning,) = defaulted_values(load_config(text))
    assert key in warning
    result = runner.invoke(main, ["validate-config", str(write_config(tmp_path, text))])
    assert result.exit_code == 0, result.output
    assert key in flat(result.output)
    assert rest(f"{base}/ws/v1/validate-conf", text) == (200, {"allowed": True})
    # registration in-process and over gRPC, and a reload: taken
    rm_id = f"in-{case}"
    core.register_resource_manager(t.register(rm_id, text), t.RecordingRM(rm_id))
    with korral.connect(address) as remote:
        remote.register_resource_manager(t.register(f"grpc-{case}", text), t.RecordingRM(f"grpc-{case}"))
        remote.update_configuration(si.UpdateConfigurationRequest(rm_id=f"grpc-{case}", config=text))
    core.update_configuration(si.UpdateConfigurationRequest(rm_id=rm_id, config=text))
    core.wait_until_idle()
    # every read answers, with what the queue runs with
    assert core.queue(f"[{rm_id}]default", "root.q") is not None
    partition = urllib.parse.quote(f"[{rm_id}]default")  # several RMs have a "default"
    status, queue = rest(f"{base}/ws/v1/partition/{partition}/queue/root.q")
    assert status == 200
    if shown is not None:
        assert isinstance(queue, dict) and queue.get(shown[0], 0) == shown[1]  # 0 omitted, as Go's
    assert rest(f"{base}/ws/v1/fullstatedump")[0] == 200
    assert rest(f"{base}/ws/v1/partition/{partition}/queues")[0] == 200


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_number_past_gos_types_is_refused_with_one_text_at_every_door(
    served, runner: CliRunner, tmp_path: Path, case: str
) -> None:
    core, address, base = served
    text = config(REFUSED[case])
    with pytest.raises(korral.ConfigError) as loading:
        load_config(text)
    expected = str(loading.value)
    assert len(expected) < 400  # one readable line, not the number
    result = runner.invoke(main, ["validate-config", str(write_config(tmp_path, text))])
    assert result.exit_code == 1 and flat(result.output) == flat(f"invalid: {expected}"), result.output
    assert rest(f"{base}/ws/v1/validate-conf", text) == (200, {"allowed": False, "reason": expected})
    with pytest.raises(korral.ConfigError) as registering:
        core.register_resource_manager(t.register(f"in-{case}", text), t.RecordingRM("x"))
    assert str(registering.value) == expected
    with korral.connect(address) as remote:
        with pytest.raises(korral.ConfigError) as remote_registering:
            remote.register_resource_manager(t.register(f"grpc-{case}", text), t.RecordingRM("x"))
        assert str(remote_registering.value) == expected
        with pytest.raises(korral.ConfigError) as reloading:
            remote.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", config=text))
        assert str(reloading.value) == expected
    with pytest.raises(korral.ConfigError) as reloading_here:
        core.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", config=text))
    assert str(reloading_here.value) == expected

"""Issue 22, point 4, served: each bound of a configuration gives the same clean error at every door.

gRPC (``korral.connect`` and a raw stub: ``INVALID_ARGUMENT``), ``korral validate-config`` and
``korral serve --config`` (exit 1, one line on stderr, no traceback; REST ``validate-conf``: in
tests/hostile), over real loopback sockets and real processes; and RM B is served over gRPC while RM A
registers a big configuration over gRPC.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from core_helpers import NODE, ROOT_ONLY, TWO_LEAVES, collect_errors
from hostile_configs import HOSTILE, LIMIT_WORDS, many_queues

import korral
from korral import si
from korral import testing as t
from korral.config import load_config
from korral.si import si_pb2

# the second tier (make test-all): real processes and configs at the bounds, seconds each
pytestmark = pytest.mark.slow

KORRAL = [sys.executable, "-c", "from korral.cli import main; main()"]
SERVICE = "/si.v1.Scheduler/"


def expected_error(name: str) -> str:
    with pytest.raises(korral.ConfigLimitError) as refused:
        load_config(HOSTILE[name]())
    assert LIMIT_WORDS[name] in str(refused.value)
    return str(refused.value)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[korral.Core, str, str]]:
    with korral.start() as core:  # default timings: 20,000 queues swept every 0.2 s would keep it busy
        core.register_resource_manager(t.register("rm", TWO_LEAVES), t.RecordingRM("rm"))
        yield core, core.serve_grpc("127.0.0.1:0"), core.serve_rest("127.0.0.1:0")


@pytest.mark.parametrize("name", HOSTILE)
def test_grpc_refuses_each_bound_as_invalid_argument_with_the_same_reason(served, name: str) -> None:
    core, address, _ = served
    expected = expected_error(name)
    text = HOSTILE[name]()
    with collect_errors() as errors:
        with korral.connect(address) as remote:
            with pytest.raises(korral.ConfigError) as registering:
                remote.register_resource_manager(t.register("other", text), t.RecordingRM("other"))
            assert str(registering.value) == expected
        channel = grpc.insecure_channel(address)
        try:
            for method, request in (
                ("RegisterResourceManager", si_pb2.RegisterResourceManagerRequest(rmID="raw", config=text)),
                ("UpdateConfiguration", si_pb2.UpdateConfigurationRequest(rmID="rm", config=text)),
            ):
                with pytest.raises(grpc.RpcError) as refused:
                    channel.unary_unary(SERVICE + method)(request.SerializeToString(), timeout=60)
                assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
                assert refused.value.details() == expected
        finally:
            channel.close()
    assert errors.messages() == []
    assert core.partition_names() == ["[rm]default"]


@pytest.mark.no_cover  # a long run over code other tests cover (pyproject.toml: no_cover)
def test_rest_validate_conf_still_judges_a_config_bigger_than_aiohttps_default_body(served) -> None:
    # aiohttp reads at most 1 MiB by default: a valid config within the 10 MiB bound is judged
    _, _, url = served
    text = many_queues(40_000)
    assert len(text) > 1024 * 1024
    request = urllib.request.Request(url + "/ws/v1/validate-conf", data=text.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=120) as response:
        assert json.loads(response.read()) == {
            "allowed": True
        }  # an empty reason is omitted, as YuniKorn does


def _one_clean_line(result: subprocess.CompletedProcess, expected: str) -> None:
    assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(expected), result.stderr[-2000:]


@pytest.mark.parametrize("name", HOSTILE)
def test_validate_config_exits_1_with_one_line(tmp_path: Path, name: str) -> None:
    expected = expected_error(name)
    path = tmp_path / "queues.yaml"
    path.write_text(HOSTILE[name]())
    result = subprocess.run(
        [*KORRAL, "validate-config", str(path)], capture_output=True, text=True, timeout=120
    )
    _one_clean_line(result, expected)
    assert result.stdout == ""


@pytest.mark.parametrize("name", HOSTILE)
def test_serve_with_such_a_config_exits_1_with_one_line(tmp_path: Path, name: str) -> None:
    expected = expected_error(name)
    path = tmp_path / "queues.yaml"
    path.write_text(HOSTILE[name]())
    result = subprocess.run(
        [*KORRAL, "serve", "--config", str(path), "--grpc", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    _one_clean_line(result, expected)


@pytest.mark.no_cover  # a long run over code other tests cover (pyproject.toml: no_cover)
@pytest.mark.timeout(900)
def test_rm_b_is_served_over_grpc_while_rm_a_registers_20000_queues_over_grpc(served) -> None:
    _, address, _ = served
    text = many_queues(20_000)
    rm_b = t.RecordingRM("b")
    # A's registration may take minutes on a slow, loaded machine: what is checked is that B is served
    # meanwhile, not how fast A's 20,000 queues are built
    with korral.connect(address, call_timeout=600) as remote_a, korral.connect(address) as remote_b:
        remote_b.register_resource_manager(t.register("b", ROOT_ONLY), rm_b)
        busy = threading.Event()
        busy.set()
        failures: list[BaseException] = []

        def register_a() -> None:
            try:
                remote_a.register_resource_manager(t.register("a", text), t.RecordingRM("a"))
            except BaseException as error:  # reported below
                failures.append(error)
            finally:
                busy.clear()

        thread = threading.Thread(target=register_a)
        thread.start()
        during: list[bool] = []
        number = 0
        while busy.is_set() or not during:
            number += 1
            node_id = f"b{number}"
            remote_b.update_node(si.NodeRequest(rm_id="b", nodes=t.nodes("b", [node_id], NODE).nodes))
            assert rm_b.wait_for(lambda r, n=node_id: n in r.accepted_nodes, timeout=120)
            during.append(busy.is_set())
        thread.join(660)
        assert not failures, failures
        assert during.count(True) >= 1, during

"""``korral simulate --replay``: a recorded cluster history replayed against one config or two.

The shipped example (src/examples/history.jsonl, recorded from korral's own /ws/v1/events/stream by
scripts/record_history.py) replays the same way every time; korral's stream, recorded here, replays
ask for ask; the CSV form reads as docs/api.md says; a bad recording is one line.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from cli_helpers import BUNDLED_EXAMPLE, flat, runner  # noqa: F401  (runner: a fixture)
from click.testing import CliRunner
from core_helpers import NODE, SMALL, TWO_LEAVES

import korral
from korral import testing as t
from korral.cli import main
from korral.harness.simulate.history import UNKNOWN_USER, read_history

EXAMPLES = BUNDLED_EXAMPLE.parent
HISTORY = EXAMPLES / "history.jsonl"
WHATIF = EXAMPLES / "queues-whatif.yaml"


def test_the_shipped_history_replays_against_two_configs_the_same_way_twice(runner: CliRunner) -> None:  # noqa: F811
    arguments = ["simulate", "--replay", str(HISTORY), "--compare", str(BUNDLED_EXAMPLE), str(WHATIF)]
    first = runner.invoke(main, arguments)
    second = runner.invoke(main, arguments)
    assert first.exit_code == 0, first.output
    assert first.output == second.output
    history = read_history(HISTORY)
    out = flat(first.output)
    assert f"{len(history.apps)} applications, {history.ask_count} asks over" in out
    # every recorded ask was replayed on both configs, and the swapped guarantees changed the waits
    assert out.count(f"{history.ask_count} submitted, ") == 2, out
    waits = re.search(
        r"wait \(every ask\): (p50 [\d,]+ ms, p99 [\d,]+ ms) (p50 [\d,]+ ms, p99 [\d,]+ ms)", out
    )
    assert waits and waits[1] != waits[2], out


def test_korrals_own_event_stream_replays_ask_for_ask(tmp_path: Path) -> None:
    pytest.importorskip("aiohttp")
    rm = t.RecordingRM("rm")
    lines: list[bytes] = []
    with korral.start() as core:
        url = core.serve_rest("127.0.0.1:0")
        stream = urllib.request.urlopen(f"{url}/ws/v1/events/stream", timeout=60)
        reader = threading.Thread(target=lambda: lines.extend(iter(stream.readline, b"")), daemon=True)
        reader.start()
        core.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
        core.update_node(t.nodes("rm", ["n1"], NODE))
        core.update_application(t.applications("rm", {"app-a": "root.a", "app-b": "root.b"}))
        core.update_allocation(t.asks("rm", "app-a", 3, SMALL, prefix="a"))
        core.update_allocation(
            t.asks("rm", "app-b", 2, {"memory": 10**12, "vcore": 1}, prefix="b")
        )  # never fits
        assert rm.wait_for_allocations(3)
        released = sorted(rm.live.values(), key=lambda a: a.allocation_key)[:2]
        core.update_allocation(t.release("rm", "app-a", uuid=released[0].uuid))
        core.update_allocation(t.release("rm", "app-a", uuid=released[1].uuid))
        core.wait_until_idle()
        deadline = time.monotonic() + 60
        while sum(b'"eventChangeType": 3' in line and b'"type": 3' in line for line in lines) < 2:
            assert time.monotonic() < deadline, lines
            time.sleep(0.05)
    reader.join(60)  # the core stopped: the server ended the stream
    recording = tmp_path / "stream.jsonl"
    recording.write_bytes(b"".join(lines))
    history = read_history(recording)
    apps = {app.app_id: app for app in history.apps}
    assert set(apps) == {"app-a", "app-b"} and history.skipped == 0
    assert (apps["app-a"].queue, apps["app-b"].queue) == ("root.a", "root.b")
    assert apps["app-a"].user == UNKNOWN_USER  # the stream names no application's user
    a_asks = {ask.key: ask for ask in apps["app-a"].asks}
    assert len(a_asks) == 3 and all(ask.resource == SMALL for ask in a_asks.values())
    ran = sorted(ask.ran for ask in a_asks.values())
    assert ran[0] >= 0 and not math.isinf(ran[1]) and math.isinf(ran[2])  # two released, one still running
    assert all(math.isinf(ask.ran) and ask.resource["memory"] == 10**12 for ask in apps["app-b"].asks)
    assert [n for n, _ in history.nodes] == ["n1"]


def test_a_csv_history_replays_and_a_bad_one_is_one_line(runner: CliRunner, tmp_path: Path) -> None:  # noqa: F811
    good = tmp_path / "history.csv"
    good.write_text(
        "submitted,application,queue,user,ask,duration,memory,vcore\n"
        "0,app-1,root.production,ana,k1,2.5,1073741824,1000\n"
        "0.5,app-1,root.production,ana,k2,,1073741824,1000\n"
        "1,app-2,root.development,bo,k3,1,2147483648,2000\n"
    )
    history = read_history(good)
    assert [(app.app_id, app.queue, app.user, len(app.asks)) for app in history.apps] == [
        ("app-1", "root.production", "ana", 2),
        ("app-2", "root.development", "bo", 1),
    ]
    result = runner.invoke(main, ["simulate", "--replay", str(good)])
    assert result.exit_code == 0, result.output
    assert "2 applications, 3 asks over" in flat(result.output)
    assert "3 submitted, 3 allocated" in flat(result.output)

    bad = tmp_path / "bad.csv"
    bad.write_text("submitted,application,queue,user,ask,duration,memory\nsoon,app-1,root.a,u,k1,1,5\n")
    refused = runner.invoke(main, ["simulate", "--replay", str(bad)])
    assert refused.exit_code == 1 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and f"cannot replay: {bad}, line 2:" in refused.stderr
    not_json = tmp_path / "events.jsonl"
    not_json.write_text('{"type": 2}\nnot json\n')
    refused = runner.invoke(main, ["simulate", "--replay", str(not_json)])
    assert refused.exit_code == 1 and f"{not_json}, line 2: not JSON" in refused.stderr
    usage = runner.invoke(main, ["simulate", "--replay", str(good), "--arrival-rate", "3"])
    assert usage.exit_code == 2 and "--arrival-rate" in usage.output


def test_the_shipped_history_is_korrals_stream_with_every_ask_resourced() -> None:
    first = json.loads(HISTORY.read_text().splitlines()[0])
    assert "InstanceUUID" in first  # the stream's own first line, as recorded
    history = read_history(HISTORY)
    assert history.skipped == 0 and history.ask_count >= 40 and len(history.nodes) == 2

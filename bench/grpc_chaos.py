"""gRPC chaos: RMs over korral.connect whose connections are cut at random; every cut is resynced.

    PYTHONPATH=build/pp python bench/grpc_chaos.py --cuts 1000 [--rms 3] [--seed 1] [--json FILE]

A core serves gRPC on loopback; each RM reaches it through its own CuttingProxy (korral.server.chaos),
so a cut drops that RM's connection, with its streams and whatever was in flight, as a failing network
would. Each RM (ResyncingRM) asks for and releases allocations at random and, when korral tells it to
resync (its callback's ``resync_required``, or a call raising ``korral.ResyncRequired``), registers
again and re-declares its applications, its nodes with the allocations it knows, and its pending asks
(docs/api.md, "A core in another process"). A cutter thread cuts a random RM's connection every few
milliseconds until --cuts cuts are done. Then the RMs settle and the books are compared: every
allocation the core booked must be held by exactly one RM that knows it, and every allocation an RM
holds must be booked. Exit 0 when they agree, 1 (with the differences) when not, or when the run
outlasts --budget seconds (then it says where each RM that is still running stands). The figures carry
the process's RSS and threads once the RMs started and at the end (every report line: both now).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import threading
import time
from pathlib import Path

import korral
from korral import si
from korral.harness.measures import process_threads, rss_mb
from korral.server.chaos import CuttingProxy, ResyncingRM, ResyncNeeded

CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: a
          - name: b
"""
NODE = {"memory": 1_000_000_000, "vcore": 1_000_000}
ASK = {"memory": 1_000_000, "vcore": 100}
HIGH_WATER = 500  # an RM releases down when it holds more than this many allocations
# An RM's first connection may meet the proxy's cuts and gRPC's reconnect backoff (1 s, 1.6 s,
# 2.6 s, ...) on a loaded machine: what is measured is the books, not how fast a channel comes up.
CONNECT_SECONDS = 60.0


class ChaosRM(threading.Thread):
    def __init__(self, index: int, proxy: CuttingProxy, seed: int, stop: threading.Event) -> None:
        super().__init__(name=f"chaos-rm-{index}", daemon=True)
        self.rm = ResyncingRM(
            f"rm{index}",
            CONFIG,
            {f"n{node}": NODE for node in range(4)},
            {"app-a": "root.a", "app-b": "root.b"},
        )
        self.proxy = proxy
        self.random = random.Random(seed)
        self.stop_event = stop
        self.next_ask = 0
        self.asked = 0
        self.released = 0
        self.calls_refused = 0  # SI calls that raised ResyncRequired (or failed on a cut)
        self.resyncing = False
        self.phase = "connecting"  # what the RM is doing: reported when the run outlasts its budget
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with korral.connect(self.proxy.address, connect_timeout=CONNECT_SECONDS) as remote:
                self.phase = "registering"
                self.rm.resync(remote, timeout=120)
                self.phase = "running"
                while not self.stop_event.is_set():
                    self._step(remote)
                self.phase = "settling"
                self.settle(remote)
                self.phase = "done"
        except BaseException as error:  # reported by the main thread
            self.error = error

    def _step(self, remote: korral.RemoteCore) -> None:
        try:
            if self.rm.must_resync:
                self._resync(remote)
                return
            if len(self.rm.live) > HIGH_WATER or self.random.random() < 0.3:
                with self.rm.lock:
                    live = sorted(self.rm.live)
                chosen = self.random.sample(live, min(len(live), self.random.randint(1, 40)))
                self.rm.release(remote, chosen)
                self.released += len(chosen)
            else:
                count = self.random.randint(1, 30)
                asks = [
                    si.AllocationAsk(
                        allocation_key=f"{self.rm.rm_id}-k{self.next_ask + index}",
                        application_id=self.random.choice(("app-a", "app-b")),
                        resource_ask=ASK,
                        max_allocations=1,
                    )
                    for index in range(count)
                ]
                self.next_ask += count
                self.asked += count
                self.rm.ask(remote, asks)
        except (korral.SchedulerError, ResyncNeeded):
            self.calls_refused += 1
            time.sleep(0.005)  # told to resync (or the call met a cut): the next step resyncs
            self._resync(remote)
        time.sleep(self.random.uniform(0, 0.004))

    def _resync(self, remote: korral.RemoteCore) -> None:
        self.resyncing = True
        try:
            self.rm.resync(remote, timeout=120)
        finally:
            self.resyncing = False

    @property
    def steady(self) -> bool:
        """In sync with the core and not resyncing: a cut now meets its ordinary traffic."""
        return not self.resyncing and not self.rm.must_resync

    def settle(self, remote: korral.RemoteCore) -> None:
        """No more cuts: resync whenever told to, until korral has answered everything sent since the
        last resync (each pending ask allocated, each release confirmed). A request lost to the last cut
        shows here as unanswered, until korral's word that the RM must resync arrives."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.rm.must_resync:
                self.rm.resync(remote, timeout=120)
            if self.rm.in_step:
                return
            time.sleep(0.05)
        raise TimeoutError(
            f"{self.rm.rm_id}: {len(self.rm.pending)} asks pending and {len(self.rm.unconfirmed)} "
            "releases unconfirmed after the run"
        )


def booked(core: korral.Core, rm_id: str) -> dict[str, str]:
    """uuid -> application of every allocation the core books for the RM."""
    result = {}
    for app_id in ("app-a", "app-b"):
        app = core.application(f"[{rm_id}]default", app_id)
        for allocation in app.allocations if app is not None else ():
            result[allocation.uuid] = app_id
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cuts", type=int, default=1_000, help="connections cut in total (default 1000)")
    parser.add_argument("--rms", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--gap", type=float, default=0.02, help="mean seconds between cuts (default 0.02)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument(
        "--budget",
        type=float,
        default=600.0,
        help="seconds the whole run may take before it gives up and reports what is stuck (default 600)",
    )
    args = parser.parse_args()
    # every cut is logged by the server and the client (a warning each): the figures say it all
    logging.getLogger("korral").setLevel(logging.ERROR)
    chooser = random.Random(args.seed)
    started = time.monotonic()
    with korral.start() as core:
        address = core.serve_grpc("127.0.0.1:0")
        proxies = [CuttingProxy(address).start() for _ in range(args.rms)]
        stop = threading.Event()
        rms = [ChaosRM(index, proxies[index], args.seed * 1000 + index, stop) for index in range(args.rms)]
        for rm in rms:
            rm.start()
        # the process's RSS and threads: cut connections must leave nothing behind
        at_start = (rss_mb(), process_threads())
        cuts = steady_cuts = 0
        last_report = time.monotonic()
        while cuts < args.cuts:
            time.sleep(chooser.expovariate(1 / args.gap))
            if any(rm.error is not None for rm in rms) or time.monotonic() - started > args.budget:
                break
            index = chooser.randrange(len(proxies))
            steady = rms[index].steady
            if proxies[index].cut():
                cuts += 1
                steady_cuts += steady
            if time.monotonic() - last_report > 10:
                last_report = time.monotonic()
                print(
                    f"  {cuts} cuts, {sum(rm.rm.resyncs for rm in rms)} resyncs, RSS {rss_mb():.1f} MB, "
                    f"{process_threads()} threads",
                    flush=True,
                )
        chaos_seconds = time.monotonic() - started
        stop.set()
        for rm in rms:
            rm.join(max(0.0, started + args.budget - time.monotonic()))
        stuck = [
            f"{rm.rm.rm_id}: still {rm.phase} after the run's budget of {args.budget:g}s "
            f"({len(rm.rm.pending)} asks pending, {len(rm.rm.live)} allocations held)"
            for rm in rms
            if rm.is_alive()
        ]
        if stuck:
            print(json.dumps({"rms": args.rms, "seed": args.seed, "cuts": cuts, "stuck": stuck}, indent=2))
            for line in stuck:
                print("STUCK", line)
            return 1
        core.wait_until_idle(timeout=max(1.0, min(60.0, started + args.budget - time.monotonic())))
        violations: list[str] = []
        seen: dict[str, str] = {}
        # the last releases may still be on their way: the books must converge within a minute
        deadline = min(time.monotonic() + 60, max(started + args.budget, time.monotonic() + 5))
        while True:
            violations = []
            seen = {}
            for rm in rms:
                if rm.error is not None:
                    violations.append(f"{rm.rm.rm_id}: {type(rm.error).__name__}: {rm.error}")
                    continue
                core_books = booked(core, rm.rm.rm_id)
                with rm.rm.lock:
                    known = set(rm.rm.live)
                for uuid in sorted(set(core_books) - known):
                    violations.append(f"{rm.rm.rm_id}: booked by the core, unknown to the RM: {uuid}")
                for uuid in sorted(known - set(core_books)):
                    violations.append(f"{rm.rm.rm_id}: held by the RM, not booked by the core: {uuid}")
                for uuid in core_books:
                    if uuid in seen:
                        violations.append(f"{uuid}: held by {seen[uuid]} and {rm.rm.rm_id}")
                    seen[uuid] = rm.rm.rm_id
            if not violations or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        figures = {
            "cuts": cuts,
            "cuts_of_an_rm_in_sync": steady_cuts,
            "connections": sum(proxy.connections for proxy in proxies),
            "rms": args.rms,
            "seed": args.seed,
            "chaos_seconds": round(chaos_seconds, 1),
            "told_to_resync": sum(rm.rm.told_to_resync for rm in rms),
            "resyncs": sum(rm.rm.resyncs for rm in rms),
            "calls_refused": sum(rm.calls_refused for rm in rms),
            "asks": sum(rm.asked for rm in rms),
            "releases": sum(rm.released for rm in rms),
            "allocations_booked_at_end": len(seen),
            "rejected": sum(len(rm.rm.rejected) for rm in rms),
            "violations": len(violations),
            "rss_mb_start": round(at_start[0], 1),
            "rss_mb_end": round(rss_mb(), 1),
            "threads_start": at_start[1],
            "threads_end": process_threads(),
        }
        for proxy in proxies:
            proxy.close()
    print(json.dumps(figures, indent=2))
    for violation in violations[:20]:
        print("VIOLATION", violation)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())

"""``korral simulate --plot FILE.png``: each guaranteed queue's usage against its guarantee over time.

One panel per queue that has a guarantee: its usage sampled every half second (the dominant share of
its guarantee, so 100 % is the guarantee whatever the resource), the guarantee as a line at 100 %, its
max as a dotted line where one is set. With ``--compare``, both configs' runs in the same panels.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from korral.harness.simulate.report import share

if TYPE_CHECKING:
    from korral.harness.simulate.cluster import SimulateRun

COLUMNS = 2
STYLES = ({"color": "tab:blue", "linestyle": "-"}, {"color": "tab:orange", "linestyle": "-"})


def guaranteed_queues(runs: list[SimulateRun]) -> list[str]:
    """Every queue with a guarantee in any run, parents before children."""
    paths: list[str] = []
    for run in runs:
        for path in run._tree_order(run.totals):
            if run.totals[path].guaranteed and path not in paths:
                paths.append(path)
    return sorted(paths, key=lambda path: path.split("."))


def plot_usage(path: str, runs: list[SimulateRun]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    queues = guaranteed_queues(runs)
    labels = [run.label.rsplit("/", 1)[-1] for run in runs]
    if len(set(labels)) < len(labels):  # the file names do not tell them apart: the whole paths
        labels = [run.label for run in runs]
    rows = max(1, math.ceil(len(queues) / COLUMNS))
    figure, axes = plt.subplots(
        rows, COLUMNS, figsize=(6 * COLUMNS, 2.6 * rows + 0.8), squeeze=False, sharex=True
    )
    flat = [axis for row in axes for axis in row]
    for axis, queue in zip(flat, queues, strict=False):
        top = 1.0  # the scale follows usage and the guarantee; a max far above stays off the panel
        for index, run in enumerate(runs):
            totals = run.totals.get(queue)
            if totals is None:
                continue
            times = [t for t, _ in run.history]
            used = [share(sample.get(queue, {}), totals.guaranteed) for _, sample in run.history]
            label = labels[index] or "usage"
            axis.plot(times, [u * 100 for u in used], label=label, linewidth=1.4, **STYLES[index % 2])
            top = max(top, *used) if used else top
            if totals.max:
                ceiling = share(totals.max, totals.guaranteed)
                axis.axhline(ceiling * 100, linestyle=":", linewidth=1.2, **_color(index))
        axis.axhline(100, color="black", linestyle="--", linewidth=1, label="guarantee")
        axis.set_title(queue, fontsize=10, loc="left")
        axis.set_ylim(0, top * 115)
        axis.set_ylabel("% of guarantee")
        axis.tick_params(labelbottom=True)
        axis.set_xlabel("virtual time (s)", fontsize=8)
        axis.grid(alpha=0.3)
    for axis in flat[len(queues) :]:
        axis.set_visible(False)
    if queues:
        flat[0].legend(fontsize=8, loc="upper left")
    else:
        flat[0].set_visible(True)
        flat[0].set_axis_off()
        flat[0].text(0.5, 0.5, "no queue has a guarantee: nothing to draw", ha="center", va="center")
    figure.suptitle(
        "queue usage against guarantee (dominant resource; dotted: max)"
        + (f" -- {' vs '.join(labels)}" if len(runs) > 1 else ""),
        fontsize=11,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _color(index: int) -> dict[str, str]:
    return {"color": STYLES[index % 2]["color"]}

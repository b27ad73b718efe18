#!/usr/bin/env python3
"""Draws the dashboard's panels from the series a real Prometheus returned (see
ci/dashboard-picture.sh): one subplot per panel at its gridPos (24 columns, rows of 8 units as
Grafana lays them out), one line per series, named by the target's legendFormat with the series'
labels filled in, time in seconds since the run started.

Usage: draw_dashboard.py DATA.json OUT.png
"""

from __future__ import annotations

import json
import math
import re
import sys

import matplotlib

matplotlib.use("Agg")  # no display: render straight to the file
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.gridspec import GridSpec  # noqa: E402


def legend(fmt: str | None, labels: dict[str, str]) -> str:
    if not fmt:
        return ",".join(f"{k}={v}" for k, v in labels.items()) or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)


def main() -> int:
    data_path, out = sys.argv[1], sys.argv[2]
    with open(data_path) as f:
        panels = json.load(f)
    if not panels or not any(p["targets"] for p in panels):
        print("draw_dashboard: no series in the data", file=sys.stderr)
        return 1
    starts = [float(v[0]) for p in panels for t in p["targets"] for s in t["result"]
              for v in s["values"][:1]]
    t0 = min(starts)
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    fig = plt.figure(figsize=(16, 2.6 * rows / 8 + 1), dpi=90)
    fig.suptitle("tenant-placer dashboard (charts/tenant-placer/monitoring/dashboard.json): "
                 "a sandbox's run, as a real Prometheus answered each panel's queries",
                 fontsize=11, y=0.995)
    grid = GridSpec(rows, 24, figure=fig, hspace=2.2, wspace=2.5, top=0.965, bottom=0.03,
                    left=0.04, right=0.99)
    for panel in panels:
        g = panel["gridPos"]
        ax = fig.add_subplot(grid[g["y"]:g["y"] + g["h"] - 1, g["x"]:g["x"] + g["w"]])
        ax.set_title(panel["title"], fontsize=10, loc="left")
        for target in panel["targets"]:
            for series in target["result"]:
                xs = [float(v[0]) - t0 for v in series["values"]]
                ys = [float(v[1]) for v in series["values"]]
                if all(math.isnan(y) for y in ys):
                    continue  # 0/0 (no placements in the window): Grafana draws nothing
                ax.plot(xs, ys, linewidth=1.3,
                        label=legend(target.get("legendFormat"), series["metric"]))
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if panel.get("unit") == "percentunit":
            ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
        if ax.lines:
            ax.legend(fontsize=6, loc="upper left", ncol=2, framealpha=0.6)
        ax.set_xlabel("seconds into the run", fontsize=7)
    fig.savefig(out, bbox_inches="tight")
    return 0


if __name__ == "__main__":
    sys.exit(main())

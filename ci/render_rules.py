#!/usr/bin/env python3
"""Writes the chart's alerting rules as a Prometheus rules file, rendered by Helm itself.

The chart is rendered with its default values (only metrics.prometheusRule.enabled switched on,
as an install that wants the alerts does), release and namespace "tenant-placer" and
"tenant-placer-system" (so the rules select job="tenant-placer-metrics",
namespace="tenant-placer-system"); the PrometheusRule's spec.groups become the file's groups,
exactly as prometheus-operator hands them to Prometheus. tests/prometheus.rs runs this, so a
template change that breaks an expression fails promtool there.

Run with the virtualenv of ci/chart-venv.sh: `"$(bash ci/chart-venv.sh)/bin/python"
ci/render_rules.py OUT.yaml`.
"""

from __future__ import annotations

import pathlib
import sys

import helm_python as helm
import yaml

CHART = pathlib.Path(__file__).resolve().parent.parent / "charts" / "tenant-placer"
RELEASE = "tenant-placer"
NAMESPACE = "tenant-placer-system"


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: render_rules.py OUT.yaml", file=sys.stderr)
        return 2
    values = {"metrics": {"prometheusRule": {"enabled": True}}}
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    rules = [doc for path, text in manifests.items() if not path.endswith("NOTES.txt")
             for doc in yaml.safe_load_all(text) if doc and doc.get("kind") == "PrometheusRule"]
    if len(rules) != 1:
        print(f"render_rules: {len(rules)} PrometheusRules rendered, want 1", file=sys.stderr)
        return 1
    pathlib.Path(sys.argv[1]).write_text(
        yaml.safe_dump({"groups": rules[0]["spec"]["groups"]}, sort_keys=False, width=1000))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# The project's tests on a fresh machine with Rust and kubectl: installs what they need, then runs
# them. The sandbox test drives the real kubectl (checked here, not installable from these
# machines' registries); the browser test drives Debian's Chromium (installed when missing, by
# ci/browser-setup.sh); the monitoring tests (tests/observability/) run Debian's Prometheus and
# promtool (installed when missing, by ci/prometheus-setup.sh) on the chart's rules rendered by
# Helm's library (the virtualenv of ci/chart-venv.sh, shared with ci/check-chart.sh). Extra
# arguments go to cargo test.
#
# Usage: bash ci/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v kubectl >/dev/null 2>&1; then
    echo "test: kubectl is not on PATH; tests/sandbox_kubectl.rs drives the real kubectl" >&2
    exit 1
fi
bash ci/browser-setup.sh
bash ci/prometheus-setup.sh
TP_CHART_PYTHON="$(bash ci/chart-venv.sh)/bin/python"
export TP_CHART_PYTHON
exec cargo test --workspace --locked "$@"

#!/usr/bin/env bash
# Checks the Helm chart charts/tenant-placer with no helm binary and no cluster: helm lint --strict
# and helm template (Helm's own Go library, through helm-python-sdk) for several value sets, the
# rendered objects against what the chart promises, kubernetes-validate --strict on every built-in
# kind, and the chart's CRDs against the generated crds/. See ci/check_chart.py.
#
# Usage: bash ci/check-chart.sh
# The virtualenv (ci/chart-venv.sh) lives in ${TP_CHART_VENV:-${TMPDIR:-/tmp}/tp-chart-venv} and
# is reused while ci/chart-requirements.txt and the Python version are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=$(bash ci/chart-venv.sh)
exec "$venv/bin/python" ci/check_chart.py

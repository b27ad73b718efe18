#!/usr/bin/env bash
# Draws docs/dashboard.png: what the Grafana dashboard (charts/tenant-placer/monitoring/
# dashboard.json) shows an operator, without Grafana. The Prometheus test of
# tests/observability/prometheus.rs runs its scenario against a sandbox (placements, a tenant
# waiting, a purchase, a consolidation, a drain, conflicts) with TP_DASHBOARD_DATA set, which
# writes every panel's series over the run (Prometheus' query_range, 1 s steps); then
# ci/draw_dashboard.py draws each panel, laid out by its gridPos, with matplotlib.
# Not part of ci/test.sh: run it by hand when the dashboard or the metrics change.
#
# Usage: bash ci/dashboard-picture.sh [OUT.png]     (default docs/dashboard.png)
# The virtualenv lives in ${TP_PICTURE_VENV:-${TMPDIR:-/tmp}/tp-picture-venv}, reused while
# ci/picture-requirements.txt is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-docs/dashboard.png}
python=${PYTHON:-python3}
venv=${TP_PICTURE_VENV:-${TMPDIR:-/tmp}/tp-picture-venv}
requirements=ci/picture-requirements.txt

stamp="$("$python" --version 2>&1) $(sha256sum "$requirements" | cut -d' ' -f1)"
if [[ ! -f "$venv/.tp-stamp" || "$(cat "$venv/.tp-stamp")" != "$stamp" ]]; then
    echo "dashboard-picture: making the virtualenv $venv" >&2
    rm -rf "$venv"
    "$python" -m venv "$venv"
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
        "$venv/bin/python" -m pip install --quiet --only-binary=:all: -r "$requirements"
    echo "$stamp" >"$venv/.tp-stamp"
fi

bash ci/prometheus-setup.sh >&2
TP_CHART_PYTHON="$(bash ci/chart-venv.sh)/bin/python"
export TP_CHART_PYTHON
data=$(mktemp --suffix=.json)
trap 'rm -f "$data"' EXIT
TP_DASHBOARD_DATA=$data cargo test --locked --test observability \
    prometheus::a_real_prometheus_scraping_a_sandbox_answers_every_panel_and_evaluates_every_alert \
    -- --exact
"$venv/bin/python" ci/draw_dashboard.py "$data" "$out"
echo "dashboard-picture: wrote $out"

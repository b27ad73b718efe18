#!/usr/bin/env bash
# Checks the Helm chart charts/tenant-placer with no helm binary and no cluster: helm lint --strict
# and helm template (Helm's own Go library, through helm-python-sdk) for several value sets, the
# rendered objects against what the chart promises, kubernetes-validate --strict on every built-in
# kind, and the chart's CRDs against the generated crds/. See ci/check_chart.py.
#
# Usage: bash ci/check-chart.sh
# The virtualenv lives in ${TP_CHART_VENV:-${TMPDIR:-/tmp}/tp-chart-venv} and is reused while
# ci/chart-requirements.txt and the Python version are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
venv=${TP_CHART_VENV:-${TMPDIR:-/tmp}/tp-chart-venv}
requirements=ci/chart-requirements.txt

if ! command -v "$python" >/dev/null 2>&1; then
    echo "check-chart: $python not found (Python >= 3.11 is needed; set PYTHON=...)" >&2
    exit 1
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "check-chart: $("$python" --version 2>&1) is too old: ci/check_chart.py needs Python >= 3.11 (tomllib)" >&2
    exit 1
fi

# The stamp names what the venv was made from; anything else (or a half-made venv) starts over.
stamp="$("$python" --version 2>&1) $(sha256sum "$requirements" | cut -d' ' -f1)"
if [[ -f "$venv/.tp-stamp" && "$(cat "$venv/.tp-stamp")" == "$stamp" ]] &&
    "$venv/bin/python" -c 'import helm_python, kubernetes_validate, yaml' >/dev/null 2>&1; then
    echo "check-chart: reusing the virtualenv $venv"
else
    echo "check-chart: making the virtualenv $venv"
    rm -rf "$venv"
    if ! "$python" -m venv "$venv"; then
        echo "check-chart: '$python -m venv' failed (on Debian: apt-get install python3-venv)" >&2
        exit 1
    fi
    if ! PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
        "$venv/bin/python" -m pip install --quiet --only-binary=:all: -r "$requirements"; then
        echo "check-chart: pip install -r $requirements failed" >&2
        exit 1
    fi
    echo "$stamp" >"$venv/.tp-stamp"
fi

exec "$venv/bin/python" ci/check_chart.py

#!/usr/bin/env bash
# Makes (or reuses) the virtualenv with the pinned packages of ci/chart-requirements.txt (Helm's
# own Go library through helm-python-sdk, kubernetes-validate, cel-python, PyYAML) and prints its
# path on stdout, its messages on stderr. Used by ci/check-chart.sh (the chart checks) and by
# ci/test.sh (tests/prometheus.rs renders the chart's PrometheusRule through it).
#
# Usage: venv=$(bash ci/chart-venv.sh)
# The virtualenv lives in ${TP_CHART_VENV:-${TMPDIR:-/tmp}/tp-chart-venv} and is reused while
# ci/chart-requirements.txt and the Python version are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
venv=${TP_CHART_VENV:-${TMPDIR:-/tmp}/tp-chart-venv}
requirements=ci/chart-requirements.txt

if ! command -v "$python" >/dev/null 2>&1; then
    echo "chart-venv: $python not found (Python >= 3.11 is needed; set PYTHON=...)" >&2
    exit 1
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "chart-venv: $("$python" --version 2>&1) is too old: ci/check_chart.py needs Python >= 3.11 (tomllib)" >&2
    exit 1
fi

# The stamp names what the venv was made from; anything else (or a half-made venv) starts over.
stamp="$("$python" --version 2>&1) $(sha256sum "$requirements" | cut -d' ' -f1)"
if [[ -f "$venv/.tp-stamp" && "$(cat "$venv/.tp-stamp")" == "$stamp" ]] &&
    "$venv/bin/python" -c 'import helm_python, kubernetes_validate, yaml' >/dev/null 2>&1; then
    echo "chart-venv: reusing the virtualenv $venv" >&2
else
    echo "chart-venv: making the virtualenv $venv" >&2
    rm -rf "$venv"
    if ! "$python" -m venv "$venv" >&2; then
        echo "chart-venv: '$python -m venv' failed (on Debian: apt-get install python3-venv)" >&2
        exit 1
    fi
    if ! PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
        "$venv/bin/python" -m pip install --quiet --only-binary=:all: -r "$requirements" >&2; then
        echo "chart-venv: pip install -r $requirements failed" >&2
        exit 1
    fi
    echo "$stamp" >"$venv/.tp-stamp"
fi
echo "$venv"

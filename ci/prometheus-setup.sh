#!/usr/bin/env bash
# Installs what the monitoring tests (tests/prometheus.rs) need: Debian's prometheus package,
# which brings `prometheus` (the scraping test starts one on loopback) and `promtool` (the alert
# unit tests and `promtool check rules`). Nothing is started: the package's service is left off
# (the test runs its own Prometheus with storage in a temporary folder). Idempotent: when both
# binaries already run it changes nothing and takes well under a second.
#
# Usage: bash ci/prometheus-setup.sh        (as root, or with sudo available)
set -euo pipefail

if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 &&
    version=$(prometheus --version 2>/dev/null | head -1); then
    echo "prometheus-setup: ${version} is already installed ($(command -v prometheus), $(command -v promtool))"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "prometheus-setup: no apt-get here; install Prometheus (prometheus and promtool on PATH) yourself" >&2
    exit 1
fi
sudo=()
if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "prometheus-setup: installing Prometheus needs root (or sudo)" >&2
        exit 1
    fi
    sudo=(sudo)
fi

echo "prometheus-setup: installing Debian's prometheus (apt-get)"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
# Recommends (node exporter and the like) are not needed: only the two binaries are used.
"${sudo[@]}" apt-get install -y -qq --no-install-recommends prometheus
echo "prometheus-setup: $(prometheus --version 2>/dev/null | head -1)"

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

# Recommends (node exporter and the like) are not needed: only the two binaries are used.
if ! bash "$(dirname "$0")/apt-install.sh" prometheus-setup prometheus; then
    echo "prometheus-setup: install Prometheus yourself (prometheus and promtool on PATH)" >&2
    exit 1
fi
echo "prometheus-setup: $(prometheus --version 2>/dev/null | head -1)"

#!/usr/bin/env bash
# The project's tests on a fresh machine with Rust and kubectl: installs what they need, then runs
# them. The sandbox test drives the real kubectl (checked here, not installable from these
# machines' registries); the browser test drives Debian's Chromium (installed when missing, by
# ci/browser-setup.sh). Extra arguments go to cargo test.
#
# Usage: bash ci/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v kubectl >/dev/null 2>&1; then
    echo "test: kubectl is not on PATH; tests/sandbox_kubectl.rs drives the real kubectl" >&2
    exit 1
fi
bash ci/browser-setup.sh
exec cargo test --workspace --locked "$@"

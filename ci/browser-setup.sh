#!/usr/bin/env bash
# Installs what the browser test (tests/page_browser.rs) needs: Debian's Chromium, which the test
# drives headless over the DevTools Protocol (no chromedriver, nothing from the network at test
# time). Idempotent: when `chromium --version` already works it changes nothing and takes well
# under a second.
#
# Usage: bash ci/browser-setup.sh        (as root, or with sudo available)
set -euo pipefail

if command -v chromium >/dev/null 2>&1 && version=$(chromium --version 2>/dev/null); then
    echo "browser-setup: ${version} is already installed ($(command -v chromium))"
    exit 0
fi

# The fonts are what the page's screenshots are rendered with; recommends are not needed headless.
if ! bash "$(dirname "$0")/apt-install.sh" browser-setup chromium fonts-dejavu-core fonts-liberation; then
    echo "browser-setup: install Chromium yourself and set TP_CHROMIUM to its binary" >&2
    exit 1
fi
echo "browser-setup: $(chromium --version 2>/dev/null)"

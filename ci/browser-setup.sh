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

if ! command -v apt-get >/dev/null 2>&1; then
    echo "browser-setup: no apt-get here; install Chromium yourself and set TP_CHROMIUM to its binary" >&2
    exit 1
fi
sudo=()
if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "browser-setup: installing Chromium needs root (or sudo)" >&2
        exit 1
    fi
    sudo=(sudo)
fi

echo "browser-setup: installing Debian's chromium (apt-get)"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
# The fonts are what the page's screenshots are rendered with; recommends are not needed headless.
"${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core fonts-liberation
echo "browser-setup: $(chromium --version 2>/dev/null)"

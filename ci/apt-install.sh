#!/usr/bin/env bash
# Installs Debian packages for the set-up scripts (ci/browser-setup.sh, ci/prometheus-setup.sh):
# apt-get update, then install without recommends, as root or through sudo. Fails, saying why,
# where there is no apt-get or no way to be root.
#
# Usage: bash ci/apt-install.sh WHO PACKAGE...     (WHO prefixes its messages)
set -euo pipefail
who=$1
shift

if ! command -v apt-get >/dev/null 2>&1; then
    echo "$who: no apt-get here to install $*" >&2
    exit 1
fi
sudo=()
if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "$who: installing $* needs root (or sudo)" >&2
        exit 1
    fi
    sudo=(sudo)
fi

echo "$who: installing Debian's $* (apt-get)"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@"

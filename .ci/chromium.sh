#!/usr/bin/env bash
# Headless Chromium for the inspector's browser tests, from the system's packages
# (never a browser downloaded by a test tool). Does nothing when it is installed.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "chromium is missing; install it with: sudo apt-get install -y chromium" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null

#!/usr/bin/env bash
# Install Debian's chromium (for the dashboard tests) if no chromium is on PATH.
# Prints the path of the browser. Safe to run again: does nothing when present.
set -euo pipefail

for exe in "${ORTBISECT_CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
    if [ -n "$exe" ] && [ -x "$exe" ]; then
        echo "$exe"
        exit 0
    fi
done

if ! command -v apt-get >/dev/null 2>&1; then
    echo "no chromium and no apt-get here: the dashboard browser tests will skip" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
        echo "no chromium and not root (no sudo): the dashboard browser tests will skip" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >&2
$sudo apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
for exe in /usr/bin/chromium /usr/bin/chromium-browser; do
    if [ -x "$exe" ]; then
        echo "$exe"
        exit 0
    fi
done
echo "chromium was installed but no executable was found" >&2
exit 1

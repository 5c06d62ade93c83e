#!/usr/bin/env bash
# Install Debian's OpenSSH server (for the ssh engine tests) if sshd is absent, without starting it: the tests
# start their own sshd on a loopback port and stop it by PID. Prints the path of sshd.
set -euo pipefail

SSHD=/usr/sbin/sshd
if [ -x "$SSHD" ] && command -v ssh >/dev/null 2>&1; then
    echo "$SSHD"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
    echo "no sshd, and no apt-get as root to install it: the ssh engine tests will skip" >&2
    exit 1
fi
# The package's maintainer script would start a system sshd on port 22; policy-rc.d exit 101 forbids it
# (only for this install, and only where no policy of the machine's own is in place).
policy=/usr/sbin/policy-rc.d
ours=""
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod 755 "$policy"
    ours=1
fi
trap 'if [ -n "$ours" ]; then rm -f "$policy"; fi' EXIT
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends openssh-server openssh-client >&2
[ -x "$SSHD" ] || { echo "openssh-server installed no $SSHD" >&2; exit 1; }
echo "$SSHD"

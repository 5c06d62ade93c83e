#!/usr/bin/env bash
# Start / stop a private Docker engine for the docker backend's CI jobs.
#
#   eval "$(.ci/docker-engine.sh start STATE_DIR)"   # prints: export DOCKER_HOST=unix://STATE_DIR/docker.sock
#   .ci/docker-engine.sh start STATE_DIR --name NAME  # a further engine beside the first (no bridge, no iptables)
#   .ci/docker-engine.sh stop STATE_DIR
#   .ci/docker-engine.sh binfmt                      # only (re)register aarch64 emulation
#
# `start` installs Debian's docker.io, debootstrap, qemu-user-static and
# binfmt-support with apt-get when they are missing, registers binfmt_misc for
# aarch64 (flag F, so arm64 containers and debootstrap --arch=arm64 work), then
# runs dockerd in the background with all its state under STATE_DIR and waits
# until it answers. `stop` kills exactly the PID in STATE_DIR/dockerd.pid.
#
# `--name NAME` starts a further engine on this host, labelled
# org.ortbisect.engine=NAME, with its own data root, exec root and socket
# under its STATE_DIR and without a bridge or iptables rules of its own (it
# would fight the first engine over docker0 and the NAT chains): probes run
# with no network anyway. Tests use it as a "remote" engine. Starting it
# deletes the host's docker0 all the same (moby's configureNetworking removes
# the default bridge interface when the bridge is "none"), so the first
# engine's builds and containers must not need a network either; none does.
#
# The aarch64 interpreter: Debian 12's qemu-user-static is QEMU 7.2, which
# segfaults importing onnxruntime >= 1.28. If a QEMU >= 8 static
# `qemu-aarch64` is available (ORTBISECT_QEMU_AARCH64, or
# ~/.cache/ortbisect/tools/bin/qemu-aarch64, or the test cache's tools/bin/qemu-aarch64)
# it is registered instead, directly through /proc/sys/fs/binfmt_misc/register.
#
# Everything except the final `export` line goes to stderr.
set -euo pipefail

log() { printf '[docker-engine] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (needs apt-get, dockerd, binfmt_misc)"

BINFMT_DIR=/proc/sys/fs/binfmt_misc
# aarch64 ELF magic/mask, as used by QEMU's own qemu-binfmt-conf.sh
AARCH64_MAGIC='\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
AARCH64_MASK='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'

ensure_packages() {
    local missing=()
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
    [ -x /usr/bin/qemu-aarch64-static ] || missing+=(qemu-user-static)
    command -v update-binfmts >/dev/null 2>&1 || missing+=(binfmt-support)
    if [ "${#missing[@]}" -eq 0 ]; then
        log "packages present: docker.io debootstrap qemu-user-static binfmt-support"
        return
    fi
    local t0=$SECONDS
    log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
    log "install took $((SECONDS - t0)) s"
}

find_qemu10() {
    local c v
    for c in "${ORTBISECT_QEMU_AARCH64:-}" \
             "${HOME:-/root}/.cache/ortbisect/tools/bin/qemu-aarch64" \
             "${ORTBISECT_TEST_CACHE:-${HOME:-/root}/.cache/ortbisect-tests}/tools/bin/qemu-aarch64"; do
        [ -n "$c" ] && [ -x "$c" ] || continue
        # "qemu-aarch64 version 10.0.2 (Debian ...)"
        v=$("$c" --version 2>/dev/null | sed -n 's/.*version \([0-9][0-9]*\)\..*/\1/p' | head -n1)
        if [ -n "$v" ] && [ "$v" -ge 8 ]; then
            readlink -f "$c"
            return 0
        fi
    done
    return 1
}

ensure_binfmt() {
    if [ ! -e "$BINFMT_DIR/register" ]; then
        log "mounting binfmt_misc"
        mount -t binfmt_misc binfmt_misc "$BINFMT_DIR"
    fi
    [ "$(cat "$BINFMT_DIR/status")" = enabled ] || echo 1 > "$BINFMT_DIR/status"

    local qemu10=""
    qemu10=$(find_qemu10) || qemu10=""
    if [ -n "$qemu10" ]; then
        # Already registered with this interpreter?
        if [ -e "$BINFMT_DIR/qemu-aarch64" ] && grep -qx "interpreter $qemu10" "$BINFMT_DIR/qemu-aarch64" \
           && grep -qx enabled "$BINFMT_DIR/qemu-aarch64"; then
            log "binfmt qemu-aarch64 -> $qemu10 (already registered)"
            return
        fi
        [ -e "$BINFMT_DIR/qemu-aarch64" ] && echo -1 > "$BINFMT_DIR/qemu-aarch64"
        # F: open the interpreter now (works inside containers/chroots),
        # C: credentials from the binary, O: pass an open fd.
        printf ':qemu-aarch64:M::%s:%s:%s:OCF' "$AARCH64_MAGIC" "$AARCH64_MASK" "$qemu10" \
            > "$BINFMT_DIR/register"
        log "binfmt qemu-aarch64 -> $qemu10 ($("$qemu10" --version | head -n1))"
        return
    fi
    if [ -e "$BINFMT_DIR/qemu-aarch64" ] && grep -qx enabled "$BINFMT_DIR/qemu-aarch64"; then
        log "binfmt qemu-aarch64 already enabled: $(grep ^interpreter "$BINFMT_DIR/qemu-aarch64")"
    else
        update-binfmts --enable qemu-aarch64 >&2 || update-binfmts --import qemu-aarch64 >&2
        log "binfmt qemu-aarch64 enabled (Debian qemu-user-static, QEMU 7.2: onnxruntime >= 1.28 will not import)"
    fi
    grep -q '^flags:.*F' "$BINFMT_DIR/qemu-aarch64" \
        || log "warning: qemu-aarch64 binfmt lacks flag F; arm64 containers will not find the interpreter"
}

engine_answers() {
    DOCKER_HOST="unix://$1/docker.sock" timeout 5 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

pid_is_dockerd() {
    local pid=$1
    [ -n "$pid" ] && [ -d "/proc/$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]
}

cmd_start() {
    local state=$1 name=${2:-}
    local extra=()
    if [ -n "$name" ]; then
        [[ "$name" =~ ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$ ]] || die "bad engine name: $name"
        extra=(--label "org.ortbisect.engine=$name" --bridge=none --iptables=false --ip6tables=false)
    fi
    mkdir -p "$state"
    state=$(cd "$state" && pwd -P)
    # unix socket paths are limited to 107 bytes (containerd's lives under exec-root)
    [ "${#state}" -le 60 ] || die "STATE_DIR path too long for unix sockets (${#state} > 60 chars): $state"

    local t0=$SECONDS
    ensure_packages
    ensure_binfmt

    local pidfile="$state/dockerd.pid"
    if [ -f "$pidfile" ] && pid_is_dockerd "$(cat "$pidfile")"; then
        if engine_answers "$state"; then
            log "dockerd already running (pid $(cat "$pidfile"))"
            echo "export DOCKER_HOST=unix://$state/docker.sock"
            return
        fi
        die "dockerd pid $(cat "$pidfile") is running but does not answer; run: $0 stop $state"
    fi
    rm -f "$pidfile" "$state/docker.sock"
    mkdir -p "$state/data" "$state/exec"

    local t1=$SECONDS
    local start_ns
    start_ns=$(date +%s%N)
    # setsid: the engine must not die with this script's session / CI step.
    setsid dockerd \
        -H "unix://$state/docker.sock" \
        --data-root "$state/data" \
        --exec-root "$state/exec" \
        --pidfile "$pidfile" \
        "${extra[@]}" \
        </dev/null >>"$state/dockerd.log" 2>&1 &
    local launched=$!

    local i
    for i in $(seq 1 600); do
        if engine_answers "$state"; then
            local ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
            log "dockerd up (pid $(cat "$pidfile" 2>/dev/null || echo "$launched")) after ${ms} ms; total start incl. install $((SECONDS - t0)) s"
            echo "export DOCKER_HOST=unix://$state/docker.sock"
            return
        fi
        if ! kill -0 "$launched" 2>/dev/null; then
            tail -n 30 "$state/dockerd.log" >&2 || true
            die "dockerd exited during startup (log: $state/dockerd.log)"
        fi
        sleep 0.1
    done
    tail -n 30 "$state/dockerd.log" >&2 || true
    die "dockerd did not answer within 60 s (log: $state/dockerd.log)"
}

cmd_stop() {
    local state=$1
    local pidfile="$state/dockerd.pid"
    if [ ! -f "$pidfile" ]; then
        log "no pidfile at $pidfile; nothing to stop"
        return
    fi
    local pid
    pid=$(cat "$pidfile")
    if ! pid_is_dockerd "$pid"; then
        log "pid $pid is not a running dockerd; removing stale pidfile"
        rm -f "$pidfile"
        return
    fi
    log "stopping dockerd pid $pid"
    kill -TERM "$pid"
    local i
    for i in $(seq 1 300); do
        pid_is_dockerd "$pid" || { log "dockerd stopped"; return; }
        sleep 0.1
    done
    log "dockerd pid $pid still alive after 30 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do
        pid_is_dockerd "$pid" || return 0
        sleep 0.1
    done
    die "could not stop dockerd pid $pid"
}

case "${1:-}" in
    start)
        if [ $# -eq 2 ]; then cmd_start "$2"
        elif [ $# -eq 4 ] && [ "$3" = --name ]; then cmd_start "$2" "$4"
        else die "usage: $0 start STATE_DIR [--name NAME]"; fi ;;
    stop)  [ $# -eq 2 ] || die "usage: $0 stop STATE_DIR";  cmd_stop "$2" ;;
    binfmt) ensure_packages; ensure_binfmt ;;
    *) die "usage: $0 start STATE_DIR [--name NAME]  |  $0 stop STATE_DIR  |  $0 binfmt" ;;
esac

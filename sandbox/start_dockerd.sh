#!/usr/bin/env bash
# Start a local Docker engine for the spade-ray sandbox. Idempotent: exits 0 at
# once when `docker info` already works. Otherwise (as root) installs Debian's
# docker.io if needed, starts dockerd detached from this shell, and waits for it.
#
# Environment (all optional):
#   SPADE_DOCKERD_LOG             log file          (default /var/log/spade-dockerd.log)
#   SPADE_DOCKERD_WAIT_S          seconds to wait    (default 60)
#   SPADE_DOCKER_STORAGE_DRIVER   force a driver, e.g. vfs (default: probe overlay2, else vfs)
set -euo pipefail
# dockerd, debootstrap, chroot live in sbin, which a non-login root PATH may lack.
export PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin

LOG=${SPADE_DOCKERD_LOG:-/var/log/spade-dockerd.log}
WAIT_S=${SPADE_DOCKERD_WAIT_S:-60}
DATA_ROOT=/var/lib/docker
DAEMON_JSON=/etc/docker/daemon.json
PIDFILE=/var/run/docker.pid

log() { echo "start_dockerd: $*" >&2; }
die() { echo "start_dockerd: ERROR: $*" >&2; exit 1; }

docker_ok() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }

# pid of a live dockerd recorded in the pid file, if any.
running_pid() {
    local pid
    [[ -r $PIDFILE ]] || return 1
    pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# Wait until `docker info` works; fail early if the given dockerd pid dies.
wait_ready() {
    local pid=$1 deadline=$((SECONDS + WAIT_S))
    while ((SECONDS < deadline)); do
        docker_ok && return 0
        if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
            return 1
        fi
        sleep 0.5
    done
    return 2
}

show_log_tail() {
    [[ -r $LOG ]] && { echo "---- last lines of $LOG ----" >&2; tail -n 25 "$LOG" >&2; echo "----" >&2; }
    return 0
}

# overlay2 needs a working overlay mount on the filesystem under $DATA_ROOT
# (fails e.g. on some nested/overlay-backed or exotic filesystems). Try a real
# mount + copy-up there rather than trusting /proc/filesystems.
overlay_works() {
    local d rc=1
    mkdir -p "$DATA_ROOT"
    d=$(mktemp -d "$DATA_ROOT/.spade-overlay-probe.XXXXXX") || return 1
    mkdir "$d/l" "$d/u" "$d/w" "$d/m"
    echo probe >"$d/l/f"
    if mount -t overlay overlay -o "lowerdir=$d/l,upperdir=$d/u,workdir=$d/w" "$d/m" 2>/dev/null; then
        # copy-up and whiteout both must work for image layers.
        if echo x >>"$d/m/f" 2>/dev/null && rm "$d/m/f" 2>/dev/null && [[ ! -e $d/m/f ]]; then
            rc=0
        fi
        umount "$d/m" 2>/dev/null || umount -l "$d/m" 2>/dev/null || true
    fi
    rm -rf "$d"
    return $rc
}

# ---------------------------------------------------------------------------
if docker_ok; then
    log "docker engine already reachable"
    exit 0
fi

[[ $(id -u) -eq 0 ]] || die "docker is not reachable and starting dockerd needs root (run as root or via sudo)"

# Serialise concurrent callers so only one dockerd is ever started.
exec 9>/var/lock/spade-start-dockerd.lock
flock -w $((WAIT_S + 120)) 9 || die "timed out waiting for another start_dockerd.sh to finish"
docker_ok && { log "docker engine became reachable"; exit 0; }

if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || die "dockerd is missing and apt-get is not available to install docker.io"
    log "installing docker.io with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2 || die "apt-get update failed"
    apt-get install -y -q --no-install-recommends docker.io >&2 || die "apt-get install docker.io failed"
    command -v dockerd >/dev/null 2>&1 || die "docker.io installed but dockerd is still not on PATH"
    # Package scripts may already have started it (systemd hosts).
    docker_ok && { log "docker engine started by the package"; exit 0; }
fi

# A dockerd may already be booting (e.g. started moments ago): wait for it
# instead of starting a second one on the same data root.
if pid=$(running_pid); then
    log "dockerd (pid $pid) already running; waiting for it"
    if wait_ready "$pid"; then exit 0; fi
    show_log_tail
    die "dockerd pid $pid is running but 'docker info' did not succeed within ${WAIT_S}s"
fi

# Storage driver: honour daemon.json / the env override; otherwise overlay2
# when a real overlay mount works here, else vfs (slow and big, but works anywhere).
drivers=()
if [[ -r $DAEMON_JSON ]] && grep -q '"storage-driver"' "$DAEMON_JSON"; then
    drivers=("")   # a --storage-driver flag would conflict with daemon.json
elif [[ -n ${SPADE_DOCKER_STORAGE_DRIVER:-} ]]; then
    drivers=("$SPADE_DOCKER_STORAGE_DRIVER")
elif overlay_works; then
    drivers=(overlay2 vfs)   # vfs as fallback if dockerd still rejects overlay2
else
    log "overlay mount does not work under $DATA_ROOT; using vfs storage driver"
    drivers=(vfs)
fi

mkdir -p "$(dirname "$LOG")"
for drv in "${drivers[@]}"; do
    args=()
    [[ -n $drv ]] && args+=("--storage-driver=$drv")
    log "starting dockerd ${args[*]:-} (log: $LOG)"
    echo "==== $(date -Is) start_dockerd.sh: dockerd ${args[*]:-}" >>"$LOG"
    # setsid+nohup: own session, immune to SIGHUP, so it outlives this script
    # and the caller's terminal/CI step.
    setsid nohup dockerd "${args[@]}" </dev/null >>"$LOG" 2>&1 &
    pid=$!
    if wait_ready "$pid"; then
        log "docker engine ready (dockerd pid $pid, storage driver: $(docker info --format '{{.Driver}}' 2>/dev/null || echo '?'))"
        exit 0
    else
        rc=$?
    fi
    if ((rc == 2)); then
        show_log_tail
        die "dockerd (pid $pid) did not answer 'docker info' within ${WAIT_S}s; it is left running, see $LOG"
    fi
    log "dockerd exited during startup${drv:+ with storage driver $drv}"
done
show_log_tail
die "could not start dockerd; see $LOG"

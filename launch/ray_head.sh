#!/usr/bin/env bash
# A local Ray head for trying Ray Jobs and cluster sweeps on one machine:
#     launch/ray_head.sh start [DIR] [-- RAY START FLAGS...]
#     launch/ray_head.sh status [DIR]
#     launch/ray_head.sh stop [DIR]
# DIR (default /tmp/spade-ray-head) holds the head's Ray temp dir, its log and its PID file.
# Knobs: DASHBOARD_PORT (8265), DASHBOARD_HOST (127.0.0.1; 0.0.0.0 to take jobs from other
# machines), GCS_PORT (6379), NUM_CPUS (all cores), HEAD_START_TIMEOUT_S (120).
#
# Why each choice:
# - The head runs from this checkout's .venv with .venv/bin first on PATH: a job's entrypoint
#   (`spade-ray run ...`) is a shell command in the head's environment, so that is where it finds
#   `spade-ray` and every dependency. The job's working_dir (the uploaded checkout, .venv left
#   out) comes first on the job's PYTHONPATH, so the code that runs is the code submitted.
# - Token auth (RAY_AUTH_MODE=token): the job server refuses clients without the token, and
#   Ray 2.60's job clients send it only with RAY_AUTH_MODE=token. The token comes from
#   RAY_AUTH_TOKEN, or the file RAY_AUTH_TOKEN_PATH (created here when missing), or
#   ~/.ray/auth_token (`ray get-auth-token --generate` creates it; a plain `ray start` does not).
#   Jobs inherit the head's environment, so their `ray.init` authenticates with the same token.
# - `ray start --block` under setsid: the head's processes form one process group led by the
#   PID in DIR/head.pid, so `stop` ends this head and nothing else. Never `ray stop`: it kills
#   every Ray process on the machine, other people's clusters included.
# - DIR is mode 0755: the sandbox user must reach a job's working_dir, which Ray unpacks inside
#   its temp dir (a mktemp -d directory, mode 0700, is not reachable).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV_BIN="$REPO/.venv/bin"

log() { echo "ray_head: $*" >&2; }
die() { log "$*"; exit 1; }

cmd="${1:-}"
[[ -n "$cmd" ]] && shift
dir="/tmp/spade-ray-head"
if [[ $# -gt 0 && "$1" != "--" ]]; then
    dir="$1"
    shift
fi
[[ "${1:-}" == "--" ]] && shift
pid_file="$dir/head.pid"

head_pid() {
    [[ -f "$pid_file" ]] || return 1
    local pid
    pid="$(cat "$pid_file")"
    kill -0 "$pid" 2>/dev/null || return 1
    echo "$pid"
}

ensure_token() {
    if [[ -n "${RAY_AUTH_TOKEN:-}" ]]; then
        return
    fi
    if [[ -n "${RAY_AUTH_TOKEN_PATH:-}" ]]; then
        if [[ ! -s "$RAY_AUTH_TOKEN_PATH" ]]; then
            # Ray's own generator writes ~/.ray/auth_token only; same format here (token_hex(32))
            (umask 077 && "$VENV_BIN/python" -c \
                'import secrets; print(secrets.token_hex(32), end="")' >"$RAY_AUTH_TOKEN_PATH")
            log "wrote a new token to $RAY_AUTH_TOKEN_PATH"
        fi
        return
    fi
    "$VENV_BIN/ray" get-auth-token --generate >/dev/null
}

start() {
    [[ -x "$VENV_BIN/ray" ]] || die "no $VENV_BIN/ray: run \`make install\` first"
    if pid="$(head_pid)"; then
        die "a head from $dir is already running (PID $pid); stop it with: $0 stop $dir"
    fi
    mkdir -p "$dir"
    chmod 0755 "$dir"
    export PATH="$VENV_BIN:$PATH" RAY_AUTH_MODE=token
    ensure_token
    local port="${DASHBOARD_PORT:-8265}" num_cpus="${NUM_CPUS:-$(nproc)}"
    setsid "$VENV_BIN/ray" start --head --block --disable-usage-stats \
        --temp-dir "$dir/ray" --port "${GCS_PORT:-6379}" --num-cpus "$num_cpus" \
        --dashboard-host "${DASHBOARD_HOST:-127.0.0.1}" --dashboard-port "$port" "$@" \
        >"$dir/head.log" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$pid_file"
    # Up once the job server answers (401 without a token still means up).
    local deadline=$((SECONDS + ${HEAD_START_TIMEOUT_S:-120}))
    until "$VENV_BIN/python" - "$port" <<'EOF' 2>/dev/null
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/api/version", timeout=2)
except urllib.error.HTTPError:
    pass
EOF
    do
        if ! kill -0 "$pid" 2>/dev/null || ((SECONDS > deadline)); then
            tail -n 30 "$dir/head.log" >&2 || true
            stop_head
            die "the head did not come up (log: $dir/head.log)"
        fi
        sleep 1
    done
    log "head up (PID $pid, $num_cpus CPUs, temp dir $dir/ray, log $dir/head.log)"
    echo "export RAY_AUTH_MODE=token RAY_API_SERVER_ADDRESS=http://127.0.0.1:$port"
}

# The head's live processes: its process group (ray start, GCS, raylet, dashboard, agents) and
# the raylet's workers, each of which leads a session of its own. Zombies do not count.
head_processes() {
    ps -eo pid=,ppid=,pgid=,stat= | awk -v g="$1" '
        { pid[NR] = $1; ppid[NR] = $2; pgid[NR] = $3; stat[NR] = $4
          if ($3 == g) in_group[$1] = 1 }
        END { for (i = 1; i <= NR; i++)
                  if ((pgid[i] == g || ppid[i] in in_group) && stat[i] !~ /^Z/) print pid[i] }'
}

stop_head() {
    local pid pids
    pid="$(cat "$pid_file" 2>/dev/null)" || { log "no head in $dir"; return 0; }
    # SIGTERM to `ray start --block` alone: it shuts its children down in order, the raylet
    # its workers (~3 s here; a TERM to every process at once took over 15 s).
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq "${HEAD_STOP_TIMEOUT_S:-20}"); do
        pids="$(head_processes "$pid")"
        [[ -z "$pids" ]] && break
        sleep 1
    done
    if [[ -n "$pids" ]]; then
        # shellcheck disable=SC2086  # one PID a word
        kill -KILL $pids 2>/dev/null || true
    fi
    rm -f "$pid_file"
    log "stopped the head of $dir (process group $pid)"
}

case "$cmd" in
    start) start "$@" ;;
    stop) stop_head ;;
    status)
        if pid="$(head_pid)"; then
            echo "running: PID $pid, temp dir $dir/ray"
        else
            echo "not running ($dir)"
            exit 1
        fi
        ;;
    *) die "usage: $0 start|status|stop [DIR] [-- RAY START FLAGS...]" ;;
esac

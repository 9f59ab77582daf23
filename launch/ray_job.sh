#!/usr/bin/env bash
# Ray Jobs for this checkout: `ray job` with the address, the token and the runtime_env set.
#     launch/ray_job.sh submit [RAY JOB SUBMIT FLAGS...] -- spade-ray run OVERRIDES...
#     launch/ray_job.sh logs [-f] JOB_ID | status JOB_ID | stop JOB_ID | list
# The cluster: RAY_API_SERVER_ADDRESS (default http://127.0.0.1:8265, launch/ray_head.sh's head).
# RAY_AUTH_MODE defaults to token (Ray 2.60's job server needs it); the token comes from
# RAY_AUTH_TOKEN, the file RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token: for a remote cluster copy
# its head's token into one of them.
#
# `submit` uploads the checkout as the job's working_dir, less launch/runtime_env.yaml's
# excludes (.venv, runs/, .git, caches, model files); the job runs its entrypoint in the head's
# environment (see launch/ray_head.sh). Without --no-wait it follows the job's logs to the end
# and exits 1 when the job fails. Give the run an absolute run_root on storage the head can
# write: a relative one lands inside the uploaded copy in Ray's temp dir, which Ray may delete.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RAY="$REPO/.venv/bin/ray"
if [[ ! -x "$RAY" ]]; then
    RAY="$(command -v ray)" || { echo "ray_job: no ray: run \`make install\`" >&2; exit 1; }
fi

export RAY_AUTH_MODE="${RAY_AUTH_MODE:-token}"
export RAY_API_SERVER_ADDRESS="${RAY_API_SERVER_ADDRESS:-http://127.0.0.1:8265}"

cmd="${1:-}"
[[ -n "$cmd" ]] && shift
case "$cmd" in
    submit)
        exec "$RAY" job submit --working-dir "$REPO" \
            --runtime-env "$REPO/launch/runtime_env.yaml" "$@" ;;
    logs | status | stop | list | delete)
        exec "$RAY" job "$cmd" "$@" ;;
    *)
        echo "usage: $0 submit|logs|status|stop|list|delete ... (see the head of this file)" >&2
        exit 2 ;;
esac

# shellcheck shell=sh
# /etc/profile.d/spade-ray.sh in the image (k8s/Dockerfile). KubeRay starts `ray start` through
# `bash -lc`, and Debian's /etc/profile resets PATH before it reads this directory: put the
# environment the pod asks for (SPADE_VENV: .venv, or .venv-vllm on the GPU pods) first again,
# so that `ray`, `python` and `spade-ray` come from it.
if [ -n "${SPADE_VENV:-}" ] && [ -d "$SPADE_VENV/bin" ]; then
    PATH="$SPADE_VENV/bin:$PATH"
    export PATH
fi

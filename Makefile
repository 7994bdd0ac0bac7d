# ddplua: `make run` trains the default example with 2 processes,
# `make test` runs every test (C, Lua specs, multi-process, ASan/UBSan),
# `make bench` prints the benchmark table beside the PyTorch peers.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
MAKEFLAGS  += --no-print-directory

.PHONY: all deps deps-test build asan run test test-c test-spec test-mp test-asan bench install format clean

all: build

deps:
	@sh tools/deps.sh run

deps-test:
	@sh tools/deps.sh test

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DDDPLUA_SANITIZE=ON -DDDPLUA_CUDA=OFF $(CMAKE_ARGS) >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)

# Makes `lua5.4 -e 'require "ddplua"'` and `ddplua` work from anywhere
# (symlinks into /usr/local; skipped without root).
install: build
	@sh tools/install_links.sh $(BUILD)

run: build install
	@./$(BUILD)/bin/ddplua --nproc 2 examples/fashion_mnist/train.lua

test: deps-test build install asan
	@$(MAKE) --no-print-directory test-c test-spec test-mp test-asan

test-c:
	@echo "== C unit tests (ctest)"
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-spec:
	@echo "== Lua specs (busted)"
	@busted --cpath="./$(BUILD)/lib/?.so" tests/spec

test-mp:
	@echo "== multi-process tests"
	@DDPLUA_BIN=./$(BUILD)/bin/ddplua busted --cpath="./$(BUILD)/lib/?.so" tests/mp

test-asan:
	@echo "== C tests and Lua specs under ASan/UBSan"
	@cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS)
	@LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  DDPLUA_ASAN=1 busted --cpath="./$(ASAN_BUILD)/lib/?.so" tests/spec

bench: deps-test build
	@./$(BUILD)/bin/ddplua bench/run.lua

# Reformats the C sources with the project's .clang-format.
format:
	@clang-format -i $$(git ls-files 'src/*.c' 'src/*.h' 'tests/c/*.c' 'tests/c/*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)

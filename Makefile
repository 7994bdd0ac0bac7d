# ddplua: `make run` trains the default example with 2 processes,
# `make test` runs every test (C, Lua specs, multi-process, ASan/UBSan),
# `make bench` prints the benchmark table beside the PyTorch peers.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
MAKEFLAGS  += --no-print-directory

.PHONY: all deps deps-test build asan run test test-c test-spec test-mp test-asan test-spec-and-asan bench install format \
	format-check clean

all: build

deps:
	@sh tools/deps.sh run

deps-test:
	@sh tools/deps.sh test

# build only: `make run`, `make test` and `make bench` install what is missing first
build:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

asan:
	@cmake -S . -B $(ASAN_BUILD) -DDDPLUA_SANITIZE=ON -DDDPLUA_CUDA=OFF $(CMAKE_ARGS) >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)

# Makes `lua5.4 -e 'require "ddplua"'` and `ddplua` work from anywhere
# (symlinks into /usr/local; skipped without root).
install: build
	@sh tools/install_links.sh $(BUILD)

run: deps
	@$(MAKE) build install
	@./$(BUILD)/bin/ddplua --nproc 2 examples/fashion_mnist/train.lua

test: deps-test
	@$(MAKE) build install asan
	@$(MAKE) format-check test-c test-spec-and-asan test-mp

# The Lua specs and the ASan/UBSan run side by side (each mostly one core:
# the two took 233 s and 435 s one after the other); the ASan run's output
# is printed after it, and either failing fails the target. The
# multi-process tests run alone after them (their ranks take both cores).
test-spec-and-asan:
	@log=$(ASAN_BUILD)/test-asan.log; rm -f $$log.rc; \
	 ( $(MAKE) test-asan > $$log 2>&1; echo $$? > $$log.rc ) & \
	 $(MAKE) test-spec; spec=$$?; wait; cat $$log; \
	 asan=$$(cat $$log.rc 2>/dev/null || echo 1); \
	 if [ $$spec -ne 0 ] || [ $$asan -ne 0 ]; then echo "== failed: Lua specs $$spec, ASan/UBSan run $$asan"; exit 1; fi

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

# `make bench only=train,ops` runs those groups (bench/run.lua lists them);
# BENCH_QUICK=1 in the environment is a short check of every row.
bench: deps-test
	@$(MAKE) build
	@./$(BUILD)/bin/ddplua bench/run.lua $(if $(only),only=$(only)) $(BENCH_ARGS)

# The C and CUDA sources under the project's .clang-format.
FORMAT_FILES = $$(git ls-files 'src/*.c' 'src/*.h' 'src/*.cu' 'src/*.cuh' 'tests/c/*.c' 'tests/c/*.h' 'bench/*.c')

# Reformats them in place.
format:
	@clang-format -i $(FORMAT_FILES)

# Fails, naming the files, when one differs from its formatted self.
format-check:
	@echo "== format check (clang-format)"
	@clang-format --dry-run -Werror $(FORMAT_FILES)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)

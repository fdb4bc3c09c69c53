# baton: one top-level make. `make` builds bin/baton; `make test` runs the
# suite against a real etcd that the harness starts and stops. Every target
# that builds calls `deps` first, so a fresh Debian machine needs nothing else.

CC       ?= cc
BUILD    ?= build
BIN      ?= bin/baton
# libcurl is compiled against (its header) but not linked: http_curl.c
# loads it with dlopen on the first https:// request.
PKGS     := luajit libuv libcurl libcjson
PKGS_LINK := luajit libuv libcjson
OPT      ?= -O2
WARN     := -Wall -Wextra -Wstrict-prototypes -Wshadow -Wno-unused-parameter \
            -Werror=implicit-function-declaration -Werror=return-type
SAN      ?=
CFLAGS   ?=
CFLAGS   += -std=gnu11 -g $(OPT) $(WARN) $(SAN) -fno-strict-aliasing -MMD -MP \
            -Iruntime -DBATON_VERSION='"$(VERSION)"' -DBATON_LUADIR='"$(CURDIR)/lua"'
LDFLAGS  += $(SAN)
VERSION  := $(shell cat VERSION 2>/dev/null || echo 0.1.0)
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS_LINK) 2>/dev/null) -lm -lpthread -ldl

SRCS     := $(wildcard runtime/*.c)
OBJS     := $(SRCS:runtime/%.c=$(BUILD)/obj/%.o)
LIBOBJS  := $(filter-out $(BUILD)/obj/main.o,$(OBJS))
CTESTS   := $(patsubst tests/c/%.c,$(BUILD)/tests/%.t,$(wildcard tests/c/*.c))
PROVE    ?= prove
PROVEFLAGS ?=

.PHONY: all deps test check asan valgrind bench fuzz demo clean ctests chaos chaos-proxy

all: deps $(BIN)

deps:
	@sh tools/deps.sh

$(BIN): $(OBJS)
	@mkdir -p $(dir $@)
	@echo "  LD    $@"
	@$(CC) $(LDFLAGS) -o $@ $(OBJS) $(PKG_LIBS)

$(BUILD)/obj/%.o: runtime/%.c
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	@$(CC) $(CFLAGS) $(PKG_CFLAGS) -c -o $@ $<

# C unit tests: tests/c/NAME.c -> $(BUILD)/tests/NAME.t, linked with the
# engine (everything but main.o).
$(BUILD)/tests/%.t: tests/c/%.c $(LIBOBJS)
	@mkdir -p $(dir $@)
	@echo "  TEST  $@"
	@$(CC) $(CFLAGS) $(PKG_CFLAGS) -Itests/c -o $@ $< $(LIBOBJS) $(LDFLAGS) $(PKG_LIBS)

ctests: $(CTESTS)

# The suite: prove runs tests/c (compiled), tests/lua (bin/baton eval) and
# tests/cluster (shell), with one etcd started for the run.
test: all ctests chaos-proxy
	@BATON_BIN=$(CURDIR)/$(BIN) BATON_CTESTS=$(CURDIR)/$(BUILD)/tests \
	  tests/harness/run-tests $(PROVEFLAGS)

check: test

asan:
	@$(MAKE) --no-print-directory BUILD=build/asan BIN=build/asan/baton \
	  OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" test

valgrind: all ctests
	@BATON_BIN=$(CURDIR)/$(BIN) BATON_CTESTS=$(CURDIR)/$(BUILD)/tests \
	  BATON_VALGRIND=1 tests/harness/run-tests $(PROVEFLAGS)

bench: all
	@BATON_BIN=$(CURDIR)/$(BIN) tests/harness/run-bench

clean:
	rm -rf build bin

-include $(OBJS:.o=.d) $(CTESTS:.t=.d)

# --- cron ---
# make fuzz: the cron parser's libFuzzer target (clang -fsanitize=fuzzer with
# ASan + UBSan), run for FUZZ_TIME seconds (default 600) on a corpus in
# build/fuzz/corpus seeded from fuzz/corpus. Crash inputs are copied to
# fuzz/regressions/, which tests/c/test-cron-fuzz.c replays on `make test`.
FUZZ_TIME ?= 600
FUZZ_CC   ?= clang
FUZZ_SRCS := fuzz/cron_fuzz.c runtime/cron.c runtime/tz.c runtime/err.c

build/fuzz/cron_fuzz: $(FUZZ_SRCS) runtime/cron.h runtime/tz.h runtime/err.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined \
	  -fno-sanitize-recover=undefined -Iruntime \
	  $$(pkg-config --cflags libuv) -o $@ $(FUZZ_SRCS) \
	  $$(pkg-config --libs libuv)

fuzz: deps build/fuzz/cron_fuzz
	@mkdir -p build/fuzz/corpus build/fuzz/crashes
	@cp fuzz/corpus/* build/fuzz/corpus/
	@rc=0; build/fuzz/cron_fuzz -max_total_time=$(FUZZ_TIME) -timeout=10 \
	  -rss_limit_mb=2048 -print_final_stats=1 \
	  -artifact_prefix=build/fuzz/crashes/ build/fuzz/corpus || rc=$$?; \
	for f in build/fuzz/crashes/*; do \
	  [ -f "$$f" ] && cp "$$f" fuzz/regressions/; done; exit $$rc
# --- end cron ---

# --- demo ---
# make demo: a throwaway etcd and three nodes on this machine, the example
# jobs, and a narrated tour (runs, hot reload, failover, a queue) until
# Ctrl-C; DEMO_DURATION=S ends it after S seconds. See tools/demo.sh.
demo: all
	@BATON_BIN=$(CURDIR)/$(BIN) tools/demo.sh
# --- end demo ---

# --- chaos ---
# make chaos: baton's nemesis suite (tests/chaos/README.md): a 3-member etcd,
# CHAOS_NODES nodes (default 4), each behind its own loopback proxy and under
# libfaketime, jobs of every kind, and a seeded schedule of faults for
# CHAOS_DURATION seconds (default 300); then tests/chaos/check reports every
# broken guarantee. CHAOS_SEED replays a schedule. A 60-second run is part of
# `make test` (tests/cluster/chaos.sh).
CHAOS_PROXY := build/chaos/proxy
CHAOS_DURATION ?= 300
CHAOS_SEED ?=
CHAOS_NODES ?= 4

chaos-proxy: $(CHAOS_PROXY)

$(CHAOS_PROXY): tests/chaos/proxy.c
	@mkdir -p $(dir $@)
	@echo "  CC    $@"
	@$(CC) -std=gnu11 -g $(OPT) $(WARN) $(SAN) $$(pkg-config --cflags libuv) -o $@ $< \
	  $(LDFLAGS) $$(pkg-config --libs libuv)

chaos: all $(CHAOS_PROXY)
	@BATON_BIN=$(CURDIR)/$(BIN) CHAOS_PROXY=$(CURDIR)/$(CHAOS_PROXY) \
	  CHAOS_DURATION=$(CHAOS_DURATION) CHAOS_SEED=$(CHAOS_SEED) CHAOS_NODES=$(CHAOS_NODES) \
	  tests/chaos/run
# --- end chaos ---

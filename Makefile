# baton: one top-level make. `make` builds bin/baton; `make test` runs the
# suite against a real etcd that the harness starts and stops. Every target
# that builds installs the Debian packages it needs first (tools/deps.sh),
# so a fresh Debian machine needs nothing else.

CC       ?= cc
BUILD    ?= build
BIN      ?= bin/baton
# libcurl, libmicrohttpd and OpenSSL are compiled against (their headers)
# but not linked: the HTTP client (runtime/core/http.c) loads libcurl with
# dlopen on a process's first request, the HTTP server (runtime/core/httpd.c)
# libmicrohttpd on its first listen, the gRPC client (runtime/core/grpc.c)
# libssl and libcrypto on its first https connection, so that processes
# that do none of these (baton lock, job ls, most eval scripts) do not pay
# for mapping them and the libraries behind them (~1 ms of start-up each,
# ~1.5 ms for OpenSSL, more for libcurl).
PKGS     := luajit libuv libcurl libcjson libmicrohttpd libsodium libssl libcrypto libnghttp2 libseccomp \
            libprotobuf-c
PKGS_LINK := luajit libuv libcjson libsodium libnghttp2 libseccomp libprotobuf-c
OPT      ?= -O2
WARN     := -Wall -Wextra -Wstrict-prototypes -Wshadow -Wno-unused-parameter \
            -Werror=implicit-function-declaration -Werror=return-type
SAN      ?=
CFLAGS   ?=
CFLAGS   += -std=gnu11 -g $(OPT) $(WARN) $(SAN) -fno-strict-aliasing -MMD -MP \
            -Iruntime -Iruntime/core -Iruntime/lua -I$(BUILD)/gen -DBATON_VERSION='"$(VERSION)"' -DBATON_LUADIR='"$(CURDIR)/lua"'
LDFLAGS  += $(SAN)
VERSION  := $(shell cat VERSION 2>/dev/null || echo 0.1.0)
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS_LINK) 2>/dev/null) -lm -lpthread -ldl

# runtime/core: the engine (no lua.h); runtime/lua: the Lua runtime and one
# binding file per module; runtime/: the program (main, the C subcommands).
SRCS     := $(wildcard runtime/*.c runtime/core/*.c runtime/lua/*.c)
# proto/*.proto (etcd's messages) compiled by protoc-c into $(BUILD)/gen,
# never committed: the generated code carries protobuf-c's version guards.
PROTOS   := $(wildcard proto/*.proto)
GEN      := $(BUILD)/gen
GEN_HS   := $(PROTOS:proto/%.proto=$(GEN)/%.pb-c.h)
GEN_OBJS := $(PROTOS:proto/%.proto=$(BUILD)/obj/gen/%.pb-c.o)
OBJS     := $(SRCS:runtime/%.c=$(BUILD)/obj/%.o) $(GEN_OBJS)
LIBOBJS  := $(filter-out $(BUILD)/obj/main.o,$(OBJS))
CTESTS   := $(patsubst tests/c/%.c,$(BUILD)/tests/%.t,$(wildcard tests/c/*.c))
PROVE    ?= prove
PROVEFLAGS ?=

.PHONY: all deps packages test check asan valgrind bench fuzz demo clean ctests chaos chaos-proxy

all: packages $(BIN) lua.pack

# Packages (tools/deps.sh SET): `make` installs what building bin/baton
# needs (SET build: compilers, -dev packages); `make demo` adds etcd
# (demo); `make deps`, `make test` and the targets that run tests or
# benches add what those use (test: chromium, prometheus, wrk, faketime,
# node and npm, then npm ci in the tests' directories). A target's set is a
# target-specific variable, which the `all` it builds first inherits, so
# one run of tools/deps.sh installs it all.
DEPS_SET = build
deps test asan valgrind bench chaos: DEPS_SET = test
demo: DEPS_SET = demo

deps: packages

packages:
	@sh tools/deps.sh $(DEPS_SET)

$(BIN): $(OBJS)
	@mkdir -p $(dir $@)
	@echo "  LD    $@"
	@$(CC) $(LDFLAGS) -o $@ $(OBJS) $(PKG_LIBS)

# The Lua library's pack (runtime/core/lib.h): the snapshot of lua/ that a
# process maps instead of reading ~60 files at start-up, written again when
# a file of lua/ changes or one is added or removed (its directory
# changes). A pack that does not match lua/ is never used, so a run
# without make after an edit reads lua/ itself, only slower.
LUA_DIRS := $(shell find lua -type d 2>/dev/null)
LUA_FILES := $(shell find lua -type f ! -name '.*' 2>/dev/null)
lua.pack: $(BIN) $(LUA_DIRS) $(LUA_FILES)
	@echo "  PACK  $@"
	@$(BIN) _pack-lib lua $(CURDIR)/lua $@

# Every object waits for the generated headers (order-only: afterwards
# -MMD's dependencies say which ones really include them).
$(BUILD)/obj/%.o: runtime/%.c | $(GEN_HS)
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	@$(CC) $(CFLAGS) $(PKG_CFLAGS) -c -o $@ $<

.SECONDARY: $(GEN_HS:.h=.c) $(GEN_HS)
$(GEN)/%.pb-c.c $(GEN)/%.pb-c.h: proto/%.proto
	@mkdir -p $(GEN)
	@echo "  PROTO $<"
	@protoc-c --proto_path=proto --c_out=$(GEN) $<

$(BUILD)/obj/gen/%.pb-c.o: $(GEN)/%.pb-c.c $(GEN)/%.pb-c.h
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	@$(CC) $(CFLAGS) $(PKG_CFLAGS) -c -o $@ $<

# C unit tests: tests/c/NAME.c -> $(BUILD)/tests/NAME.t, linked with the
# engine (everything but main.o).
$(BUILD)/tests/%.t: tests/c/%.c $(LIBOBJS) | $(GEN_HS)
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
	rm -rf build bin lua.pack

-include $(OBJS:.o=.d) $(CTESTS:.t=.d)

# --- fuzz ---
# make fuzz: every libFuzzer target (clang -fsanitize=fuzzer with ASan +
# UBSan), one after another, FUZZ_TIME seconds each (default 600):
#   cron  fuzz/cron_fuzz.c  the cron parser and next-instant search
#   etcd  fuzz/etcd_fuzz.c  etcd's answers above the transport: gRPC statuses,
#                           Watch and LeaseKeepAlive responses (protobuf and
#                           JSON), int64 fields, base64, endpoint lists
#   json  fuzz/json_fuzz.c  NUL bytes in JSON text (runtime/core/jsonnul.c): the
#                           passes baton.json.decode makes before cJSON
#   grpc  fuzz/grpc_fuzz.c  gRPC messages cut out of DATA chunks in any split,
#                           grpc-message percent-decoding (runtime/core/grpc_frame.c)
#   etcdpb fuzz/etcdpb_fuzz.c  a gRPC stream's bytes in arbitrary splits through
#                           the deframer (runtime/core/grpc_frame.c), each
#                           message decoded as every etcd message into the
#                           gateway's JSON and encoded back (etcdpb.c)
# make fuzz-cron, fuzz-etcd, fuzz-json, fuzz-grpc, fuzz-etcdpb run one. Each runs on its own corpus
# build/fuzz/<target>/corpus (kept, not committed), seeded from
# fuzz/corpus/<target>/; crash, leak and timeout inputs are copied to
# fuzz/regressions/<target>/, which tests/c/test-<target>-fuzz.c replays
# with the seeds on `make test` (commit them with the fix).
FUZZ_TIME    ?= 600
FUZZ_CC      ?= clang
FUZZ_TARGETS := cron etcd json grpc etcdpb
FUZZ_CFLAGS  := -std=gnu11 -g -O1 $(WARN) -fsanitize=fuzzer,address,undefined \
                -fno-sanitize-recover=undefined -Iruntime/core -I$(GEN)
FUZZ_SRCS_cron := runtime/core/cron.c runtime/core/tz.c runtime/core/err.c
FUZZ_SRCS_json := runtime/core/jsonnul.c runtime/core/err.c
FUZZ_SRCS_grpc := runtime/core/grpc_frame.c runtime/core/err.c
FUZZ_SRCS_etcdpb := runtime/core/grpc_frame.c runtime/core/etcdpb.c runtime/core/b64.c \
                    runtime/core/err.c $(GEN)/etcd.pb-c.c runtime/core/etcd_pure.c \
                    runtime/core/http_url.c
FUZZ_SRCS_etcd := runtime/core/etcd_pure.c runtime/core/b64.c runtime/core/err.c \
                  runtime/core/http_url.c

.PHONY: $(addprefix fuzz-,$(FUZZ_TARGETS))

define fuzz_target
build/fuzz/$(1)_fuzz: fuzz/$(1)_fuzz.c $$(FUZZ_SRCS_$(1)) $$(wildcard runtime/core/*.h)
	@mkdir -p $$(dir $$@)
	@echo "  FUZZ  $$@"
	@$$(FUZZ_CC) $$(FUZZ_CFLAGS) $$(PKG_CFLAGS) -o $$@ $$< $$(FUZZ_SRCS_$(1)) \
	  $$(shell pkg-config --libs libuv libcjson libprotobuf-c) -lm -ldl -lpthread

fuzz-$(1): packages build/fuzz/$(1)_fuzz
	@mkdir -p build/fuzz/$(1)/corpus build/fuzz/$(1)/crashes fuzz/regressions/$(1)
	@cp fuzz/corpus/$(1)/* build/fuzz/$(1)/corpus/
	@rc=0; build/fuzz/$(1)_fuzz -max_total_time=$$(FUZZ_TIME) -timeout=10 \
	  -rss_limit_mb=2048 -print_final_stats=1 \
	  -artifact_prefix=build/fuzz/$(1)/crashes/ build/fuzz/$(1)/corpus || rc=$$$$?; \
	for f in build/fuzz/$(1)/crashes/*; do \
	  [ -f "$$$$f" ] && cp "$$$$f" fuzz/regressions/$(1)/; done; exit $$$$rc
endef
$(foreach t,$(FUZZ_TARGETS),$(eval $(call fuzz_target,$(t))))

# One target at a time, whatever -j says; all run even if one fails.
fuzz:
	@rc=0; for t in $(FUZZ_TARGETS); do \
	  $(MAKE) --no-print-directory fuzz-$$t || rc=1; done; exit $$rc
# --- end fuzz ---

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

# --- install ---
# make install [PREFIX=/usr/local] [DESTDIR=]: the program, the Lua library
# (LUADIR), the shipped jobs and policies, the man page, bash completion,
# the docs (DOCDIR: README, CHANGELOG, LICENSE, NOTICE, docs/*.md), a
# systemd unit with its sysusers.d user, and the environment file
# SYSCONFDIR/default/baton (see tools/install.sh); make uninstall removes
# exactly what it wrote. Everything goes under DESTDIR/PREFIX: SYSCONFDIR
# is PREFIX/etc unless set, so `make install PREFIX=$HOME/opt/baton` needs no
# root, and /etc/default/baton is written only when asked for with
# SYSCONFDIR=/etc (as the Debian package has it). The unit reads the
# environment file from SYSCONFDIR, wherever that is. The
# installed program is bin/baton relinked with LUADIR compiled in (and
# VERSION, which make install VERSION=... overrides): only the sources that
# mention BATON_LUADIR or BATON_VERSION are compiled again, in
# INSTALL_BUILD. It finds its library relative to itself first
# (PREFIX/bin/../share/baton/lua), so a DESTDIR tree runs where it is.
PREFIX      ?= /usr/local
DESTDIR     ?=
BINDIR      ?= $(PREFIX)/bin
DATADIR     ?= $(PREFIX)/share
PKGDATADIR  ?= $(DATADIR)/baton
LUADIR      ?= $(PKGDATADIR)/lua
MANDIR      ?= $(DATADIR)/man
DOCDIR      ?= $(DATADIR)/doc/baton
BASHCOMPDIR ?= $(DATADIR)/bash-completion/completions
UNITDIR     ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
SYSCONFDIR  ?= $(PREFIX)/etc
INSTALL_BUILD ?= $(BUILD)/install

STAMPED      := $(shell grep -l 'BATON_LUADIR\|BATON_VERSION' $(SRCS))
INSTALL_OBJS := $(STAMPED:runtime/%.c=$(INSTALL_BUILD)/obj/%.o)
INSTALL_BIN  := $(INSTALL_BUILD)/baton
INSTALL_DEFS := -DBATON_VERSION='"$(VERSION)"' -DBATON_LUADIR='"$(LUADIR)"'

.PHONY: install uninstall deb FORCE
FORCE:

# Rewritten when VERSION or LUADIR change, so the stamped objects follow.
$(INSTALL_BUILD)/defs: FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' "$(VERSION) $(LUADIR)" | cmp -s - $@ || printf '%s\n' "$(VERSION) $(LUADIR)" >$@

$(INSTALL_BUILD)/obj/%.o: runtime/%.c $(INSTALL_BUILD)/defs | $(GEN_HS)
	@mkdir -p $(dir $@)
	@echo "  CC    $@"
	@$(CC) $(filter-out -DBATON_%,$(CFLAGS)) $(INSTALL_DEFS) $(PKG_CFLAGS) -c -o $@ $<

$(INSTALL_BIN): $(filter-out $(STAMPED:runtime/%.c=$(BUILD)/obj/%.o),$(OBJS)) $(INSTALL_OBJS)
	@echo "  LD    $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(PKG_LIBS)

INSTALL_VARS = DESTDIR="$(DESTDIR)" BIN="$(INSTALL_BIN)" BINDIR="$(BINDIR)" \
  PKGDATADIR="$(PKGDATADIR)" LUADIR="$(LUADIR)" MANDIR="$(MANDIR)" DOCDIR="$(DOCDIR)" \
  BASHCOMPDIR="$(BASHCOMPDIR)" UNITDIR="$(UNITDIR)" SYSUSERSDIR="$(SYSUSERSDIR)" \
  SYSCONFDIR="$(SYSCONFDIR)" SYSCONFDIR_ORIGIN="$(origin SYSCONFDIR)"

install: $(INSTALL_BIN)
	@$(INSTALL_VARS) sh tools/install.sh install

uninstall:
	@$(INSTALL_VARS) sh tools/install.sh uninstall

# make deb: a Debian package of `make install PREFIX=/usr`, built with
# dpkg-deb, its dependencies found by dpkg-shlibdeps (tools/deb.sh), in
# DEBDIR.
DEBDIR ?= $(BUILD)/deb

deb:
	@rm -rf $(DEBDIR)/pkg
	@$(MAKE) --no-print-directory install PREFIX=/usr SYSCONFDIR=/etc \
	  DESTDIR=$(abspath $(DEBDIR))/pkg/debian/baton INSTALL_BUILD=$(INSTALL_BUILD)/deb
	@VERSION="$(VERSION)" DEBDIR="$(abspath $(DEBDIR))" sh tools/deb.sh

-include $(INSTALL_OBJS:.o=.d)
# --- end install ---

# --- dist ---
# make dist: a source tarball of the committed tree at HEAD in DISTDIR,
# baton-VERSION.tar.gz when HEAD is the release tag vVERSION, else
# baton-VERSION-gCOMMIT.tar.gz (a snapshot); a release tag that does not
# match VERSION is refused (tools/dist.sh, README.md "Licence and releases").
DISTDIR ?= $(BUILD)/dist

.PHONY: dist
dist:
	@DISTDIR="$(DISTDIR)" sh tools/dist.sh
# --- end dist ---

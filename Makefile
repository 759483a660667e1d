# cairn's one entry point. CI runs `make test` through .ci/run.
# Tools are pinned and installed into .bin/ on first use; nothing else is
# needed on a fresh machine of the project's kind (Go from /usr/local/go).

SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/.bin
export PATH := $(BIN):$(PATH)
export CAIRN_VERSITYGW := $(BIN)/versitygw
# Tests talk to loopback only: never let the AWS SDK probe EC2 instance metadata.
export AWS_EC2_METADATA_DISABLED := true

VERSITYGW_VERSION := v1.8.0
STATICCHECK_VERSION := v0.8.2

# Packages and fuzz targets. FUZZTIME is per target.
FUZZTIME ?= 5s
FUZZ_TARGETS := \
	./chunkstore:FuzzDecodeTree \
	./chunkstore:FuzzDecodeChunkList \
	./chunkstore:FuzzDecodeSnapshot \
	./chunkstore:FuzzDecodeIndex \
	./chunkstore:FuzzDecodePackTrailer \
	./chunkstore:FuzzDecodeConfig \
	./chunkstore:FuzzDecodeRef \
	./chunkstore/cdc:FuzzChunker \
	./journal:FuzzDecodeInode \
	./journal:FuzzDecodeMeta \
	./journal/internal/metalog:FuzzDecodeRecord

.PHONY: all build test unit race fuzz bench fsbench s3bench runbench torture lint tools debs demo clean

all: build

build:
	$(GO) build -o bin/cairn ./cmd/cairn

## test: everything CI checks: lint, unit and integration tests (S3 against a
## real versitygw on loopback), the race detector, and a short fuzz of every decoder.
test: tools lint unit race fuzz

unit: tools
	$(GO) test -count=1 -timeout 30m ./...

race: tools
	$(GO) test -count=1 -race -short ./chunkstore/...
	$(GO) test -count=1 -race ./journal/internal/metalog/
	$(GO) test -count=1 -race -run 'TestSnapshot_|TestHandle_|TestXattr_' ./journal/

# No minimisation in these short runs: minimising a new input can outlast
# -fuzztime, which the fuzzer then reports as a failure ("context deadline
# exceeded").
fuzz:
	@set -e; log=$$(mktemp -t cairn-fuzz.XXXXXX); trap 'rm -f "$$log"' EXIT; \
	for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzz $$pkg $$fn ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 0 $$pkg > "$$log" 2>&1 || \
		{ grep -q 'context deadline exceeded' "$$log" && ! grep -q 'Failing input' "$$log" && \
		  echo "  (the fuzzer's own deadline flake on a busy machine, no failing input: once more)" && \
		  $(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 0 $$pkg > "$$log" 2>&1; } || \
		{ cat "$$log"; exit 1; }; \
	done

## bench: the performance figures, as Go benchmarks (MB/s via b.SetBytes).
bench: tools
	$(GO) test -run '^$$' -bench . -benchtime 2x ./chunkstore/cdc/ | grep -E '^(Benchmark|ok|PASS)' || true
	$(GO) test -run '^$$' -bench 'ChunkHash|Ingest|IndexMemory|DecodeTree' -benchtime 3x ./chunkstore/
	$(GO) test -run '^$$' -bench 'Diff100k|Log10k' -benchtime 5x ./chunkstore/
	$(GO) test -run '^$$' -bench 'Create|Lookup|Unlink' -benchtime 20000x ./journal/
	$(GO) test -run '^$$' -bench 'SnapshotSmallChange|Rollback' -benchtime 50x ./journal/
	$(GO) test -run '^$$' -bench 'Fork' -benchtime 20x ./journal/
	$(GO) test -run '^$$' -bench 'ColdWalk' -benchtime 5x ./journal/
	$(GO) test -run '^$$' -bench 'Memory100k' -benchtime 1x ./journal/
	$(GO) test -run '^$$' -bench 'CreateOpenRelease' -benchtime 5000x ./journal/
	$(GO) test -run '^$$' -bench 'Start' -benchtime 20x ./sandbox/
	$(GO) test -run '^$$' -bench 'Syscall' ./sandbox/seccomp/
	$(GO) test -run '^$$' -bench 'Connect' ./netpolicy/cgroupbpf/
	$(GO) test -run '^$$' -bench 'Forwarder' ./netpolicy/
	$(MAKE) --no-print-directory runbench
	$(MAKE) --no-print-directory fsbench
	$(MAKE) --no-print-directory s3bench

## torture: the history torture test at 1000 cycles (make test runs 100), and
## the multi-machine torture test at 2000 steps x 3 machines, local and S3
## (make test runs 50). MULTI_SEED replays another seed.
MULTI_SEED ?= 1
torture: build tools
	$(GO) test ./integration -run TestHistory_Torture -count=1 -timeout 60m -history.torture.cycles=1000
	set -o pipefail; $(GO) test ./integration -run TestHistory_MultiMachine -count=1 -timeout 90m -v -history.multi.steps=2000 -history.multi.seed=$(MULTI_SEED) | grep -v '^=== RUN'
	@echo "(KNOWN LIMIT lines above, if any, count daemons that died of Badger's SIGBUS on a full disk: README, durability contract)"

## runbench: cairn run -- true end to end, daemon up, next to plain true.
runbench: build
	$(GO) run ./internal/runbench -cairn bin/cairn

## s3bench: resume a 10k-file source tree from S3 (versitygw on loopback) on an empty cache.
s3bench: build tools
	$(GO) run ./internal/s3bench -cairn bin/cairn -versitygw $(BIN)/versitygw

## fsbench: ext4, libfuse's passthrough_hp (plain and over FUSE io_uring, built
## once from ../shared/peers into ~/.cache/cairn-peers) and cairn, side by side on
## one scratch ext4, with FUSE request counts and server CPU per request (root,
## /dev/fuse). 3 rounds here (about 13 minutes); the full run is 5 or more:
## FSBENCH_FLAGS='-rounds 5', or e.g. FSBENCH_FLAGS='-only tar-x,npm-ci -targets
## ext4,passthrough_hp,cairn,loopback'.
FSBENCH_FLAGS ?= -rounds 3
fsbench: build tools
	@php=$$(internal/fsbench/libfuse.sh) && \
	$(GO) run ./internal/fsbench -cairn bin/cairn -passthrough-hp "$$php" -json bench-fs.json $(FSBENCH_FLAGS)

lint: tools
	@out=$$(gofmt -l $$(git ls-files '*.go') $$(git ls-files -o --exclude-standard '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/staticcheck ./...

tools: $(BIN)/.versitygw-$(VERSITYGW_VERSION) $(BIN)/.staticcheck-$(STATICCHECK_VERSION) debs

# Programs the integration tests drive through the mount, setpriv (tests
# that drop capabilities), mkfs.ext4 and losetup for the benchmarks' scratch
# filesystem, and the python3 and perl that sandbox and egress tests run
# inside the sandbox, on its default PATH (so the system's, not a user's
# pyenv) (PACKAGE:COMMAND); installed only when missing.
DEBS := git:git sqlite3:sqlite3 tar:tar diffutils:diff e2fsprogs:mkfs.ext4 python3:/usr/bin/python3 perl:/usr/bin/perl util-linux:setpriv mount:losetup
debs:
	@missing=""; for pc in $(DEBS); do command -v $${pc#*:} >/dev/null || missing="$$missing $${pc%%:*}"; done; \
	if [ -n "$$missing" ]; then echo "apt-get install$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi

$(BIN)/.versitygw-$(VERSITYGW_VERSION):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)
	@touch $@

$(BIN)/.staticcheck-$(STATICCHECK_VERSION):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@touch $@

clean:
	rm -rf bin

## demo: the main job on the embedded default (a local store, zero configuration):
## init, mount, write, snapshot, unmount, mount again and on a "second machine",
## and find the files and their history back.
demo: build
	@set -e; home=$$(mktemp -d -t cairn-demo.XXXXXX); mnt=$$home/mnt; mkdir -p $$mnt; \
	export CAIRN_HOME=$$home/state; c=bin/cairn; \
	trap '$$c unmount demo >/dev/null 2>&1 || true; CAIRN_HOME=$$home/other $$c unmount demo >/dev/null 2>&1 || true; rm -rf $$home' EXIT; \
	echo "== cairn init (zero configuration: a local store in $$CAIRN_HOME)"; $$c init; \
	echo "== cairn mount demo $$mnt"; $$c mount demo $$mnt; \
	echo "== write files, as an agent would"; \
	mkdir -p $$mnt/src && printf 'package main\n\nfunc main() {}\n' > $$mnt/src/main.go && echo "# demo" > $$mnt/README.md && ln -s src/main.go $$mnt/entry && chmod 0600 $$mnt/README.md; \
	ls -la $$mnt; \
	echo "== cairn snapshot demo -m 'turn 1'"; $$c snapshot demo -m "turn 1" --label turn=1; \
	echo "more" >> $$mnt/README.md; \
	echo "== cairn status"; $$c status; \
	echo "== cairn unmount demo (flushes; the change since the snapshot stays in the journal)"; $$c unmount demo; \
	echo "== cairn mount demo again: everything is back"; $$c mount demo $$mnt; ls -la $$mnt; cat $$mnt/README.md; \
	$$c snapshot demo -m "turn 2" >/dev/null; $$c unmount demo; \
	echo "== on a second machine (a fresh state dir, same store): the head snapshot, same inode numbers"; \
	CAIRN_HOME=$$home/other CAIRN_STORE=$$home/state/store $$c mount demo $$mnt; stat -c '%i %A %n' $$mnt/README.md $$mnt/src/main.go; cat $$mnt/README.md; \
	echo "written on the second machine" > $$mnt/second.txt; CAIRN_HOME=$$home/other CAIRN_STORE=$$home/state/store $$c snapshot demo -m "turn 3, second machine" >/dev/null; \
	CAIRN_HOME=$$home/other $$c unmount demo; \
	echo "== back on the first machine: it picks up the second machine's turn (one history)"; \
	$$c mount demo $$mnt; cat $$mnt/second.txt; $$c unmount demo; $$c log demo; \
	echo "== and turn 1, as a fork: cairn mount --from demo@1 demo-turn1"; \
	$$c mount --from demo@1 demo-turn1 $$mnt; cat $$mnt/README.md; $$c unmount demo-turn1; \
	echo "== demo done"

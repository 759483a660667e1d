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
	./journal:FuzzDecodeMeta

.PHONY: all build test unit race fuzz bench lint tools demo clean

all: build

build:
	$(GO) build -o bin/cairn ./cmd/cairn

## test: everything CI checks: lint, unit and integration tests (S3 against a
## real versitygw on loopback), the race detector, and a short fuzz of every decoder.
test: tools lint unit race fuzz

unit: tools
	$(GO) test -count=1 ./...

race: tools
	$(GO) test -count=1 -race -short ./chunkstore/...

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzz $$pkg $$fn ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $$pkg > /tmp/cairn-fuzz.log 2>&1 || { cat /tmp/cairn-fuzz.log; exit 1; }; \
	done

## bench: the performance figures, as Go benchmarks (MB/s via b.SetBytes).
bench: tools
	$(GO) test -run '^$$' -bench . -benchtime 2x ./chunkstore/cdc/ | grep -E '^(Benchmark|ok|PASS)' || true
	$(GO) test -run '^$$' -bench 'ChunkHash|Ingest|IndexMemory|DecodeTree' -benchtime 3x ./chunkstore/
	$(GO) test -run '^$$' -bench 'Create|Lookup|Unlink' -benchtime 20000x ./journal/
	$(GO) test -run '^$$' -bench 'SnapshotSmallChange|Rollback' -benchtime 50x ./journal/
	$(GO) test -run '^$$' -bench 'Memory100k' -benchtime 1x ./journal/

lint: tools
	@out=$$(gofmt -l $$(git ls-files '*.go') $$(git ls-files -o --exclude-standard '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/staticcheck ./...

tools: $(BIN)/.versitygw-$(VERSITYGW_VERSION) $(BIN)/.staticcheck-$(STATICCHECK_VERSION)

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

## demo: the main job on the embedded default (a local store, zero configuration).
demo: build
	@set -e; home=$$(mktemp -d /tmp/cairn-demo.XXXXXX); \
	echo "== cairn init (zero configuration; CAIRN_HOME=$$home)"; \
	CAIRN_HOME=$$home bin/cairn init; \
	echo "== the store it created"; find $$home/store -maxdepth 2 | sort; \
	echo "== cairn init again: refused"; CAIRN_HOME=$$home bin/cairn init || echo "(exit code $$?)"; \
	rm -rf $$home

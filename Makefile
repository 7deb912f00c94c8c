# chstorm: make demo | make test | make bench
SHELL := /bin/bash
CARGO ?= cargo
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: all deps build release test demo bench clean

all: release

deps:
	@scripts/install-deps

build: deps
	$(CARGO) build --workspace

release: deps
	$(CARGO) build --release -p chstorm

## Every test, against real ClickHouse servers that the tests start and stop themselves.
test: deps
	$(CARGO) test --workspace --no-fail-fast

## The main job: a local ClickHouse, small datasets, the storm and shopee suites (quick), one report
## in ./chstorm-demo/report.html. DEMO_FLAGS=--keep leaves the server running.
demo: release
	target/release/chstorm demo $(DEMO_FLAGS)

## chstorm against wrk and clickhouse-benchmark, in one run; ratios printed, JSON in bench-results/.
bench: release
	$(CARGO) build --release -p chstorm --example ping_server
	python3 scripts/bench_peers.py --out bench-results

clean:
	$(CARGO) clean
	rm -rf chstorm-demo bench-results

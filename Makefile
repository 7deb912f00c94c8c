# chstorm: make demo | make test | make bench
SHELL := /bin/bash
CARGO ?= cargo
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: all deps build release release-pgo demo-build test lint demo bench profile clean

all: release

deps:
	@scripts/install-deps

build: deps
	$(CARGO) build --workspace

release: deps
	$(CARGO) build --release -p chstorm

## A profile-guided release build for a gateway (scripts/build_pgo.py): target/pgo/release/chstorm,
## trained on the gateway's hot path against a local server, laid out again by BOLT, then checked
## against the server differentially. About three release builds' time.
release-pgo: deps
	@EXTRA_PKGS=bolt scripts/install-deps
	python3 scripts/build_pgo.py

## Every test, against real ClickHouse servers that the tests start and stop themselves; the lint
## gates first (a formatting or clippy finding fails the run, as any test does).
test: deps lint
	$(CARGO) test --workspace --no-fail-fast

## The lint gates alone: rustfmt (rustfmt.toml) and clippy with warnings as errors.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## The demo's build: target/demo/chstorm ([profile.demo] in Cargo.toml: release's optimisation with
## thin LTO and 16 codegen units, no debug info), for the demo and for trying chstorm out. A
## gateway to deploy is built with `make release` or `make release-pgo`; `make bench` measures those.
## It installs only what the demo runs (scripts/install-deps --demo: no test clients, no lint
## components, no benchmark tools).
demo-build:
	@scripts/install-deps --demo
	$(CARGO) build --profile demo -p chstorm

## The main job: a local ClickHouse, small datasets, the storm and shopee suites (quick), one report
## in ./chstorm-demo/report.html. DEMO_FLAGS=--keep leaves the server running.
demo: demo-build
	target/demo/chstorm demo $(DEMO_FLAGS)

## Every benchmark, figures printed and written as JSON in bench-results/ (docs/PERFORMANCE.md):
##   peers.json     chstorm vs wrk and clickhouse-benchmark; 10,000 connections on one thread
##   gateway.json   gateway cost on SELECT 1; routed vs Distributed point lookups on a 2x2 cluster
##   gateway_cache.json  hot-key point lookups on a 2x2 cluster without a cache, with merging alone, with a 1 s cache
##   gateway_cpu.json  the gateway's CPU per proxied SELECT 1 (wrk), its QPS / direct beside HAProxy, nginx and the floor relays, 10,000 idle connections; its profile-guided build (release-pgo) beside it
##   gateway_instructions.json, gateway_instructions_native.json  user-space instructions per proxied SELECT 1 (callgrind), the gateway and its profile-guided build beside HAProxy
##   gateway_syscalls.json  system calls and epoll events per proxied SELECT 1 (strace), the gateway and its profile-guided build beside HAProxy
##   gateway_sched.json  who wakes and who preempts the server's threads per query under 256 clients (perf sched events), behind the gateway and HAProxy
##   server_request_shape.json, server_request_shape_haproxy.json  the server's CPU and context switches per SELECT 1 sent plain and in the shape the gateway sends it (Authorization, max_threads, query_id), straight at it and through HAProxy
##   failover.json  gateway P99.9/max with a replica hung 3 s and across a rolling restart, vs steady
##   threads.json   the thread budget vs static max_threads (the total_max_threads table)
##   colocate.json  an online ClickHouse beside offline CPU burners, per isolation mechanism
##   compare.json   compare's defaults against a server held to 10 % less CPU (a cgroup quota), and an A/A beside it, 20 seeds
bench: release release-pgo
	$(CARGO) build --release -p chstorm --example ping_server
	$(CARGO) build --release -p chstorm-gateway --example floor_relay
	python3 scripts/bench_peers.py --out bench-results
	python3 scripts/bench_gateway.py --out bench-results
	python3 scripts/bench_gateway_cache.py --out bench-results
	python3 scripts/bench_gateway_cpu.py --pgo target/pgo/release/chstorm --cap 8 --out bench-results
	EXTRA_PKGS="valgrind strace linux-perf" bash scripts/install-deps
	python3 scripts/bench_gateway_instructions.py --b target/pgo/release/chstorm --out bench-results
	python3 scripts/bench_gateway_instructions.py --native --b target/pgo/release/chstorm --out bench-results
	python3 scripts/bench_gateway_syscalls.py --b target/pgo/release/chstorm --out bench-results
	python3 scripts/bench_gateway_sched.py --gateway target/pgo/release/chstorm --out bench-results
	python3 scripts/bench_server_request_shape.py --out bench-results
	python3 scripts/bench_server_request_shape.py --via-haproxy --out bench-results
	python3 scripts/bench_failover.py --out bench-results
	if [ -f scripts/bench_threads.py ]; then python3 scripts/bench_threads.py --out bench-results; fi
	if [ -f scripts/bench_colocate.sh ]; then bash scripts/bench_colocate.sh; fi
	python3 scripts/bench_compare.py --out bench-results

## A CPU flamegraph of the gateway proxying SELECT 1 (perf + inferno): bench-results/gateway-cpu.svg
profile: release
	bash scripts/profile_gateway.sh bench-results/gateway-cpu.svg

clean:
	$(CARGO) clean
	rm -rf chstorm-demo bench-results

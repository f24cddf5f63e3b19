# The README's commands. Meson builds everything; this file only names the steps.
.PHONY: all build test test-ha demo demo-ha bench asan tsan valgrind fuzz chaos clean

all: build

build:
	@scripts/deps
	@[ -f build/build.ninja ] || meson setup build
	@ninja -C build

# Most tests wait on the server (leases, timeouts, lock waits) far more than they compute: twice
# as many at once as there are cores, unless PGCOORD_TEST_JOBS says otherwise. Every test polls
# for its states with bounds that hold under that load.
test:
	@PGCOORD_TEST_JOBS=$${PGCOORD_TEST_JOBS:-$$(( $$(nproc) * 2 ))} scripts/run-tests build

# The HA suite on Patroni clusters of its own (scripts/pg-ha); make test leaves it out.
test-ha:
	@scripts/test-ha build

# The C tests and the whole-process tests named for asan in tests/instrumented.list, as many at
# once as make test runs (ASan slows a process about twice; the tests still mostly wait).
asan:
	@PGCOORD_TEST_JOBS=$${PGCOORD_TEST_JOBS:-$$(( $$(nproc) * 2 ))} MESON_TEST_ARGS="$${MESON_TEST_ARGS:---suite unit --suite pg --suite asan}" \
		scripts/run-tests build-asan -Db_sanitize=address,undefined -Db_lundef=false \
		-Dc_args=-fno-sanitize-recover=all -Dc_link_args=-fno-sanitize-recover=all

# The C tests and the whole-process tests named for tsan in tests/instrumented.list.
tsan:
	@scripts/tsan

demo:
	@scripts/demo

# pgcoord across a switchover of a Patroni cluster on loopback.
demo-ha:
	@scripts/demo-ha

bench:
	@scripts/bench

# The whole-process tests named for valgrind in tests/instrumented.list.
valgrind:
	@scripts/valgrind

fuzz:
	@scripts/fuzz $(FUZZ_SECONDS)

clean:
	rm -rf build build-asan build-tsan build-fuzz build-release build*.log

chaos:
	@scripts/deps && ([ -f build/build.ninja ] || meson setup build) && ninja -C build >/dev/null
	@if command -v patroni >/dev/null && command -v etcd >/dev/null; then \
		tests/chaos/chaos.sh long queue locks elect failover-sync failover-async; \
	else tests/chaos/chaos.sh long; fi

# pgcoord's queue beside graphile-worker and pg-boss (needs Node.js 20+ and npm).
.PHONY: bench-peers
bench-peers: build
	@bench/peers/run

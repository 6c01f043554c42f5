#!/usr/bin/env bash
# `make bench`: builds the binaries once, runs Stormgate's benchmark scenarios side by side
# (direct to the provider, HAProxy in TCP mode, Stormgate) in one run, and regenerates
# docs/benchmarks.md and docs/img/*.svg from what it measured.
#
#   bash bench/run.sh                          the full run (about 13 minutes on 2 cores)
#   bash bench/run.sh --quick                  every scenario at about a tenth of its size
#   bash bench/run.sh --scenarios idle,storm   a subset (see: bench/out/bin/suite run -h)
#   BENCH_BASE_REF=4fa09f0 make bench          also measure the sidecar at that commit (forward, triple-forward)
#
# Needs root for the accept-storm scenario (it creates a network namespace) and for installing
# HAProxy with apt-get when it is missing. Logs, per-run JSON and results.json go to bench/out
# (BENCH_OUT overrides); `bench/out/bin/suite render` rewrites the doc from results.json.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${BENCH_OUT:-$ROOT/bench/out}
BIN=$OUT/bin
mkdir -p "$BIN"

if ! command -v haproxy >/dev/null 2>&1; then
  echo "bench: installing haproxy (Debian package)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null
fi
if ! command -v gcc >/dev/null 2>&1; then
  echo "bench: installing gcc (Debian package) for the floor programs in bench/floor"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null
fi
if ! command -v ip >/dev/null 2>&1; then
  echo "bench: installing iproute2 (Debian package)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null
fi

echo "bench: building sidecar, stormbench, suite, the dubbo-go provider and consumer and the floor programs into $BIN"
go build -o "$BIN/sidecar" ./cmd/sidecar
go build -o "$BIN/stormbench" ./cmd/stormbench
go build -o "$BIN/suite" ./bench/suite
(cd interop && go build -o "$BIN/dgprovider" ./cmd/dgprovider && go build -o "$BIN/dgconsumer" ./cmd/dgconsumer)
# BENCH_BASE_REF=<commit>: also build the sidecar at that commit, which the forward scenario then
# measures in the same alternating rounds as this tree's (what a change costs the common case).
rm -f "$BIN/sidecar-base" "$BIN/sidecar-base.ref"
if [ -n "${BENCH_BASE_REF:-}" ]; then
  base_src=$(mktemp -d)
  git archive "$BENCH_BASE_REF" | tar -x -C "$base_src"
  (cd "$base_src" && go build -o "$BIN/sidecar-base" ./cmd/sidecar)
  git rev-parse --short "$BENCH_BASE_REF" >"$BIN/sidecar-base.ref"
  rm -rf "$base_src"
fi
# The floors: what a bare epoll loop in C spends (frame pointers kept so perf can walk their stacks).
for f in hbfloor fwdfloor; do
  gcc -O2 -fno-omit-frame-pointer -Wall -Wextra -Werror -o "$BIN/$f" "bench/floor/$f.c"
done
# ... and what a responder and a forwarder on netpoll's connections spend, set up as Stormgate sets
# netpoll up.
for f in npfloor npfwd; do
  go build -o "$BIN/$f" "./bench/floor/$f"
done

# Every process may hold up to its hard fd limit (the load tool and the proxies need ~10,000+).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# The whole run is bounded: SIGINT after 45 minutes (a run took 20-22 before the Triple scenarios, which
# took 8 on their own; the throughput ladders climb
# higher on a faster day), after which the suite kills its children, removes its network namespace and
# keeps the partial results.json; SIGKILL a minute later.
# The doc names the command that produced it: `make bench`, or this script with its arguments.
CMD="make bench"
if [ $# -gt 0 ]; then CMD="bash bench/run.sh $*"; fi
timeout --signal=INT --kill-after=60s 45m \
  "$BIN/suite" run --bin "$BIN" --out "$OUT" --doc docs/benchmarks.md --img docs/img --command "$CMD" "$@"

#!/usr/bin/env bash
# `make soak`: the long integrity runs. Builds sidecar, stormbench and the suite into bench/out/bin,
# then runs `suite soak` twice, with Dubbo consumers and then with Triple (h2c) ones (SOAK_PROTOCOLS
# picks; the Triple one: the Triple echo provider, which reads normally, and `stormbench load
# --protocol triple`, no one-way calls, PINGs as heartbeats; its own section of the doc). Each: the echo provider (killed and restarted every 60 s, the kills alternating
# between SO_LINGER 0 resets and closes as at a process's death; reading slowly at random), `sidecar run`, and 10,000 consumers in worker processes sending unique checked bodies
# for 10 minutes. It fails (exit 1) when any request got a body that was not its own, no answer or
# two, when the provider saw a malformed frame, a repeated upstream id or a request twice, or when
# the sidecar's fds, goroutines or heap at the end differ by more than 5% from after warm-up.
#
#   bash bench/soak.sh                     the published runs (about 22 minutes); rewrite the soak
#                                          sections of docs/benchmarks.md
#   bash bench/soak.sh --duration 60s --conns 1000 --restart-every 20s --warmup 25s
#                                          a short run by hand (no doc unless you add --doc FILE)
#   bench/out/bin/suite soak -h            every knob
#
#   SOAK_PROTOCOLS=triple bash bench/soak.sh --duration 90s --conns 1000 --restart-every 30s --warmup 35s
#                                          a short Triple soak alone
#
# Results: bench/out/soak/soak.json (bench/out/soak-triple/ for Triple), one log per process in logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${SOAK_OUT:-$ROOT/bench/out/soak}
BIN=${BENCH_BIN:-$ROOT/bench/out/bin}
mkdir -p "$BIN" "$OUT"

echo "soak: building sidecar, stormbench and suite into $BIN"
go build -o "$BIN/sidecar" ./cmd/sidecar
go build -o "$BIN/stormbench" ./cmd/stormbench
go build -o "$BIN/suite" ./bench/suite

# The sidecar holds one fd per consumer; each load worker up to 5,000 (limit 20,000 per process).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# SOAK_PROTOCOLS: the soaks to run, one after the other (Dubbo consumers, then Triple ones: h2c
# consumers in front of the Triple echo provider, its own section of the doc and bench/out/soak-triple).
PROTOCOLS=${SOAK_PROTOCOLS:-dubbo triple}
status=0
for proto in $PROTOCOLS; do
  args=("$@")
  if [ ${#args[@]} -eq 0 ]; then
    args=(--doc docs/benchmarks.md --command "make soak")
  fi
  out=$OUT
  [ "$proto" = dubbo ] || out=$OUT-$proto
  echo "soak: the $proto soak (results in $out)"
  # Bounded: every child has its own deadline; each soak gets SIGINT after 60 minutes.
  timeout --signal=INT --kill-after=60s 60m \
    "$BIN/suite" soak --protocol "$proto" --bin "$BIN" --out "$out" "${args[@]}" || status=1
done
exit $status

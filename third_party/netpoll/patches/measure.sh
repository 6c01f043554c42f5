#!/usr/bin/env bash
# The same-run measurements PATCHES.md quotes: system calls (perf's syscalls tracepoints, steady on a
# shared machine) and CPU ticks of one process over a window, under stormbench load. Build the binaries
# of two patch levels (say into /tmp/a and /tmp/b: go build -o DIR ./cmd/stormbench ./cmd/sidecar
# ./bench/floor/npfloor ./bench/floor/npfwd) and alternate the runs:
#
#   measure.sh idle DIR npfloor|sidecar CONNS HEARTBEAT WINDOW_S   # heartbeats only
#   measure.sh fwd  DIR npfwd|sidecar   CONNS RATE WINDOW_S        # stormbench provider behind it
#   measure.sh greedy DIR npfwd|sidecar CONNS SIZE WINDOW_S        # bulk senders, echo provider behind it
#   measure.sh mem  DIR sidecar         CONNS HEARTBEAT SETTLE_S   # memory per idle consumer
#
# idle prints calls and CPU ticks per answered write (one write per readable consumer) and, for the
# sidecar, what it allocated over the window (go_memstats_alloc_bytes_total and go_memstats_mallocs_total
# from its metrics listener, less what one scrape itself allocates): bytes per second, bytes and
# allocations per answered write; fwd prints calls per request and, for sidecar, frames per upstream
# write over the window (stormgate_upstream_write_batch_frames, from the sidecar's metrics listener, on
# the port after the provider's);
# greedy runs `stormbench greedy --read` (CONNS connections sending SIZE-byte requests back to back and
# reading their answers) for the window through the proxy to an echo provider that reads well, and
# prints MiB/s of answered requests (sent: what the senders wrote, kernel buffers included) and readv and
# epoll_wait calls per answered MiB (the proxy reads each request twice: from the consumer and, echoed,
# from the provider).
# mem prints the sidecar's RSS (as make bench reads it, no collection forced) and Go heap (live after a
# forced collection: the admin listener's heap profile with gc=1) per consumer connection: with
# nothing connected, then SETTLE_S seconds after all CONNS consumers (heartbeating every HEARTBEAT)
# are connected, over CONNS.
# Ports are taken below 32768, away from the load tool's ephemeral ports. Every process it starts is
# stopped before it returns.
set -euo pipefail
mode=$1 dir=$2 kind=$3 conns=$4 arg=$5 win=${6:-10}
port=$((20000 + RANDOM % 8000))
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null; rm -f "${res:-}"' EXIT
res=$(mktemp)
listening() { # waits up to 20 s for $1 to accept
  for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done
  echo "measure.sh: nothing listens on port $1" >&2; exit 1
}
start_proxy() { # $1: upstream address (fwd) or none
  case $kind in
    npfloor) exec "$dir/npfloor" --listen 127.0.0.1:$port ;;
    npfwd) exec "$dir/npfwd" --listen 127.0.0.1:$port --upstream "$1" --upstream-conns 4 ;;
    sidecar) exec "$dir/sidecar" run --listen 127.0.0.1:$port --upstream "${1:-127.0.0.1:9}" --upstream-conns 4 \
      --metrics "${metrics:-}" --admin "${admin:-}" --log-level error ;;
  esac
}
if [ "$mode" = greedy ]; then
  "$dir/stormbench" echo-provider --listen 127.0.0.1:$((port + 1)) --slow-chance 0 --stall-chance 0 \
    --rcvbuf 0 --mss 0 --stats-every 0 >/dev/null 2>&1 & pids+=($!)
  listening $((port + 1))
  start_proxy 127.0.0.1:$((port + 1)) >/dev/null 2>&1 & px=$!; pids+=($px)
  listening $port
  out=$(mktemp)
  t0=$(awk '{print $14+$15}' /proc/$px/stat)
  perf stat -x, -e 'syscalls:sys_enter_*' -p "$px" -o "$out" &
  pf=$!; pids+=($pf)
  sleep 0.2
  "$dir/stormbench" greedy --target 127.0.0.1:$port --conns "$conns" --size "$arg" --read \
    --duration "${win}s" --json "$res" >/dev/null 2>&1 || true
  kill -INT "$pf"; wait "$pf" || true
  t1=$(awk '{print $14+$15}' /proc/$px/stat)
  calls() { awk -F, -v e="syscalls:sys_enter_$1" '$3 == e {print $1}' "$out"; }
  top=$(awk -F, '$1 ~ /^[0-9]+$/ && $1 > 0 {sub("syscalls:sys_enter_","",$3); print $3 "=" $1}' "$out" |
    sort -t= -k2 -nr | head -7 | tr '\n' ' ')
  python3 - "$res" "$win" "$arg" "$(calls readv)" "$(calls epoll_wait)" "$((t1 - t0))" "$kind $dir conns=$conns size=$arg" "$top" <<'PY'
import json, sys
res, win, size, readv, ew, ticks, what, top = sys.argv[1:]
d = json.load(open(res))
mib = d["answered"] * int(size) / 2**20  # answered round trips: what crossed the proxy both ways
print("greedy %s window=%ss answered_MiB/s=%.1f sent_MiB/s=%.1f readv=%s readv_per_MiB=%.1f epoll_wait_per_MiB=%.1f "
      "cpu_ticks=%s cpu_ticks_per_MiB=%.2f answered=%d/%d errors=%d closed=%d | %s" % (what, win, mib / float(win),
      d["bytes"] / 2**20 / float(win), readv, int(readv) / mib, int(ew or 0) / mib, ticks, int(ticks) / mib,
      d["answered"], d["sent"], d["errors"], d["closed"], top))
PY
  rm -f "$out"
  exit 0
fi
metric() { # summed over its labels
  curl -s "http://$metrics/metrics" | awk -v m="$1" '$1 == m || index($1, m "{") == 1 {s += $2; n++} END {if (n) printf "%d", s}'
}
allocs() { # bytes and objects the sidecar allocated so far
  curl -s "http://$metrics/metrics" | awk '$1 == "go_memstats_alloc_bytes_total" {b = $2} $1 == "go_memstats_mallocs_total" {n = $2}
    END {printf "%d %d\n", b, n}'
}
if [ "$mode" = mem ]; then
  metrics=127.0.0.1:$((port + 2)) admin=127.0.0.1:$((port + 3))
  start_proxy >/dev/null 2>&1 & px=$!; pids+=($px)
  listening $port
  listening $((port + 2))
  sample() { # RSS in KiB, then live heap in bytes after a forced collection
    rss=$(awk '/^VmRSS:/ {print $2}' /proc/$px/status)
    curl -s -o /dev/null "http://$admin/debug/pprof/heap?gc=1"
    echo "$rss $(metric go_gc_heap_live_bytes)"
  }
  sleep 2
  read -r rss0 heap0 < <(sample)
  "$dir/stormbench" load --target 127.0.0.1:$port --conns "$conns" --heartbeat "$arg" \
    --duration $((win + 60))s --json "$res" >/dev/null 2>&1 & ld=$!; pids+=($ld)
  for _ in $(seq 600); do [ "$(metric stormgate_downstream_connections)" = "$conns" ] && break; sleep 0.1; done
  up=$(metric stormgate_downstream_connections)
  sleep "$win"
  read -r rss1 heap1 < <(sample)
  echo "mem $kind $dir conns=$up/$conns heartbeat=$arg settle=${win}s rss_kib=$rss0->$rss1" \
    "rss_kib_per_conn=$(echo "scale=2; ($rss1 - $rss0) / $conns" | bc)" \
    "heap_live=$heap0->$heap1 heap_kib_per_conn=$(echo "scale=2; ($heap1 - $heap0) / 1024 / $conns" | bc)"
  exit 0
fi
batches() { # "sum count" of frames per upstream write, or nothing without metrics
  [ -n "${metrics:-}" ] || return 0
  curl -s "http://$metrics/metrics" | awk '/^stormgate_upstream_write_batch_frames_sum/ {s=$2}
    /^stormgate_upstream_write_batch_frames_count/ {c=$2} END {printf "%d %d", s, c}'
}
if [ "$mode" = fwd ]; then
  [ "$kind" = sidecar ] && metrics=127.0.0.1:$((port + 2))
  "$dir/stormbench" provider --listen 127.0.0.1:$((port + 1)) >/dev/null 2>&1 & pids+=($!)
  listening $((port + 1))
  start_proxy 127.0.0.1:$((port + 1)) >/dev/null 2>&1 & px=$!; pids+=($px)
  listening $port
  "$dir/stormbench" load --target 127.0.0.1:$port --conns "$conns" --rate "$arg" --heartbeat 30s \
    --duration $((win + conns / 2000 + 20))s --json "$res" >/dev/null 2>&1 & ld=$!
  reqs=$((arg * win))
else
  [ "$kind" = sidecar ] && metrics=127.0.0.1:$((port + 2))
  start_proxy >/dev/null 2>&1 & px=$!; pids+=($px)
  listening $port
  [ -n "${metrics:-}" ] && listening $((port + 2))
  "$dir/stormbench" load --target 127.0.0.1:$port --conns "$conns" --heartbeat "$arg" \
    --duration $((win + conns / 2000 + 20))s --json "$res" >/dev/null 2>&1 & ld=$!
fi
pids+=($ld)
sleep $((conns / 2000 + 3)) # connected and settled; the load runs well past the window
if [ -n "${metrics:-}" ]; then # the sidecar: every consumer connected, then 5 s for their first requests
  for _ in $(seq 600); do [ "$(metric stormgate_downstream_connections)" = "$conns" ] && break; sleep 0.1; done
  sleep 5
fi
out=$(mktemp)
if [ -n "${metrics:-}" ]; then # after a first scrape (it sets up what later ones reuse), two back to back:
  allocs >/dev/null                # their difference is one scrape's own cost
  read -r ab0 an0 < <(allocs)
  read -r ab1 an1 < <(allocs)
fi
b0=$(batches || true)
t0=$(awk '{print $14+$15}' /proc/$px/stat)
perf stat -x, -e 'syscalls:sys_enter_*' -p "$px" -o "$out" -- sleep "$win" 2>/dev/null
t1=$(awk '{print $14+$15}' /proc/$px/stat)
b1=$(batches || true)
[ -n "${metrics:-}" ] && read -r ab2 an2 < <(allocs)
fpw=
if [ -n "$b0" ] && [ -n "$b1" ]; then
  fpw=$(echo "$b0 $b1" | awk '{ if ($4 > $2) printf " frames_per_upstream_write=%.2f", ($3 - $1) / ($4 - $2) }')
fi
wait "$ld" || true
tot=$(awk -F, '$1 ~ /^[0-9]+$/ {s+=$1} END{print s}' "$out")
per=${reqs:-$(awk -F, '$3 ~ /sys_enter_write$/ {print $1}' "$out")}
top=$(awk -F, '$1 ~ /^[0-9]+$/ && $1 > 0 {sub("syscalls:sys_enter_","",$3); print $3 "=" $1}' "$out" |
  sort -t= -k2 -nr | head -7 | tr '\n' ' ')
rm -f "$out"
# The load's own outcome: a window without the offered load says nothing about the proxy.
load=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
print("load_ok=%d/%d hb_answered=%d/%d" % (d["ok"], d["scheduled"], d["heartbeats_answered"], d["heartbeats_sent"]))' "$res" 2>/dev/null ||
  echo "load_result=missing")
alloc=
if [ -n "${metrics:-}" ]; then
  ab=$((ab2 - ab1 - (ab1 - ab0))) an=$((an2 - an1 - (an1 - an0)))
  alloc="alloc_bytes_per_s=$((ab / win)) alloc_bytes_per_unit=$(echo "scale=1; $ab / $per" | bc)"
  alloc="$alloc allocs_per_unit=$(echo "scale=3; $an / $per" | bc) scrape_bytes=$((ab1 - ab0))"
fi
echo "$mode $kind $dir conns=$conns $arg window=${win}s cpu_ticks=$((t1 - t0)) cpu_ticks_per_1000=$(echo "scale=3; 1000 * $((t1 - t0)) / $per" | bc)" \
  "calls=$tot calls_per_unit=$(echo "scale=2; $tot / $per" | bc)$fpw $alloc $load | $top"

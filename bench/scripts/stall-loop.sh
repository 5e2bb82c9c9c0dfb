#!/usr/bin/env bash
# Runs the in-process shard-append benchmark and the gRPC append scenario RUNS
# times each and prints every run's largest ack latency. Before the glommio
# patch (engine/vendor/PATCHES.md) a shard could stall until a 50 ms signal or
# for good; a stall shows here as a max ack latency far above the p99.9.
#
#   bench/scripts/stall-loop.sh [RUNS] [STALL_MS]
#
# RUNS defaults to 20, STALL_MS to 100. Needs release builds of the bench and
# the server (cargo build --release -p ringfeed-server -p ringfeed-bench).
# Exits non-zero if any run's max ack latency is over STALL_MS.
set -uo pipefail
cd "$(dirname "$0")/../.."

runs=${1:-20}
stall_ms=${2:-100}
bench=target/release/ringfeed-bench
[ -x "$bench" ] && [ -x target/release/ringfeed ] || {
  echo "stall-loop: build first: cargo build --release -p ringfeed-server -p ringfeed-bench" >&2
  exit 2
}
scratch=./bench-scratch/stall-loop
out=$(mktemp -d -t ringfeed-stall-loop.XXXXXX)
worst=0

# The largest "max" of a run's rows, in ms. shard-append prints microseconds
# in its 4th latency column; `append` prints a markdown table with "ack max ms".
max_of() {
  python3 - "$1" "$2" <<'PY'
import sys
kind, path = sys.argv[1], sys.argv[2]
worst = 0.0
for line in open(path):
    cells = [c.strip() for c in line.split("|")]
    if kind == "shard" and line.split()[:1] in (["memory"], ["durable"]) and len(cells) >= 3:
        worst = max(worst, float(cells[2].split()[3]) / 1000.0)
    if kind == "grpc" and len(cells) > 13 and cells[2] == "ringfeed":
        worst = max(worst, float(cells[13]))
print(f"{worst:.2f}")
PY
}

echo "# shard-append --batches 1,64 --shards 2 --seconds 2 (4 producer threads; memory and durable acks)"
for i in $(seq 1 "$runs"); do
  f="$out/shard.$i.txt"
  "$bench" shard-append --dir "$scratch" --batches 1,64 --shards 2 --seconds 2 >"$f" 2>&1 || { echo "run $i failed: $f"; exit 1; }
  m=$(max_of shard "$f")
  echo "shard-append run $i: max ack ${m} ms"
  worst=$(python3 -c "print(max($worst, $m))")
done

echo "# append --events 20000 --producers 8 --batches 1,64 --event-bytes 200 (gRPC, ringfeed serve --shards 2; memory and durable acks)"
for i in $(seq 1 "$runs"); do
  f="$out/grpc.$i.txt"
  "$bench" append --dir "$scratch" --events 20000 --producers 8 --batches 1,64 --event-bytes 200 >"$f" 2>&1 || { echo "run $i failed: $f"; exit 1; }
  m=$(max_of grpc "$f")
  echo "grpc append run $i: max ack ${m} ms"
  worst=$(python3 -c "print(max($worst, $m))")
done

echo "worst max ack over all runs: $worst ms (outputs in $out)"
python3 -c "import sys; sys.exit(0 if $worst <= $stall_ms else 1)" || {
  echo "stall-loop: a run's max ack latency is over $stall_ms ms" >&2
  exit 1
}

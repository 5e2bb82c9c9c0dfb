#!/usr/bin/env bash
# Issue 39's "200 tails x 200k events" figure: N `ringfeed tail`s with
# default flags, started at once from the beginning over E events already
# appended (memory acks), each until the time the appends ended. Prints the
# time until every tail has exited, the server's peak RSS (VmHWM), and
# whether every tail printed every event once. Loopback only; the scratch
# dir is removed at the end.
#
#   cargo build --release -p ringfeed-cli && bash bench/many-tails.sh [N] [E]
#   (RINGFEED_BIN=path runs another build of `ringfeed`, e.g. to compare two)
set -u
N=${1:-200}
E=${2:-200000}
cd "$(dirname "$0")/.."
BIN=${RINGFEED_BIN:-$PWD/target/release/ringfeed}
[ -x "$BIN" ] || { echo "build it first: cargo build --release -p ringfeed-cli" >&2; exit 1; }
mkdir -p bench-scratch
D=$(mktemp -d "$PWD/bench-scratch/tails.XXXXXX") || exit 1
trap 'kill "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null; rm -rf "$D"' EXIT
"$BIN" serve --data-dir "$D/data" --listen 127.0.0.1:0 --log-level warn >"$D/serve.out" 2>&1 &
SPID=$!
ADDR=
for _ in $(seq 100); do
  ADDR=$(grep -o 'listening on [0-9.:]*' "$D/serve.out" | head -1 | cut -d' ' -f3)
  [ -n "$ADDR" ] && break
  sleep 0.1
done
[ -n "$ADDR" ] || { echo "the server did not start:" >&2; cat "$D/serve.out" >&2; exit 1; }
python3 -c "
for i in range($E): print('{\"directory\":\"/t/d%d\",\"newEntry\":{\"name\":\"f%d\"}}' % (i % 100, i))" \
  | "$BIN" append --server "$ADDR" --batch 1000 >/dev/null || exit 1
UNTIL=$(date +%s%N)
echo "$E events appended; server RSS before the tails: $(awk '/VmRSS/ {print $2, $3}' /proc/$SPID/status)"
start=$(date +%s.%N)
pids=()
for i in $(seq "$N"); do
  "$BIN" tail --server "$ADDR" --beginning --until-ns "$UNTIL" >"$D/t$i.out" 2>"$D/t$i.err" &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
end=$(date +%s.%N)
echo "$N tails done in $(echo "$end - $start" | bc) s; $failed exited non-zero"
echo "server peak RSS: $(awk '/VmHWM/ {print $2, $3}' /proc/$SPID/status)"
inexact=0
for i in $(seq "$N"); do
  lines=$(wc -l <"$D/t$i.out")
  distinct=$(grep -o '"shard":[0-9]*,"offset":[0-9]*' "$D/t$i.out" | sort -u | wc -l)
  if [ "$lines" != "$E" ] || [ "$distinct" != "$E" ]; then
    inexact=$((inexact + 1))
    echo "tail $i: $lines lines, $distinct distinct positions"
  fi
done
echo "tails not printing every event once: $inexact"

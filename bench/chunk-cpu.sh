#!/usr/bin/env bash
# Server CPU per event of a chunk-mode catch-up, the reader outside the
# measured process: E events (about 200 B each) are appended once and
# flushed; then, for R rounds and each binary given in turn, the server is
# started on that data dir (so the catch-up reads segments), one Python
# grpcio chunk-mode subscriber reads from the beginning to the ChunkModeEnd
# marker, and the server's CPU (utime + stime from /proc) over that read is
# printed with the chunk responses it took. Loopback only; the scratch dir
# is removed at the end.
#
#   bash bench/chunk-cpu.sh [E] [R] [BINARY...]   (default: 4000000 3 target/release/ringfeed)
set -u
E=${1:-4000000}
R=${2:-3}
shift $(( $# < 2 ? $# : 2 ))
cd "$(dirname "$0")/.."
ROOT=$PWD
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || BINS=("$ROOT/target/release/ringfeed")
for b in "${BINS[@]}"; do [ -x "$b" ] || { echo "no binary $b (cargo build --release -p ringfeed-cli)" >&2; exit 1; }; done
python3 -c "import grpc, grpc_tools" || { echo "needs python3 grpcio and grpcio-tools" >&2; exit 1; }
mkdir -p bench-scratch
D=$(mktemp -d "$ROOT/bench-scratch/chunk-cpu.XXXXXX") || exit 1
SPID=
trap '[ -n "$SPID" ] && kill "$SPID" 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
python3 - "$D/stubs" <<'PY' || exit 1
import os, sys
sys.path.insert(0, "server/cli/tests/python")
from ringfeed_client_test import generate_stubs
os.makedirs(sys.argv[1]); generate_stubs("proto/ringfeed.proto", sys.argv[1])
PY
serve() { # BINARY: starts it on $D/data, sets SPID and ADDR
  "$1" serve --data-dir "$D/data" --listen 127.0.0.1:0 --log-level warn >"$D/serve.out" 2>&1 &
  SPID=$!
  ADDR=
  for _ in $(seq 300); do
    ADDR=$(grep -o 'listening on [0-9.:]*' "$D/serve.out" | head -1 | cut -d' ' -f3)
    [ -n "$ADDR" ] && return 0
    sleep 0.1
  done
  echo "the server did not start:" >&2; cat "$D/serve.out" >&2; exit 1
}
stop() { kill "$SPID"; wait "$SPID"; SPID=; }
serve "${BINS[0]}"
python3 -c "
pad = 'x' * 170
for i in range($E): print('{\"directory\":\"/t/d%d\",\"newEntry\":{\"name\":\"f%d-%s\"}}' % (i % 100, i, pad))" \
  | "${BINS[0]}" append --server "$ADDR" --batch 1000 >/dev/null || exit 1
stop # flushed and synced at exit
echo "$E events in $(du -sh "$D/data" | cut -f1)"
for r in $(seq "$R"); do
  for b in "${BINS[@]}"; do
    serve "$b"
    t0=$(awk '{print $14 + $15}' "/proc/$SPID/stat")
    out=$(python3 - "$D/stubs" "$ADDR" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import grpc, ringfeed_pb2 as pb, ringfeed_pb2_grpc as pbg
channel = grpc.insecure_channel(sys.argv[2], options=[("grpc.max_receive_message_length", 8 << 20)])
request = pb.SubscribeRequest(beginning=True, chunk_mode=True, batching=True)
chunks = events = 0
for response in pbg.RingFeedStub(channel).Subscribe(request):
    kind = response.WhichOneof("item")
    if kind == "chunk":
        chunks += 1
        events += response.chunk.record_count
    elif kind == "chunk_mode_end":
        break
print(chunks, events)
PY
)
    t1=$(awk '{print $14 + $15}' "/proc/$SPID/stat")
    stop
    read -r chunks events <<<"$out"
    hz=$(getconf CLK_TCK)
    awk -v b="$b" -v t="$((t1 - t0))" -v hz="$hz" -v c="$chunks" -v e="$events" 'BEGIN {
      printf "%s: server CPU %.2f s for %d events in %d chunk responses: %.3f us an event\n", b, t / hz, e, c, e ? t / hz / e * 1e6 : 0 }'
  done
done

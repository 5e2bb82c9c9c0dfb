#!/usr/bin/env bash
# Runs engine tests that start and stop shard executors over and over, each
# run under `timeout 12`, and counts hangs. A hang is a bug (glommio's park
# race hung ~1.2 % of `data_dir_meta_and_reopen` runs before the patch in
# engine/vendor/PATCHES.md); this is how to show it is gone.
#
#   bench/scripts/hang-loop.sh [RUNS] [TEST ...]
#
# RUNS defaults to 2000 per test; TEST defaults to data_dir_meta_and_reopen and
# engine_open_close_stress. Prints one line per test: runs, passed, failed,
# hung. Exits non-zero if any run failed or hung; the output of the first few
# bad runs is kept in a temp dir it names.
set -uo pipefail
cd "$(dirname "$0")/../.."

runs=${1:-2000}
shift || true
tests=("$@")
[ ${#tests[@]} -eq 0 ] && tests=(data_dir_meta_and_reopen engine_open_close_stress)

keep=$(mktemp -d -t ringfeed-hang-loop.XXXXXX)
bad_total=0
for test in "${tests[@]}"; do
  # Build once, then run the test binary itself, so each run is only the test.
  bin=$(cargo test -p ringfeed-engine --locked --test "$test" --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["test"]:
        print(m["executable"])' | tail -1)
  if [ -z "$bin" ]; then
    echo "hang-loop: could not build the test $test" >&2
    exit 2
  fi
  passed=0 failed=0 hung=0
  started=$(date +%s)
  for i in $(seq 1 "$runs"); do
    out="$keep/$test.$i.log"
    # The watchdog's own bound is longer than 12 s: here `timeout` is the judge.
    timeout -k 2 12 "$bin" -q >"$out" 2>&1
    rc=$?
    case $rc in
      0) passed=$((passed + 1)); rm -f "$out" ;;
      124|137) hung=$((hung + 1)); echo "hang-loop: $test run $i hung (kept $out)" >&2 ;;
      *) failed=$((failed + 1)); echo "hang-loop: $test run $i failed, rc $rc (kept $out)" >&2 ;;
    esac
    if [ $((i % 200)) -eq 0 ]; then
      echo "hang-loop: $test: $i/$runs runs, $hung hung, $failed failed, $(( $(date +%s) - started )) s" >&2
    fi
  done
  echo "$test: runs $runs, passed $passed, failed $failed, hung $hung ($(( $(date +%s) - started )) s)"
  bad_total=$((bad_total + failed + hung))
done
if [ "$bad_total" -eq 0 ]; then
  rmdir "$keep" 2>/dev/null
else
  echo "hang-loop: logs of the bad runs are in $keep" >&2
fi
[ "$bad_total" -eq 0 ]

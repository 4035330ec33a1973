# scripts/bench storm [N] [DEVICES]: DEVICES devices (default 200) standing at DEVICES distinct versions ask one
# server for their catch-up patch at the same moment (issue 47), while a new device makes its first fetch. N
# campgrounds + N reviews (default 100000); DEVICES versions are published first on a 30-day patch horizon, each after
# a few rows changed. Prints: the answers (every catch-up must end 200; a 503 is retried as a device would, after its
# Retry-After), the seconds until the last one, the server's CPU seconds and peak RSS (target < 1 GB), and the new
# device's fetch time during the storm against the same fetch on the idle server just before (the anchor; a new
# device takes the checkpoint and its patch, so no merge should hold it up: target, no more than 2 s longer).
# Release build; a private PostgreSQL; sourced by scripts/bench after scripts/lib/common.sh.

N=${1:-100000}
DEVICES=${2:-200}
case "$N$DEVICES" in '' | *[!0-9]*) echo "usage: scripts/bench storm [N] [DEVICES]" >&2; exit 2 ;; esac

ferry_install_deps curl bc
echo "load average before the run: $(cat /proc/loadavg)"
work=$(mktemp -d /tmp/ferry-bench-storm.XXXXXX)
serve_pid=""
trap 'ferry_stop_pid "$serve_pid"; ferry_stop_postgres; rm -rf "$work"' EXIT

bench_build_ferry

say "Starting a private PostgreSQL; $N campgrounds + $N reviews"
ferry_start_postgres
bench_database
bench_generate_campgrounds "$URL" "$N"
store=$work/store
publish() {
  "$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$store" --patch-horizon 30d "$@" \
    --json >/dev/null
}
publish

say "Publishing $DEVICES more versions, each after 5 campgrounds changed"
for round in $(seq 1 "$DEVICES"); do
  psql "$URL" -q -v ON_ERROR_STOP=1 -c "UPDATE campgrounds SET description = 'storm $round ' || md5(id || '$round'), updated_at = updated_at + interval '1 second'
    WHERE id IN (SELECT id FROM campgrounds WHERE abs(hashtext(id || 's$round')) % $(( N / 5 > 0 ? N / 5 : 1 )) = 0 LIMIT 5)"
  publish --changed public.campgrounds
  [ $(( round % 50 )) = 0 ] && echo "  version $(( round + 1 )) published"
done
last=$(( DEVICES + 1 ))

port=$(ferry_free_port)
"$FERRY" serve --store "$store" --host 127.0.0.1 --port "$port" --cache-dir "$work/cache" >"$work/serve.log" 2>&1 &
serve_pid=$!
server=http://127.0.0.1:$port
ferry_wait_version "$server/v1/datasets/campgrounds/manifest" "$last" "" 300 || { tail -20 "$work/serve.log" >&2; exit 1; }
cpu() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$serve_pid/stat"; }

say "Anchor: a new device's first fetch on the idle server"
start=$(date +%s.%N)
"$FERRY" fetch --server "$server" --dataset campgrounds --dir "$work/anchor-device" --apply --json >"$work/anchor.json"
anchor_secs=$(echo "$(date +%s.%N) - $start" | bc -l)

say "The storm: $DEVICES catch-ups from versions 1 to $DEVICES at once, and a new device's first fetch beside them"
catch_up() {  # catch_up FROM: the patch FROM-last, retried after Retry-After on 503; prints FROM STATUS TRIES
  local from=$1 status tries=0 wait
  while :; do
    tries=$(( tries + 1 ))
    status=$(curl -s -o "$work/patch-$from" -D "$work/headers-$from" -w '%{http_code}' \
      "$server/v1/datasets/campgrounds/patches/$from-$last")
    [ "$status" = 503 ] && [ "$tries" -lt 60 ] || break
    wait=$(awk 'tolower($1) == "retry-after:" {print $2 + 0}' "$work/headers-$from")
    sleep "${wait:-1}"
  done
  echo "$from $status $tries"
}
cpu_before=$(cpu)
start=$(date +%s.%N)
for from in $(seq 1 "$DEVICES"); do catch_up "$from" >>"$work/storm.txt" & done
new_start=$(date +%s.%N)
"$FERRY" fetch --server "$server" --dataset campgrounds --dir "$work/new-device" --apply --json >"$work/new.json"
new_secs=$(echo "$(date +%s.%N) - $new_start" | bc -l)
wait $(jobs -p | grep -v "^$serve_pid$") 2>/dev/null || true
storm_secs=$(echo "$(date +%s.%N) - $start" | bc -l)
cpu_after=$(cpu)
peak_kb=$(awk '/VmHWM/ {print $2}' "/proc/$serve_pid/status")

say "Results: N = $N per table, $DEVICES devices at $DEVICES distinct versions"
python3 - "$work/storm.txt" <<'PY'
import collections, sys
rows = [line.split() for line in open(sys.argv[1]) if line.strip()]
statuses = collections.Counter(r[1] for r in rows)
retried = sum(1 for r in rows if int(r[2]) > 1)
print(f"catch-ups: {len(rows)} answered, by final status {dict(statuses)}; {retried} retried after a 503 (max {max(int(r[2]) for r in rows)} tries)")
PY
printf 'the storm took %.2f s; server CPU %.2f s; server peak RSS %d MB (target < 1024 MB)\n' \
  "$storm_secs" "$(echo "$cpu_after - $cpu_before" | bc -l)" "$(( peak_kb / 1024 ))"
printf 'a new device during the storm: %.2f s, against %.2f s on the idle server (+%.2f s; target <= +2 s)\n' \
  "$new_secs" "$anchor_secs" "$(echo "$new_secs - $anchor_secs" | bc -l)"
grep -c "made a catch-up patch" "$work/serve.log" | sed 's/^/merges the server made: /' || true

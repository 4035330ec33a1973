# scripts/bench history [VERSIONS] [INTERVAL]: what a long history costs (issue 47). `ferry-history-bench` publishes
# VERSIONS versions (default 100000) of a 10,000-row table on a simulated clock (a version every INTERVAL seconds,
# default 30, so 100,000 versions span 35 days; a 30-day patch horizon, the default tiers), 2 rows changed per version
# (one of a hot set of 10, one spread), in one process. At versions 100, 10,000 and VERSIONS it prints the mean
# publish time of the last 10 versions, the store's manifest.json and the manifest a device reads. Targets: a publish
# at the last mark <= 1.2x a publish at version 100 (the same run's anchor); manifests under 256 KB (store) and 16 KB
# (device). Then devices that stopped 1, 100 and 10,000 versions, 1 hour, 1 day, 7 days and 29 days before the last
# version (those inside the run) catch up from `ferry serve` with `ferry fetch --apply`: for each, the path, the patch
# requests, the bytes moved beside the gzip of the direct diff from its version (`ferry-delta-bench`,
# sqlite3session_diff) and the gzip copy, and the server's CPU seconds for it (its first request of the pair).
# Targets: <= 3 patch requests, <= 1.5x the direct diff, <= 1 CPU s. Release build; a private PostgreSQL; sourced by
# scripts/bench after scripts/lib/common.sh. The work directory is made under TMPDIR (TMPDIR=/dev/shm: a tmpfs, where
# the publisher's fsyncs cost nothing, so 100,000 versions take minutes rather than hours and what grows with the
# history is what is left).

VERSIONS=${1:-100000}
INTERVAL=${2:-30}
case "$VERSIONS$INTERVAL" in '' | *[!0-9]*) echo "usage: scripts/bench history [VERSIONS] [INTERVAL_SECONDS]" >&2; exit 2 ;; esac

ferry_install_deps curl
echo "load average before the run: $(cat /proc/loadavg)"
work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-bench-history.XXXXXX")
serve_pid=""
trap 'ferry_stop_pid "$serve_pid"; ferry_stop_postgres; rm -rf "$work"' EXIT

say "Building ferry-history-bench, ferry and ferry-delta-bench (release)"
for product in ferry-history-bench ferry ferry-delta-bench; do
  swift build -c release --product "$product" 2>&1 | tail -1
done
bin=$(swift build -c release --show-bin-path)

say "Starting a private PostgreSQL"
ferry_start_postgres
bench_database

# The devices stop this many versions before the last: 1, 100, 10,000, and 1 hour, 1 day, 7 days, 29 days of versions.
behinds=()
for k in 1 100 10000 $((3600 / INTERVAL)) $((86400 / INTERVAL)) $((7 * 86400 / INTERVAL)) $((29 * 86400 / INTERVAL)); do
  [ "$k" -ge 1 ] && [ "$k" -lt "$VERSIONS" ] && behinds+=("$k")
done
device_versions=$(for k in "${behinds[@]}"; do echo $((VERSIONS - k)); done | paste -sd, -)
marks=(100 10000 "$VERSIONS")
say "Publishing $VERSIONS versions on a simulated clock (a version every $INTERVAL s); figures at versions ${marks[*]}"
"$bin/ferry-history-bench" "$URL" "$work/store" "$VERSIONS" "$INTERVAL" "${device_versions:--}" "${marks[@]}" \
  | tee "$work/marks.jsonl"
say "The anchor again, after: 100 versions into a new store, on the machine as it is now"
"$bin/ferry-history-bench" "$URL" "$work/after/store" 100 "$INTERVAL" - 100 | tee "$work/after.jsonl"

say "Results"
python3 - "$work/marks.jsonl" "$work/after.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
after = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
first = rows[0]
print(f"{'version':>8} {'publish s':>10} {'x v100':>7} {'store manifest':>15} {'device manifest':>16} {'retained':>9} {'history':>8}")
for r in rows:
    print(f"{int(r['version']):>8} {r['publishSeconds']:>10.4f} {r['publishSeconds'] / first['publishSeconds']:>7.2f} "
          f"{int(r['storeManifestBytes']):>15,} {int(r['deviceManifestBytes']):>16,} {int(r['retained']):>9} {int(r['history']):>8}")
last = rows[-1]
print(f"publish at version {int(last['version'])}: {last['publishSeconds'] / first['publishSeconds']:.2f}x a publish at version "
      f"{int(first['version'])} (target <= 1.2x); largest manifests: store {max(r['storeManifestBytes'] for r in rows) / 1024:.1f} KB "
      f"(target < 256 KB), device {max(r['deviceManifestBytes'] for r in rows) / 1024:.1f} KB (target < 16 KB)")
print(f"the anchor measured again after the run: {after['publishSeconds']:.4f} s a publish at version 100; the last mark is "
      f"{last['publishSeconds'] / after['publishSeconds']:.2f}x that")
PY

say "Catching up: devices ${behinds[*]} versions behind, from ferry serve"
port=$(ferry_free_port)
"$bin/ferry" serve --store "$work/store" --host 127.0.0.1 --port "$port" >"$work/serve.log" 2>&1 &
serve_pid=$!
server=http://127.0.0.1:$port
ferry_wait_version "$server/v1/datasets/history/manifest" "$VERSIONS" "" 120 || { tail -20 "$work/serve.log" >&2; exit 1; }
full_gzip=$(curl -fsS "$server/v1/datasets/history/manifest" | python3 -c 'import json,sys; print(json.load(sys.stdin)["gzipSize"])')
cpu() { awk '{print $14 + $15}' "/proc/$serve_pid/stat"; }
ticks=$(getconf CLK_TCK)
printf '%-24s %7s %8s %8s %11s %11s %6s %6s %7s\n' device path requests bytes "direct diff" "gzip copy" /diff /gzip "cpu s"
for k in "${behinds[@]}"; do
  at=$((VERSIONS - k))
  dir=$work/device-$k
  mkdir -p "$dir"
  cp "$work/devices/at-$at.sqlite" "$dir/database.db"
  ideal=$("$bin/ferry-delta-bench" "$work/devices/at-$at.sqlite" "$work/devices/at-$VERSIONS.sqlite" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["changesetGzip"])')
  before=$(cpu)
  "$bin/ferry" fetch --server "$server" --dataset history --dir "$dir" --apply --json >"$dir/fetch.json" \
    || { cat "$dir/fetch.json"; tail -5 "$work/serve.log"; exit 1; }
  after=$(cpu)
  python3 - "$dir/fetch.json" "$k" "$at" "$ideal" "$full_gzip" "$((after - before))" "$ticks" "$VERSIONS" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
k, at, ideal, gzip, ticks, hz, last = (int(a) for a in sys.argv[2:])
moved = r["bytesReceived"]
requests = 1 if r["path"] == "patch" else 0
print(f"{f'{k} behind (v{at})':<24} {r['path']:>7} {requests:>8} {moved:>8} {ideal:>11} {gzip:>11} "
      f"{moved / ideal if ideal else float('nan'):>6.2f} {moved / gzip:>6.3f} {ticks / hz:>7.2f}")
PY
done
grep -c "made a catch-up patch" "$work/serve.log" | sed 's/^/server: catch-up patches made: /'

# scripts/bench catchup [N] [VERSIONS]: devices that were away catch up (docs/delta.md, "Catching up"). N campgrounds
# + N reviews (default 1M), then VERSIONS versions (default 1000), each after 0.01 % of the rows changed: half of
# them a hot set of campgrounds changed in every version, half spread at random. Devices fetch and stop at
# 1000, 100, 10 and 1 versions before the last; at the end each catches up with `ferry fetch --apply` from
# `ferry serve`. For each: the patch requests and bytes it moved, beside the gzip size of the direct diff between
# its version's file and the current one (`ferry-delta-bench`: sqlite3session_diff, the ideal) and the full gzip
# copy. Also the publish time at version 10 and at the last version (the last 10 averaged each), and what the
# history costs the store. Release build, a private PostgreSQL; sourced by scripts/bench after scripts/lib/common.sh.

N=${1:-1000000}
VERSIONS=${2:-1000}
case "$N$VERSIONS" in '' | *[!0-9]*) echo "usage: scripts/bench catchup [N] [VERSIONS]" >&2; exit 2 ;; esac

ferry_install_deps curl bc
echo "load average before the run: $(cat /proc/loadavg)"
work=$(mktemp -d /tmp/ferry-bench-catchup.XXXXXX)
serve_pid=""
cleanup() {
  ferry_stop_pid "$serve_pid"
  ferry_stop_postgres
  rm -rf "$work"
}
trap cleanup EXIT

say "Building ferry and ferry-delta-bench (release)"
swift build -c release --product ferry 2>&1 | tail -1
swift build -c release --product ferry-delta-bench 2>&1 | tail -1
bin=$(swift build -c release --show-bin-path)
FERRY=$bin/ferry

say "Starting a private PostgreSQL; $N campgrounds + $N reviews"
ferry_start_postgres
bench_database
bench_generate_campgrounds "$URL" "$N"
per_round=$(( (2 * N) / 10000 ))  # 0.01 % of the rows
per_round=$(( per_round > 2 ? per_round : 2 ))
hot=$(( per_round / 2 ))  # changed in every version
spread=$(( per_round - hot ))

store=$work/store
publish() {  # publish: the next version; prints the publish's seconds
  "$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$store" --patch-horizon 30d \
    --changed public.campgrounds --json >"$work/publish.json"
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["seconds"])' "$work/publish.json"
}
"$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$store" --patch-horizon 30d --json >/dev/null

port=$(ferry_free_port)
"$FERRY" serve --store "$store" --host 127.0.0.1 --port "$port" >"$work/serve.log" 2>&1 &
serve_pid=$!
server=http://127.0.0.1:$port
ferry_wait_version "$server/v1/datasets/campgrounds/manifest" 1 "" 120 || { tail -20 "$work/serve.log" >&2; exit 1; }

# The devices stop at these versions: 1000, 100, 10 and 1 behind the last (those that exist).
last=$(( VERSIONS + 1 ))
behinds=()
for k in 1000 100 10 1; do [ "$k" -lt "$last" ] && behinds+=("$k"); done
device_at() {  # device_at K: a device on the current version, kept K versions before the last
  local k=$1 version sha
  "$FERRY" fetch --server "$server" --dataset campgrounds --dir "$work/device-$k" --apply --json >"$work/device-$k.first.json"
  read -r version sha < <(curl -fsS "$server/v1/datasets/campgrounds/manifest" | python3 -c 'import json,sys; m=json.load(sys.stdin); print(m["version"], m["sha256"])')
  # Its version's published file, for the direct diff: a checkpoint's object, or the one the publisher built.
  cp "$(ls "$store/campgrounds/objects/$sha.sqlite" "$store/.ferry-work/campgrounds/$sha.sqlite" 2>/dev/null | head -1)" "$work/at-$k.sqlite"
  echo "device $k behind holds version $version"
}

say "Publishing $VERSIONS versions, each after $per_round rows changed ($hot of them in every version)"
times=()
for round in $(seq 1 "$VERSIONS"); do
  version=$round  # the version the devices see before this round's publish
  for k in "${behinds[@]}"; do
    [ $(( last - k )) = "$version" ] && { ferry_wait_version "$server/v1/datasets/campgrounds/manifest" "$version" "" 60; device_at "$k"; }
  done
  psql "$URL" -q -v ON_ERROR_STOP=1 -c "UPDATE campgrounds SET description = 'round $round ' || md5(id || '$round'), updated_at = updated_at + interval '1 second'
    WHERE id IN (SELECT id FROM campgrounds ORDER BY id LIMIT $hot)
       OR id IN (SELECT id FROM campgrounds WHERE abs(hashtext(id || 'r$round')) % $(( N / spread > 0 ? N / spread : 1 )) = 0 LIMIT $spread)"
  times+=("$(publish)")
  [ $(( round % 100 )) = 0 ] && echo "  version $(( round + 1 )) published"
done
ferry_wait_version "$server/v1/datasets/campgrounds/manifest" "$last" "" 120
manifest=$(curl -fsS "$server/v1/datasets/campgrounds/manifest")
current_sha=$(echo "$manifest" | python3 -c 'import json,sys; print(json.load(sys.stdin)["sha256"])')
full_gzip=$(echo "$manifest" | python3 -c 'import json,sys; print(json.load(sys.stdin)["gzipSize"])')
cp "$(ls "$store/campgrounds/objects/$current_sha.sqlite" "$store/.ferry-work/campgrounds/$current_sha.sqlite" 2>/dev/null | head -1)" "$work/current.sqlite"

say "Catching up"
rows=""
for k in "${behinds[@]}"; do
  ideal=$("$bin/ferry-delta-bench" "$work/at-$k.sqlite" "$work/current.sqlite" | python3 -c 'import json,sys; print(json.load(sys.stdin)["changesetGzip"])')
  start=$(date +%s.%N)
  "$FERRY" fetch --server "$server" --dataset campgrounds --dir "$work/device-$k" --apply --json >"$work/device-$k.json"
  secs=$(echo "$(date +%s.%N) - $start" | bc -l)
  read -r path moved requests < <(python3 -c 'import json,sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(r["path"], r["bytesReceived"], 1 if r["path"] == "patch" else 0)' "$work/device-$k.json")
  rows+=$(printf '%-22s %8s %9s %12s %12s %12s %7s %7s %8.2f\n' "$k versions behind" "$path" "$requests" "$moved" "$ideal" "$full_gzip" \
    "$(python3 -c "import sys; print(f'{int(sys.argv[1]) / int(sys.argv[2]):.2f}' if int(sys.argv[2]) else 'n/a')" "$moved" "$ideal")" \
    "$(python3 -c "import sys; print(f'{int(sys.argv[1]) / int(sys.argv[2]):.3f}')" "$moved" "$full_gzip")" "$secs")$'\n'
done

say "Results: N = $N per table, $VERSIONS versions of $per_round changed rows"
printf '%-22s %8s %9s %12s %12s %12s %7s %7s %8s\n' "device" "path" "requests" "bytes moved" "direct diff" "full gzip" "/diff" "/full" "seconds"
printf '%s' "$rows"
python3 - "$work" "${times[@]}" <<'PY'
import sys
work, times = sys.argv[1], [float(t) for t in sys.argv[2:]]
early = times[:10]
late = times[-10:]
print(f"publish at version 2-11: {sum(early) / len(early):.3f} s on average; at the last 10 versions: {sum(late) / len(late):.3f} s "
      f"({sum(late) / len(late) / (sum(early) / len(early)):.2f}x; target <= 1.2x)")
PY
patch_bytes=$(find "$store/campgrounds/objects" -name '*.patch.gz' -printf '%s\n' | awk '{s += $1} END {print s + 0}')
python3 - "$store/campgrounds/manifest.json" "$patch_bytes" "$full_gzip" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); patches, gzip = int(sys.argv[2]), int(sys.argv[3])
entry = m["scopes"][0]
print(f"store: {len(entry.get('history') or [])} history + {len(entry['retained'])} retained versions, "
      f"{sum(1 for r in entry['retained'] if r.get('checkpoint', 'step' not in r))} checkpoint(s); "
      f"patches and steps {patches:,} bytes = {patches / gzip:.2f}x the gzip copy ({gzip:,} bytes; target <= 2x); "
      f"manifest.json {__import__('os').path.getsize(sys.argv[1]):,} bytes")
PY
grep "made a catch-up patch" "$work/serve.log" | sed 's/^/  server: /' | tail -5

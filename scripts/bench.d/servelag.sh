# scripts/bench servelag [N]: what a version costs a server, and a new device's start (docs/delta.md, "What a server
# does per version"). N campgrounds + N reviews (default 1M), published, served by `ferry serve`; then 0.01 % of the
# rows change and are published as a step. Measured:
# - serve lag: from the end of `ferry publish` to the server's manifest naming the new version (polled every 10 ms),
#   and the server's CPU seconds meanwhile (/proc/PID/stat); beside it, in the same run, what building that version
#   whole costs the server when a client asks for it whole (`curl /snapshot`: the old per-version work);
# - new device: bytes and seconds of a first `ferry fetch --apply` (the checkpoint's gzip copy and one patch), beside
#   the gzip anchor: curl + gunzip + sha256sum + mv of the current version's gzip copy (built before, so the anchor
#   pays no build).
# Release build, a private PostgreSQL; sourced by scripts/bench after scripts/lib/common.sh.

N=${1:-1000000}
case "$N" in '' | *[!0-9]*) echo "usage: scripts/bench servelag [N]" >&2; exit 2 ;; esac

ferry_install_deps curl bc
echo "load average before the run: $(cat /proc/loadavg)"
work=$(mktemp -d /tmp/ferry-bench-servelag.XXXXXX)
serve_pid=""
cleanup() {
  ferry_stop_pid "$serve_pid"
  ferry_stop_postgres
  rm -rf "$work"
}
trap cleanup EXIT

bench_build_ferry

say "Starting a private PostgreSQL; $N campgrounds + $N reviews"
ferry_start_postgres
bench_database
bench_generate_campgrounds "$URL" "$N"
store=$work/store
publish() { "$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$store" --json >"$work/publish.json"; }
publish

port=$(ferry_free_port)
"$FERRY" serve --store "$store" --host 127.0.0.1 --port "$port" --cache-dir "$work/cache" >"$work/serve.log" 2>&1 &
serve_pid=$!
server=http://127.0.0.1:$port
ferry_wait_version "$server/v1/datasets/campgrounds/manifest" 1 "" 300 || { tail -20 "$work/serve.log" >&2; exit 1; }
cpu() {  # the server's user + system CPU seconds so far
  awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$serve_pid/stat"
}

changed=$(( (2 * N) / 10000 ))
changed=$(( changed > 2 ? changed : 2 ))
say "Changing $changed campgrounds (0.01 % of the rows) and publishing a step"
psql "$URL" -q -v ON_ERROR_STOP=1 -c "UPDATE campgrounds SET description = 'lag ' || md5(id), updated_at = updated_at + interval '1 second'
  WHERE id IN (SELECT id FROM campgrounds ORDER BY id LIMIT $changed)"
publish
ended=$(date +%s.%N)
cpu_before=$(cpu)
until curl -fsS "$server/v1/datasets/campgrounds/manifest" | grep -q '"version":2,'; do
  sleep 0.01
  [ "$(echo "$(date +%s.%N) - $ended > 120" | bc -l)" = 1 ] && { echo "version 2 not served within 120 s" >&2; exit 1; }
done
lag=$(echo "$(date +%s.%N) - $ended" | bc -l)
lag_cpu=$(echo "$(cpu) - $cpu_before" | bc -l)
checkpoint=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); r = m["scopes"][0]["retained"][-1]; print(r.get("checkpoint", "step" not in r))' "$store/campgrounds/manifest.json")

say "The same version built whole on request (curl /snapshot), the work every server did per version before"
cpu_before=$(cpu)
start=$(date +%s.%N)
curl -fsS -o /dev/null "$server/v1/datasets/campgrounds/snapshot"
build_secs=$(echo "$(date +%s.%N) - $start" | bc -l)
build_cpu=$(echo "$(cpu) - $cpu_before" | bc -l)

say "A new device: ferry fetch --apply, beside curl + gunzip + sha256sum + mv of the gzip copy"
start=$(date +%s.%N)
"$FERRY" fetch --server "$server" --dataset campgrounds --dir "$work/device" --apply --json >"$work/fetch.json"
fetch_secs=$(echo "$(date +%s.%N) - $start" | bc -l)
read -r path moved < <(python3 -c 'import json,sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(r["path"], r["bytesReceived"])' "$work/fetch.json")
sha=$(curl -fsS "$server/v1/datasets/campgrounds/manifest" | python3 -c 'import json,sys; print(json.load(sys.stdin)["sha256"])')
sync
start=$(date +%s.%N)
curl -fsS -H 'Accept-Encoding: gzip' -o "$work/anchor.gz" "$server/v1/datasets/campgrounds/versions/2"
gunzip -c "$work/anchor.gz" >"$work/anchor.tmp"
[ "$(sha256sum "$work/anchor.tmp" | cut -d' ' -f1)" = "$sha" ] || { echo "the anchor's file is not version 2" >&2; exit 1; }
mv "$work/anchor.tmp" "$work/anchor.sqlite"
anchor_secs=$(echo "$(date +%s.%N) - $start" | bc -l)
gzip_bytes=$(stat -c %s "$work/anchor.gz")

say "Results: N = $N per table, $changed rows changed"
printf 'version 2 stored as a step: %s\n' "$([ "$checkpoint" = False ] && echo yes || echo "no (a checkpoint)")"
printf 'serve lag: %.3f s after the publish ended, %.3f CPU s of the server (targets <= 1 s, <= 0.1 CPU s); building it whole on request: %.3f s, %.3f CPU s\n' \
  "$lag" "$lag_cpu" "$build_secs" "$build_cpu"
python3 - "$moved" "$gzip_bytes" "$fetch_secs" "$anchor_secs" "$path" <<'PY'
import sys
moved, gzip, fetch, anchor, path = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
print(f"new device ({path}): {moved:,} bytes = {moved / gzip:.3f}x the gzip copy ({gzip:,}; target <= 1.3x), "
      f"{fetch:.2f} s against the anchor's {anchor:.2f} s = {fetch / anchor:.2f}x (target <= 0.6x)")
PY

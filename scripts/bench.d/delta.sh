# scripts/bench delta [N]: what an update costs after 1 % of the rows change, in one run on the same data:
# Ferry's row-level patch (SQLite changeset, gzip) against Ferry's gzip full download, the uncompressed file, and
# zsync (2 KiB blocks) between the same two files; the time to publish v2 with and without patches; and on the
# device (`ferry fetch --apply` from `ferry serve` on loopback) the patch update against a full update of the same
# version: time, peak RSS, body bytes and loopback bytes (every byte on lo, headers included). Then a 10-row change.
# A third device edits 100 rows and pushes them before the 1 % change: its update is measured the same way, against
# the patch and the gzip copy. The changeset's size is printed beside the patchset's (new values only).
# N campgrounds + N reviews (~500 MB at the default N). Release build; a private PostgreSQL; nothing else touched.

N=${1:-1000000}
case "$N" in ''|*[!0-9]*) echo "usage: scripts/bench delta [N]   (N rows per table, default 1000000)" >&2; exit 2 ;; esac

ferry_install_deps time bc zsync nginx-light
echo "load average before the run: $(cat /proc/loadavg)"
trap ferry_stop_postgres EXIT

say "Building ferry (release)"
swift build -c release --product ferry 2>&1 | tail -1
swift build -c release --product ferry-delta-bench 2>&1 | tail -1
FERRY=$(swift build -c release --show-bin-path)/ferry
DELTA_BENCH=$(swift build -c release --show-bin-path)/ferry-delta-bench

say "Starting a private PostgreSQL"
ferry_start_postgres
work=$(mktemp -d /tmp/ferry-bench.XXXXXX)
http_pid=
serve_pid=
cleanup() {
  [ -n "$http_pid" ] && kill "$http_pid" 2>/dev/null
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null
  ferry_stop_postgres
  rm -rf "$work"
}
trap cleanup EXIT
bench_database

say "Generating $N campgrounds + $N reviews"
bench_generate_campgrounds "$URL" "$N"

say "v1: ferry publish"
"$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$work/store" --json >"$work/v1.json"
cp -a "$work/store" "$work/store-nopatch"

say "ferry serve on loopback, with the changes endpoint; three devices fetch v1 (initial sync)"
sport=$(ferry_free_port)
"$FERRY" serve --store "$work/store" --port "$sport" --config templates/campgrounds.yml --database-url "$URL" >"$work/serve.log" 2>&1 &
serve_pid=$!
server="http://127.0.0.1:$sport"
for _ in $(seq 1 100); do curl -fs -o /dev/null "$server/v1/datasets/campgrounds/manifest" && break; sleep 0.1; done
for device in patch full edit; do
  "$FERRY" fetch --server "$server" --dataset campgrounds --dir "$work/device-$device" --json >/dev/null
done
# Waits until the server names version $1 (it polls the store every second).
wait_version() { for _ in $(seq 1 100); do [ "$(curl -fs "$server/v1/datasets/campgrounds/manifest" | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')" = "$1" ] && return; sleep 0.1; done; echo "the server did not pick up version $1" >&2; return 1; }
lo_bytes() { awk '/^ *lo:/ {print $2}' /proc/net/dev; }
# device_update NAME ARGS...: ferry fetch --apply on loopback, measured; its body bytes, loopback bytes and path.
device_update() {
  local name=$1; shift
  local before; before=$(lo_bytes)
  bench_measure "$name" "$FERRY" fetch --server "$server" --dataset campgrounds --json --apply "$@"
  printf -v "${name}_lo" '%s' "$(( $(lo_bytes) - before ))"
  printf -v "${name}_body" '%s' "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bytesReceived"])' "$work/$name.out")"
  printf -v "${name}_path" '%s' "$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["path"] + ("" if d["path"] == "full" else " %d → %d" % (d["patchFrom"], d["patchTo"])))' "$work/$name.out")"
}

say "The editing device edits 100 campgrounds and pushes them (answered applied)"
bench_measure editexec "$FERRY" exec --dir "$work/device-edit" "UPDATE campgrounds SET name = name || ' (checked)' WHERE id IN (SELECT id FROM campgrounds ORDER BY id LIMIT 100)"
"$FERRY" push --server "$server" --dataset campgrounds --dir "$work/device-edit" --json >"$work/push.json"
pushed=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["applied"], "applied,", d["remaining"], "remaining")' "$work/push.json" 2>/dev/null || cat "$work/push.json")
echo "pushed: $pushed"

say "1 % of rows change: key hash or key = 50 mod 100, same-length text, updated_at bumped"
bench_change_one_percent "$URL"
changed=$(psql "$URL" -At -c "SELECT (SELECT count(*) FROM campgrounds WHERE abs(hashtext(id)) % 100 = 50) + (SELECT count(*) FROM reviews WHERE id % 100 = 50)")

say "v2: ferry publish, with patches and without (the same data, from copies of the v1 store)"
bench_measure with "$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$work/store" --json
bench_measure without "$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$work/store-nopatch" --json --no-patches
cp "$work/with.out" "$work/v2.json"

field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
size=$(field "$work/v2.json" "d['size']")
gzip=$(field "$work/v2.json" "d['gzipSize']")
patch=$(field "$work/v2.json" "[p for p in d.get('patches', []) if p['from'] == 1][0]['size'] if d.get('patches') else 0")
v1sha=$(field "$work/v1.json" "d['sha256']")
v2sha=$(field "$work/v2.json" "d['sha256']")
objects="$work/store/campgrounds/objects"

say "The devices update to v2: one by the patch, one by the full download (--no-patch), both with --apply"
wait_version 2
device_update devpatch --dir "$work/device-patch"
device_update devfull --dir "$work/device-full" --no-patch
device_update devedit --dir "$work/device-edit"
devedit_own=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ownRowsSettled"])' "$work/devedit.out")
for device in patch full edit; do
  sha=$("$FERRY" status --dir "$work/device-$device" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["sha256"])')
  [ "$sha" = "$v2sha" ] || { echo "device-$device does not hold v2 ($sha)" >&2; exit 1; }
done
[ "$devpatch_path" = "patch 1 → 2" ] || { echo "the device did not take the patch ($devpatch_path)" >&2; cat "$work/devpatch.err" >&2; }
[ "$devedit_path" = "patch 1 → 2" ] || { echo "the editing device did not take the patch ($devedit_path)" >&2; cat "$work/devedit.err" >&2; }
"$DELTA_BENCH" "$objects/$v1sha.sqlite" "$objects/$v2sha.sqlite" >"$work/sets.json"

say "A 10-row change: v3, and the device updates by patch"
psql "$URL" -q -v ON_ERROR_STOP=1 -c "UPDATE reviews SET rating = 1 + rating % 5, updated_at = updated_at + interval '1 day' WHERE id IN (SELECT id FROM reviews ORDER BY id LIMIT 10)"
"$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$work/store" --json >"$work/v3.json"
wait_version 3
device_update devten --dir "$work/device-patch"

say "Anchor: zsync with 2 KiB blocks from v1 to v2, over loopback HTTP (nginx, which serves the ranges zsync asks for)"
mkdir -p "$work/www" "$work/nginx"
chmod 755 "$work"
cp "$objects/$v2sha.sqlite" "$work/www/v2.sqlite"
(cd "$work/www" && zsyncmake -b 2048 -u v2.sqlite -o v2.sqlite.zsync v2.sqlite >/dev/null 2>&1)
chmod -R a+rX "$work/www"; chmod 777 "$work/nginx"
port=$(ferry_free_port)
cat >"$work/nginx/nginx.conf" <<NGINX
worker_processes 1;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 64; }
http {
  log_format sent '\$bytes_sent';
  access_log $work/nginx/access.log sent;
  client_body_temp_path $work/nginx/body; proxy_temp_path $work/nginx/proxy; fastcgi_temp_path $work/nginx/fcgi;
  uwsgi_temp_path $work/nginx/uwsgi; scgi_temp_path $work/nginx/scgi;
  server { listen 127.0.0.1:$port; root $work/www; }
}
NGINX
nginx -p "$work/nginx" -c "$work/nginx/nginx.conf"
http_pid=$(cat "$work/nginx/nginx.pid")
cp "$objects/$v1sha.sqlite" "$work/seed.sqlite"
(cd "$work" && zsync -i seed.sqlite -o out.sqlite "http://127.0.0.1:$port/v2.sqlite.zsync" >"$work/zsync.out" 2>&1) || true
cmp -s "$work/out.sqlite" "$work/www/v2.sqlite" || { echo "zsync did not rebuild v2" >&2; cat "$work/zsync.out" >&2; }
zsent=$(awk '{s += $1} END {print s + 0}' "$work/nginx/access.log")  # every byte nginx sent, headers and .zsync file included
kill "$http_pid" 2>/dev/null; http_pid=
kill "$serve_pid" 2>/dev/null; serve_pid=

say "Results: $changed of $((2 * N)) rows changed (N = $N per table)"
pct() { echo "100 * $1 / $size" | bc -l | xargs printf '%.2f'; }
printf '%-44s %14s %10s\n' "bytes to move v1 → v2" "bytes" "% of file"
printf '%-44s %14s %10s\n' "uncompressed full download" "$size" "100.00"
printf '%-44s %14s %10s\n' "Ferry gzip full download" "$gzip" "$(pct "$gzip")"
printf '%-44s %14s %10s\n' "zsync, 2 KiB blocks (all bytes sent)" "$zsent" "$(pct "$zsent")"
printf '%-44s %14s %10s\n' "Ferry patch 1 → 2 (changeset, gzip)" "$patch" "$(pct "$patch")"
patchset=$(field "$work/sets.json" "d['patchsetGzip']")
printf '%-44s %14s %10s\n' "the same as a patchset (new values only, gzip)" "$patchset" "$(pct "$patchset")"
printf '%-44s %14s %10s\n' "editing device's update (body bytes)" "$devedit_body" "$(pct "$devedit_body")"
echo
printf 'publish v2 with patches:    %6.2f s, peak RSS %s MB\n' "$with_secs" "$with_rss"
printf 'publish v2 without patches: %6.2f s, peak RSS %s MB\n' "$without_secs" "$without_rss"
printf 'patches cost %.0f %% more publish time (target <= 25 %%); the patch is %.2f %% of the file (target <= 2 %%)\n' \
  "$(echo "100 * ($with_secs - $without_secs) / $without_secs" | bc -l)" "$(echo "100 * $patch / $size" | bc -l)"
echo
printf '%-44s %9s %9s %14s %14s\n' "device: ferry fetch --apply v1 → v2" "seconds" "peak RSS" "body bytes" "loopback bytes"
printf '%-44s %9.2f %7s MB %14s %14s\n' "by patch ($devpatch_path)" "$devpatch_secs" "$devpatch_rss" "$devpatch_body" "$devpatch_lo"
printf '%-44s %9.2f %7s MB %14s %14s\n' "full download, gzip (--no-patch)" "$devfull_secs" "$devfull_rss" "$devfull_body" "$devfull_lo"
printf '%-44s %9.2f %7s MB %14s %14s\n' "editing device, 100 rows pushed ($devedit_path)" "$devedit_secs" "$devedit_rss" "$devedit_body" "$devedit_lo"
printf 'the editing device moved %.2f× the patch and %.2f %% of the gzip copy; it settled %s of its own rows, and its update took %.2f× the clean device'"'"'s (the 100-row edit on the device: %.2f s)\n' \
  "$(echo "$devedit_body / $patch" | bc -l)" "$(echo "100 * $devedit_body / $gzip" | bc -l)" "$devedit_own" "$(echo "$devedit_secs / $devpatch_secs" | bc -l)" "$editexec_secs"
printf 'the patch update took %.2f× the full update'"'"'s time (target <= 1.0); device peak RSS %s MB (target <= 100)\n' \
  "$(echo "$devpatch_secs / $devfull_secs" | bc -l)" "$devpatch_rss"
printf 'a 10-row change (v2 → v3, %s): %s body bytes, %s loopback bytes (target <= 65536)\n' "$devten_path" "$devten_body" "$devten_lo"

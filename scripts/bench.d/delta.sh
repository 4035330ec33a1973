# scripts/bench delta [N]: what an update costs after 1 % of the rows change, in one run on the same data:
# Ferry's row-level patch (SQLite changeset, gzip) against Ferry's gzip full download, the uncompressed file, and
# zsync (2 KiB blocks) between the same two files; and the time to publish v2 with and without patches.
# N campgrounds + N reviews (~500 MB at the default N). Release build; a private PostgreSQL; nothing else touched.
# The device side (apply time, device RSS) joins this table once the client applies patches.

N=${1:-1000000}
case "$N" in ''|*[!0-9]*) echo "usage: scripts/bench delta [N]   (N rows per table, default 1000000)" >&2; exit 2 ;; esac

ferry_install_deps time bc zsync nginx-light
trap ferry_stop_postgres EXIT

say "Building ferry (release)"
swift build -c release --product ferry 2>&1 | tail -1
FERRY=$(swift build -c release --show-bin-path)/ferry

say "Starting a private PostgreSQL"
ferry_start_postgres
work=$(mktemp -d /tmp/ferry-bench.XXXXXX)
http_pid=
cleanup() {
  [ -n "$http_pid" ] && kill "$http_pid" 2>/dev/null
  ferry_stop_postgres
  rm -rf "$work"
}
trap cleanup EXIT
psql "$FERRY_PG_URL" -q -c "CREATE DATABASE bench"
URL="postgres://postgres@127.0.0.1:$FERRY_PG_PORT/bench"

say "Generating $N campgrounds + $N reviews"
bench_generate_campgrounds "$URL" "$N"

say "v1: ferry publish"
"$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$work/store" --json >"$work/v1.json"
cp -a "$work/store" "$work/store-nopatch"

say "1 % of rows change: key hash or key = 50 mod 100, same-length text, updated_at bumped"
psql "$URL" -q -v ON_ERROR_STOP=1 <<'SQL'
UPDATE campgrounds SET description = 'Sites by the lake, ' || md5(id || 'v2') || ' ' || md5(id || 'v2b'),
                       updated_at = updated_at + interval '1 day'
 WHERE abs(hashtext(id)) % 100 = 50;
UPDATE reviews SET body = 'Review ' || id || ': ' || md5(id::text || 'v2') || ' ' || md5((id * 3)::text) || ' ' || md5((id * 5)::text),
                   updated_at = updated_at + interval '1 day'
 WHERE id % 100 = 50;
SQL
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

say "Results: $changed of $((2 * N)) rows changed (N = $N per table)"
pct() { echo "100 * $1 / $size" | bc -l | xargs printf '%.2f'; }
printf '%-44s %14s %10s\n' "bytes to move v1 → v2" "bytes" "% of file"
printf '%-44s %14s %10s\n' "uncompressed full download" "$size" "100.00"
printf '%-44s %14s %10s\n' "Ferry gzip full download" "$gzip" "$(pct "$gzip")"
printf '%-44s %14s %10s\n' "zsync, 2 KiB blocks (all bytes sent)" "$zsent" "$(pct "$zsent")"
printf '%-44s %14s %10s\n' "Ferry patch 1 → 2 (changeset, gzip)" "$patch" "$(pct "$patch")"
echo
printf 'publish v2 with patches:    %6.2f s, peak RSS %s MB\n' "$with_secs" "$with_rss"
printf 'publish v2 without patches: %6.2f s, peak RSS %s MB\n' "$without_secs" "$without_rss"
printf 'patches cost %.0f %% more publish time (target <= 25 %%); the patch is %.2f %% of the file (target <= 2 %%)\n' \
  "$(echo "100 * ($with_secs - $without_secs) / $without_secs" | bc -l)" "$(echo "100 * $patch / $size" | bc -l)"

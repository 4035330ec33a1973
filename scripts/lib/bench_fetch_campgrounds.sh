# `scripts/bench fetch --campgrounds N [--runs R]` (see scripts/bench.d/fetch.sh): sourced by it, with
# $campgrounds (N), $runs and $ferry_bin set.
case "$campgrounds" in ''|*[!0-9]*) echo "usage: scripts/bench fetch --campgrounds N [--runs R]" >&2; exit 2 ;; esac
ferry_install_deps curl time bc
echo "load average before the run: $(cat /proc/loadavg)"

if [ -n "$ferry_bin" ]; then
  FERRY=$ferry_bin
else
  say "Building ferry (release)"
  swift build -c release --product ferry 2>&1 | tail -1
  FERRY=$(swift build -c release --show-bin-path)/ferry
fi
echo "ferry binary: $FERRY"

say "Starting a private PostgreSQL"
ferry_start_postgres
work=$(mktemp -d /tmp/ferry-bench-fetch.XXXXXX)
serve_pid=
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null
  ferry_stop_postgres
  rm -rf "$work"
}
trap cleanup EXIT

published_sha() { "$FERRY" status --dir "$1" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["sha256"])'; }
# v1: a small version the device holds; v2: N campgrounds + N reviews, published without a patch from v1, so the
# update is the full download.
psql "$FERRY_PG_URL" -q -c "CREATE DATABASE small" -c "CREATE DATABASE big"
base="postgres://postgres@127.0.0.1:$FERRY_PG_PORT"
say "v1: 1000 campgrounds + 1000 reviews; v2: $campgrounds + $campgrounds"
bench_generate_campgrounds "$base/small" 1000
bench_generate_campgrounds "$base/big" "$campgrounds"
"$FERRY" publish --config templates/campgrounds.yml --database-url "$base/small" --store "$work/store" --json >/dev/null

sport=$(ferry_free_port)
"$FERRY" serve --store "$work/store" --host 127.0.0.1 --port "$sport" >"$work/serve.log" 2>&1 &
serve_pid=$!
server="http://127.0.0.1:$sport"
# wait_version N: until the server names version N (it polls the store every second).
wait_version() {
  for _ in $(seq 1 300); do
    [ "$(curl -fs "$server/v1/datasets/campgrounds/manifest" 2>/dev/null |
      python3 -c 'import json,sys; m=json.load(sys.stdin); print(m.get("current", m)["version"])' 2>/dev/null || true)" = "$1" ] && return 0
    sleep 0.1
  done
  echo "the server did not name version $1" >&2
  return 1
}
wait_version 1
# The device on v1, kept as a template copied before each run.
"$FERRY" fetch --server "$server" --dataset campgrounds --dir "$work/device-v1" --json >/dev/null
"$FERRY" publish --config templates/campgrounds.yml --database-url "$base/big" --store "$work/store" --json \
  --no-patches >"$work/v2.json"
wait_version 2
read -r version sha size gzip_size < <(curl -fs "$server/v1/datasets/campgrounds/manifest" |
  python3 -c 'import json,sys; m=json.load(sys.stdin); m=m.get("current", m); print(m["version"], m["sha256"], m["size"], m.get("gzipSize", 0))')
url="$server/v1/datasets/campgrounds/versions/$version"
echo "version $version: $size bytes, gzip copy $gzip_size bytes"
[ "$(published_sha "$work/device-v1")" != "$sha" ] || { echo "the device template already holds version $version" >&2; exit 1; }
curl -fs -o /dev/null "$url"; curl -fs -o /dev/null -H 'Accept-Encoding: gzip' "$url"  # warm the page cache

anchor() {  # anchor NAME COMMAND: a fresh directory holding v1's file, then COMMAND in it, measured
  local name=$1 command=$2
  rm -rf "$work/anchor" && mkdir -p "$work/anchor" && cp "$work/device-v1/database.db" "$work/anchor/database.db"
  bench_measure "$name" bash -c "cd '$work/anchor' && $command"
  bench_keep_best "$name"
  [ "$(cut -d' ' -f1 "$work/$name.out")" = "$sha" ] || { echo "$name: wrong bytes" >&2; exit 1; }
}
for run in $(seq 1 "$runs"); do
  anchor gzip "set -o pipefail; curl -fs -H 'Accept-Encoding: gzip' '$url' | gzip -dc >updated.db && sha256sum updated.db && mv updated.db database.db"
  anchor plain "curl -fs -o updated.db '$url' && sha256sum updated.db && mv updated.db database.db"
  rm -rf "$work/client" && cp -a "$work/device-v1" "$work/client"
  bench_measure ferry "$FERRY" fetch --apply --json --server "$server" --dataset campgrounds --dir "$work/client"
  bench_keep_best ferry
  [ "$(published_sha "$work/client")" = "$sha" ] || { echo "ferry fetch --apply produced the wrong database.db" >&2; exit 1; }
  printf 'run %d: anchor gzip %.2f s, anchor uncompressed %.2f s, ferry %.2f s (%.2fx gzip, %.2fx uncompressed)\n' \
    "$run" "$gzip_secs" "$plain_secs" "$ferry_secs" "$(echo "$ferry_secs / $gzip_secs" | bc -l)" \
    "$(echo "$ferry_secs / $plain_secs" | bc -l)"
done

echo "ferry fetch --json (last run): $(tr -d '\n' <"$work/ferry.out" | cut -c1-600)"

say "Results: N = $campgrounds, $size bytes (gzip copy $gzip_size), best of $runs runs"
row() { printf '%-70s %6.2f s  peak RSS %5d MB  runs:%s\n' "$1" "$2" "$3" "$4"; }
row "anchor: curl (gzip copy) | gzip -dc, sha256sum, mv" "$gzip_best_secs" "$gzip_best_rss" "$gzip_runs"
row "anchor: curl (SQLite file), sha256sum, mv" "$plain_best_secs" "$plain_best_rss" "$plain_runs"
row "ferry fetch --apply (gzip copy; verify, quick_check, fsync, swap)" "$ferry_best_secs" "$ferry_best_rss" "$ferry_runs"
printf 'ferry / gzip anchor: %.2fx (goal <= 0.5x); ferry / uncompressed anchor: %.2fx\n' \
  "$(echo "$ferry_best_secs / $gzip_best_secs" | bc -l)" "$(echo "$ferry_best_secs / $plain_best_secs" | bc -l)"

# scripts/bench app [N]: an app's update on the benchmark dataset (N campgrounds + N reviews, ~500 MB at the default
# N), after 1 % of the rows change: the patch applied in place under the app's open GRDB pool (FerryGRDB
# .automatic) while 4 readers query, against the swap by rename (close the pool, rename updated.db, reopen) of the
# same update, in the same run. Prints the apply times, the readers' p50/p99 idle and during the apply, and when
# the observation fired. Release build; a private PostgreSQL; nothing else touched.

N=${1:-1000000}
case "$N" in ''|*[!0-9]*) echo "usage: scripts/bench app [N]   (N rows per table, default 1000000)" >&2; exit 2 ;; esac

ferry_install_deps
echo "load average before the run: $(cat /proc/loadavg)"

say "Building ferry and ferry-app-bench (release)"
swift build -c release --product ferry 2>&1 | tail -1
swift build -c release --product ferry-app-bench 2>&1 | tail -1
bin=$(swift build -c release --show-bin-path)

say "Starting a private PostgreSQL"
ferry_start_postgres
work=$(mktemp -d /tmp/ferry-bench.XXXXXX)
serve_pid=
bench_pid=
cleanup() {
  [ -n "$bench_pid" ] && kill "$bench_pid" 2>/dev/null
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null
  ferry_stop_postgres
  rm -rf "$work"
}
trap cleanup EXIT
bench_database

say "Generating $N campgrounds + $N reviews; v1"
bench_generate_campgrounds "$URL" "$N"
"$bin/ferry" publish --config templates/campgrounds.yml --database-url "$URL" --store "$work/store" >/dev/null

sport=$(ferry_free_port)
"$bin/ferry" serve --store "$work/store" --port "$sport" >"$work/serve.log" 2>&1 &
serve_pid=$!
server="http://127.0.0.1:$sport"
for _ in $(seq 1 100); do curl -fs -o /dev/null "$server/v1/datasets/campgrounds/manifest" && break; sleep 0.1; done

say "Two devices sync v1 (one in place under a GRDB pool, one by rename)"
mkdir -p "$work/devices"
"$bin/ferry-app-bench" --server "$server" --dataset campgrounds --work "$work/devices" >"$work/bench.out" 2>&1 &
bench_pid=$!
for _ in $(seq 1 3000); do grep -q '^ready' "$work/bench.out" && break; kill -0 "$bench_pid" 2>/dev/null || break; sleep 0.2; done
grep '^ready' "$work/bench.out" || { cat "$work/bench.out" >&2; exit 1; }

say "1 % of the rows change; v2 is published"
bench_change_one_percent "$URL"
"$bin/ferry" publish --config templates/campgrounds.yml --database-url "$URL" --store "$work/store" >/dev/null
for _ in $(seq 1 100); do
  [ "$(curl -fs "$server/v1/datasets/campgrounds/manifest" | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')" = 2 ] && break
  sleep 0.1
done
touch "$work/devices/go"
wait "$bench_pid"
bench_pid=
say "Results"
grep -v '^ready' "$work/bench.out"

# scripts/bench publish [N]: times `ferry publish` against the anchor (db-to-sqlite --all) and the floor
# (psql binary \copy to /dev/null) on the same N campgrounds + N reviews (~200 bytes/row), in one run.
# Sourced by scripts/bench after scripts/lib/common.sh. Release build; a private PostgreSQL; nothing else touched.

N=${1:-1000000}
case "$N" in ''|*[!0-9]*) echo "usage: scripts/bench publish [N]   (N rows per table, default 1000000)" >&2; exit 2 ;; esac

ferry_install_deps time python3-venv bc
trap ferry_stop_postgres EXIT

say "Building ferry (release)"
swift build -c release --product ferry 2>&1 | tail -1
FERRY=$(swift build -c release --show-bin-path)/ferry

say "Starting a private PostgreSQL"
ferry_start_postgres
work=$(mktemp -d /tmp/ferry-bench.XXXXXX)
trap 'ferry_stop_postgres; rm -rf "$work"' EXIT
psql "$FERRY_PG_URL" -q -c "CREATE DATABASE bench"
URL="postgres://postgres@127.0.0.1:$FERRY_PG_PORT/bench"

say "Generating $N campgrounds + $N reviews"
bench_generate_campgrounds "$URL" "$N"
rows=$(psql "$URL" -At -c "SELECT (SELECT count(*) FROM campgrounds) + (SELECT count(*) FROM reviews) + (SELECT count(*) FROM photos)")
bytes=$(psql "$URL" -At -c "SELECT pg_table_size('campgrounds') + pg_table_size('reviews')")
echo "$rows rows; heap $((bytes / 1024 / 1024)) MB ($((bytes / rows)) bytes/row)"

say "Floor: psql binary \\copy of the same tables to /dev/null"
cat >"$work/floor.sql" <<'SQL'
\copy campgrounds TO '/dev/null' WITH (FORMAT binary)
\copy reviews TO '/dev/null' WITH (FORMAT binary)
\copy photos TO '/dev/null' WITH (FORMAT binary)
SQL
bench_measure floor psql "$URL" -q -f "$work/floor.sql"

say "Ferry: ferry publish --config templates/campgrounds.yml"
bench_measure ferry "$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$work/store" --json
cat "$work/ferry.out"

say "Anchor: db-to-sqlite --all (venv)"
venv=${FERRY_BENCH_VENV:-/tmp/ferry-bench-venv}   # kept between runs
if [ ! -x "$venv/bin/db-to-sqlite" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q db-to-sqlite psycopg2-binary
fi
# SQLAlchemy 2.1 defaults to psycopg 3: name the psycopg2 driver the brief installs.
bench_measure anchor "$venv/bin/db-to-sqlite" "postgresql+psycopg2://postgres@127.0.0.1:$FERRY_PG_PORT/bench" "$work/anchor.db" --all

say "Results: $rows rows (N = $N per table)"
rate() { echo "$rows / $1" | bc -l | xargs printf '%.0f'; }
printf '%-34s %10s %14s %12s\n' "" "seconds" "rows/s" "peak RSS MB"
printf '%-34s %10.2f %14s %12s\n' "floor (psql \\copy binary → null)" "$floor_secs" "$(rate "$floor_secs")" "$floor_rss"
printf '%-34s %10.2f %14s %12s\n' "ferry publish" "$ferry_secs" "$(rate "$ferry_secs")" "$ferry_rss"
printf '%-34s %10.2f %14s %12s\n' "anchor (db-to-sqlite --all)" "$anchor_secs" "$(rate "$anchor_secs")" "$anchor_rss"
echo
printf 'ferry vs anchor: %.1fx the rows/s (target >= 10x)\n' "$(echo "$anchor_secs / $ferry_secs" | bc -l)"
printf 'ferry vs floor:  %.1fx the floor time\n' "$(echo "$ferry_secs / $floor_secs" | bc -l)"
printf 'ferry peak RSS:  %s MB (target <= 150 MB)\n' "$ferry_rss"
ls -l "$work/store/campgrounds/objects" | tail -n +2

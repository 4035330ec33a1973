# scripts/bench publish [N]: times `ferry publish` against the anchor (db-to-sqlite --all) and the floor on the
# same N campgrounds + N reviews (~200 bytes/row), in one run. The floor is the extract (psql binary \copy to
# /dev/null) plus the load (`sqlite3 .import` of the same rows and columns from CSV into the tables of Ferry's own
# snapshot, without indexes). Ferry's seconds per phase (`--json` `phases`) are printed too.
# FERRY_BENCH_ANCHOR=0 skips the slow anchor. Sourced by scripts/bench after scripts/lib/common.sh. Release build;
# a private PostgreSQL; nothing else touched.

N=${1:-1000000}
case "$N" in ''|*[!0-9]*) echo "usage: scripts/bench publish [N]   (N rows per table, default 1000000)" >&2; exit 2 ;; esac

ferry_install_deps time python3-venv bc sqlite3
echo "load average before the run: $(cat /proc/loadavg)"
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

say "Floor, load: sqlite3 .import of the same rows (CSV written first, untimed) into Ferry's tables, no indexes"
snapshot=$(ls "$work"/store/campgrounds/objects/*.sqlite | head -1)
: >"$work/import.sql"
for table in campgrounds reviews photos; do
  columns=$(sqlite3 "$snapshot" "SELECT group_concat('\"' || name || '\"', ', ') FROM pragma_table_info('$table')")
  psql "$URL" -q -c "\\copy (SELECT $columns FROM $table) TO '$work/$table.csv' WITH (FORMAT csv)"
  sqlite3 "$snapshot" "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = '$table'" >>"$work/floor-schema.sql"
  echo ";" >>"$work/floor-schema.sql"
  echo ".import --csv $work/$table.csv $table" >>"$work/import.sql"
done
sqlite3 "$work/floor.db" <"$work/floor-schema.sql"
bench_measure import sqlite3 "$work/floor.db" ".read $work/import.sql"
floor_total=$(echo "$floor_secs + $import_secs" | bc -l)

anchor_secs=""
if [ "${FERRY_BENCH_ANCHOR:-1}" != 0 ]; then
  say "Anchor: db-to-sqlite --all (venv)"
  venv=${FERRY_BENCH_VENV:-/tmp/ferry-bench-venv}   # kept between runs
  if [ ! -x "$venv/bin/db-to-sqlite" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q db-to-sqlite psycopg2-binary
  fi
  # SQLAlchemy 2.1 defaults to psycopg 3: name the psycopg2 driver the brief installs.
  bench_measure anchor "$venv/bin/db-to-sqlite" "postgresql+psycopg2://postgres@127.0.0.1:$FERRY_PG_PORT/bench" "$work/anchor.db" --all
fi

say "Results: $rows rows (N = $N per table)"
rate() { echo "$rows / $1" | bc -l | xargs printf '%.0f'; }
printf '%-34s %10s %14s %12s\n' "" "seconds" "rows/s" "peak RSS MB"
printf '%-34s %10.2f %14s %12s\n' "floor: extract (\\copy binary → null)" "$floor_secs" "$(rate "$floor_secs")" "$floor_rss"
printf '%-34s %10.2f %14s %12s\n' "floor: load (sqlite3 .import)" "$import_secs" "$(rate "$import_secs")" "$import_rss"
printf '%-34s %10.2f %14s %12s\n' "floor: extract + load" "$floor_total" "$(rate "$floor_total")" ""
printf '%-34s %10.2f %14s %12s\n' "ferry publish" "$ferry_secs" "$(rate "$ferry_secs")" "$ferry_rss"
[ -n "$anchor_secs" ] && printf '%-34s %10.2f %14s %12s\n' "anchor (db-to-sqlite --all)" "$anchor_secs" "$(rate "$anchor_secs")" "$anchor_rss"
echo
echo "ferry phases (seconds; phases that run side by side overlap):"
python3 -c 'import json, sys
phases = json.load(open(sys.argv[1])).get("phases", {})
for name, seconds in phases.items(): print(f"  {name:<16} {seconds:8.2f}")' "$work/ferry.out"
echo
[ -n "$anchor_secs" ] && printf 'ferry vs anchor: %.1fx the rows/s (target >= 10x)\n' "$(echo "$anchor_secs / $ferry_secs" | bc -l)"
printf 'ferry vs floor:  %.2fx the floor time (target <= 1.0x)\n' "$(echo "$ferry_secs / $floor_total" | bc -l)"
printf 'ferry peak RSS:  %s MB (target <= 100 MB)\n' "$ferry_rss"
ls -l "$work/store/campgrounds/objects" | tail -n +2

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
psql "$URL" -q -v ON_ERROR_STOP=1 -f templates/campgrounds.pg.sql
psql "$URL" -q -v ON_ERROR_STOP=1 <<SQL
SET session_replication_role = replica;  -- skip FK triggers while loading
INSERT INTO campgrounds (id, name, description, lat, lon, tier, price_per_night, has_water, amenities, details,
                         open_from, open_until, created_at, updated_at)
SELECT md5(g::text)::uuid::text, 'Campground ' || g, 'Sites by the lake, ' || md5((g * 7)::text) || ' ' || md5((g * 13)::text),
       -60 + (g % 120000) / 1000.0, -170 + (g % 340000) / 1000.0, (g % 3)::smallint, ((g % 9000) / 100.0)::numeric(8,2),
       g % 2 = 0, '{fire pits,toilets}', jsonb_build_object('sites', g % 97), date '2024-05-01', date '2024-09-30',
       timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second', timestamptz '2024-06-01 00:00:00+00' + g * interval '1 second'
FROM generate_series(1, $N) g;
INSERT INTO reviews (id, campground_id, rating, author, body, created_at, updated_at)
SELECT 1000 + g, md5(((g % $N) + 1)::text)::uuid::text, 1 + g % 5, 'user' || (g % 50000),
       'Review ' || g || ': ' || md5(g::text) || ' ' || md5((g * 3)::text) || ' ' || md5((g * 5)::text),
       timestamptz '2024-07-01 00:00:00+00' + g * interval '1 second', timestamptz '2024-07-02 00:00:00+00' + g * interval '1 second'
FROM generate_series(1, $N) g;
VACUUM ANALYZE;
SQL
rows=$(psql "$URL" -At -c "SELECT (SELECT count(*) FROM campgrounds) + (SELECT count(*) FROM reviews) + (SELECT count(*) FROM photos)")
bytes=$(psql "$URL" -At -c "SELECT pg_table_size('campgrounds') + pg_table_size('reviews')")
echo "$rows rows; heap $((bytes / 1024 / 1024)) MB ($((bytes / rows)) bytes/row)"

# run NAME CMD...: wall seconds and peak RSS (MB) of CMD, into $NAME_secs and $NAME_rss.
measure() {
  local name=$1; shift
  local start end
  start=$(date +%s.%N)
  /usr/bin/time -v -o "$work/$name.time" "$@" >"$work/$name.out" 2>"$work/$name.err" || { cat "$work/$name.err" >&2; return 1; }
  end=$(date +%s.%N)
  printf -v "${name}_secs" '%s' "$(echo "$end - $start" | bc -l)"
  printf -v "${name}_rss" '%s' "$(awk '/Maximum resident set size/ {printf "%.0f", $6 / 1024}' "$work/$name.time")"
}

say "Floor: psql binary \\copy of the same tables to /dev/null"
cat >"$work/floor.sql" <<'SQL'
\copy campgrounds TO '/dev/null' WITH (FORMAT binary)
\copy reviews TO '/dev/null' WITH (FORMAT binary)
\copy photos TO '/dev/null' WITH (FORMAT binary)
SQL
measure floor psql "$URL" -q -f "$work/floor.sql"

say "Ferry: ferry publish --config templates/campgrounds.yml"
measure ferry "$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$work/store" --json
cat "$work/ferry.out"

say "Anchor: db-to-sqlite --all (venv)"
venv=${FERRY_BENCH_VENV:-/tmp/ferry-bench-venv}   # kept between runs
if [ ! -x "$venv/bin/db-to-sqlite" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q db-to-sqlite psycopg2-binary
fi
# SQLAlchemy 2.1 defaults to psycopg 3: name the psycopg2 driver the brief installs.
measure anchor "$venv/bin/db-to-sqlite" "postgresql+psycopg2://postgres@127.0.0.1:$FERRY_PG_PORT/bench" "$work/anchor.db" --all

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
ls -l "$work/store/campgrounds/versions" | tail -n +2

# Helpers shared by the benchmarks in scripts/bench.d/ (sourced by scripts/bench after common.sh).

# bench_measure NAME CMD...: runs CMD under /usr/bin/time; its wall seconds and peak RSS (MB) go into $NAME_secs
# and $NAME_rss, its output into $work/NAME.out and .err ($work must be set). The file system's dirty pages are
# written out first (sync, untimed), so no measurement pays for an earlier step's writes.
bench_measure() {
  local name=$1; shift
  local start end
  sync
  start=$(date +%s.%N)
  /usr/bin/time -v -o "$work/$name.time" "$@" >"$work/$name.out" 2>"$work/$name.err" || { cat "$work/$name.err" >&2; return 1; }
  end=$(date +%s.%N)
  printf -v "${name}_secs" '%s' "$(echo "$end - $start" | bc -l)"
  printf -v "${name}_rss" '%s' "$(awk '/Maximum resident set size/ {printf "%.0f", $6 / 1024}' "$work/$name.time")"
}

# bench_keep_best NAME: after `bench_measure NAME`, keeps the fastest run so far in $NAME_best_secs and
# $NAME_best_rss (its output in $work/NAME.best.out) and appends the run's seconds to $NAME_runs.
bench_keep_best() {
  local name=$1 secs best
  secs=$(eval echo "\$${name}_secs")
  best=$(eval echo "\${${name}_best_secs:-}")
  printf -v "${name}_runs" '%s' "$(eval echo "\${${name}_runs:-}") $(printf '%.2f' "$secs")"
  if [ -z "$best" ] || [ "$(echo "$secs < $best" | bc -l)" = 1 ]; then
    printf -v "${name}_best_secs" '%s' "$secs"
    printf -v "${name}_best_rss" '%s' "$(eval echo "\$${name}_rss")"
    cp "$work/$name.out" "$work/$name.best.out"
  fi
}

# bench_generate_campgrounds URL N [tenants]: loads templates/campgrounds.pg.sql, then N campgrounds (tiers 0-2,
# ~200 bytes each) and N reviews. With "tenants", campgrounds also get a tenant column (0-99) and indexes on
# tenant, tier and reviews.campground_id.
bench_generate_campgrounds() {
  local url=$1 n=$2 tenants=${3:-}
  local column="" value="" indexes=""
  if [ "$tenants" = tenants ]; then
    column=", tenant"; value=", g % 100"
    indexes="CREATE INDEX ON campgrounds (tenant); CREATE INDEX ON campgrounds (tier); CREATE INDEX ON reviews (campground_id);"
  fi
  psql "$url" -q -v ON_ERROR_STOP=1 -f templates/campgrounds.pg.sql
  psql "$url" -q -v ON_ERROR_STOP=1 <<SQL
$( [ "$tenants" = tenants ] && echo "ALTER TABLE campgrounds ADD COLUMN tenant integer NOT NULL DEFAULT 0;" )
SET session_replication_role = replica;  -- skip FK triggers while loading
INSERT INTO campgrounds (id, name, description, lat, lon, tier, price_per_night, has_water, amenities, details,
                         open_from, open_until, created_at, updated_at$column)
SELECT md5(g::text)::uuid::text, 'Campground ' || g, 'Sites by the lake, ' || md5((g * 7)::text) || ' ' || md5((g * 13)::text),
       -60 + (g % 120000) / 1000.0, -170 + (g % 340000) / 1000.0, (g % 3)::smallint, ((g % 9000) / 100.0)::numeric(8,2),
       g % 2 = 0, '{fire pits,toilets}', jsonb_build_object('sites', g % 97), date '2024-05-01', date '2024-09-30',
       timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second', timestamptz '2024-06-01 00:00:00+00' + g * interval '1 second'$value
FROM generate_series(1, $n) g;
INSERT INTO reviews (id, campground_id, rating, author, body, created_at, updated_at)
SELECT 1000 + g, md5(((g % $n) + 1)::text)::uuid::text, 1 + g % 5, 'user' || (g % 50000),
       'Review ' || g || ': ' || md5(g::text) || ' ' || md5((g * 3)::text) || ' ' || md5((g * 5)::text),
       timestamptz '2024-07-01 00:00:00+00' + g * interval '1 second', timestamptz '2024-07-02 00:00:00+00' + g * interval '1 second'
FROM generate_series(1, $n) g;
$indexes
VACUUM ANALYZE;
SQL
}

# bench_change_one_percent URL [TAG] [REMAINDER]: changes 1 % of the campgrounds and reviews (key hash or key =
# REMAINDER mod 100, default 50), with same-length text (new for each TAG, default v2) and a bumped updated_at.
bench_change_one_percent() {
  local tag=${2:-v2} remainder=${3:-50}
  psql "$1" -q -v ON_ERROR_STOP=1 -v tag="$tag" -v rem="$remainder" <<'SQL'
UPDATE campgrounds SET description = 'Sites by the lake, ' || md5(id || :'tag') || ' ' || md5(id || :'tag' || 'b'),
                       updated_at = updated_at + interval '1 day'
 WHERE abs(hashtext(id)) % 100 = :rem;
UPDATE reviews SET body = 'Review ' || id || ': ' || md5(id::text || :'tag') || ' ' || md5((id * 3)::text) || ' ' || md5((id * 5)::text),
                   updated_at = updated_at + interval '1 day'
 WHERE id % 100 = :rem;
SQL
}

# bench_database: creates the database `bench` in the private PostgreSQL (ferry_start_postgres) and sets URL to it.
bench_database() {
  psql "$FERRY_PG_URL" -q -c "CREATE DATABASE bench"
  URL="postgres://postgres@127.0.0.1:$FERRY_PG_PORT/bench"
}

# bench_build_ferry: builds the `ferry` product in release mode and sets FERRY to its path.
bench_build_ferry() {
  say "Building ferry (release)"
  swift build -c release --product ferry 2>&1 | tail -1
  FERRY=$(swift build -c release --show-bin-path)/ferry
}

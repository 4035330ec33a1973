# scripts/bench scopes [N]: publishes N campgrounds + N reviews once unscoped (the anchor, same run), then per
# scope for 3 tiers (tier <= :scope, reviews follow their campground) and for 100 tenants (tenant = :scope), and
# prints the seconds per scope beside the unscoped publish. Release build; a private PostgreSQL.
# Sourced by scripts/bench after scripts/lib/common.sh.

N=${1:-1000000}
case "$N" in ''|*[!0-9]*) echo "usage: scripts/bench scopes [N]   (N campgrounds and N reviews, default 1000000)" >&2; exit 2 ;; esac

ferry_install_deps time bc
trap ferry_stop_postgres EXIT

say "Building ferry (release)"
swift build -c release --product ferry 2>&1 | tail -1
FERRY=$(swift build -c release --show-bin-path)/ferry

say "Starting a private PostgreSQL"
ferry_start_postgres
work=$(mktemp -d /tmp/ferry-bench-scopes.XXXXXX)
trap 'ferry_stop_postgres; rm -rf "$work"' EXIT
psql "$FERRY_PG_URL" -q -c "CREATE DATABASE bench"
URL="postgres://postgres@127.0.0.1:$FERRY_PG_PORT/bench"

say "Generating $N campgrounds (3 tiers, 100 tenants) + $N reviews"
psql "$URL" -q -v ON_ERROR_STOP=1 -f templates/campgrounds.pg.sql
psql "$URL" -q -v ON_ERROR_STOP=1 <<SQL
ALTER TABLE campgrounds ADD COLUMN tenant integer NOT NULL DEFAULT 0;
SET session_replication_role = replica;  -- skip FK triggers while loading
INSERT INTO campgrounds (id, name, description, lat, lon, tier, tenant, price_per_night, has_water, amenities, details,
                         open_from, open_until, created_at, updated_at)
SELECT md5(g::text)::uuid::text, 'Campground ' || g, 'Sites by the lake, ' || md5((g * 7)::text) || ' ' || md5((g * 13)::text),
       -60 + (g % 120000) / 1000.0, -170 + (g % 340000) / 1000.0, (g % 3)::smallint, g % 100, ((g % 9000) / 100.0)::numeric(8,2),
       g % 2 = 0, '{fire pits,toilets}', jsonb_build_object('sites', g % 97), date '2024-05-01', date '2024-09-30',
       timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second', timestamptz '2024-06-01 00:00:00+00' + g * interval '1 second'
FROM generate_series(1, $N) g;
INSERT INTO reviews (id, campground_id, rating, author, body, created_at, updated_at)
SELECT 1000 + g, md5(((g % $N) + 1)::text)::uuid::text, 1 + g % 5, 'user' || (g % 50000),
       'Review ' || g || ': ' || md5(g::text) || ' ' || md5((g * 3)::text) || ' ' || md5((g * 5)::text),
       timestamptz '2024-07-01 00:00:00+00' + g * interval '1 second', timestamptz '2024-07-02 00:00:00+00' + g * interval '1 second'
FROM generate_series(1, $N) g;
CREATE INDEX ON campgrounds (tenant);
CREATE INDEX ON campgrounds (tier);
CREATE INDEX ON reviews (campground_id);
VACUUM ANALYZE;
SQL

# The same two tables in three templates: public, per tier, per tenant.
common_tables() {
  cat <<YAML
tables:
  - name: campgrounds
    source: campgrounds
    exclude: [internal_notes]
    filter: "$1"
  - name: reviews
    source: reviews
    parent: { table: campgrounds, column: campground_id }
YAML
}
cat >"$work/public.yml" <<YAML
dataset: bench-public
tables:
  - name: campgrounds
    source: campgrounds
    exclude: [internal_notes]
  - name: reviews
    source: reviews
YAML
{ printf 'dataset: bench-tiers\nscope:\n  values: [0, 1, 2]\n  token: "SELECT 0 WHERE $1::text IS NULL"\n'; common_tables "tier <= :scope"; } >"$work/tiers.yml"
{ printf 'dataset: bench-tenants\nscope:\n  values: "SELECT DISTINCT tenant FROM campgrounds"\n  token: "SELECT 0 WHERE $1::text IS NULL"\n'; common_tables "tenant = :scope"; } >"$work/tenants.yml"

# measure NAME CMD...: wall seconds and peak RSS (MB) of CMD, into $NAME_secs and $NAME_rss.
measure() {
  local name=$1; shift
  local start end
  start=$(date +%s.%N)
  /usr/bin/time -v -o "$work/$name.time" "$@" >"$work/$name.out" 2>"$work/$name.err" || { cat "$work/$name.err" >&2; return 1; }
  end=$(date +%s.%N)
  printf -v "${name}_secs" '%s' "$(echo "$end - $start" | bc -l)"
  printf -v "${name}_rss" '%s' "$(awk '/Maximum resident set size/ {printf "%.0f", $6 / 1024}' "$work/$name.time")"
}

# The command line of a publish (paths have no spaces: mktemp and the build directory).
publish() { echo "$FERRY" publish --config "$1" --database-url "$URL" --store "$work/store" --json; }

say "Anchor: one unscoped publish of the same data"
measure public $(publish "$work/public.yml")
say "Ferry: 3 tiers"
measure tiers $(publish "$work/tiers.yml")
say "Ferry: 100 tenants"
measure tenants $(publish "$work/tenants.yml")
say "Ferry: 100 tenants again, nothing changed (every scope is exported and compared, no file written)"
measure again $(publish "$work/tenants.yml")

files() { ls "$work/store/$1/objects" | grep -c '\.sqlite$'; }
say "Results: N = $N campgrounds + $N reviews"
printf '%-40s %8s %8s %14s %14s %8s\n' "" "scopes" "files" "seconds" "s per scope" "RSS MB"
printf '%-40s %8s %8s %14.2f %14.2f %8s\n' "anchor: unscoped publish" 1 1 "$public_secs" "$public_secs" "$public_rss"
printf '%-40s %8s %8s %14.2f %14.2f %8s\n' "3 tiers (tier <= :scope)" 3 "$(files bench-tiers)" "$tiers_secs" "$(echo "$tiers_secs / 3" | bc -l)" "$tiers_rss"
printf '%-40s %8s %8s %14.2f %14.2f %8s\n' "100 tenants (tenant = :scope)" 100 "$(files bench-tenants)" "$tenants_secs" "$(echo "$tenants_secs / 100" | bc -l)" "$tenants_rss"
printf '%-40s %8s %8s %14.2f %14.2f %8s\n' "100 tenants, unchanged" 100 "$(files bench-tenants)" "$again_secs" "$(echo "$again_secs / 100" | bc -l)" "$again_rss"
echo
printf 'per tier:   %.2fx the unscoped publish (each tier exports 1/3, 2/3, 3/3 of the rows)\n' "$(echo "$tiers_secs / 3 / $public_secs" | bc -l)"
printf 'per tenant: %.3fx the unscoped publish (each tenant exports 1%% of the rows)\n' "$(echo "$tenants_secs / 100 / $public_secs" | bc -l)"
printf 'all tenants together: %.2fx one unscoped publish\n' "$(echo "$tenants_secs / $public_secs" | bc -l)"

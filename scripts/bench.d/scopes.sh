# scripts/bench scopes [N]: publishes N campgrounds + N reviews once unscoped (the anchor, same run), then per
# scope for 3 tiers (tier <= :scope, reviews follow their campground) and for 100 tenants (tenant = :scope), and
# prints the seconds per scope beside the unscoped publish. Release build; a private PostgreSQL.
# Sourced by scripts/bench after scripts/lib/common.sh.

N=${1:-1000000}
case "$N" in ''|*[!0-9]*) echo "usage: scripts/bench scopes [N]   (N campgrounds and N reviews, default 1000000)" >&2; exit 2 ;; esac

ferry_install_deps time bc
echo "load average before the run: $(cat /proc/loadavg)"
trap ferry_stop_postgres EXIT

bench_build_ferry

say "Starting a private PostgreSQL"
ferry_start_postgres
work=$(mktemp -d /tmp/ferry-bench-scopes.XXXXXX)
trap 'ferry_stop_postgres; rm -rf "$work"' EXIT
bench_database

say "Generating $N campgrounds (3 tiers, 100 tenants) + $N reviews"
bench_generate_campgrounds "$URL" "$N" tenants

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


# The command line of a publish (paths have no spaces: mktemp and the build directory).
publish() { echo "$FERRY" publish --config "$1" --database-url "$URL" --store "$work/store" --json; }

say "Anchor: one unscoped publish of the same data"
bench_measure public $(publish "$work/public.yml")
say "Ferry: 3 tiers"
bench_measure tiers $(publish "$work/tiers.yml")
say "Ferry: 100 tenants"
bench_measure tenants $(publish "$work/tenants.yml")
say "Ferry: 100 tenants again, nothing changed (every scope is exported and compared, no file written)"
bench_measure again $(publish "$work/tenants.yml")

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

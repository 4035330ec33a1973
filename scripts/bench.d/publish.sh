# scripts/bench publish [N]: times `ferry publish` against the anchor (db-to-sqlite --all) and the floor on the
# same N campgrounds + N reviews (~200 bytes/row), in one run. The floor is the extract (psql binary \copy to
# /dev/null) plus the load (`sqlite3 .import` of the same rows and columns from CSV into the tables of Ferry's own
# snapshot, without indexes). Ferry's seconds per phase (`--json` `phases`) are printed too. Then the publishes
# built from the previous version: an unchanged publish against the extract alone (Ferry's own COPY statements,
# replayed by psql to /dev/null in the same snapshot settings), and a publish after 1 % of rows changed against
# `ferry publish --full` of the same change (each from a copy of the version-1 store); these four rows are the
# fastest of FERRY_BENCH_ROUNDS (default 3) interleaved runs, every run printed beside it. Last, a publish on change
# (`--changed public.campgrounds`, what the triggers name) after 1 % of campgrounds alone changed, against a publish
# that reads every table and against the extract of campgrounds alone.
# FERRY_BENCH_ANCHOR=0 skips the slow anchor. Sourced by scripts/bench after scripts/lib/common.sh. Release build;
# a private PostgreSQL; nothing else touched.

N=${1:-1000000}
case "$N" in ''|*[!0-9]*) echo "usage: scripts/bench publish [N]   (N rows per table, default 1000000)" >&2; exit 2 ;; esac

ferry_install_deps time python3-venv bc sqlite3
echo "load average before the run: $(cat /proc/loadavg)"
trap ferry_stop_postgres EXIT

bench_build_ferry

say "Starting a private PostgreSQL"
ferry_start_postgres
work=$(mktemp -d /tmp/ferry-bench.XXXXXX)
trap 'ferry_stop_postgres; rm -rf "$work"' EXIT
bench_database

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
# PostgreSQL logs this publish's statements, so its COPY statements can be replayed below (the extract alone).
psql "$URL" -q -c "ALTER DATABASE bench SET log_statement = 'all'"
bench_measure ferry "$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$work/store" --json
psql "$URL" -q -c "ALTER DATABASE bench RESET log_statement"
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

say "Built from the previous version: an unchanged publish, and the extract alone (Ferry's COPY statements via psql)"
{
  echo "SET TIME ZONE 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'iso_8601'; SET extra_float_digits = 3;"
  echo "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;"
  grep -o 'statement: COPY (SELECT .* TO STDOUT (FORMAT binary)$' "$FERRY_PG_DIR/postgres.log" | sed 's/^statement: //; s/$/;/'
  echo "ROLLBACK;"
} >"$work/extract.sql"
copies=$(grep -c '^COPY' "$work/extract.sql")
[ "$copies" = 3 ] || { echo "expected 3 COPY statements in PostgreSQL's log, found $copies" >&2; exit 1; }
cp -a "$work/store" "$work/store-v1"
# These four rows are a few seconds each and the machine is noisy: each is measured $rounds times, interleaved, and
# the fastest run counts (all runs are printed).
rounds=${FERRY_BENCH_ROUNDS:-3}
for round in $(seq 1 "$rounds"); do
  bench_measure extract psql "$URL" -q -f "$work/extract.sql" -o /dev/null
  bench_keep_best extract
  bench_measure same "$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$work/store" --json
  bench_keep_best same
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["unchanged"] and d.get("incremental"), d' "$work/same.out"
done

say "1 % of rows change; ferry publish makes version 2, a step built from a copy of the checkpoint's file"
bench_change_one_percent "$URL"
# Untimed: the first read after an UPDATE sets the new tuples' hint bits and reads them into the cache, which would
# fall to whichever publish runs first. Both then find PostgreSQL in the same state.
psql "$URL" -q -f "$work/extract.sql" -o /dev/null
rm -rf "$work/store-step" && cp -a "$work/store-v1" "$work/store-step"
bench_measure firststep "$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$work/store-step" --json
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["version"] == 2 and d.get("incremental"), d' "$work/firststep.out"

say "Another 1 % of rows change; ferry publish (version 3, built in place of version 2's working copy), then ferry publish --full of the same change"
bench_change_one_percent "$URL" v4 52
psql "$URL" -q -f "$work/extract.sql" -o /dev/null  # untimed, as above
store_du() { du -sb "$work/store" | cut -f1; }
for round in $(seq 1 "$rounds"); do
  # Each from its own copy of the version-2 store (its work directory included).
  rm -rf "$work/store" && cp -a "$work/store-step" "$work/store"
  inc_before=$(store_du)
  bench_measure incremental "$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$work/store" --json
  bench_keep_best incremental
  inc_growth=$(( $(store_du) - inc_before ))
  rm -rf "$work/store" && cp -a "$work/store-step" "$work/store"
  full_before=$(store_du)
  bench_measure full "$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$work/store" --json --full
  bench_keep_best full
  full_growth=$(( $(store_du) - full_before ))
  python3 -c 'import json, sys
inc, full = (json.load(open(p)) for p in sys.argv[1:3])
assert inc["version"] == full["version"] == 3 and inc.get("incremental") and not full.get("incremental"), (inc, full)
assert inc["contentDigest"] == full["contentDigest"], "the two builds hold different rows"
print("rows:", inc["incremental"])' "$work/incremental.out" "$work/full.out"
done
rm -rf "$work/store"

say "On change: 1 % of campgrounds alone changes; ferry publish --changed public.campgrounds (what a publish on change reads) against ferry publish, each from a copy of the version-2 store"
cp -a "$work/store-v1" "$work/store-v2"
"$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$work/store-v2" --json >/dev/null
psql "$URL" -q -v ON_ERROR_STOP=1 -c "UPDATE campgrounds SET description = 'Sites by the lake, ' || md5(id || 'v3') || ' ' || md5(id || 'v3b'), updated_at = updated_at + interval '1 day' WHERE abs(hashtext(id)) % 100 = 51"
psql "$URL" -q -f "$work/extract.sql" -o /dev/null  # untimed, as above: hint bits and cache
{
  echo "SET TIME ZONE 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'iso_8601'; SET extra_float_digits = 3;"
  echo "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;"
  grep '^COPY' "$work/extract.sql" | head -1  # the campgrounds table's COPY: the template's first table
  echo "ROLLBACK;"
} >"$work/extract-one.sql"
for round in $(seq 1 "$rounds"); do
  bench_measure extractone psql "$URL" -q -f "$work/extract-one.sql" -o /dev/null
  bench_keep_best extractone
  rm -rf "$work/store" && cp -a "$work/store-v2" "$work/store"
  bench_measure onchange "$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$work/store" --json --changed public.campgrounds
  bench_keep_best onchange
  rm -rf "$work/store" && cp -a "$work/store-v2" "$work/store"
  bench_measure readall "$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$work/store" --json
  bench_keep_best readall
  python3 -c 'import json, sys
one, every = (json.load(open(p)) for p in sys.argv[1:3])
assert one["version"] == every["version"] == 3 and one["contentDigest"] == every["contentDigest"], "the two publishes hold different rows"' "$work/onchange.out" "$work/readall.out"
done
rm -rf "$work/store"

say "Store growth: 100 versions, each after 0.01 % of the rows changed (campgrounds; --changed public.campgrounds), from a copy of the version-1 store"
rm -rf "$work/store" && cp -a "$work/store-v1" "$work/store"
# The store's bytes without row indexes (the checkpoint's moves to the work directory at the first step): its
# objects and its manifest.
store_bytes() { find "$work/store/campgrounds" -maxdepth 2 -type f ! -name '*.rows' -printf '%s\n' | awk '{s += $1} END {print s + 0}'; }
growth_before=$(store_bytes)
per_version=$(( 2 * N / 10000 ))
for round in $(seq 1 100); do
  psql "$URL" -q -v ON_ERROR_STOP=1 -c "UPDATE campgrounds SET description = 'growth $round ' || md5(id || 'g$round'), updated_at = updated_at + interval '1 second' WHERE id IN (SELECT id FROM campgrounds WHERE abs(hashtext(id || 'g$round')) % $(( N / per_version > 0 ? N / per_version : 1 )) = 0 LIMIT $per_version)"
  growth_start=$(date +%s.%N)
  "$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --store "$work/store" --changed public.campgrounds --json >"$work/growth.json"
  echo "$(date +%s.%N) - $growth_start" | bc -l >>"$work/growth-seconds"
done
# The first of them is the first step after the checkpoint (it copies its file); the others are built in place.
growth_median=$(tail -n +2 "$work/growth-seconds" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
growth_after=$(store_bytes)
read -r growth_steps growth_step_bytes growth_checkpoints growth_version < <(python3 -c 'import json,sys
m = json.load(open(sys.argv[1])); entry = m["scopes"][0]
steps = [r["step"]["size"] for r in entry["retained"] if r.get("step") and not r.get("checkpoint")]
print(len(steps), sum(steps), sum(1 for r in entry["retained"] if r.get("checkpoint", "step" not in r)), entry["retained"][-1]["version"])' "$work/store/campgrounds/manifest.json")

say "A server with an empty cache serves version $growth_version at once, and builds it whole from the checkpoint and its $growth_steps steps when asked (GET /versions/$growth_version)"
build_port=$(ferry_free_port)
build_start=$(date +%s.%N)
"$FERRY" serve --store "$work/store" --host 127.0.0.1 --port "$build_port" >"$work/serve-build.log" 2>&1 &
build_pid=$!
trap 'ferry_stop_pid "$build_pid"; ferry_stop_postgres; rm -rf "$work"' EXIT
ferry_wait_version "http://127.0.0.1:$build_port/v1/datasets/campgrounds/manifest" "$growth_version" "" 600 \
  || { tail -20 "$work/serve-build.log" >&2; exit 1; }
serve_secs=$(echo "$(date +%s.%N) - $build_start" | bc -l)
build_start=$(date +%s.%N)
served_sha=$(curl -fsS "http://127.0.0.1:$build_port/v1/datasets/campgrounds/versions/$growth_version" | sha256sum | cut -d' ' -f1)
build_secs=$(echo "$(date +%s.%N) - $build_start" | bc -l)
ferry_stop_pid "$build_pid"
recorded_sha=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["scopes"][0]["retained"][-1]["sha256"])' "$work/store/campgrounds/manifest.json")
[ "$served_sha" = "$recorded_sha" ] || { echo "the built version $growth_version is not the recorded file" >&2; exit 1; }
grep -o 'built a version for a whole-file request.*' "$work/serve-build.log" | tail -1 || true
rm -rf "$work/store"

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
echo
echo "built from the previous version (seconds: the fastest of $rounds runs, then every run; peak RSS MB of the fastest):"
row() { printf '  %-52s %8.2f %6s   (%s)\n' "$1" "$(eval echo "\$${2}_best_secs")" "$(eval echo "\$${2}_best_rss")" "$(eval echo "\$${2}_runs")"; }
row "extract alone (Ferry's COPY statements, psql → null)" extract
row "unchanged publish" same
printf '  %-52s %8.2f %6s   (one run)\n' "1 % changed: version 2, from the checkpoint's copy" "$firststep_secs" "$firststep_rss"
row "1 % changed: version 3, built in place of version 2" incremental
row "1 % changed: ferry publish --full" full
python3 -c 'import json, sys
for label, path in (("1 % changed, in place", sys.argv[1]), ("1 % changed, --full", sys.argv[2])):
    phases = json.load(open(path)).get("phases", {})
    print(f"  phases (fastest run), {label}: " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()))' "$work/incremental.best.out" "$work/full.best.out"
printf 'unchanged vs extract alone:      %.2fx (target <= 1.0x)\n' "$(echo "$same_best_secs / $extract_best_secs" | bc -l)"
printf '1 %% change vs the first publish: %.2fx (target <= 0.4x); vs --full of the same change: %.2fx\n' \
  "$(echo "$incremental_best_secs / $ferry_secs" | bc -l)" "$(echo "$incremental_best_secs / $full_best_secs" | bc -l)"
printf '1 %% change: the store directory grew by %s bytes in place (last run; --full: %s)\n' "$inc_growth" "$full_growth"
printf '0.01 %% change (median of 99 publishes on change, in place): %.2f s = %.2fx the first publish\n' \
  "$growth_median" "$(echo "$growth_median / $ferry_secs" | bc -l)"
echo
echo "publish on change, 1 % of campgrounds changed (the fastest of $rounds runs, then every run):"
row "extract of campgrounds alone (its COPY, psql → null)" extractone
row "ferry publish --changed public.campgrounds" onchange
row "ferry publish (every table read)" readall
printf 'on change vs every table read:   %.2fx; vs the extract of that one table: %.2fx (the goal: that extract plus the store)\n' \
  "$(echo "$onchange_best_secs / $readall_best_secs" | bc -l)" "$(echo "$onchange_best_secs / $extractone_best_secs" | bc -l)"
echo
echo "a version costs what changed (100 versions of $per_version changed rows each, from version 1):"
printf '  store growth per version: %.0f bytes; its step: %.0f bytes on average (%.2fx; target <= 2x); %s checkpoint(s) retained\n' \
  "$(echo "($growth_after - $growth_before) / 100" | bc -l)" "$(echo "$growth_step_bytes / $growth_steps" | bc -l)" \
  "$(echo "($growth_after - $growth_before) / $growth_step_bytes" | bc -l)" "$growth_checkpoints"
printf '  a server with an empty cache serves version %s (its manifest) %.2f s after it starts; asked for the whole file,\n  it builds it from the checkpoint and %s steps, with its gzip copy, and sends it: %.2f s = %.2fx the first publish\n' \
  "$growth_version" "$serve_secs" "$growth_steps" "$build_secs" "$(echo "$build_secs / $ferry_secs" | bc -l)"
ls -l "$work/store-v1/campgrounds/objects" | tail -n +2

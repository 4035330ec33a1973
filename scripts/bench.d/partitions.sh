# scripts/bench partitions [SITES] [PROJECTS] [ROUNDS]: a partitioned dataset (docs/partitions.md, issue 50). SITES
# sites and as many findings (default 1,000,000 each) in PROJECTS projects (default 1,000) of Zipf-like sizes (the
# project of rank r has ~1/r of the weight: a few large ones, many small), plus a shared table of 10,000 checklist
# items; the schema is templates/projects.pg.sql's. The same tables are published twice, partitioned (one stream
# per project plus the shared one) and unpartitioned (the anchor), each into its own store served by its own
# `ferry serve`. Each figure is printed beside its anchor from the same run:
#   1. first sync of 3 projects (`ferry subscribe` + `ferry fetch --apply`): seconds and bytes, against those 3
#      projects' rows and the shared table exported by `COPY … TO STDOUT` | gzip (the floor); targets <= 2x, <= 1.3x;
#   2. a publish after 0.01 % of the rows changed in 5 other projects, against the same change published
#      unpartitioned (best of ROUNDS rounds, default 3); target <= 1.2x;
#   3. the device's update after that change: bytes on the wire (through scripts/lib/relay.py) and the server's body
#      bytes per stream (/metrics); target: 0 bytes of partition data, nothing of the unchanged shared stream.
#      Then one of its own projects changes: one patch;
#   4. both servers' RSS after the same requests (a device's sync each, then one manifest request per partition of
#      the partitioned dataset, as many of the unpartitioned one's); target <= 1.5x.
# Release build, a private PostgreSQL. Sourced by scripts/bench after scripts/lib/common.sh.

SITES=${1:-1000000}
PROJECTS=${2:-1000}
ROUNDS=${3:-3}
case "$SITES$PROJECTS$ROUNDS" in '' | *[!0-9]*)
  echo "usage: scripts/bench partitions [SITES] [PROJECTS] [ROUNDS]   (default 1000000 1000 3)" >&2; exit 2 ;; esac
[ "$PROJECTS" -ge 20 ] && [ "$SITES" -ge $((20 * PROJECTS)) ] && [ "$ROUNDS" -ge 1 ] \
  || { echo "scripts/bench partitions: at least 20 projects, 20 sites per project and 1 round" >&2; exit 2; }
SHARED=10000

ferry_install_deps time bc curl
echo "load average before the run: $(cat /proc/loadavg)"
work=$(mktemp -d /tmp/ferry-bench-partitions.XXXXXX)
parts_pid=""
whole_pid=""
relay_pid=""
cleanup() {
  ferry_stop_pid "$relay_pid"
  ferry_stop_pid "$parts_pid"
  ferry_stop_pid "$whole_pid"
  ferry_stop_postgres
  rm -rf "$work"
}
trap cleanup EXIT
helper() { python3 scripts/lib/partitions_bench.py "$@"; }

bench_build_ferry

say "Starting a private PostgreSQL; $SITES sites + $SITES findings in $PROJECTS projects, $SHARED checklist items"
ferry_start_postgres
bench_database
psql "$URL" -q -v ON_ERROR_STOP=1 -f templates/projects.pg.sql 2>&1 | grep -v NOTICE || true
psql "$URL" -q -v ON_ERROR_STOP=1 -v sites="$SITES" -v projects="$PROJECTS" -v shared="$SHARED" <<'SQL'
TRUNCATE findings, sites, project_members, projects, checklist_items;
SET session_replication_role = replica;  -- skip FK triggers while loading
INSERT INTO checklist_items (code, title, category, created_at, updated_at)
SELECT 'C-' || lpad(g::text, 5, '0'), 'Check ' || g || ': ' || md5(g::text), (ARRAY['fire', 'electrical', 'access', 'site'])[1 + g % 4],
       timestamptz '2026-01-05 08:00:00+00', timestamptz '2026-01-05 08:00:00+00' + g * interval '1 second'
FROM generate_series(1, :shared) g;
INSERT INTO projects (id, name, client, archived, created_at, updated_at)
SELECT g, 'Project ' || g, 'Client ' || (g % 37), false,
       timestamptz '2020-01-01 00:00:00+00' + g * interval '1 hour', timestamptz '2020-01-01 00:00:00+00' + g * interval '1 hour'
FROM generate_series(1, :projects) g;
-- Project r gets a share 1/r of the sites (at least one; project 1 takes the rounding), its sites numbered in a run.
CREATE TEMP TABLE sizes AS
  WITH w AS (SELECT g AS project, 1.0 / g AS weight FROM generate_series(1, :projects) g),
       n AS (SELECT project, greatest(1, floor(:sites * weight / sum(weight) OVER ()))::bigint AS n FROM w),
       fixed AS (SELECT project, n + CASE WHEN project = 1 THEN :sites - sum(n) OVER () ELSE 0 END AS n FROM n)
  SELECT project, n, sum(n) OVER (ORDER BY project) - n AS first FROM fixed;
INSERT INTO sites (id, project_id, name, address, lat, lon, created_at, updated_at)
SELECT s.first + i, s.project, 'Site ' || (s.first + i), (s.first + i) || ' Storgatan, ' || md5((s.first + i)::text),
       56 + ((s.first + i) % 10000) / 10000.0, 14 + ((s.first + i) % 7919) / 7919.0,
       timestamptz '2021-01-01 00:00:00+00' + (s.first + i) * interval '1 second',
       timestamptz '2021-06-01 00:00:00+00' + (s.first + i) * interval '1 second'
FROM sizes s, generate_series(1, s.n) i;
INSERT INTO findings (id, site_id, checklist_code, severity, status, note, created_at, updated_at)
SELECT md5('finding-' || g)::uuid::text, g, 'C-' || lpad((1 + g % :shared)::text, 5, '0'), 1 + g % 3,
       (ARRAY['open', 'fixed', 'accepted'])[1 + g % 3], 'Finding ' || g || ': ' || md5((g * 7)::text),
       timestamptz '2022-01-01 00:00:00+00' + g * interval '1 second', timestamptz '2022-06-01 00:00:00+00' + g * interval '1 second'
FROM generate_series(1, :sites) g;
VACUUM ANALYZE;
SQL
echo "project sizes (sites): $(psql "$URL" -At -c "SELECT 'largest ' || max(c) || ', median ' || percentile_disc(0.5) WITHIN GROUP (ORDER BY c) || ', smallest ' || min(c) FROM (SELECT count(*) c FROM sites GROUP BY project_id) x")"

# The device's 3 projects (ranks ~P/200, P/20, P/2) and the 5 others that change (ranks 3, 7, P/10, P/4, P/3 + 1).
mine=($(( PROJECTS / 200 > 2 ? PROJECTS / 200 : 2 )) $(( PROJECTS / 20 )) $(( PROJECTS / 2 )))
others=(3 7 $(( PROJECTS / 10 )) $(( PROJECTS / 4 )) $(( PROJECTS / 3 + 1 )))
[ "$(printf '%s\n' "${mine[@]}" "${others[@]}" | sort -u | wc -l)" = 8 ] || { echo "the chosen projects overlap" >&2; exit 1; }
in_list() { local IFS=,; echo "$*"; }
mine_sql=$(in_list "${mine[@]}")

# The same tables in two templates: partitioned as templates/projects.yml (public: no access query), and not.
table_lines() {  # table_lines [partitioned]
  local projects="" sites="" findings=""
  if [ "${1:-}" = partitioned ]; then
    projects=$'\n    partition: id'
    sites=$'\n    partition: project_id'
    findings=$'\n    parent: { table: sites, column: site_id }'
  fi
  cat <<YAML
tables:
  - name: projects
    source: projects$projects
  - name: sites
    source: sites$sites
    indexes: ["CREATE INDEX sites_project ON sites(project_id)"]
  - name: findings
    source: findings$findings
    indexes: ["CREATE INDEX findings_site ON findings(site_id)"]
    writable: true
    merge: {rule: newest-wins, per: column}
  - name: checklist_items
    source: checklist_items
YAML
}
{ printf 'dataset: projects\npartition:\n  table: projects\n  key: id\n  values: "SELECT id FROM projects WHERE NOT archived"\n'
  table_lines partitioned; } >"$work/parts.yml"
{ printf 'dataset: projects-whole\n'; table_lines; } >"$work/whole.yml"

publish() {  # publish NAME TEMPLATE STORE: one measured publish
  bench_measure "$1" "$FERRY" publish --config "$2" --database-url "$URL" --store "$3" --json
}
say "First publishes: partitioned ($PROJECTS partitions + shared) and unpartitioned"
publish initparts "$work/parts.yml" "$work/store-parts"
publish initwhole "$work/whole.yml" "$work/store-whole"
printf 'partitioned %.2f s (peak RSS %s MB), unpartitioned %.2f s (peak RSS %s MB); stores %s and %s\n' \
  "$initparts_secs" "$initparts_rss" "$initwhole_secs" "$initwhole_rss" \
  "$(du -sh "$work/store-parts" | cut -f1)" "$(du -sh "$work/store-whole" | cut -f1)"

serve() {  # serve STORE: starts ferry serve on a free port; sets served_pid and served_url
  local port; port=$(ferry_free_port)
  "$FERRY" serve --store "$1" --host 127.0.0.1 --port "$port" >"$1.serve.log" 2>&1 &
  served_pid=$!
  served_url=http://127.0.0.1:$port
  ferry_wait_http "$served_url/healthz" "$served_pid" || { tail -20 "$1.serve.log" >&2; exit 1; }
}
rss_of() { awk -v k="$2:" '$1 == k {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }  # rss_of PID VmRSS|VmHWM: MB
serve "$work/store-parts"; parts_pid=$served_pid; parts=$served_url
serve "$work/store-whole"; whole_pid=$served_pid; whole=$served_url
listing=$parts/v1/datasets/projects/partitions
ferry_wait_http "$listing" "$parts_pid" 60 || { tail -20 "$work/store-parts.serve.log" >&2; exit 1; }
ferry_wait_http "$whole/v1/datasets/projects-whole/manifest" "$whole_pid" 60
parts_idle=$(rss_of "$parts_pid" VmRSS); whole_idle=$(rss_of "$whole_pid" VmRSS)

# The device's figures need `ferry subscribe` (the client's part of issue 50); without it they are printed as n/a.
has_client=""
"$FERRY" --help | grep -Eq '^  subscribe ' && has_client=1
[ -n "$has_client" ] || echo "this ferry has no \`subscribe\` command: the device's figures are skipped" >&2

say "The floor: projects ${mine[*]} and the shared table, COPY … TO STDOUT | gzip"
floor_rows=$(psql "$URL" -At -c "SELECT (SELECT count(*) FROM sites WHERE project_id IN ($mine_sql)) * 2 + 3 + $SHARED")
bench_measure floor bash -c "psql '$URL' -q -v ON_ERROR_STOP=1 \
  -c 'COPY (SELECT * FROM projects WHERE id IN ($mine_sql)) TO STDOUT' \
  -c 'COPY (SELECT * FROM sites WHERE project_id IN ($mine_sql)) TO STDOUT' \
  -c 'COPY (SELECT f.* FROM findings f JOIN sites s ON s.id = f.site_id WHERE s.project_id IN ($mine_sql)) TO STDOUT' \
  -c 'COPY checklist_items TO STDOUT' | gzip -c"
floor_bytes=$(stat -c %s "$work/floor.out")

device=$work/device
first_body=n/a; first_secs=n/a; first_client=""; first_bytes='{}'; update_bytes='{}'; own_bytes='{}'; update_wire=n/a
if [ -n "$has_client" ]; then
say "Ferry: ferry subscribe ${mine[*]} + ferry fetch --apply"
curl -fsS "$parts/metrics" >"$work/m0"
bench_measure subscribe "$FERRY" subscribe --dir "$device" --server "$parts" --dataset projects "${mine[@]}"
bench_measure first "$FERRY" fetch --dir "$device" --server "$parts" --dataset projects --apply --json
curl -fsS "$parts/metrics" >"$work/m1"
first_bytes=$(helper bytes "$work/m0" "$work/m1")
first_body=$(echo "$first_bytes" | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])')
first_client=$(helper last-json "$work/first.out" bytesReceived)
first_secs=$(echo "$subscribe_secs + $first_secs" | bc -l)
device_rows=$(helper rows "$device/database.db")
echo "device rows: $device_rows; PostgreSQL: $floor_rows rows in the floor"
fi

say "A device of the unpartitioned dataset (context): ferry fetch --apply of everything"
bench_measure wholefirst "$FERRY" fetch --dir "$work/device-whole" --server "$whole" --dataset projects-whole --apply --json

# change TAG: 0.01 % of the rows (at least 10), in the 5 other projects: same-length text, updated_at bumped.
per_project=$(( 2 * SITES / 10000 / 10 > 1 ? 2 * SITES / 10000 / 10 : 1 ))
change() {
  psql "$URL" -q -v ON_ERROR_STOP=1 -v tag="$1" -v k="$per_project" <<SQL
UPDATE sites SET name = 'Site ' || id || ' ' || left(md5(:'tag'), 4), updated_at = updated_at + interval '1 second'
 WHERE id IN (SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY project_id ORDER BY id) r
                FROM sites WHERE project_id IN ($(in_list "${others[@]}"))) x WHERE r <= :k);
UPDATE findings SET note = 'Finding ' || left(md5(id || :'tag'), 8), updated_at = updated_at + interval '1 second'
 WHERE id IN (SELECT id FROM (SELECT f.id, row_number() OVER (PARTITION BY s.project_id ORDER BY f.id) r
                FROM findings f JOIN sites s ON s.id = f.site_id WHERE s.project_id IN ($(in_list "${others[@]}"))) x WHERE r <= :k);
SQL
}
changed_rows=$(( 2 * 5 * per_project ))

say "Publishes after $changed_rows rows changed in projects ${others[*]}: $ROUNDS rounds, each published both ways"
for round in $(seq 1 "$ROUNDS"); do
  before=$(helper version "$listing" "${others[0]}")
  change "round$round"
  if [ $(( round % 2 )) = 1 ]; then order="parts whole"; else order="whole parts"; fi
  for which in $order; do
    publish "pub$which" "$work/$which.yml" "$work/store-$which"
    bench_keep_best "pub$which"
  done
  echo "round $round: partitioned $(printf '%.2f' "$pubparts_secs") s, unpartitioned $(printf '%.2f' "$pubwhole_secs") s"
  helper wait "$listing" "${others[0]}" "$before" 60 >/dev/null
  if [ "$round" = 1 ] && [ -n "$has_client" ]; then
    say "The device updates (3 projects held, 5 others changed): through a byte-counting relay"
    "$FERRY" status --dir "$device" --json >"$work/status-before.json"
    python3 scripts/lib/relay.py --target "${parts##*:}" --port-file "$work/relay.port" --stats "$work/relay.json" &
    relay_pid=$!
    for _ in $(seq 1 100); do [ -s "$work/relay.port" ] && break; sleep 0.05; done
    curl -fsS "$parts/metrics" >"$work/m2"
    "$FERRY" fetch --dir "$device" --server "http://127.0.0.1:$(cat "$work/relay.port")" --dataset projects --apply --json >"$work/update.out"
    curl -fsS "$parts/metrics" >"$work/m3"
    ferry_stop_pid "$relay_pid"; relay_pid=""
    update_bytes=$(helper bytes "$work/m2" "$work/m3")
    update_wire=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["down"])' "$work/relay.json")
  fi
done

if [ -n "$has_client" ]; then
say "One of the device's own projects (${mine[1]}) changes: the update takes its patch"
before=$(helper version "$listing" "${mine[1]}")
psql "$URL" -q -v ON_ERROR_STOP=1 -c "UPDATE sites SET name = name || '!', updated_at = updated_at + interval '1 second'
  WHERE id IN (SELECT id FROM sites WHERE project_id = ${mine[1]} ORDER BY id LIMIT $per_project)"
"$FERRY" publish --config "$work/parts.yml" --database-url "$URL" --store "$work/store-parts" --json >/dev/null
helper wait "$listing" "${mine[1]}" "$before" 60 >/dev/null
curl -fsS "$parts/metrics" >"$work/m4"
"$FERRY" fetch --dir "$device" --server "$parts" --dataset projects --apply --json >"$work/own.out"
curl -fsS "$parts/metrics" >"$work/m5"
own_bytes=$(helper bytes "$work/m4" "$work/m5")
fi

say "RSS: the same requests to both servers (one manifest request per partition, as many to the unpartitioned)"
paths=("/v1/datasets/projects/partitions" "/v1/datasets/projects/shared/manifest")
for key in $(seq 1 "$PROJECTS"); do paths+=("/v1/datasets/projects/partitions/$key/manifest"); done
count=${#paths[@]}
echo "partitioned:   $(helper requests "$parts" "$count" "${paths[@]}")"
echo "unpartitioned: $(helper requests "$whole" "$count" /v1/datasets /v1/datasets/projects-whole/manifest)"
parts_rss=$(rss_of "$parts_pid" VmRSS); parts_hwm=$(rss_of "$parts_pid" VmHWM)
whole_rss=$(rss_of "$whole_pid" VmRSS); whole_hwm=$(rss_of "$whole_pid" VmHWM)

field() { echo "$1" | python3 -c "import json,sys; print(json.load(sys.stdin).get(sys.argv[1], 'n/a'))" "$2"; }
ratio() { case "$1$2" in *n/a*) echo n/a ;; *) echo "$1 / $2" | bc -l | xargs printf '%.2f' ;; esac; }
num() { case "$1" in n/a) echo n/a ;; *) printf '%.2f' "$1" ;; esac; }
say "Results: $SITES sites + $SITES findings in $PROJECTS projects, $SHARED shared rows; device projects ${mine[*]}"
printf '%-62s %14s %14s %8s %s\n' "" "Ferry" "anchor" "ratio" "target"
printf '%-62s %14s %14s %8s %s\n' "first sync of 3 projects: bytes (server body bytes)" "$first_body" "$floor_bytes" \
  "$(ratio "$first_body" "$floor_bytes")" "<= 1.3 (anchor: COPY | gzip of their $floor_rows rows)"
printf '%-62s %14s %14.2f %8s %s\n' "first sync of 3 projects: seconds (subscribe + fetch --apply)" "$(num "$first_secs")" "$floor_secs" \
  "$(ratio "$first_secs" "$floor_secs")" "<= 2"
printf '%-62s %14.2f %14.2f %8s %s\n' "publish after $changed_rows rows changed in 5 projects: s (best)" "$pubparts_best_secs" \
  "$pubwhole_best_secs" "$(ratio "$pubparts_best_secs" "$pubwhole_best_secs")" "<= 1.2 (anchor: unpartitioned)"
printf '%-62s %14s %14s %8s %s\n' "server RSS after the same requests, MB (now)" "$parts_rss" "$whole_rss" \
  "$(ratio "$parts_rss" "$whole_rss")" "<= 1.5 (anchor: unpartitioned)"
printf '%-62s %14s %14s %8s\n' "server RSS, MB (peak)" "$parts_hwm" "$whole_hwm" "$(ratio "$parts_hwm" "$whole_hwm")"
printf '%-62s %14s %14s %8s\n' "server RSS, MB (idle, after start)" "$parts_idle" "$whole_idle" "$(ratio "$parts_idle" "$whole_idle")"
echo
echo "first sync: the client counted ${first_client:-?} bytes received; server body bytes by stream: $(echo "$first_bytes" | python3 -c 'import json,sys; d=json.load(sys.stdin); print({k: d.get(k) for k in ("listing", "shared", "partitions", "other")})')"
echo "first sync of the whole unpartitioned dataset (context): $(printf '%.2f' "$wholefirst_secs") s, $(helper last-json "$work/wholefirst.out" bytesReceived) bytes received"
echo "publish runs (s): partitioned$pubparts_runs; unpartitioned$pubwhole_runs; peak RSS $pubparts_best_rss MB against $pubwhole_best_rss MB"
echo "update, 5 other projects changed: $update_wire bytes on the wire (headers included); server body bytes: partition streams $(field "$update_bytes" partitions) (target 0), shared $(field "$update_bytes" shared) (unchanged: target 0), listing $(field "$update_bytes" listing), other $(field "$update_bytes" other)"
echo "update, its own project ${mine[1]} changed ($per_project sites): server body bytes: partition streams $(field "$own_bytes" partitions), shared $(field "$own_bytes" shared), listing $(field "$own_bytes" listing); routes $(field "$own_bytes" routes)"
[ -n "$has_client" ] && echo "device after the updates: $(helper rows "$device/database.db"); ferry status: $("$FERRY" status --dir "$device" --json | python3 -c 'import json,sys; print(json.load(sys.stdin).get("partitions"))')"
true

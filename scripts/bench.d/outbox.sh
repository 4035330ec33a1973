# scripts/bench outbox [ROWS] — sourced by scripts/bench after scripts/lib/common.sh.
# Changes applied per second by the merge engine (ChangeMerger, as behind POST /v1/datasets/{d}/changes) for
# batches of 500 updates to distinct rows, beside the floor measured in the same run: the same updates sent by
# psql as one multi-row UPDATE … FROM (VALUES …) statement per 500 rows.
rows=${1:-50000}
batch=500

ferry_install_deps
trap ferry_stop_postgres EXIT
say "Starting a private PostgreSQL"
ferry_start_postgres
psql_cmd=("$FERRY_PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$FERRY_PG_URL")
[ -x "$FERRY_PG_BIN/psql" ] || psql_cmd=(psql -X -q -v ON_ERROR_STOP=1 "$FERRY_PG_URL")
"${psql_cmd[@]}" -c "CREATE TABLE bench_trips(id int PRIMARY KEY, name text NOT NULL, seats int NOT NULL, stops int NOT NULL,
  created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL)"

say "Building the benchmark program (release)"
swift build -c release --product ferry-outbox-bench >/dev/null
bench_bin=$(swift build -c release --show-bin-path)/ferry-outbox-bench

say "Ferry: $rows updates in batches of $batch"
read -r _ ferry_s ferry_rate < <("$bench_bin" "$FERRY_PG_URL" "$rows" "$batch" 1)
read -r _ ferry2_s ferry2_rate < <("$bench_bin" "$FERRY_PG_URL" "$rows" "$batch" 2)

say "Floor: psql, one UPDATE … FROM (VALUES …) per $batch rows"
sql=$(mktemp /tmp/ferry-outbox-floor.XXXXXX.sql)
python3 - "$rows" "$batch" >"$sql" <<'PY'
import sys
rows, batch = int(sys.argv[1]), int(sys.argv[2])
for start in range(1, rows + 1, batch):
    values = ",".join(f"({i},{i % 7},'Växjö-Kalmar {i}')" for i in range(start, min(start + batch, rows + 1)))
    print("UPDATE bench_trips AS t SET seats = v.seats, name = v.name, updated_at = clock_timestamp() "
          f"FROM (VALUES {values}) AS v(id, seats, name) WHERE t.id = v.id;")
PY
"${psql_cmd[@]}" -c "TRUNCATE bench_trips; INSERT INTO bench_trips SELECT g, 'Växjö-Kalmar', 0, 0, now(), now() FROM generate_series(1, $rows) g"
"${psql_cmd[@]}" -c "VACUUM ANALYZE bench_trips"  # VACUUM cannot share a transaction with the load
floor_start=$(date +%s.%N)
"${psql_cmd[@]}" -f "$sql"
floor_end=$(date +%s.%N)
rm -f "$sql"
floor_s=$(python3 -c "print(f'{$floor_end - $floor_start:.3f}')")
floor_rate=$(python3 -c "print(f'{$rows / ($floor_end - $floor_start):.0f}')")

say "Results ($rows updates, batches of $batch)"
printf '%-44s %10s %14s\n' "" "seconds" "changes/s"
printf '%-44s %10s %14s\n' "ferry merge engine, 1 connection" "$ferry_s" "$ferry_rate"
printf '%-44s %10s %14s\n' "ferry merge engine, 2 connections" "$ferry2_s" "$ferry2_rate"
printf '%-44s %10s %14s\n' "floor: psql UPDATE … FROM (VALUES …)" "$floor_s" "$floor_rate"
python3 -c "print(f'ratio ferry/floor: {$ferry_rate / $floor_rate:.2f} (1 connection), {$ferry2_rate / $floor_rate:.2f} (2); target >= 10000 changes/s')"

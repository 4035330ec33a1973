# scripts/bench triggers [TRANSACTIONS]: what `ferry triggers install` costs a writing transaction. pgbench runs
# single-row UPDATEs (one per transaction, 1 client) on the trips table, without the trigger (the anchor), then with
# it while a session LISTENs on the channel as `ferry schedule --on-change` does, three rounds each, best kept.
# Release build; a private PostgreSQL; nothing else touched.

TX=${1:-20000}
case "$TX" in ''|*[!0-9]*) echo "usage: scripts/bench triggers [TRANSACTIONS]   (default 20000)" >&2; exit 2 ;; esac

ferry_install_deps time bc
echo "load average before the run: $(cat /proc/loadavg)"

bench_build_ferry

say "Starting a private PostgreSQL"
ferry_start_postgres
work=$(mktemp -d /tmp/ferry-bench.XXXXXX)
listen_pid=
cleanup() {
  [ -n "$listen_pid" ] && kill -- "-$listen_pid" 2>/dev/null
  ferry_stop_postgres
  rm -rf "$work"
}
trap cleanup EXIT
bench_database
psql "$URL" -q -f templates/trips.pg.sql
psql "$URL" -q -c "INSERT INTO trips (id, name) SELECT 'row-' || i, 'Trip ' || i FROM generate_series(1, 10000) AS i"
PGBENCH=$(ls /usr/lib/postgresql/*/bin/pgbench | tail -1)
cat >"$work/update.sql" <<'SQL'
\set i random(1, 10000)
UPDATE trips SET passengers = passengers + 1, "updatedAt" = now() WHERE id = 'row-' || :i;
SQL
# tps ROUND: pgbench's transactions per second, excluding connection time.
tps() { "$PGBENCH" -n -c 1 -t "$TX" -f "$work/update.sql" "$URL" 2>/dev/null | awk '/^tps/ {print $3; exit}'; }
best() { local b=0 t; for _ in 1 2 3; do t=$(tps); b=$(echo "if ($t > $b) $t else $b" | bc -l); done; echo "$b"; }

say "Without the trigger: $TX single-row UPDATE transactions, 3 rounds"
without=$(best)
say "ferry triggers install, and a session LISTENing on the channel"
"$FERRY" triggers install --config templates/trips.yml --database-url "$URL"
# A listener that drains notifications as they come, like ferry's (psql reads them after each command it runs).
setsid bash -c 'while sleep 0.2; do echo "SELECT 1;"; done | psql "$1" -q -c "LISTEN ferry_trips" -f - >/dev/null 2>&1' _ "$URL" &
listen_pid=$!  # its own process group: stopped below with everything in it
say "With the trigger: the same, 3 rounds"
with=$(best)
kill -- "-$listen_pid" 2>/dev/null; listen_pid=
"$FERRY" triggers remove --config templates/trips.yml --database-url "$URL"

say "Results"
printf '%-44s %12s\n' "single-row UPDATE transactions" "per second"
printf '%-44s %12.0f\n' "without the trigger (anchor)" "$without"
printf '%-44s %12.0f\n' "with the trigger, one listener" "$with"
printf 'the trigger costs %.1f %% of the write rate, %.1f µs per transaction\n' \
  "$(echo "100 * ($without - $with) / $without" | bc -l)" "$(echo "1000000 / $with - 1000000 / $without" | bc -l)"

# scripts/bench fresh [DEVICES] [COMMITS]: how long a committed row takes to reach every device, through nginx, in one
# run: publish on change (`ferry triggers install`, `serve --publish-on-change`) with every device on `ferry watch`
# (the manifest long-poll), against today's behaviour as the anchor (a 15 s publish schedule and a fetch every 30 s
# per device). One row is committed per second for COMMITS seconds (default 60) with DEVICES devices (default 200);
# printed: p50 and p99 from each commit to each device holding it, and to the last device, and the origin's manifest
# requests per version (scripts/lib/fresh.py). Release build; a private PostgreSQL; nothing else touched.

DEVICES=${1:-200}
COMMITS=${2:-60}
case "$DEVICES$COMMITS" in *[!0-9]*) echo "usage: scripts/bench fresh [DEVICES] [COMMITS]" >&2; exit 2 ;; esac

ferry_install_deps nginx-light
echo "load average before the run: $(cat /proc/loadavg)"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

bench_build_ferry

say "Starting a private PostgreSQL"
ferry_start_postgres
out=$(mktemp -d /tmp/ferry-bench.XXXXXX)
trap 'ferry_stop_postgres; rm -rf "$out"' EXIT
psql "$FERRY_PG_URL" -q -c "CREATE DATABASE fresh"
URL="postgres://postgres@127.0.0.1:$FERRY_PG_PORT/fresh"
psql "$URL" -q -f templates/trips.pg.sql

say "Anchor: a 15 s publish schedule, $DEVICES devices each fetching every 30 s; one commit per second for $COMMITS s"
python3 scripts/lib/fresh.py --ferry "$FERRY" --pg-url "$URL" --mode anchor --devices "$DEVICES" --commits "$COMMITS" | tee "$out/anchor.json"
say "Ferry: publish on change, $DEVICES devices on ferry watch (long-poll through nginx); the same commits"
python3 scripts/lib/fresh.py --ferry "$FERRY" --pg-url "$URL" --mode onchange --devices "$DEVICES" --commits "$COMMITS" | tee "$out/onchange.json"

say "Results"
python3 - "$out/anchor.json" "$out/onchange.json" <<'PY'
import json, sys
anchor, fresh = (json.load(open(p)) for p in sys.argv[1:3])
print(f"{'commit → device holding the row':44} {'p50 s':>8} {'p99 s':>8} {'last device p99 s':>18} {'origin manifest req/version':>28}")
for label, r in (("anchor: 15 s schedule, 30 s fetch", anchor), ("Ferry: on change + ferry watch", fresh)):
    print(f"{label:44} {r['p50']:8.2f} {r['p99']:8.2f} {r['everyDeviceP99']:18.2f} {r['originPerVersion'] or 0:28.2f}")
print(f"versions published: anchor {anchor['versions']}, Ferry {fresh['versions']}; (commit, device) pairs never served: anchor {anchor['missed']}, Ferry {fresh['missed']}")
print(f"{'split at the version being in the store':44} {'commit → in store p50/p99 s':>30} {'in store → device p50/p99 s':>30} {'publish s p50/p99':>20}")
for label, r in (("anchor", anchor), ("Ferry", fresh)):
    print(f"{label:44} {r['publishedP50']:14.2f} /{r['publishedP99']:6.2f}      {r['deliveredP50']:14.2f} /{r['deliveredP99']:6.2f}      {r['publishSecondsP50']:8.2f} /{r['publishSecondsP99']:6.2f}")
print(f"targets: p99 <= 2 s plus the publish time; <= 2 origin manifest requests per version per cache")
PY

# scripts/bench history [VERSIONS]: what a long history costs (issue 47). `ferry-history-bench` publishes VERSIONS
# versions (default 100000) of a 10,000-row table on a simulated clock (a version every 10 s, a 30-day patch horizon,
# the default tiers), 2 rows changed per version, in one process. At versions 100, 10,000 and VERSIONS it prints
# the mean publish time of the last 10 versions, the store's manifest.json and the manifest a device reads. Targets:
# a publish at the last mark <= 1.2x a publish at version 100 (the same run's anchor); manifests under 256 KB (store)
# and 16 KB (device). Release build; a private PostgreSQL; sourced by scripts/bench after scripts/lib/common.sh.

VERSIONS=${1:-100000}
case "$VERSIONS" in '' | *[!0-9]*) echo "usage: scripts/bench history [VERSIONS]" >&2; exit 2 ;; esac

echo "load average before the run: $(cat /proc/loadavg)"
work=$(mktemp -d /tmp/ferry-bench-history.XXXXXX)
trap 'ferry_stop_postgres; rm -rf "$work"' EXIT

say "Building ferry-history-bench (release)"
swift build -c release --product ferry-history-bench 2>&1 | tail -1
bin=$(swift build -c release --show-bin-path)

say "Starting a private PostgreSQL"
ferry_start_postgres
bench_database

marks=(100 10000 "$VERSIONS")
say "Publishing $VERSIONS versions on a simulated clock (a version every 10 s); figures at versions ${marks[*]}"
"$bin/ferry-history-bench" "$URL" "$work/store" "$VERSIONS" "${marks[@]}" | tee "$work/marks.jsonl"

say "Results"
python3 - "$work/marks.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
first = rows[0]
print(f"{'version':>8} {'publish s':>10} {'x v100':>7} {'store manifest':>15} {'device manifest':>16} {'retained':>9} {'history':>8}")
for r in rows:
    print(f"{int(r['version']):>8} {r['publishSeconds']:>10.4f} {r['publishSeconds'] / first['publishSeconds']:>7.2f} "
          f"{int(r['storeManifestBytes']):>15,} {int(r['deviceManifestBytes']):>16,} {int(r['retained']):>9} {int(r['history']):>8}")
last = rows[-1]
print(f"publish at version {int(last['version'])}: {last['publishSeconds'] / first['publishSeconds']:.2f}x a publish at version "
      f"{int(first['version'])} (target <= 1.2x); largest manifests: store {max(r['storeManifestBytes'] for r in rows) / 1024:.1f} KB "
      f"(target < 256 KB), device {max(r['deviceManifestBytes'] for r in rows) / 1024:.1f} KB (target < 16 KB)")
PY

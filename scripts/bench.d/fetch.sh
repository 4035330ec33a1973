# scripts/bench fetch [--size-mb N] [--runs R]: `ferry fetch --apply` against the anchor
# `curl -o updated.db URL && sha256sum updated.db && mv updated.db database.db`, same server, same run.
# The client directory holds an older small version, so ferry does the whole update path: conditional GET,
# streaming to .ferry/partial.sqlite while hashing, verification (checksum, quick_check, ferry_snapshot), fsync,
# rename to updated.db, then the apply swap. Both client transports are measured in the same run: the CLI's
# AsyncHTTPClient (FerryClientNIO; the gzip copy on the wire) and FerryClient's default URLSession
# (`--transport urlsession`: FoundationNetworking on Linux, which asks for the SQLite file itself).
# Prints the median wall time of each, the ratios, and peak RSS.
#
# scripts/bench fetch --campgrounds N [--runs R] [--ferry-bin PATH]: the same update on the benchmark dataset (N campgrounds + N
# reviews, ~500 MB at N = 1000000, published by `ferry publish` from a private PostgreSQL, so the gzip copy is the
# publisher's own), against two anchors from the same run: the gzip copy (`curl` of the version URL with
# `Accept-Encoding: gzip` | `gzip -dc` > updated.db, `sha256sum`, `mv`; issue 41's goal: ferry <= 0.5x) and the
# SQLite file itself (`curl`, `sha256sum`, `mv`). Prints every run and the best of each, with the ratios.
# --ferry-bin runs a ferry binary built before instead of building.
# Sourced by scripts/bench after scripts/lib/common.sh.

size_mb=120
runs=5
campgrounds=""
ferry_bin=""
while [ $# -gt 0 ]; do
  case "$1" in
    --size-mb) size_mb=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --campgrounds) campgrounds=$2; shift 2 ;;
    --ferry-bin) ferry_bin=$2; shift 2 ;;
    *) echo "usage: scripts/bench fetch [--size-mb N | --campgrounds N [--ferry-bin PATH]] [--runs R]" >&2; exit 2 ;;
  esac
done
if [ -n "$campgrounds" ]; then
  . scripts/lib/bench_fetch_campgrounds.sh
  exit 0
fi

ferry_install_deps curl time
echo "load average before the run: $(cat /proc/loadavg)"
work=$(mktemp -d /tmp/ferry-bench-fetch.XXXXXX)
ferry_pid=""
cleanup() {
  [ -n "$ferry_pid" ] && kill "$ferry_pid" 2>/dev/null && wait "$ferry_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

bench_build_ferry
ferry_bin=$FERRY

say "Making a store: version 1 (small) and version 2 (${size_mb} MB)"
# Self-contained: Python's sqlite3 writes real Ferry snapshots (data tables + ferry_snapshot + ferry_tables), then
# the store layout before content addressing (versions/N.sqlite, N.sqlite.gz, N.json, manifest.json), which ferry serve reads as it is.
python3 - "$work/store" "$size_mb" <<'PY'
import gzip, hashlib, json, os, sqlite3, sys, datetime
root, size_mb = sys.argv[1], int(sys.argv[2])
d = os.path.join(root, "bench", "versions"); os.makedirs(d)
created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
def make(version, mb):
    path = os.path.join(d, f"{version}.sqlite")
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE trips(id INTEGER PRIMARY KEY, name TEXT, notes TEXT, payload BLOB)")
    rows = 0
    with db:
        while os.path.getsize(path) < mb * 1024 * 1024:
            db.executemany("INSERT INTO trips(name, notes, payload) VALUES (?,?,?)",
                [(f"trip {rows+i}", "campground near the lake " * 8, os.urandom(2048)) for i in range(2000)])
            rows += 2000
    with db:
        db.executescript("""
          CREATE TABLE ferry_snapshot(dataset TEXT NOT NULL, version INTEGER NOT NULL, schemaVersion INTEGER NOT NULL,
            createdAt TEXT NOT NULL, tables TEXT NOT NULL);
          CREATE TABLE ferry_tables(name TEXT PRIMARY KEY, primaryKey TEXT NOT NULL, columns TEXT NOT NULL,
            writable INTEGER NOT NULL, merge TEXT NOT NULL, createdColumn TEXT, updatedColumn TEXT, rows INTEGER NOT NULL);""")
        db.execute("INSERT INTO ferry_snapshot VALUES ('bench', ?, 1, ?, ?)", (version, created, json.dumps({"trips": rows})))
        db.execute("INSERT INTO ferry_tables VALUES ('trips', '[\"id\"]', '[\"id\",\"name\",\"notes\",\"payload\"]', 0, 'newest-wins', NULL, NULL, ?)", (rows,))
    db.close()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20): h.update(chunk)
    with open(path, "rb") as src, gzip.open(path + ".gz", "wb", compresslevel=1) as dst:
        while chunk := src.read(1 << 20): dst.write(chunk)
    record = {"version": version, "sha256": h.hexdigest(), "size": os.path.getsize(path),
              "gzipSize": os.path.getsize(path + ".gz"), "createdAt": created, "schemaVersion": 1,
              "tables": {"trips": rows}, "dataDigest": f"{version:064d}"}
    json.dump(record, open(os.path.join(d, f"{version}.json"), "w"), sort_keys=True)
    return record
make(1, 1)
record = make(2, size_mb)
manifest = dict(record, dataset="bench", versions=[1, 2]); del manifest["dataDigest"]
json.dump(manifest, open(os.path.join(root, "bench", "manifest.json"), "w"), sort_keys=True)
print(f"version 2: {record['size']} bytes, sha256 {record['sha256']}")
PY
sha=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sha256"])' "$work/store/bench/manifest.json")

say "Starting ferry serve"
port=$(ferry_free_port)
"$ferry_bin" serve --store "$work/store" --host 127.0.0.1 --port "$port" >"$work/serve.log" 2>&1 &
ferry_pid=$!
for _ in $(seq 1 100); do
  curl -sf -o /dev/null "http://127.0.0.1:$port/healthz" && break
  sleep 0.1
done
server="http://127.0.0.1:$port"
url="$server/v1/datasets/bench/snapshot"
curl -s -o /dev/null "$url"  # warm the server's page cache

now() { date +%s.%N; }
# Runs "$@" under /usr/bin/time -v; prints "<wall seconds> <peak RSS kB>".
measure() {
  local start end
  start=$(now)
  /usr/bin/time -v -o "$work/time.txt" "$@" >/dev/null 2>"$work/err.txt" || { cat "$work/err.txt" >&2; return 1; }
  end=$(now)
  echo "$(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.3f", b-a}') $(awk -F': ' '/Maximum resident/{print $2}' "$work/time.txt")"
}
# The published checksum of DIR's database.db, as `ferry status` reads it: opening the database installs the outbox
# triggers (docs/outbox.md), so after an apply its bytes are no longer the published file's; the checksum the client
# verified and recorded inside it (ferry_origin) is.
published_sha() { "$ferry_bin" status --dir "$1" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["sha256"])'; }
median() { sort -n | awk '{a[NR]=$1} END{print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

anchor_times=(); ferry_times=(); urlsession_times=(); anchor_rss=0; ferry_rss=0; urlsession_rss=0
for run in $(seq 1 "$runs"); do
  # Anchor: curl, hash, rename.
  rm -rf "$work/anchor" && mkdir -p "$work/anchor" && cp "$work/store/bench/versions/1.sqlite" "$work/anchor/database.db"
  read -r t rss < <(measure bash -c "cd '$work/anchor' && curl -sf -o updated.db '$url' && sha256sum updated.db && mv updated.db database.db")
  anchor_times+=("$t"); [ "$rss" -gt "$anchor_rss" ] && anchor_rss=$rss
  # Ferry: a client directory on version 1, then one fetch --apply.
  rm -rf "$work/client" && mkdir -p "$work/client" && cp "$work/store/bench/versions/1.sqlite" "$work/client/database.db"
  read -r t rss < <(measure "$ferry_bin" fetch --apply --server "$server" --dataset bench --dir "$work/client")
  ferry_times+=("$t"); [ "$rss" -gt "$ferry_rss" ] && ferry_rss=$rss
  got=$(published_sha "$work/client")
  [ "$got" = "$sha" ] || { echo "ferry fetch --apply produced the wrong database.db" >&2; exit 1; }
  # The same with URLSession.
  rm -rf "$work/client" && mkdir -p "$work/client" && cp "$work/store/bench/versions/1.sqlite" "$work/client/database.db"
  read -r t rss < <(measure "$ferry_bin" fetch --apply --transport urlsession --server "$server" --dataset bench --dir "$work/client")
  urlsession_times+=("$t"); [ "$rss" -gt "$urlsession_rss" ] && urlsession_rss=$rss
  got=$(published_sha "$work/client")
  [ "$got" = "$sha" ] || { echo "ferry fetch --apply --transport urlsession produced the wrong database.db" >&2; exit 1; }
  echo "run $run: anchor ${anchor_times[-1]} s, ferry ${ferry_times[-1]} s, ferry (URLSession) ${urlsession_times[-1]} s"
done

anchor_median=$(printf '%s\n' "${anchor_times[@]}" | median)
ferry_median=$(printf '%s\n' "${ferry_times[@]}" | median)
urlsession_median=$(printf '%s\n' "${urlsession_times[@]}" | median)
ratio=$(awk -v a="$ferry_median" -v b="$anchor_median" 'BEGIN{printf "%.2f", a/b}')
urlsession_ratio=$(awk -v a="$urlsession_median" -v b="$anchor_median" 'BEGIN{printf "%.2f", a/b}')
size=$(stat -c %s "$work/store/bench/versions/2.sqlite")
say "Results (${size} bytes, median of ${runs} runs)"
printf '%-58s %8s s  %6.0f MB/s  peak RSS %6d kB\n' "anchor: curl -o updated.db && sha256sum && mv" "$anchor_median" \
  "$(awk -v s="$size" -v t="$anchor_median" 'BEGIN{print s/1048576/t}')" "$anchor_rss"
printf '%-58s %8s s  %6.0f MB/s  peak RSS %6d kB\n' "ferry fetch --apply (verify, quick_check, fsync, swap)" "$ferry_median" \
  "$(awk -v s="$size" -v t="$ferry_median" 'BEGIN{print s/1048576/t}')" "$ferry_rss"
printf '%-58s %8s s  %6.0f MB/s  peak RSS %6d kB\n' "ferry fetch --apply --transport urlsession" "$urlsession_median" \
  "$(awk -v s="$size" -v t="$urlsession_median" 'BEGIN{print s/1048576/t}')" "$urlsession_rss"
echo "ratio ferry/anchor: ${ratio}x (target <= 1.3x); URLSession/anchor: ${urlsession_ratio}x"

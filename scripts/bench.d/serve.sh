# scripts/bench serve [--size-mb N] [--duration S] [--ferry-bin PATH]: `ferry serve` against nginx on the same files,
# same run. --ferry-bin runs a ferry binary built before (to compare two builds back to back) instead of building.
# 304 revalidations/s (wrk -t2 -c64, If-None-Match) of the snapshot (also with a header named twice, which takes
# ferry's path after the HTTP decoder) and of the manifest (nginx serves the store's manifest.json file), the size
# of each 304, and full-download throughput (-c1, -c4); prints each, the ratio, and ferry's RSS under the
# 64-connection load. Sourced by scripts/bench after scripts/lib/common.sh.

size_mb=100
duration=10
ferry_bin=""
while [ $# -gt 0 ]; do
  case "$1" in
    --size-mb) size_mb=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --ferry-bin) ferry_bin=$2; shift 2 ;;
    *) echo "usage: scripts/bench serve [--size-mb N] [--duration S] [--ferry-bin PATH]" >&2; exit 2 ;;
  esac
done

ferry_install_deps nginx-light wrk curl
echo "load average before the run: $(cat /proc/loadavg)"
work=$(mktemp -d /tmp/ferry-bench-serve.XXXXXX)
ferry_pid=""
nginx_conf="$work/nginx.conf"
cleanup() {
  [ -n "$ferry_pid" ] && kill "$ferry_pid" 2>/dev/null && wait "$ferry_pid" 2>/dev/null || true
  [ -f "$work/nginx.pid" ] && nginx -c "$nginx_conf" -s stop 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

if [ -z "$ferry_bin" ]; then
  say "Building ferry (release)"
  swift build -c release --product ferry 2>&1 | tail -1
  ferry_bin=$(swift build -c release --show-bin-path)/ferry
fi
echo "ferry binary: $ferry_bin"

say "Making a ${size_mb} MB snapshot store"
# Self-contained: Python's sqlite3 writes the SQLite file, then the store layout before content addressing
# (versions/1.sqlite, .sqlite.gz, 1.json, manifest.json), which ferry serve reads as it is.
python3 - "$work/store" "$size_mb" <<'PY'
import gzip, hashlib, json, os, sqlite3, sys, datetime
root, size_mb = sys.argv[1], int(sys.argv[2])
d = os.path.join(root, "bench", "versions"); os.makedirs(d)
path = os.path.join(d, "1.sqlite")
db = sqlite3.connect(path)
db.execute("CREATE TABLE trips(id INTEGER PRIMARY KEY, name TEXT, notes TEXT, payload BLOB)")
rows, target = 0, size_mb * 1024 * 1024
with db:
    while os.path.getsize(path) < target:
        db.executemany("INSERT INTO trips(name, notes, payload) VALUES (?,?,?)",
            [(f"trip {rows+i}", "campground near the lake " * 8, os.urandom(2048)) for i in range(2000)])
        rows += 2000
db.close()
sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
with open(path, "rb") as src, gzip.open(path + ".gz", "wb", compresslevel=1) as dst:
    while chunk := src.read(1 << 20): dst.write(chunk)
created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
record = {"version": 1, "sha256": sha, "size": os.path.getsize(path), "gzipSize": os.path.getsize(path + ".gz"),
          "createdAt": created, "schemaVersion": 1, "tables": {"trips": rows}, "dataDigest": "0" * 64}
json.dump(record, open(os.path.join(d, "1.json"), "w"), sort_keys=True)
manifest = dict(record, dataset="bench", versions=[1]); del manifest["dataDigest"]
json.dump(manifest, open(os.path.join(root, "bench", "manifest.json"), "w"), sort_keys=True)
print(f"{record['size']} bytes, sha256 {sha}")
PY
chmod -R a+rX "$work"  # nginx workers run as nobody
sha=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sha256"])' "$work/store/bench/manifest.json")
size=$(stat -c %s "$work/store/bench/versions/1.sqlite")

say "Starting ferry serve and nginx (etag on, sendfile on, 2 workers)"
ferry_port=$(ferry_free_port)
"$ferry_bin" serve --store "$work/store" --host 127.0.0.1 --port "$ferry_port" >"$work/ferry.log" 2>&1 &
ferry_pid=$!
nginx_port=$(ferry_free_port)
mkdir -p "$work/nginx-tmp"
cat >"$nginx_conf" <<NGINX
worker_processes 2;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
daemon on;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  etag on;
  keepalive_requests 1000000;
  types { application/vnd.sqlite3 sqlite; }
  client_body_temp_path $work/nginx-tmp/body;
  proxy_temp_path $work/nginx-tmp/proxy;
  fastcgi_temp_path $work/nginx-tmp/fastcgi;
  uwsgi_temp_path $work/nginx-tmp/uwsgi;
  scgi_temp_path $work/nginx-tmp/scgi;
  server {
    listen 127.0.0.1:$nginx_port;
    root $work/store;
  }
}
NGINX
nginx -c "$nginx_conf"
for _ in $(seq 1 100); do
  curl -sf -o /dev/null "http://127.0.0.1:$ferry_port/healthz" && break
  sleep 0.1
done
ferry_url="http://127.0.0.1:$ferry_port/v1/datasets/bench/snapshot"
nginx_url="http://127.0.0.1:$nginx_port/bench/versions/1.sqlite"
nginx_etag=$(curl -sI "$nginx_url" | tr -d '\r' | awk -F': ' 'tolower($1)=="etag"{print $2}')
ferry_etag="\"$sha\""
ferry_manifest_url="http://127.0.0.1:$ferry_port/v1/datasets/bench/manifest"
nginx_manifest_url="http://127.0.0.1:$nginx_port/bench/manifest.json"
nginx_manifest_etag=$(curl -sI "$nginx_manifest_url" | tr -d '\r' | awk -F': ' 'tolower($1)=="etag"{print $2}')
# Sanity: both answer 304 to their ETag and serve the same bytes.
for pair in "$ferry_url|$ferry_etag" "$nginx_url|$nginx_etag"; do
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "If-None-Match: ${pair#*|}" "${pair%%|*}")
  [ "$code" = 304 ] || { echo "expected 304 from ${pair%%|*}, got $code" >&2; exit 1; }
  got=$(curl -s "${pair%%|*}" | sha256sum | cut -d' ' -f1)
  [ "$got" = "$sha" ] || { echo "wrong bytes from ${pair%%|*}" >&2; exit 1; }
done
for pair in "$ferry_manifest_url|$ferry_etag" "$nginx_manifest_url|$nginx_manifest_etag"; do
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "If-None-Match: ${pair#*|}" "${pair%%|*}")
  [ "$code" = 304 ] || { echo "expected 304 from ${pair%%|*}, got $code" >&2; exit 1; }
done
# Bytes of a 304's status line and headers, as sent.
head_bytes() { curl -s -o /dev/null -w '%{size_header}' -H "If-None-Match: $2" "$1"; }
ferry_304_bytes=$(head_bytes "$ferry_url" "$ferry_etag")
nginx_304_bytes=$(head_bytes "$nginx_url" "$nginx_etag")

rps() { awk '/Requests\/sec/{print $2}'; }
# wrk prints Transfer/sec as e.g. 1.23GB; convert to MB/s.
mbps() { awk '/Transfer\/sec/{v=$2; u=substr(v,length(v)-1); n=substr(v,1,length(v)-2);
  if(u=="GB")n*=1024; else if(u=="KB")n/=1024; else if(u!="MB"){n=substr(v,1,length(v)-1)/1048576}; printf "%.0f\n", n}'; }
ratio() { python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print(f'{a/b:.2f}' if b else 'n/a')" "$1" "$2"; }

rss_max=0
sample_rss() {  # samples ferry's VmRSS (kB) every 0.2 s for $1 seconds, prints the maximum
  local end=$(( $(date +%s) + $1 )) max=0 v
  while [ "$(date +%s)" -lt "$end" ]; do
    v=$(awk '/VmRSS/{print $2}' "/proc/$ferry_pid/status" 2>/dev/null || echo 0)
    [ "${v:-0}" -gt "$max" ] && max=$v
    sleep 0.2
  done
  echo "$max"
}

say "304 revalidations: wrk -t2 -c64 -d${duration}s with If-None-Match"
rss_before=$(awk '/VmRSS/{print $2}' "/proc/$ferry_pid/status")
wrk -t2 -c64 -d2s -H "If-None-Match: $ferry_etag" "$ferry_url" >/dev/null  # warm-up
wrk -t2 -c64 -d2s -H "If-None-Match: $nginx_etag" "$nginx_url" >/dev/null
sample_rss "$duration" >"$work/rss" &
sampler=$!
ferry_304=$(wrk -t2 -c64 -d"${duration}s" -H "If-None-Match: $ferry_etag" "$ferry_url" | rps)
wait "$sampler"
rss_304=$(cat "$work/rss")
nginx_304=$(wrk -t2 -c64 -d"${duration}s" -H "If-None-Match: $nginx_etag" "$nginx_url" | rps)
# The same revalidation with a header named twice, which RawNotModifiedHandler leaves to the HTTP decoder: the 304s
# a connection gets once the decoder owns it (after any request the raw handler does not answer).
twice=(-H "X-Bench: 1" -H "x-bench: 2")
ferry_decoded_304=$(wrk -t2 -c64 -d"${duration}s" -H "If-None-Match: $ferry_etag" "${twice[@]}" "$ferry_url" | rps)
nginx_decoded_304=$(wrk -t2 -c64 -d"${duration}s" -H "If-None-Match: $nginx_etag" "${twice[@]}" "$nginx_url" | rps)
ferry_manifest_304=$(wrk -t2 -c64 -d"${duration}s" -H "If-None-Match: $ferry_etag" "$ferry_manifest_url" | rps)
nginx_manifest_304=$(wrk -t2 -c64 -d"${duration}s" -H "If-None-Match: $nginx_manifest_etag" "$nginx_manifest_url" | rps)

say "Full downloads of the ${size} byte file: wrk -c1 and -c4, ${duration}s each"
ferry_c1=$(wrk -t1 -c1 -d"${duration}s" "$ferry_url" | mbps)
nginx_c1=$(wrk -t1 -c1 -d"${duration}s" "$nginx_url" | mbps)
sample_rss "$duration" >"$work/rss" &
sampler=$!
ferry_c4=$(wrk -t2 -c4 -d"${duration}s" "$ferry_url" | mbps)
wait "$sampler"
rss_c4=$(cat "$work/rss")
nginx_c4=$(wrk -t2 -c4 -d"${duration}s" "$nginx_url" | mbps)
rss_after=$(awk '/VmRSS/{print $2}' "/proc/$ferry_pid/status")

say "Results (same run, loopback, $(nproc) CPUs shared with whatever else runs)"
printf '%-28s %14s %14s %8s %8s\n' "measure" "ferry serve" "nginx" "ratio" "target"
printf '%-28s %14s %14s %8s %8s\n' "304 revalidations/s (c64)" "$ferry_304" "$nginx_304" "$(ratio "$ferry_304" "$nginx_304")" "1.00"
printf '%-28s %14s %14s %8s\n' "304 after the decoder/s" "$ferry_decoded_304" "$nginx_decoded_304" "$(ratio "$ferry_decoded_304" "$nginx_decoded_304")"
printf '%-28s %14s %14s %8s %8s\n' "304 of the manifest/s (c64)" "$ferry_manifest_304" "$nginx_manifest_304" "$(ratio "$ferry_manifest_304" "$nginx_manifest_304")" "0.80"
printf '%-28s %14s %14s\n' "bytes of a 304's head" "$ferry_304_bytes" "$nginx_304_bytes"
printf '%-28s %14s %14s %8s %8s\n' "download MB/s (c1)" "$ferry_c1" "$nginx_c1" "$(ratio "$ferry_c1" "$nginx_c1")" "0.90"
printf '%-28s %14s %14s %8s %8s\n' "download MB/s (c4)" "$ferry_c4" "$nginx_c4" "$(ratio "$ferry_c4" "$nginx_c4")" "0.90"
echo "ferry RSS: idle ${rss_before} kB, max under 64-connection 304 load ${rss_304} kB, max under 4 downloads ${rss_c4} kB, after ${rss_after} kB"

# scripts/bench s3 [N]: the store in a bucket (issue 24), against a private SeaweedFS on loopback, each figure beside
# its anchor measured in the same run (release build, a private PostgreSQL, N campgrounds + N reviews, default 1M):
#   - publish into the bucket against into a local directory (target <= 1.2x);
#   - the upload of version 1's objects (the SQLite file, its gzip copy and its row index: `bucket.uploadSeconds` of
#     the publish's --json) against `aws s3 cp --recursive` of the same files into the same server (awscli from
#     PyPI; target <= 1.0x);
#   - after 1 % of rows changed, a cold publisher (an empty --cache-dir, as on a new machine) against a warm one;
#   - `ferry serve --store s3://…` against `ferry serve --store DIR` of the same files: downloads (MB/s, curl, the
#     best of 3) and 304 revalidations/s (wrk -t2 -c64, If-None-Match; target >= 0.9x).
# Sourced by scripts/bench after scripts/lib/common.sh.

N=${1:-1000000}
case "$N" in '' | *[!0-9]*) echo "usage: scripts/bench s3 [N]   (N rows per table, default 1000000)" >&2; exit 2 ;; esac

ferry_install_deps time bc wrk curl
echo "load average before the run: $(cat /proc/loadavg)"
work=$(mktemp -d /tmp/ferry-bench-s3.XXXXXX)
serve_pids=()
cleanup() {
  local pid
  for pid in "${serve_pids[@]}"; do ferry_stop_pid "$pid"; done
  ferry_stop_seaweedfs
  ferry_stop_postgres
  rm -rf "$work"
}
trap cleanup EXIT

bench_build_ferry

say "Starting a private PostgreSQL and a private SeaweedFS; awscli into .build/awscli-venv"
ferry_start_postgres
unset FERRY_S3_PID FERRY_S3_DIR
ferry_start_seaweedfs
ferry_venv .build/awscli-venv awscli==1.46.3
export AWS_ACCESS_KEY_ID=$FERRY_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$FERRY_TEST_S3_SECRET_KEY AWS_REGION=us-east-1
endpoint=$FERRY_TEST_S3_ENDPOINT
for bucket in warm cold awscli; do python3 scripts/lib/s3_store.py create-bucket "ferry-bench-$bucket"; done
bench_database

say "Generating $N campgrounds + $N reviews"
bench_generate_campgrounds "$URL" "$N"

publish() {  # publish NAME STORE-ARGS...: one timed publish of the campgrounds template
  local name=$1; shift
  bench_measure "$name" "$FERRY" publish --config templates/campgrounds.yml --database-url "$URL" --json "$@"
}
ratio() { python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print(f'{a/b:.2f}' if b else 'n/a')" "$1" "$2"; }

say "Publish: into a directory, then into the bucket (each the first version, from scratch)"
publish disk --store "$work/store"
publish bucket --store s3://ferry-bench-warm/bench --s3-endpoint "$endpoint" --cache-dir "$work/cache-warm"
python3 scripts/lib/s3_store.py check s3://ferry-bench-warm/bench
read -r uploaded upload_bytes upload_secs < <(python3 -c 'import json,sys; b=json.load(open(sys.argv[1]))["bucket"]; print(b["uploaded"], b["uploadedBytes"], b["uploadSeconds"])' "$work/bucket.out")
mkdir -p "$work/upload"
ln "$work"/cache-warm/campgrounds/objects/* "$work/upload/"
[ "$(cat "$work"/upload/* | wc -c)" = "$upload_bytes" ] || { echo "the cache holds other files than the $uploaded uploaded" >&2; ls -l "$work/upload" >&2; exit 1; }

say "The same $uploaded files ($upload_bytes bytes): aws s3 cp --recursive into the same server"
bench_measure awscli .build/awscli-venv/bin/aws --endpoint-url "$endpoint" s3 cp --recursive --only-show-errors "$work/upload" s3://ferry-bench-awscli/objects/

say "1 % of rows change: a warm publisher (its cache holds version 1) against a cold one (empty --cache-dir)"
publish coldseed --store s3://ferry-bench-cold/bench --s3-endpoint "$endpoint" --cache-dir "$work/cache-seed"
rm -rf "$work/cache-seed"
bench_change_one_percent "$URL"
publish warm --store s3://ferry-bench-warm/bench --s3-endpoint "$endpoint" --cache-dir "$work/cache-warm"
publish cold --store s3://ferry-bench-cold/bench --s3-endpoint "$endpoint" --cache-dir "$work/cache-cold"
publish disk2 --store "$work/store"
python3 scripts/lib/s3_store.py check s3://ferry-bench-warm/bench
python3 scripts/lib/s3_store.py check s3://ferry-bench-cold/bench

say "Serving: ferry serve --store s3://… against ferry serve --store DIR (the same version 2)"
disk_port=$(ferry_free_port)
"$FERRY" serve --store "$work/store" --host 127.0.0.1 --port "$disk_port" >"$work/serve-disk.log" 2>&1 &
serve_pids+=($!)
bucket_port=$(ferry_free_port)
while [ "$bucket_port" = "$disk_port" ]; do bucket_port=$(ferry_free_port); done
"$FERRY" serve --store s3://ferry-bench-warm/bench --s3-endpoint "$endpoint" --host 127.0.0.1 --port "$bucket_port" \
  >"$work/serve-bucket.log" 2>&1 &
serve_pids+=($!)
for port in "$disk_port" "$bucket_port"; do
  ferry_wait_version "http://127.0.0.1:$port/v1/datasets/campgrounds/manifest" 2 "" 120 \
    || { tail -20 "$work"/serve-*.log >&2; exit 1; }
done
# Each store's version 2 is its own file (the same rows, another createdAt): its checksum and size per server.
manifest_field() { curl -fsS "http://127.0.0.1:$1/v1/datasets/campgrounds/manifest" | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
download_mbps() {  # the best of 3 full downloads of version 2 (identity), MB/s
  local best=0 i secs size
  size=$(manifest_field "$1" size)
  for i in 1 2 3; do
    secs=$(curl -fsS -o /dev/null -w '%{time_total}' "http://127.0.0.1:$1/v1/datasets/campgrounds/versions/2")
    best=$(python3 -c "import sys; print(max(float(sys.argv[1]), float(sys.argv[2]) / float(sys.argv[3]) / 1e6))" "$best" "$size" "$secs")
  done
  printf '%.0f' "$best"
}
revalidations() {  # 304s/s of the snapshot URL with its ETag
  local sha
  sha=$(manifest_field "$1" sha256)
  wrk -t2 -c64 -d10s -H "If-None-Match: \"$sha\"" "http://127.0.0.1:$1/v1/datasets/campgrounds/snapshot" | awk '/Requests\/sec/{print $2}'
}
for port in "$disk_port" "$bucket_port"; do
  sha=$(manifest_field "$port" sha256)
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "If-None-Match: \"$sha\"" "http://127.0.0.1:$port/v1/datasets/campgrounds/snapshot")
  [ "$code" = 304 ] || { echo "expected 304 from port $port, got $code" >&2; exit 1; }
  got=$(curl -fsS "http://127.0.0.1:$port/v1/datasets/campgrounds/versions/2" | sha256sum | cut -d' ' -f1)
  [ "$got" = "$sha" ] || { echo "port $port served other bytes than version 2" >&2; exit 1; }
done
dl_disk=$(download_mbps "$disk_port"); dl_bucket=$(download_mbps "$bucket_port")
r304_disk=$(revalidations "$disk_port"); r304_bucket=$(revalidations "$bucket_port")
r304_disk2=$(revalidations "$disk_port")

say "Results (same run, loopback, 2 CPUs shared with SeaweedFS and PostgreSQL)"
printf '%-58s %12s %12s %8s %8s\n' measure ferry anchor ratio target
printf '%-58s %11.2fs %11.2fs %8s %8s\n' "publish into the bucket / into a directory (v1)" "$bucket_secs" "$disk_secs" "$(ratio "$bucket_secs" "$disk_secs")" "<=1.20"
printf '%-58s %11.2fs %11.2fs %8s %8s\n' "upload of v1's $uploaded objects / aws s3 cp --recursive" "$upload_secs" "$awscli_secs" "$(ratio "$upload_secs" "$awscli_secs")" "<=1.00"
printf '%-58s %11.2fs %11.2fs %8s %8s\n' "1 % change: cold publisher / warm publisher" "$cold_secs" "$warm_secs" "$(ratio "$cold_secs" "$warm_secs")" ""
printf '%-58s %11.2fs %11.2fs %8s %8s\n' "1 % change: warm bucket publish / directory publish" "$warm_secs" "$disk2_secs" "$(ratio "$warm_secs" "$disk2_secs")" "<=1.20"
read -r warm_uploaded warm_patch < <(python3 -c 'import json,sys
r = json.load(open(sys.argv[1]))
patch = next((p["size"] for p in r.get("patches") or [] if p["to"] == r["version"] and p["from"] == r["version"] - 1), 0)
print(r["bucket"]["uploadedBytes"], patch)' "$work/warm.out")
printf '%-58s %12s %12s %8s %8s\n' "1 % change: bytes uploaded / the version's patch (its step)" "$warm_uploaded" "$warm_patch" "$(ratio "$warm_uploaded" "$warm_patch")" "<=1.50"
printf '%-58s %12s %12s %8s %8s\n' "download MB/s (curl, best of 3): bucket / directory" "$dl_bucket" "$dl_disk" "$(ratio "$dl_bucket" "$dl_disk")" ">=0.90"
printf '%-58s %12s %12s %8s %8s\n' "304/s (wrk -c64): bucket / directory (before, after)" "$r304_bucket" "$r304_disk $r304_disk2" "$(ratio "$r304_bucket" "$(python3 -c "import sys; print((float(sys.argv[1]) + float(sys.argv[2])) / 2)" "$r304_disk" "$r304_disk2")")" ">=0.90"
echo "ferry publish --json of the bucket publishes: $work/{bucket,warm,cold}.out (kept only with the run)"
python3 -c 'import json,sys
for p in sys.argv[1:]:
    r = json.load(open(p)); print(p.rsplit("/", 1)[1], "bucket:", json.dumps(r.get("bucket")), "phases:", json.dumps(r.get("phases")))' \
  "$work/bucket.out" "$work/warm.out" "$work/cold.out"

# scripts/bench attachments [--count N] [--size BYTES] [--rate R (10M)] [--cuts C (5)] [--kills K (5)] [--seed S]:
# photos from a device to the server and to other devices (issue 39). 200 photos of 4 MiB, queued offline, pushed
# through a relay that cuts the link 5 times while `ferry push` is killed with -9 5 times, each when the bytes sent
# cross a threshold inside the push (issue 48: every cut and kill lands, on any machine): every photo must arrive
# once, every planned cut and kill must land, with at most 1.05x the payload on the wire. Then upload throughput beside `curl -T` of the same files, and download throughput
# (direct, and behind nginx running deploy/nginx/ferry.conf, cold and warm) beside nginx serving the same files.
# Sourced by scripts/bench after scripts/lib/common.sh; the driver is scripts/lib/attachments_bench.py.
ferry_install_deps nginx-light curl
echo "load average before the run: $(cat /proc/loadavg)"
cleanup() { ferry_stop_postgres; }
trap cleanup EXIT
say "Starting a private PostgreSQL"
ferry_start_postgres
bench_build_ferry
ferry_bin=$FERRY
python3 scripts/lib/attachments_bench.py --ferry "$ferry_bin" --database-url "$FERRY_PG_URL" "$@"

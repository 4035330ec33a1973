# scripts/bench longpoll [--waiters N] [--duration S] [--collapse-waiters N]: the manifest long-poll (issue 25).
# 10,000 connections waiting on one `ferry serve` (Prefer: wait=60): the server's RSS, and plain revalidations per
# second (wrk, 64 connections) beside them against the anchor without waiters, in the same run; then the time for a
# publish to reach every waiter, and SIGTERM answering them all 304. Then 1,000 waiters behind nginx
# (deploy/nginx/ferry.conf): origin manifest requests per version. Sourced by scripts/bench after scripts/lib/common.sh.

waiters=10000
duration=10
collapse_waiters=1000
while [ $# -gt 0 ]; do
  case "$1" in
    --waiters) waiters=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --collapse-waiters) collapse_waiters=$2; shift 2 ;;
    *) echo "usage: scripts/bench longpoll [--waiters N] [--duration S] [--collapse-waiters N]" >&2; exit 2 ;;
  esac
done

ferry_install_deps nginx-light wrk
echo "load average before the run: $(cat /proc/loadavg)"
# One connection per waiter on each side, plus the server's files.
ulimit -n "$(( waiters * 2 + 4096 ))" 2>/dev/null || ulimit -n "$(ulimit -Hn)"

bench_build_ferry
ferry_bin=$FERRY

say "$waiters waiting connections on one server"
python3 scripts/lib/longpoll.py bench --ferry "$ferry_bin" --waiters "$waiters" --duration "$duration"

say "$collapse_waiters waiting devices behind nginx"
python3 scripts/lib/longpoll.py collapse --ferry "$ferry_bin" --waiters "$collapse_waiters" --versions 5

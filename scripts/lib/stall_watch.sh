#!/usr/bin/env bash
# scripts/lib/stall_watch.sh LOG [QUIET_SECONDS (60)] [DUMPS (3)] [OUT_DIR (.)]: watches the output of a test run and,
# whenever LOG has not grown for QUIET_SECONDS while the Swift test process runs, writes every thread's backtrace of
# that process (gdb) and the busiest processes to OUT_DIR/stall-N.txt, at most DUMPS times: for the rare silences of
# a whole test process (60-136 s with no line, seen in CI rehearsals on a loaded 2-core machine). Run it beside the
# run, e.g.:
#   CI=true bash .ci/run > run.log 2>&1 & scripts/lib/stall_watch.sh run.log 60 3 /tmp
# It exits when the test process has come and gone, or after DUMPS dumps.
set -u
log=$1
quiet=${2:-60}
dumps=${3:-3}
out=${4:-.}
case "$quiet$dumps" in *[!0-9]*) echo "usage: stall_watch.sh LOG [QUIET_SECONDS] [DUMPS] [OUT_DIR]" >&2; exit 2 ;; esac
command -v gdb >/dev/null || { echo "stall_watch: gdb is missing (apt-get install gdb)" >&2; exit 1; }
taken=0
seen=0
last_size=-1
last_change=$(date +%s)
while [ "$taken" -lt "$dumps" ]; do
  sleep 5
  pid=$(pgrep -f 'PackageTests\.xctest' | head -1)
  if [ -z "$pid" ]; then
    [ "$seen" = 1 ] && exit 0
    continue
  fi
  seen=1
  size=$(stat -c %s "$log" 2>/dev/null || echo 0)
  now=$(date +%s)
  if [ "$size" != "$last_size" ]; then
    last_size=$size
    last_change=$now
    continue
  fi
  [ $((now - last_change)) -lt "$quiet" ] && continue
  taken=$((taken + 1))
  dump="$out/stall-$taken.txt"
  {
    date -u
    echo "test process $pid; $log quiet for $((now - last_change)) s"
    ps aux --sort=-%cpu | head -15
  } > "$dump" 2>&1
  timeout 120 gdb -p "$pid" -batch -ex "thread apply all bt 25" >> "$dump" 2>&1
  echo "stall_watch: $((now - last_change)) s of silence; backtraces in $dump" >&2
  last_change=$(date +%s)
done

"""Hostile and slow clients against a running `ferry serve` (used by scripts/hostile; Python stdlib only).

  hostile_driver.py connections PORT PATH ETAG --idle N --slowloris N --seconds S
      Opens N idle connections and N slowloris connections (one header byte a second), and meanwhile asks for
      PATH with If-None-Match: ETAG on a fresh connection every 0.2 s, timing each 304.
  hostile_driver.py downloads PORT PATH ETAG --count N --size BYTES --server-pid PID
      N concurrent full downloads of PATH, while sampling the server's VmRSS and timing 304s as above.

Prints one JSON object. Every loop is bounded in count and time; every socket is on 127.0.0.1 and closed at the end.
"""
import argparse
import json
import selectors
import socket
import threading
import time

HOST = "127.0.0.1"


def probe_304(port, path, etag, timeout=5.0):
    """Seconds until a complete 304 head arrives on a fresh connection, or None when it did not."""
    start = time.monotonic()
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\nIf-None-Match: {etag}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 65536:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        if not data.startswith(b"HTTP/1.1 304"):
            return None
    except OSError:
        return None
    return time.monotonic() - start


def summarize(latencies):
    ok = sorted(x for x in latencies if x is not None)
    failed = sum(1 for x in latencies if x is None)
    if not ok:
        return {"requests": len(latencies), "failed": failed}
    return {
        "requests": len(latencies), "failed": failed, "p50_ms": round(ok[len(ok) // 2] * 1000, 1),
        "p99_ms": round(ok[min(len(ok) - 1, int(len(ok) * 0.99))] * 1000, 1), "max_ms": round(ok[-1] * 1000, 1),
    }


def connections(args):
    idle, slow = [], []
    for _ in range(args.idle):
        idle.append(socket.create_connection((HOST, args.port), timeout=5))
    head = f"GET {args.path} HTTP/1.1\r\nHost: {HOST}\r\nX-Slow: ".encode()
    started = {}
    for _ in range(args.slowloris):
        s = socket.create_connection((HOST, args.port), timeout=5)
        s.setblocking(False)
        slow.append(s)
    sel = selectors.DefaultSelector()
    for s in idle + slow:
        sel.register(s, selectors.EVENT_READ)
    closed_at = {}  # socket -> seconds from its first byte until the server closed it
    sent = {s: 0 for s in slow}
    latencies = []
    deadline = time.monotonic() + args.seconds
    next_byte = time.monotonic()
    while time.monotonic() < deadline:
        now = time.monotonic()
        if now >= next_byte:  # one header byte a second on every slowloris connection still open
            for s in slow:
                if s in closed_at:
                    continue
                try:
                    s.send(head[sent[s]:sent[s] + 1] if sent[s] < len(head) else b"a")
                    started.setdefault(s, now)
                    sent[s] += 1
                except OSError:
                    closed_at[s] = now - started.get(s, now)
            next_byte = now + 1.0
        for key, _ in sel.select(timeout=0):
            s = key.fileobj
            try:
                gone = s.recv(65536) == b""
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            if gone:
                sel.unregister(s)
                if s in sent:
                    closed_at.setdefault(s, time.monotonic() - started.get(s, time.monotonic()))
                else:
                    closed_at.setdefault(s, -1.0)
        latencies.append(probe_304(args.port, args.path, args.etag))
        time.sleep(0.2)
    idle_open = sum(1 for s in idle if s not in closed_at)
    slow_closed = [t for s, t in closed_at.items() if s in sent]
    for s in idle + slow:
        s.close()
    return {
        "idle": args.idle, "idle_still_open": idle_open, "slowloris": args.slowloris,
        "slowloris_closed_by_server": len(slow_closed),
        "slowloris_seconds_until_closed_max": round(max(slow_closed), 1) if slow_closed else None,
        "slowloris_header_bytes_sent_max": max(sent.values()) if sent else 0,
        "not_modified": summarize(latencies),
    }


def rss_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def downloads(args):
    results = [None] * args.count
    deadline = time.monotonic() + args.timeout

    def download(i):
        got = 0
        try:
            with socket.create_connection((HOST, args.port), timeout=30) as s:
                s.sendall(f"GET {args.path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
                buf = bytearray(1 << 20)
                view = memoryview(buf)
                data = b""
                while b"\r\n\r\n" not in data and len(data) < 65536:
                    n = s.recv_into(view)
                    if n == 0:
                        break
                    data += bytes(view[:n])
                head, _, rest = data.partition(b"\r\n\r\n")
                if not head.startswith(b"HTTP/1.1 200"):
                    results[i] = {"error": head[:40].decode(errors="replace")}
                    return
                got = len(rest)
                while got < args.size and time.monotonic() < deadline:
                    n = s.recv_into(view)
                    if n == 0:
                        break
                    got += n
        except OSError as error:
            results[i] = {"error": str(error), "bytes": got}
            return
        results[i] = {"bytes": got}

    # Writing 5 to clear_refs resets the peak (VmHWM) to the current RSS, so VmHWM afterwards is this round's exact
    # peak; the samples below would miss short spikes.
    try:
        with open(f"/proc/{args.server_pid}/clear_refs", "w") as f:
            f.write("5")
        hwm_reset = True
    except OSError:
        hwm_reset = False
    baseline = rss_kib(args.server_pid, "VmRSS")
    threads = [threading.Thread(target=download, args=(i,), daemon=True) for i in range(args.count)]
    start = time.monotonic()
    for t in threads:
        t.start()
    peak, latencies = baseline, []
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        peak = max(peak, rss_kib(args.server_pid, "VmRSS"))
        latencies.append(probe_304(args.port, args.path, args.etag))
        time.sleep(0.1)
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    seconds = time.monotonic() - start
    complete = sum(1 for r in results if r and r.get("bytes") == args.size and "error" not in r)
    return {
        "downloads": args.count, "complete": complete, "size_bytes": args.size, "seconds": round(seconds, 1),
        "rss_baseline_mib": round(baseline / 1024, 1), "rss_sampled_peak_mib": round(peak / 1024, 1),
        "vmhwm_mib": round(rss_kib(args.server_pid, "VmHWM") / 1024, 1), "vmhwm_reset": hwm_reset,
        "errors": [r for r in results if not r or "error" in r][:3], "not_modified": summarize(latencies),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["connections", "downloads"])
    parser.add_argument("port", type=int)
    parser.add_argument("path")
    parser.add_argument("etag")
    parser.add_argument("--idle", type=int, default=0)
    parser.add_argument("--slowloris", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--size", type=int, default=0)
    parser.add_argument("--server-pid", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    print(json.dumps(connections(args) if args.mode == "connections" else downloads(args)))


if __name__ == "__main__":
    main()

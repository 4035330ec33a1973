"""A TCP relay on 127.0.0.1 for benchmarks and drills (stdlib only): forwards each connection to a target port,
counts the bytes each way, and can throttle the upload direction and cut every live connection, as a field link
does: at an interval (--cut-every), or when the upload bytes it forwarded cross given counts (--cut-at), which lands
each cut inside an upload whatever the machine's speed. Its counts are written as JSON to --stats every
--stats-every seconds, and at exit: up, down, connections, cuts, and cut_log (per cut: the upload bytes forwarded
then and the connections it cut).

  python3 scripts/lib/relay.py --listen 0 --target 8080 --port-file P --stats S [--rate 8M] [--cut-every 30]
      [--cut-at 1000000,5000000] [--stats-every 0.5]
"""
import argparse, json, os, signal, socket, sys, threading, time

A = argparse.ArgumentParser()
A.add_argument("--listen", type=int, default=0)
A.add_argument("--target", type=int, required=True)
A.add_argument("--port-file", required=True)
A.add_argument("--stats", required=True)
A.add_argument("--rate", default="0", help="upload bytes per second (K/M suffix), 0: unthrottled")
A.add_argument("--cut-every", type=float, default=0, help="seconds between cuts of every live connection; 0: never")
A.add_argument("--cut-at", default="", help="upload byte counts (comma-separated) at which every live connection is cut")
A.add_argument("--stats-every", type=float, default=0.5, help="seconds between writes of --stats")
ARGS = A.parse_args()


def parse_rate(text):
    mult = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:].upper(), 1)
    return int(float(text[:-1] if mult > 1 else text) * mult)


RATE = parse_rate(ARGS.rate)
LOCK = threading.Lock()
STATS = {"up": 0, "down": 0, "connections": 0, "cuts": 0, "cut_log": []}
LIVE = set()
CUT_AT = sorted(int(n) for n in ARGS.cut_at.split(",") if n.strip())


def write_stats():
    with LOCK:
        data = json.dumps(STATS)
    tmp = ARGS.stats + ".tmp"
    with open(tmp, "w") as f:
        f.write(data)
    os.replace(tmp, ARGS.stats)


def pump(src, dst, key):
    started = time.monotonic()
    sent = 0
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if key == "up" and RATE:
                sent += len(data)
                ahead = sent / RATE - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
            dst.sendall(data)
            with LOCK:
                STATS[key] += len(data)
                due = key == "up" and CUT_AT and STATS["up"] >= CUT_AT[0]
                if due:
                    del CUT_AT[0]
            if due:
                cut()
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def handle(client):
    try:
        upstream = socket.create_connection(("127.0.0.1", ARGS.target))
    except OSError:
        client.close()
        return
    with LOCK:
        STATS["connections"] += 1
        LIVE.add(client)
    threads = [threading.Thread(target=pump, args=(client, upstream, "up"), daemon=True),
               threading.Thread(target=pump, args=(upstream, client, "down"), daemon=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with LOCK:
        LIVE.discard(client)
    client.close()
    upstream.close()


def cut():
    """Cuts every live connection (a reset to the client, a close to the target); counted when there was one."""
    with LOCK:
        victims = list(LIVE)
        if victims:
            STATS["cuts"] += 1
            STATS["cut_log"].append({"up": STATS["up"], "connections": len(victims)})
    for s in victims:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def cutter():
    while True:
        time.sleep(ARGS.cut_every)
        cut()


def stats_loop():
    while True:
        write_stats()
        time.sleep(ARGS.stats_every)


def main():
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", ARGS.listen))
    server.listen(64)
    with open(ARGS.port_file + ".tmp", "w") as f:
        f.write(str(server.getsockname()[1]))
    os.replace(ARGS.port_file + ".tmp", ARGS.port_file)
    signal.signal(signal.SIGTERM, lambda *_: (write_stats(), os._exit(0)))
    threading.Thread(target=stats_loop, daemon=True).start()
    if ARGS.cut_every > 0:
        threading.Thread(target=cutter, daemon=True).start()
    while True:
        client, _ = server.accept()
        threading.Thread(target=handle, args=(client,), daemon=True).start()


if __name__ == "__main__":
    main()

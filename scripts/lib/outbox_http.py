#!/usr/bin/env python3
"""End-to-end driver for `scripts/bench outbox`: devices POSTing change batches to `ferry serve`.

Each device is a thread with one keep-alive HTTP/1.1 connection. All request bodies are built before the clock
starts, so the figure is the server's (HTTP, JSON decoding, the merge, the answers), not Python's.

  distinct: ROWS updates of rows 1..ROWS, in batches of BATCH distinct rows, DEVICES batches in flight at once.
  overlap:  DEVICES devices each update every row 1..ROWS once, in the same order, device d starting d batches
            later (wrapping around), so every row gets DEVICES edits within moments and batches meet on the same
            rows; the merge rule settles them (applied or rejected).

Prints one line: `changes seconds changes_per_second applied rejected`. Exits 1 if any change is unanswered or
answered otherwise than applied/rejected, or an HTTP request fails.
Python standard library only.
"""
import argparse
import datetime
import http.client
import json
import sys
import threading
import time
import urllib.parse
import uuid


def iso(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def body(device, rows, base, edited, sent):
    changes = [
        {"id": str(uuid.uuid4()), "table": "trips", "op": "update", "key": {"id": row},
         "values": {"seats": row % 7, "name": f"Växjö-Kalmar {row} d{device}"},
         "editedAt": edited, "baseUpdatedAt": base}
        for row in rows
    ]
    return json.dumps({"clientId": f"bench-device-{device}", "sentAt": sent, "changes": changes}).encode()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True, help="http://127.0.0.1:PORT")
    parser.add_argument("--dataset", default="bench")
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--mode", choices=["distinct", "overlap"], default="distinct")
    parser.add_argument("--base", required=True, help="updated_at of every row before the run")
    args = parser.parse_args()

    starts = list(range(1, args.rows + 1, args.batch))
    ranges = [range(s, min(s + args.batch, args.rows + 1)) for s in starts]
    now = datetime.datetime.now(datetime.timezone.utc)
    sent = iso(now)
    # Queues of bodies, one per device.
    queues = [[] for _ in range(args.devices)]
    if args.mode == "distinct":
        for i, rows in enumerate(ranges):
            queues[i % args.devices].append(body(i % args.devices, rows, args.base, iso(now - datetime.timedelta(seconds=1)), sent))
    else:
        for d in range(args.devices):
            # Later devices edited later: under newest-wins some of their edits win a conflict, some lose.
            edited = iso(now - datetime.timedelta(seconds=args.devices - d))
            for k in range(len(ranges)):
                queues[d].append(body(d, ranges[(k + d) % len(ranges)], args.base, edited, sent))

    target = urllib.parse.urlsplit(args.url)
    path = f"/v1/datasets/{args.dataset}/changes"
    failures = []
    finished = []  # (monotonic time of the last answer, answer bodies) per device
    lock = threading.Lock()
    barrier = threading.Barrier(args.devices + 1)

    def device(queue):
        connection = http.client.HTTPConnection(target.hostname, target.port, timeout=120)
        try:
            connection.connect()
        except OSError as error:
            failures.append(error)
            barrier.abort()
            return
        answers = []
        barrier.wait()
        try:
            for payload in queue:
                connection.request("POST", path, body=payload, headers={"Content-Type": "application/json"})
                response = connection.getresponse()
                data = response.read()
                if response.status != 200:
                    raise RuntimeError(f"HTTP {response.status}: {data[:300]!r}")
                answers.append(data)
        except Exception as error:  # reported by the main thread
            failures.append(error)
            return
        finally:
            connection.close()
        with lock:
            finished.append((time.monotonic(), answers))

    threads = [threading.Thread(target=device, args=(q,)) for q in queues]
    for t in threads:
        t.start()
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass  # a device could not connect: reported below
    started = time.monotonic()
    for t in threads:
        t.join()
    if failures:
        print(f"outbox_http: {failures[0]}", file=sys.stderr)
        return 1
    seconds = max(end for end, _ in finished) - started
    counts = {"applied": 0, "rejected": 0, "other": 0, "changes": 0}
    for _, answers in finished:
        for data in answers:
            for result in json.loads(data)["results"]:
                counts["changes"] += 1
                status = result["status"]
                counts[status if status in ("applied", "rejected") else "other"] += 1
    expected = args.rows * (args.devices if args.mode == "overlap" else 1)
    if counts["changes"] != expected or counts["other"]:
        print(f"outbox_http: {counts['changes']} answers for {expected} changes, {counts['other']} neither applied nor rejected",
              file=sys.stderr)
        return 1
    print(f"{expected} {seconds:.3f} {expected / seconds:.0f} {counts['applied']} {counts['rejected']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Checks FerryS3's AWS Signature Version 4 signer against botocore's, an independent implementation.

Generates requests from a fixed seed (methods GET/PUT/HEAD/DELETE/POST; keys with spaces, unicode, `+`, `~`, `%`
and other reserved characters; query strings with repeated and empty parameters; session tokens; empty, non-empty,
UNSIGNED-PAYLOAD and STREAMING-UNSIGNED-PAYLOAD-TRAILER bodies; headers with odd case and whitespace; presigned
URLs), signs each with botocore's S3SigV4Auth (S3SigV4QueryAuth for presigned URLs) at a fixed time, and with the
Swift signer through the `ferry-sigv4` tool, and compares Authorization, x-amz-date, x-amz-content-sha256 and
x-amz-security-token (for a presigned URL: every query item). A mismatch prints the case and both results and exits 1.

Run by scripts/test. Installs botocore (pinned, from PyPI) into .build/s3-venv through scripts/lib/common.sh.
Usage: python3 scripts/lib/sigv4_check.py [--sigv4 PATH-TO-ferry-sigv4] [--cases N] [--seed N]
"""
import argparse
import base64
import datetime
import json
import os
import random
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.path.join(ROOT, ".build", "s3-venv")


def ensure_venv():
    """Re-runs this script with the venv's Python, making the venv first (scripts/lib/common.sh: ferry_s3_venv)."""
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        return
    subprocess.run(["bash", "-c", f'. "{ROOT}/scripts/lib/common.sh" && cd "{ROOT}" && ferry_s3_venv'], check=True)
    python = os.path.join(VENV, "bin", "python")
    os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])


KEY_PARTS = ["a", "key", "with space", "dir/sub", "unicodé", "日本語", "🚢", "plus+sign", "tilde~", "per%cent",
             "eq=al", "amp&ersand", "q?mark", "hash#", "star*", "bang!", "paren(s)", "dollar$", "at@", "colon:",
             "comma,", "semi;", "apos'", "quo\"te", "brace{}", "back\\slash", "caret^", "pipe|", "..", ".", "_-.~",
             "UPPER", "0123", "a  two  spaces", "tab\there", "<lt>"]
QUERY_KEYS = ["prefix", "list-type", "continuation-token", "uploads", "uploadId", "partNumber", "max-keys",
              "delimiter", "start-after", "x-id", "versionId", "A", "a", "B", "key with space", "ü", "k+", "k~",
              "k%", "k=", "k&"]
QUERY_VALUES = ["", "", "2", "1000", "a b", "a+b", "a~b", "a%2Fb", "/", "日本", "é", "=", "&", "x" * 40,
                "2fLc/token+==", "?", "#", "0", "00", "z", "Z"]
# No `Date`: botocore replaces a Date header with the signing time and then sends no x-amz-date; Ferry never sends
# one (SigV4Tests has the documentation's PUT example, which signs a Date header).
EXTRA_HEADERS = [("Range", "bytes=0-9"), ("Content-Type", "text/plain;   charset=utf-8"),
                 ("content-type", "  application/octet-stream  "), ("If-None-Match", "*"),
                 ("If-Match", '"9b2cf535f27731c974343645a3985328"'), ("X-Amz-Meta-Note", "a\tb   c"),
                 ("x-amz-meta-Mixed-Case", "Value"), ("Content-MD5", "1B2M2Y8AsgTpgAmY7PhCfg=="),
                 ("x-amz-checksum-sha256", "47DEQpj8HBSa+/TejW8DgQ2wNUwtWoQzDtsBG5UtIw8="),
                 ("Cache-Control", "no-cache"), ("X-Amz-Storage-Class", "REDUCED_REDUNDANCY"),
                 ("Content-Encoding", "aws-chunked"),
                 ("x-amz-decoded-content-length", "1024"), ("x-amz-trailer", "x-amz-checksum-sha256")]
REGIONS = ["us-east-1", "eu-west-3", "ap-southeast-2", "auto", "garage"]
HOSTS = ["127.0.0.1:8333", "examplebucket.s3.amazonaws.com", "s3.eu-west-3.amazonaws.com", "localhost:9000",
         "b.s3.us-east-1.amazonaws.com"]


def generate(count, seed):
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        method = ["GET", "PUT", "HEAD", "DELETE", "POST"][i % 5]
        # One category per case in turn, so each gets count/6 cases at least; the rest is random.
        kind = i % 6
        segments = [rng.choice(KEY_PARTS) for _ in range(rng.randint(1, 3))]
        if kind == 0:
            segments.append(rng.choice(["with space", "a  two  spaces", "日本語", "🚢", "unicodé"]))
        elif kind == 1:
            segments.append(rng.choice(["plus+sign", "tilde~", "per%cent", "%2F", "%20", "+ ~ %"]))
        path = "/bucket-" + str(rng.randint(0, 9)) + "/" + "/".join(segments)
        if rng.random() < 0.1:
            path = "/"
        query = []
        nquery = rng.choice([0, 0, 1, 2, 3, 5])
        if kind == 2:
            nquery = max(nquery, 3)
        for _ in range(nquery):
            query.append([rng.choice(QUERY_KEYS), rng.choice(QUERY_VALUES)])
        if kind == 2 and query:  # a repeated key with two values, and an empty one
            query.append([query[0][0], rng.choice(QUERY_VALUES)])
            query.append([rng.choice(QUERY_KEYS), ""])
        headers = [["Host", rng.choice(HOSTS)]]
        for name, value in rng.sample(EXTRA_HEADERS, rng.randint(0, 4)):
            if name.lower() not in {h[0].lower() for h in headers}:
                headers.append([name, value])
        body = b""
        payload = "body"
        roll = rng.random()
        if kind == 3 or roll < 0.2:
            payload = "unsigned"
        elif kind == 4 or roll < 0.3:
            payload = "trailer"
        elif roll < 0.65:
            body = bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 21, 100, 4096])))
        token = None
        if kind == 5 or rng.random() < 0.3:
            token = "IQoJb3JpZ2luX2VjE" + "".join(rng.choice("abcXYZ019+/=") for _ in range(rng.randint(8, 60)))
        secret = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
                         for _ in range(40))
        access = "AKIA" + "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") for _ in range(16))
        time = 1369353600 + rng.randint(0, 10 * 365 * 86400)  # 2013-05-24 onwards
        case = {"id": i, "method": method, "path": path, "query": query, "headers": headers, "payload": payload,
                "body": base64.b64encode(body).decode(), "accessKey": access, "secretKey": secret, "token": token,
                "region": rng.choice(REGIONS), "time": time}
        if i % 10 == 9:  # a presigned URL: only host is signed, unique query keys (botocore takes them as a dict)
            case["method"] = rng.choice(["GET", "PUT", "HEAD"])
            case["headers"] = headers[:1]
            unique = {}
            for key, value in query:
                unique.setdefault(key, value)
            case["query"] = [[k, v] for k, v in unique.items()]
            case["presignExpires"] = rng.choice([1, 900, 3600, 604800])
        cases.append(case)
    return cases


def quote_path(path):
    from botocore.utils import percent_encode
    return percent_encode(path, safe="/~")


def botocore_sign(case):
    """botocore's signature for the case: a dict of the headers it added, or the presigned URL's query items."""
    from unittest import mock
    from urllib.parse import parse_qsl, urlsplit
    from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    credentials = Credentials(case["accessKey"], case["secretKey"], case["token"])
    host = case["headers"][0][1]
    url = f"http://{host}{quote_path(case['path'])}"
    now = datetime.datetime.fromtimestamp(case["time"], datetime.timezone.utc).replace(tzinfo=None)
    body = base64.b64decode(case["body"])
    if "presignExpires" in case:
        request = AWSRequest(method=case["method"], url=url, params=[tuple(q) for q in case["query"]] or None)
        signer = S3SigV4QueryAuth(credentials, "s3", case["region"], expires=case["presignExpires"])
        with mock.patch("botocore.auth.get_current_datetime", return_value=now):
            signer.add_auth(request)
        return {"query": sorted(parse_qsl(urlsplit(request.url).query, keep_blank_values=True))}
    request = AWSRequest(method=case["method"], url=url, data=body,
                         params=[tuple(q) for q in case["query"]] or None)
    for name, value in case["headers"]:
        request.headers[name] = value
    if case["payload"] == "unsigned":
        request.context["client_config"] = type("Config", (), {"s3": {"payload_signing_enabled": False}})()
    elif case["payload"] == "trailer":
        request.context["checksum"] = {"request_algorithm": {"in": "trailer", "name": "x-amz-checksum-sha256"}}
    signer = S3SigV4Auth(credentials, "s3", case["region"])
    with mock.patch("botocore.auth.get_current_datetime", return_value=now):
        signer.add_auth(request)
    names = ["authorization", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token"]
    return {"headers": {n: request.headers.get(n) for n in names}}


def swift_signatures(tool, cases):
    done = subprocess.run([tool], input=json.dumps(cases).encode(), capture_output=True)
    if done.returncode != 0:
        sys.exit(f"{tool} failed ({done.returncode}): {done.stderr.decode()}")
    return {item["id"]: item for item in json.loads(done.stdout)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sigv4", help="the ferry-sigv4 tool (default: in `swift build --show-bin-path`)")
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--seed", type=int, default=20261126)
    args = parser.parse_args()
    ensure_venv()
    tool = args.sigv4 or os.path.join(
        subprocess.run(["swift", "build", "--show-bin-path"], cwd=ROOT, capture_output=True, text=True,
                       check=True).stdout.strip(), "ferry-sigv4")
    cases = generate(args.cases, args.seed)
    swift = swift_signatures(tool, cases)
    failures = 0
    counts = {"presigned": 0, "session token": 0, "UNSIGNED-PAYLOAD": 0, "STREAMING-UNSIGNED-PAYLOAD-TRAILER": 0,
              "empty body": 0, "non-empty body": 0, "repeated query key": 0, "empty query value": 0,
              "non-ASCII path": 0, "+ ~ % in path": 0, "space in path": 0}
    for case in cases:
        expected = botocore_sign(case)
        got = swift.get(case["id"], {})
        if "presignExpires" in case:
            counts["presigned"] += 1
            mine = sorted(tuple(q) for q in got.get("query", []))
            ok = mine == expected["query"]
            theirs = expected["query"]
        else:
            mine = {k.lower(): v for k, v in got.get("headers", [])}
            mine = {n: mine.get(n) for n in expected["headers"]}
            theirs = expected["headers"]
            ok = mine == theirs
            kind = case["payload"]
            counts[{"unsigned": "UNSIGNED-PAYLOAD", "trailer": "STREAMING-UNSIGNED-PAYLOAD-TRAILER"}.get(
                kind, "non-empty body" if case["body"] else "empty body")] += 1
        counts["session token"] += case["token"] is not None
        keys = [q[0] for q in case["query"]]
        counts["repeated query key"] += len(keys) != len(set(keys))
        counts["empty query value"] += any(q[1] == "" for q in case["query"])
        counts["non-ASCII path"] += any(ord(c) > 127 for c in case["path"])
        counts["+ ~ % in path"] += any(c in case["path"] for c in "+~%")
        counts["space in path"] += " " in case["path"]
        if not ok:
            failures += 1
            print(f"MISMATCH in case {case['id']}:\n  case: {json.dumps(case, ensure_ascii=False)}\n"
                  f"  botocore: {theirs}\n  ferry:    {mine}", file=sys.stderr)
    methods = sorted({c["method"] for c in cases})
    print(f"sigv4: {len(cases) - failures} of {len(cases)} requests signed as botocore signs them "
          f"(methods {', '.join(methods)}; " + ", ".join(f"{k}: {v}" for k, v in counts.items()) + ")")
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Reads back, with botocore (an independent S3 client), the objects FerryS3's client wrote in
S3ClientTests.writesObjectsForBotocoreToRead: one PUT and one multipart upload, under keys with a space, unicode,
`+`, `~` and `%`. Each must be there with the expected bytes (byte i is i mod 251), and its SHA-256 must match.

Run by scripts/test after the Swift tests, while the SeaweedFS they used still runs (FERRY_TEST_S3_ENDPOINT,
FERRY_TEST_S3_ACCESS_KEY, FERRY_TEST_S3_SECRET_KEY). Installs botocore into .build/s3-venv like sigv4_check.py.
"""
import hashlib
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.path.join(ROOT, ".build", "s3-venv")
OBJECTS = {"single/ünï code+~%.bin": 100_000, "multi/日本 +~%.bin": (6 << 20) + 123}


def main():
    if os.path.realpath(sys.prefix) != os.path.realpath(VENV):
        subprocess.run(["bash", "-c", f'. "{ROOT}/scripts/lib/common.sh" && cd "{ROOT}" && ferry_s3_venv'],
                       check=True)
        python = os.path.join(VENV, "bin", "python")
        os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])
    import botocore.session
    from botocore.config import Config

    missing = [n for n in ("FERRY_TEST_S3_ENDPOINT", "FERRY_TEST_S3_ACCESS_KEY", "FERRY_TEST_S3_SECRET_KEY")
               if not os.environ.get(n)]
    if missing:
        sys.exit(f"{', '.join(missing)} not set: run scripts/test, which starts a private SeaweedFS")
    s3 = botocore.session.get_session().create_client(
        "s3", endpoint_url=os.environ["FERRY_TEST_S3_ENDPOINT"], region_name="us-east-1",
        aws_access_key_id=os.environ["FERRY_TEST_S3_ACCESS_KEY"],
        aws_secret_access_key=os.environ["FERRY_TEST_S3_SECRET_KEY"],
        config=Config(s3={"addressing_style": "path"}))
    failures = 0
    for key, size in OBJECTS.items():
        expected = bytes(i % 251 for i in range(size))
        got = s3.get_object(Bucket="ferry-verify", Key=key)["Body"].read()
        listed = [o["Key"] for o in s3.list_objects_v2(Bucket="ferry-verify", Prefix=key).get("Contents", [])]
        if got != expected or listed != [key]:
            failures += 1
            print(f"s3://ferry-verify/{key}: {len(got)} bytes, sha256 {hashlib.sha256(got).hexdigest()}, listed as "
                  f"{listed}; expected {size} bytes, sha256 {hashlib.sha256(expected).hexdigest()}", file=sys.stderr)
        else:
            print(f"s3://ferry-verify/{key}: {size} bytes, sha256 {hashlib.sha256(got).hexdigest()[:16]}…, as written")
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()

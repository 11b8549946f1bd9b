"""Checks SigV4 signatures the way AWS does, with botocore's own signer:
for each request recorded by a test's fake upstream (a JSON file: method,
url, headers, base64 body), the signature is computed again from the
request's signed headers, its X-Amz-Date and the credentials of this
process's environment, and compared with the one the request carries.
Prints one JSON line per request."""

import base64
import json
import os
import sys

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

credentials = Credentials(
    os.environ["AWS_ACCESS_KEY_ID"],
    os.environ["AWS_SECRET_ACCESS_KEY"],
    os.environ.get("AWS_SESSION_TOKEN"),
)

with open(sys.argv[1]) as f:
    recorded = json.load(f)

for r in recorded:
    headers = {k.lower(): v for k, v in r["headers"].items()}
    authorization = headers.get("authorization", "")
    scheme, _, fields = authorization.partition(" ")
    parts = dict(p.strip().split("=", 1) for p in fields.split(",") if "=" in p)
    scope = parts.get("Credential", "").split("/")
    signed = parts.get("SignedHeaders", "").split(";")
    if scheme != "AWS4-HMAC-SHA256" or len(scope) != 5:
        print(json.dumps({"valid": False, "why": "not a SigV4 Authorization"}))
        continue
    _, _, region, service, _ = scope
    request = AWSRequest(
        method=r["method"],
        url=r["url"],
        headers={k: v for k, v in headers.items() if k in signed},
        data=base64.b64decode(r["body"]),
    )
    request.context["timestamp"] = headers["x-amz-date"]
    auth = SigV4Auth(credentials, service, region)
    canonical = auth.canonical_request(request)
    expected = auth.signature(auth.string_to_sign(request, canonical), request)
    print(json.dumps({
        "valid": expected == parts.get("Signature") and scope[0] == credentials.access_key,
        "region": region,
        "service": service,
        "signed": signed,
        "token": headers.get("x-amz-security-token"),
    }))

"""The rows of the SDK matrix (tests/it/sdks.rs), on the Python side: each row
makes one call the way an app would and prints what the app saw, as one
JSON line: {"row", "seen"} when the call returned, or {"row", "raised",
"text", "body", "trace"} when it raised (the exception's class, `str(e)`,
the body the SDK keeps, if any, and where it was raised)."""

import json
import os
import sys
import traceback

# probity, e.g. http://127.0.0.1:8080; each script appends its route prefix.
PROBITY = os.environ["PROBE_URL"]
# What the app asks in every chat: the fake upstream answers in kind.
MESSAGES = [{"role": "user", "content": "Name the capital of France."}]


def dummy_aws():
    """What an app behind a Bedrock route that holds the key may sign with:
    dummy AWS credentials, and nothing of the machine's own AWS setup (its
    profile, token, retry mode). Call it before making a boto3 client."""
    os.environ.update(
        AWS_ACCESS_KEY_ID="AKIDEXAMPLE",
        AWS_SECRET_ACCESS_KEY="dummy-secret",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
    )
    for name in ["AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_BEARER_TOKEN_BEDROCK", "AWS_RETRY_MODE", "AWS_MAX_ATTEMPTS"]:
        os.environ.pop(name, None)


def kept_body(err):
    """The body an SDK keeps on its exception, as text (voyageai keeps it
    in `http_body`, the others as `body`)."""
    for name in ("http_body", "body"):
        body = getattr(err, name, None)
        if body is not None:
            return body if isinstance(body, str) else json.dumps(body, default=repr)
    return None


def row(name, call):
    try:
        out = {"row": name, "seen": call()}
    except Exception as err:  # noqa: BLE001 - every exception is a finding
        frames = traceback.extract_tb(err.__traceback__)[-2:]
        out = {
            "row": name,
            "raised": type(err).__name__,
            "text": str(err),
            "body": kept_body(err),
            "trace": [f"{os.path.basename(f.filename)}:{f.lineno} {f.line}" for f in frames],
        }
    print(json.dumps(out, default=repr))
    sys.stdout.flush()

"""Drives boto3's `converse_stream` through probity: a sound stream, one
whose `metadata` frame carries a malformed count (read as absent), and one
that breaks (a frame with a bad CRC): boto3 raises the `EventStreamError`
of probity's own exception frame, after the text that came before it.
Prints one JSON line per call."""

import json
import os
import sys

os.environ.update(
    AWS_ACCESS_KEY_ID="AKIDEXAMPLE",
    AWS_SECRET_ACCESS_KEY="dummy-secret",
    AWS_DEFAULT_REGION="us-east-1",
)
for name in ["AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_BEARER_TOKEN_BEDROCK"]:
    os.environ.pop(name, None)

import boto3
from botocore.config import Config
from botocore.exceptions import EventStreamError

runtime = boto3.client(
    "bedrock-runtime",
    endpoint_url=os.environ["PROBE_BASE_URL"],
    config=Config(retries={"total_max_attempts": 1}),
)

for prompt in ["Say hello", "Say hello (malformed)", "Say hello (broken)"]:
    text, usage, latency, stop = "", None, None, None
    try:
        reply = runtime.converse_stream(
            modelId="anthropic.claude-3-haiku-20240307-v1:0",
            messages=[{"role": "user", "content": [{"text": prompt}]}],
        )
        for event in reply["stream"]:
            if "contentBlockDelta" in event:
                text += event["contentBlockDelta"]["delta"].get("text", "")
            if "messageStop" in event:
                stop = event["messageStop"]["stopReason"]
            if "metadata" in event:
                usage = {k: event["metadata"]["usage"].get(k) for k in ["inputTokens", "outputTokens", "totalTokens"]}
                latency = event["metadata"]["metrics"].get("latencyMs")
        print(json.dumps({"text": text, "stop": stop, "usage": usage, "latency": latency}))
    except EventStreamError as err:
        print(json.dumps({"text": text, "code": err.response["Error"]["Code"], "message": err.response["Error"]["Message"]}))
    sys.stdout.flush()

"""Drives boto3's `bedrock-runtime` client through probity on a route that
signs with SigV4 (tests/it/clients.rs): only `endpoint_url` changes, with
dummy AWS credentials (probity signs with its own). `converse` once on a
sound answer, once on an answer with a malformed count (read as absent),
and once on an answer that breaks an invariant (boto3's `ClientError` with
probity's code and message). Prints what the app saw, one JSON line per
call."""

import json
import os
import sys

os.environ.update(
    AWS_ACCESS_KEY_ID="AKIDEXAMPLE",
    AWS_SECRET_ACCESS_KEY="dummy-secret",
    AWS_DEFAULT_REGION="us-east-1",
)
for name in ["AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_BEARER_TOKEN_BEDROCK", "AWS_RETRY_MODE", "AWS_MAX_ATTEMPTS"]:
    os.environ.pop(name, None)

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"


# Retries off, as probity's manual advises (docs/src/apps.md) (the SDK matrix,
# tests/it/sdks.rs, counts each retry mode's attempts).
runtime = boto3.client(
    "bedrock-runtime",
    endpoint_url=os.environ["PROBE_BASE_URL"],
    config=Config(retries={"total_max_attempts": 1}),
)


def show(**seen):
    print(json.dumps(seen))
    sys.stdout.flush()


def converse(runtime, prompt):
    return runtime.converse(
        modelId=MODEL,
        messages=[{"role": "user", "content": [{"text": prompt}]}],
        inferenceConfig={"maxTokens": 256},
    )


for prompt in ["Say hello", "Say hello (malformed)"]:
    reply = converse(runtime, prompt)
    show(
        text=reply["output"]["message"]["content"][0]["text"],
        stop=reply["stopReason"],
        usage={k: reply["usage"].get(k) for k in ["inputTokens", "outputTokens", "totalTokens"]},
        latency=reply["metrics"].get("latencyMs"),
    )

try:
    converse(runtime, "Say hello (broken)")
    show(error=None)
except ClientError as err:
    show(
        code=err.response["Error"]["Code"],
        message=err.response["Error"]["Message"],
        status=err.response["ResponseMetadata"]["HTTPStatusCode"],
    )

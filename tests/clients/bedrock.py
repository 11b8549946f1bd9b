"""Drives boto3's `bedrock-runtime` client through probity, the way an app
on AWS would: only `endpoint_url` changes, with dummy AWS credentials
(probity holds the real one). `converse` once on a sound answer, once on an
answer with a malformed count (the app must read it as absent), and once on
an answer that breaks an invariant: the SDK's usual `ClientError`, with
probity's code and message, after as many attempts as its retry mode makes.
Prints what the app saw, as one JSON line per call."""

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
if len(sys.argv) > 1:
    # A client token: boto3 sends a Bedrock API key as `Authorization: Bearer`.
    os.environ["AWS_BEARER_TOKEN_BEDROCK"] = sys.argv[1]

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"


def client(**retries):
    config = Config(retries=retries) if retries else None
    return boto3.client("bedrock-runtime", endpoint_url=os.environ["PROBE_BASE_URL"], config=config)


def show(**seen):
    print(json.dumps(seen))
    sys.stdout.flush()


def converse(runtime, prompt):
    return runtime.converse(
        modelId=MODEL,
        messages=[{"role": "user", "content": [{"text": prompt}]}],
        inferenceConfig={"maxTokens": 256},
    )


runtime = client()
for prompt in ["Say hello", "Say hello (malformed)"]:
    reply = converse(runtime, prompt)
    show(
        text=reply["output"]["message"]["content"][0]["text"],
        stop=reply["stopReason"],
        usage={k: reply["usage"].get(k) for k in ["inputTokens", "outputTokens", "totalTokens"]},
        latency=reply["metrics"].get("latencyMs"),
    )

# A broken answer: with retries off (what probity's README advises), and
# with each of boto3's retry modes as it comes.
for label, retries in [
    ("off", {"total_max_attempts": 1}),
    ("legacy", {"mode": "legacy"}),
    ("standard", {"mode": "standard"}),
]:
    try:
        converse(client(**retries), f"Say hello (broken, {label})")
        show(retries=label, error=None)
    except ClientError as err:
        show(
            retries=label,
            code=err.response["Error"]["Code"],
            message=err.response["Error"]["Message"],
            status=err.response["ResponseMetadata"]["HTTPStatusCode"],
            attempts=err.response["ResponseMetadata"].get("RetryAttempts"),
        )

"""Drives boto3's `invoke_model` through probity for the embedding models
apps use on Bedrock, Titan Text Embeddings v2 and Cohere Embed, with dummy
AWS credentials (probity holds the route's). Prints one JSON line per
call."""

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
from botocore.exceptions import ClientError

runtime = boto3.client(
    "bedrock-runtime",
    endpoint_url=os.environ["PROBE_BASE_URL"],
    config=Config(retries={"total_max_attempts": 1}),
)


def show(**seen):
    print(json.dumps(seen))
    sys.stdout.flush()


for model, body in [
    ("amazon.titan-embed-text-v2:0", {"inputText": "hello", "dimensions": 3}),
    ("amazon.titan-embed-text-v2:0", {"inputText": "hello (short)", "dimensions": 3}),
    ("cohere.embed-english-v3", {"texts": ["a", "b"], "input_type": "search_document"}),
]:
    try:
        reply = runtime.invoke_model(modelId=model, body=json.dumps(body))
        headers = reply["ResponseMetadata"]["HTTPHeaders"]
        show(body=json.loads(reply["body"].read()), latency=headers.get("x-amzn-bedrock-invocation-latency"))
    except ClientError as err:
        show(code=err.response["Error"]["Code"], message=err.response["Error"]["Message"], status=err.response["ResponseMetadata"]["HTTPStatusCode"])

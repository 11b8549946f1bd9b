"""boto3's `bedrock-runtime` client through probity, the way an app on AWS
uses it: `endpoint_url` at probity and dummy AWS credentials (the route
holds the Bedrock key; boto3's signature is removed). `converse`,
`converse_stream`, and `invoke_model` for Titan Text Embeddings v2 and
Cohere Embed. The model id's version (after its last `:`) names the case
the fake upstream answers (tests/it/sdks.rs). One JSON line per row
(rows.py)."""

import json

import boto3
from botocore.config import Config

from rows import MESSAGES, PROBITY, dummy_aws, row

dummy_aws()


def client(**retries):
    config = Config(retries=retries) if retries else None
    return boto3.client("bedrock-runtime", endpoint_url=f"{PROBITY}/bedrock", config=config)


# Retries off, as probity's manual advises (docs/src/apps.md) (boto3 retries any 502), for
# every row but the retry rows; those use boto3's modes as they come.
runtime = client(total_max_attempts=1)
CLIENTS = {
    "retry-default": client(),
    "retry-legacy": client(mode="legacy"),
    "retry-off": runtime,
}

CLAUDE = "anthropic.claude-3-haiku-20240307-v1"
TITAN = "amazon.titan-embed-text-v2"
COHERE = "cohere.embed-english-v3"
ASK = [{"role": "user", "content": [{"text": MESSAGES[0]["content"]}]}]
USAGE = ["inputTokens", "outputTokens", "totalTokens"]


def usage_of(usage):
    # boto3 leaves a null member out of the dict it builds: `.get` reads None.
    return {k: usage.get(k) for k in USAGE}


def converse(case):
    def call():
        reply = CLIENTS.get(case, runtime).converse(
            modelId=f"{CLAUDE}:{case}", messages=ASK, inferenceConfig={"maxTokens": 256}
        )
        # `usage` and `metrics` read unguarded, as apps and AWS's examples do.
        return {
            "text": reply["output"]["message"]["content"][0]["text"],
            "stop": reply["stopReason"],
            "usage": usage_of(reply["usage"]),
            "latency": reply["metrics"].get("latencyMs"),
        }

    return call


def converse_stream(case):
    def call():
        reply = runtime.converse_stream(modelId=f"{CLAUDE}:{case}", messages=ASK)
        seen = {"events": [], "deltas": []}
        for event in reply["stream"]:
            (name, body), = event.items()
            seen["events"].append(name)
            if name == "contentBlockDelta":
                seen["deltas"].append(body["delta"]["text"])
            if name == "messageStop":
                seen["stop"] = body["stopReason"]
            if name == "metadata":
                seen["usage"] = usage_of(body["usage"])
                seen["latency"] = body["metrics"].get("latencyMs")
        return seen

    return call


def invoke(model, request):
    def call():
        reply = runtime.invoke_model(modelId=model, body=json.dumps(request))
        headers = reply["ResponseMetadata"]["HTTPHeaders"]
        return {
            "body": json.loads(reply["body"].read()),
            "input_token_count": headers.get("x-amzn-bedrock-input-token-count"),
            "latency": headers.get("x-amzn-bedrock-invocation-latency"),
        }

    return call


for case in ("valid", "figure", "collapse", "relation", "reject"):
    row(f"converse.{case}", converse(case))
for case in ("valid", "figure", "collapse", "reject", "reject-frame"):
    row(f"converse-stream.{case}", converse_stream(case))
for case in ("valid", "figure", "header", "reject"):
    titan = {"inputText": MESSAGES[0]["content"], "dimensions": 256}
    row(f"invoke-titan.{case}", invoke(f"{TITAN}:{case}", titan))
for case in ("valid", "header", "id", "reject"):
    cohere = {"texts": ["hello", "goodbye"], "input_type": "search_document"}
    row(f"invoke-cohere.{case}", invoke(f"{COHERE}:{case}", cohere))
for case in CLIENTS:
    row(f"converse.{case}", converse(case))

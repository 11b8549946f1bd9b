"""Drives LangChain's `ChatBedrockConverse` (langchain-aws) through probity:
`endpoint_url` at probity, dummy AWS credentials. `invoke` and `stream`,
each once sound and once with a malformed count. Prints one JSON line per
call: the text, and the usage LangChain made of it (or the exception it
raised)."""

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

from botocore.config import Config
from langchain_aws import ChatBedrockConverse

llm = ChatBedrockConverse(
    model="anthropic.claude-3-haiku-20240307-v1:0",
    region_name="us-east-1",
    endpoint_url=os.environ["PROBE_BASE_URL"],
    config=Config(retries={"total_max_attempts": 1}),
)


def show(**seen):
    print(json.dumps(seen))
    sys.stdout.flush()


for prompt in ["Say hello", "Say hello (malformed)"]:
    try:
        reply = llm.invoke(prompt)
        show(call="invoke", text=reply.content, usage=reply.usage_metadata)
    except Exception as err:  # what the app would see
        show(call="invoke", raised=type(err).__name__, text=str(err))
    try:
        text, usage = "", None
        for chunk in llm.stream(prompt):
            if isinstance(chunk.content, str):
                text += chunk.content
            else:
                text += "".join(c.get("text", "") for c in chunk.content if isinstance(c, dict))
            if chunk.usage_metadata:
                usage = chunk.usage_metadata
        show(call="stream", text=text, usage=usage)
    except Exception as err:
        show(call="stream", raised=type(err).__name__, text=str(err))

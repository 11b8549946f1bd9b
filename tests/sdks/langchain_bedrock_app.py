"""LangChain's `ChatBedrockConverse` (langchain-aws, boto3 underneath)
through probity: `endpoint_url` at probity, dummy AWS credentials,
retries off as probity's manual advises
(docs/src/apps.md). `invoke` and `stream`. The model
id's version (after its last `:`) names the case the fake upstream answers
(tests/it/sdks.rs). One JSON line per row (rows.py)."""

from botocore.config import Config
from langchain_aws import ChatBedrockConverse

from rows import MESSAGES, PROBITY, dummy_aws, row

dummy_aws()

PROMPT = MESSAGES[0]["content"]


def llm(case):
    return ChatBedrockConverse(
        model=f"anthropic.claude-3-haiku-20240307-v1:{case}",
        region_name="us-east-1",
        endpoint_url=f"{PROBITY}/bedrock",
        config=Config(retries={"total_max_attempts": 1}),
    )


def text_of(content):
    if isinstance(content, str):
        return content
    return "".join(c.get("text", "") for c in content if isinstance(c, dict))


def summary(usage):
    return None if usage is None else {k: usage.get(k) for k in ["input_tokens", "output_tokens", "total_tokens"]}


def invoke(case):
    def call():
        reply = llm(case).invoke(PROMPT)
        return {"text": text_of(reply.content), "usage_metadata": summary(reply.usage_metadata)}

    return call


def stream(case):
    def call():
        text, usage = "", None
        for chunk in llm(case).stream(PROMPT):
            text += text_of(chunk.content)
            if chunk.usage_metadata:
                usage = chunk.usage_metadata
        return {"text": text, "usage_metadata": summary(usage)}

    return call


for case in ("valid", "figure", "reject"):
    row(f"converse.{case}", invoke(case))
for case in ("valid", "figure", "reject"):
    row(f"converse-stream.{case}", stream(case))

"""The openai SDK through probity, the way an app uses it: embeddings and
chat completions, whole and streamed. The `model` names the case the fake
upstream answers (tests/it/sdks.rs). One JSON line per row (rows.py)."""

import openai

from rows import MESSAGES, PROBITY, row

# The SDK's defaults (two retries), as an app has them.
client = openai.OpenAI(base_url=f"{PROBITY}/openai/v1", api_key="unused")
# The same upstream behind a route with retry_invalid_response = true.
advised = openai.OpenAI(base_url=f"{PROBITY}/openai-retry/v1", api_key="unused")


def usage_of(usage):
    if usage is None:
        return None
    details = usage.prompt_tokens_details
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "cached_tokens": None if details is None else details.cached_tokens,
    }


def embeddings(case, inputs=2):
    def call():
        # The SDK asks for base64 and decodes it: the vectors are floats.
        reply = client.embeddings.create(model=case, input=[f"document {i}" for i in range(inputs)])
        return {
            "id": getattr(reply, "id", None),
            "vectors": [list(d.embedding) for d in reply.data],
            "prompt_tokens": reply.usage.prompt_tokens,
            "total_tokens": reply.usage.total_tokens,
        }

    return call


def chat(case, on=client):
    def call():
        reply = on.chat.completions.create(model=case, messages=MESSAGES)
        return {"id": reply.id, "text": reply.choices[0].message.content, "usage": usage_of(reply.usage)}

    return call


def chat_stream(case):
    def call():
        ids, text, usage = [], "", None
        stream = client.chat.completions.create(
            model=case, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        for chunk in stream:
            ids.append(chunk.id)
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
            if chunk.usage is not None:
                usage = usage_of(chunk.usage)
        return {"ids": ids, "text": text, "usage": usage}

    return call


for case in ("valid", "figure", "collapse", "id", "reject"):
    row(f"embeddings.{case}", embeddings(case))
for case in ("valid", "figure", "details", "collapse", "id", "relation", "reject"):
    row(f"chat.{case}", chat(case))
for case in ("valid", "figure", "collapse", "id", "relation", "reject"):
    row(f"chat-stream.{case}", chat_stream(case))
row("chat.retry-default", chat("retry-default"))
row("chat.retry-advised", chat("retry-advised", on=advised))

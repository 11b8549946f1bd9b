"""openai.AzureOpenAI through probity, the way an app on Azure uses it:
embeddings and chat completions, whole and streamed, with the resource's
key held by the route (`/azure`), or the app's own key or Entra token
passed through (`/azure-own`). The `model` (the deployment) names the case
the fake resource answers (tests/it/sdks/azure.rs). One JSON line per row
(rows.py)."""

import openai

from rows import MESSAGES, PROBITY, row

API_VERSION = "2024-10-21"


def azure(prefix, **credential):
    # The SDK's defaults (two retries), as an app has them.
    return openai.AzureOpenAI(azure_endpoint=f"{PROBITY}/{prefix}", api_version=API_VERSION, **credential)


client = azure("azure", api_key="client-azure-key")
advised = azure("azure-retry", api_key="client-azure-key")
own_key = azure("azure-own", api_key="client-azure-key")
entra = azure("azure-own", azure_ad_token="entra-token-0123")
# An Entra token sent to the route that holds the key: replaced by the key.
entra_replaced = azure("azure", azure_ad_token="entra-token-0123")


def usage_of(usage):
    if usage is None:
        return None
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def embeddings(case):
    def call():
        # The SDK asks for base64 and decodes it: the vectors are floats.
        reply = client.embeddings.create(model=case, input=["document 0", "document 1"])
        return {
            "vectors": [list(d.embedding) for d in reply.data],
            "prompt_tokens": reply.usage.prompt_tokens,
            "total_tokens": reply.usage.total_tokens,
        }

    return call


def chat(case, on=client):
    def call():
        reply = on.chat.completions.create(model=case, messages=MESSAGES)
        # Azure's filter results are members the SDK's types do not name.
        seen = reply.to_dict()
        return {
            "id": reply.id,
            "text": reply.choices[0].message.content,
            "usage": usage_of(reply.usage),
            "prompt_filters": len(seen["prompt_filter_results"]),
            "choice_filtered": seen["choices"][0]["content_filter_results"]["hate"]["filtered"],
        }

    return call


def chat_stream(case):
    def call():
        ids, text, usage, filter_chunks, offsets = [], "", None, 0, []
        stream = client.chat.completions.create(
            model=case, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        for chunk in stream:
            ids.append(chunk.id)
            # Azure's filter chunks: `object` empty, as the SDK's own
            # stream helper tells them apart.
            filter_chunks += chunk.object == ""
            for choice in chunk.to_dict()["choices"]:
                # An Asynchronous Filter chunk's choice has no `delta`.
                text += (choice.get("delta") or {}).get("content") or ""
                if "content_filter_offsets" in choice:
                    offsets.append(choice["content_filter_offsets"]["end_offset"])
            if chunk.usage is not None:
                usage = usage_of(chunk.usage)
        return {"ids": ids, "text": text, "usage": usage, "filter_chunks": filter_chunks, "offsets": offsets}

    return call


for case in ("valid", "figure", "reject"):
    row(f"embeddings.{case}", embeddings(case))
for case in ("valid", "figure", "reject"):
    row(f"chat.{case}", chat(case))
row("chat.own-key", chat("own-key", on=own_key))
row("chat.entra", chat("entra", on=entra))
row("chat.entra-replaced", chat("entra-replaced", on=entra_replaced))
for case in ("valid", "figure", "id", "reject"):
    row(f"chat-stream.{case}", chat_stream(case))
row("chat-stream.async-filter", chat_stream("async-filter"))
row("chat.retry-default", chat("retry-default"))
row("chat.retry-advised", chat("retry-advised", on=advised))

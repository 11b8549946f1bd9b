"""The cohere SDK's chat (ClientV2.chat, chat_stream) through probity, the
way an app uses it: plain, with tools, with documents it cites. The
`model` names the case the fake upstream answers
(tests/it/sdks/cohere_chat.rs). One JSON line per row (rows.py)."""

import json

import cohere

from rows import MESSAGES, PROBITY, row

# The SDK retries every 5xx, whatever x-should-retry says: no retries here
# keeps the rejection rows fast, but for the one row that counts them.
client = cohere.ClientV2(api_key="unused", base_url=f"{PROBITY}/cohere", max_retries=0)
retrying = cohere.ClientV2(api_key="unused", base_url=f"{PROBITY}/cohere")
degrading = cohere.ClientV2(api_key="unused", base_url=f"{PROBITY}/cohere-degrade", max_retries=0)

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "gets the weather of a given location",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
    },
}]
PENGUINS = [{"role": "user", "content": "Where do the tallest penguins live?"}]
# Two documents Cohere names itself (doc:0:0, doc:0:1), one named here.
DOCUMENTS = [
    {"data": {"title": "Tall penguins", "snippet": "Emperor penguins are the tallest."}},
    {"data": {"title": "Penguin habitats", "snippet": "Emperor penguins only live in Antarctica."}},
    {"id": "animals", "data": {"title": "What are animals?", "snippet": "Animals are different from plants."}},
]


def usage_of(usage):
    if usage is None:
        return None
    billed, tokens = usage.billed_units, usage.tokens
    return {
        "billed_units": None if billed is None else {
            "input_tokens": billed.input_tokens, "output_tokens": billed.output_tokens,
        },
        "tokens": None if tokens is None else {
            "input_tokens": tokens.input_tokens, "output_tokens": tokens.output_tokens,
        },
    }


def sources_of(citations):
    return [s.id for c in citations or [] for s in c.sources or []]


def chat(case, sdk=client):
    def call():
        raw = sdk.with_raw_response.chat(model=case, messages=MESSAGES)
        reply = raw.data
        return {
            "id": reply.id, "finish_reason": reply.finish_reason, "text": reply.message.content[0].text,
            "usage": usage_of(reply.usage), "output": raw.headers.get("probity-output"),
        }

    return call


def tools():
    raw = client.with_raw_response.chat(model="tools", messages=MESSAGES, tools=TOOLS)
    reply = raw.data
    return {
        "finish_reason": reply.finish_reason,
        "calls": [[c.function.name, c.function.arguments] for c in reply.message.tool_calls],
        "output": raw.headers.get("probity-output"), "reason": raw.headers.get("probity-output-reason"),
    }


def cited(case, sdk=client, answer=False):
    def call():
        raw = sdk.with_raw_response.chat(model=case, messages=PENGUINS, documents=DOCUMENTS)
        message = raw.data.message
        text = message.content[0].text
        seen = {"answer": json.loads(text)} if answer else {"text": text}
        return {
            **seen, "sources": sources_of(message.citations),
            "output": raw.headers.get("probity-output"), "reason": raw.headers.get("probity-output-reason"),
        }

    return call


def stream(case, documents=None):
    def call():
        seen = {"id": None, "text": "", "finish_reason": None, "usage": None, "sources": [], "error": None}
        for event in client.chat_stream(model=case, messages=MESSAGES, documents=documents):
            if event.type == "message-start":
                seen["id"] = event.id
            elif event.type == "content-delta":
                seen["text"] += event.delta.message.content.text
            elif event.type == "citation-start":
                seen["sources"] += sources_of([event.delta.message.citations])
            elif event.type == "message-end":
                seen["finish_reason"] = event.delta.finish_reason
                seen["usage"] = usage_of(event.delta.usage)
                error = event.delta.error
                # What names the invariant in probity's message.
                seen["error"] = error and ("content_block_invalid" if "content_block_invalid" in error else error)
        return seen

    return call


for case in ("valid", "figure", "reject"):
    row(f"chat.{case}", chat(case))
row("chat.tools", tools)
row("chat.citations", cited("citations"))
row("chat.citation-unknown", cited("citation-unknown"))
row("chat.citation-degrade", cited("citation-degrade", degrading, answer=True))
row("chat.citation-retried", cited("citation-retried", retrying))
for case in ("valid", "figure", "reject"):
    row(f"chat-stream.{case}", stream(case))
row("chat-stream.citation-unknown", stream("citation-unknown", DOCUMENTS))
row("chat.retry-default", chat("retry-default", retrying))

"""The anthropic SDK through probity, the way an app uses it: a message,
whole and streamed. The `model` names the case the fake upstream answers
(tests/it/sdks.rs). One JSON line per row (rows.py)."""

import anthropic

from rows import MESSAGES, PROBITY, row

# The SDK's defaults (two retries), as an app has them.
client = anthropic.Anthropic(base_url=f"{PROBITY}/anthropic", api_key="unused")
# The same upstream behind a route with retry_invalid_response = true.
advised = anthropic.Anthropic(base_url=f"{PROBITY}/anthropic-retry", api_key="unused")


def seen(message):
    tools = message.usage.server_tool_use
    return {
        "id": message.id,
        "text": "".join(block.text for block in message.content if block.type == "text"),
        "input_tokens": message.usage.input_tokens,
        "output_tokens": message.usage.output_tokens,
        "web_search_requests": None if tools is None else tools.web_search_requests,
    }


def message(case, on=client):
    return lambda: seen(on.messages.create(model=case, max_tokens=1024, messages=MESSAGES))


def message_stream(case):
    def call():
        with client.messages.stream(model=case, max_tokens=1024, messages=MESSAGES) as stream:
            text = "".join(stream.text_stream)
            final = seen(stream.get_final_message())
        # What the app printed as it came equals the final message's text.
        return {**final, "streamed": text}

    return call


for case in ("valid", "figure", "details", "collapse", "id", "relation", "reject"):
    row(f"message.{case}", message(case))
for case in ("valid", "figure", "collapse", "collapse-delta", "id", "reject"):
    row(f"message-stream.{case}", message_stream(case))
row("message.retry-default", message("retry-default"))
row("message.retry-advised", message("retry-advised", on=advised))

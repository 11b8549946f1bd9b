"""The openai SDK's Realtime client through probity (tests/it/realtime.rs).

Two sessions, one per model the fake upstream knows: `gpt-realtime`
(sound usage) and `gpt-realtime-bad-usage` (a malformed `input_tokens`).
Each sends a user message and `response.create`, reads the events up to
`response.done`, and prints what the app saw as one JSON line.
"""

import json
import os

from openai import OpenAI

client = OpenAI(base_url=os.environ["PROBE_BASE_URL"], api_key="sk-client-own-key")
seen = {}
for model in ["gpt-realtime", "gpt-realtime-bad-usage"]:
    session = {"types": [], "text": ""}
    with client.realtime.connect(model=model) as connection:
        for event in connection:
            session["types"].append(event.type)
            if event.type == "session.created":
                connection.send(
                    {
                        "type": "conversation.item.create",
                        "item": {
                            "type": "message",
                            "role": "user",
                            "content": [{"type": "input_text", "text": "Say hi"}],
                        },
                    }
                )
                connection.response.create()
            elif event.type == "response.output_text.delta":
                session["text"] += event.delta
            elif event.type == "response.done":
                usage = event.response.usage
                details = usage.input_token_details
                session["id"] = event.response.id
                session["usage"] = {
                    "total_tokens": usage.total_tokens,
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                    "cached_text_tokens": details.cached_tokens_details.text_tokens,
                }
                break
    seen[model] = session
print(json.dumps(seen))

"""The openai SDK's Responses API through probity, the way an app uses it:
`responses.create` plain and with `text.format`, and `responses.stream`.
The `model` names the case the fake upstream answers (tests/it/sdks.rs). One
JSON line per row (rows.py)."""

import openai

from rows import PROBITY, row

client = openai.OpenAI(base_url=f"{PROBITY}/openai/v1", api_key="unused")

CITY = {
    "type": "json_schema",
    "name": "city",
    "strict": True,
    "schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def usage_of(usage):
    if usage is None:
        return None
    details = usage.input_tokens_details
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "cached_tokens": None if details is None else details.cached_tokens,
    }


def create(case):
    def call():
        reply = client.responses.create(model=case, input="Name the capital of France.")
        return {"id": reply.id, "text": reply.output_text, "usage": usage_of(reply.usage)}

    return call


def formatted(case):
    def call():
        # `text.format` is the contract; the route annotates (its default).
        raw = client.responses.with_raw_response.create(
            model=case, input="Which city is the capital of France?", text={"format": CITY}
        )
        reply = raw.parse()
        return {
            "text": reply.output_text,
            "output": raw.headers.get("probity-output"),
            "reason": raw.headers.get("probity-output-reason"),
        }

    return call


def stream(case):
    def call():
        deltas = []
        with client.responses.stream(model=case, input="Name the capital of France.") as events:
            for event in events:
                if event.type == "response.output_text.delta":
                    deltas.append(event.delta)
            final = events.get_final_response()
        return {"deltas": deltas, "text": final.output_text, "usage": usage_of(final.usage)}

    return call


for case in ("valid", "figure", "details", "collapse", "id", "relation", "reject"):
    row(f"responses.{case}", create(case))
for case in ("format", "format-invalid"):
    row(f"responses.{case}", formatted(case))
for case in ("valid", "figure", "collapse", "reject"):
    row(f"responses-stream.{case}", stream(case))

"""The openai SDK with a pydantic response_format, through a probity route
whose contract degrades invalid answers: the app must parse the degraded
answer without error. Prints what it parsed, as JSON."""

import json
import os

import openai
from pydantic import BaseModel


class Answer(BaseModel):
    answer: str
    sufficient: bool
    citations: list[str]
    uncertainty: list[str]


client = openai.OpenAI(base_url=os.environ["PROBE_BASE_URL"], api_key="sk-app", max_retries=0)
prompt = {
    "question": "Why is the sky blue?",
    "sources": [{"id": "s1", "text": "Rayleigh scattering makes the sky blue."}],
}
raw = client.chat.completions.with_raw_response.parse(
    model="llama3.2:3b",
    messages=[{"role": "user", "content": json.dumps(prompt)}],
    response_format=Answer,
)
parsed = raw.parse().choices[0].message.parsed
print(
    json.dumps(
        {
            "answer": parsed.answer,
            "sufficient": parsed.sufficient,
            "citations": parsed.citations,
            "uncertainty": parsed.uncertainty,
            "output": raw.headers.get("probity-output"),
            "reasons": raw.headers.get("probity-output-reason"),
        }
    )
)

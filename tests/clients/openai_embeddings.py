"""Drives the official openai Python SDK through probity, the way an app
would: only the base URL changes. Prints what the app sees, as JSON."""

import json
import os
import sys

import openai

client = openai.OpenAI(base_url=os.environ["PROBE_BASE_URL"], api_key="sk-app", max_retries=0)
raw = client.embeddings.with_raw_response.create(
    model="text-embedding-3-small", input=["first document", "second document"]
)
response = raw.parse()
print(
    json.dumps(
        {
            "vectors": [list(d.embedding) for d in response.data],
            "indexes": [d.index for d in response.data],
            "prompt_tokens": response.usage.prompt_tokens,
            "total_tokens": response.usage.total_tokens,
            "normalized": raw.headers.get("probity-normalized"),
        }
    )
)
try:
    client.embeddings.create(model="text-embedding-3-small", input=["one", "two", "three"])
    print(json.dumps({"short_list": "accepted"}))
except openai.APIStatusError as err:
    print(json.dumps({"short_list": err.status_code, "type": err.body.get("type") if isinstance(err.body, dict) else None}))
sys.stdout.flush()

"""Drives the google-genai SDK through probity, the way an app would: only
the base URL changes (`http_options.base_url`). Each call once on a sound
answer and once on an answer with one malformed figure, which probity
turns into `null`: the app must read `None` for it and raise nothing.
Prints what the app saw, as one JSON line per call."""

import json
import os
import sys

from google import genai
from google.genai import types

client = genai.Client(
    api_key="unused",
    http_options=types.HttpOptions(base_url=os.environ["PROBE_BASE_URL"]),
)


def show(**seen):
    print(json.dumps(seen))
    sys.stdout.flush()


def usage(u):
    if u is None:
        return None
    return {
        "input": u.prompt_token_count,
        "output": getattr(u, "candidates_token_count", None),
        "total": u.total_token_count,
    }


# Embeddings: one content, several, and several with a malformed count.
for contents in ["What is the meaning of life?", ["first document", "second document"], ["malformed usage", "second document"]]:
    reply = client.models.embed_content(
        model="gemini-embedding-001",
        contents=contents,
        config=types.EmbedContentConfig(output_dimensionality=3),
    )
    show(
        vectors=[e.values for e in reply.embeddings],
        usage=usage(getattr(reply, "usage_metadata", None)),
    )

# Generation, whole and streamed, sound then malformed.
for prompt in ["Say hello", "Say hello (malformed)"]:
    reply = client.models.generate_content(model="gemini-2.5-flash", contents=prompt)
    show(text=reply.text, usage=usage(reply.usage_metadata), id=reply.response_id)
    text, last = "", None
    for chunk in client.models.generate_content_stream(model="gemini-2.5-flash", contents=prompt):
        text += chunk.text or ""
        if chunk.usage_metadata is not None:
            last = chunk.usage_metadata
    show(text=text, usage=usage(last))

# A stream that breaks an invariant mid-way: the app gets the text so far,
# then the SDK's own ServerError from probity's error event.
text = ""
try:
    for chunk in client.models.generate_content_stream(model="gemini-2.5-flash", contents="Say hello (broken)"):
        text += chunk.text or ""
    show(text=text, error=None)
except genai.errors.APIError as err:
    show(text=text, error=err.code, status=err.status, reason=err.details["error"]["details"][0]["reason"])

"""Vertex AI's SDKs through probity, the way an app on Google Cloud uses
them: anthropic.AnthropicVertex (Claude: :rawPredict, :streamRawPredict),
google-genai with vertexai=True (Gemini: :generateContent,
:streamGenerateContent; embeddings: :predict) and the openai SDK against
Vertex's OpenAI-compatible endpoint. The model (in the path, or the
openai request's `model`) names the case the fake Vertex answers
(tests/it/sdks/vertex.rs). The credential is an OAuth access token, sent
as `Authorization: Bearer`. One JSON line per row (rows.py)."""

import anthropic
import openai
from google import genai
from google.genai import types
from google.oauth2.credentials import Credentials

from rows import MESSAGES, PROBITY, row

PROJECT = "my-project"
REGION = "us-east5"
TOKEN = "ya29.vertex-access-token"


def claude(prefix):
    # The SDK's defaults (two retries), as an app has them.
    return anthropic.AnthropicVertex(
        region=REGION, project_id=PROJECT, access_token=TOKEN, base_url=f"{PROBITY}/{prefix}/v1"
    )


def gemini(retry=None):
    options = types.HttpOptions(base_url=f"{PROBITY}/vertex/", retry_options=retry)
    return genai.Client(
        vertexai=True, project=PROJECT, location=REGION, credentials=Credentials(token=TOKEN), http_options=options
    )


client = claude("vertex")
advised = claude("vertex-retry")
google = gemini()
# google-genai retries only when told to (HttpRetryOptions): 502 is one of
# the codes it retries then.
retrying = gemini(types.HttpRetryOptions(attempts=2, initial_delay=0.01, max_delay=0.01))
chat_client = openai.OpenAI(
    base_url=f"{PROBITY}/vertex/v1/projects/{PROJECT}/locations/{REGION}/endpoints/openapi", api_key=TOKEN
)


def claude_seen(message):
    return {
        "id": message.id,
        "text": "".join(block.text for block in message.content if block.type == "text"),
        "input_tokens": message.usage.input_tokens,
        "output_tokens": message.usage.output_tokens,
    }


def message(case, on=client):
    return lambda: claude_seen(on.messages.create(model=case, max_tokens=1024, messages=MESSAGES))


def message_stream(case):
    def call():
        with client.messages.stream(model=case, max_tokens=1024, messages=MESSAGES) as stream:
            text = "".join(stream.text_stream)
            final = claude_seen(stream.get_final_message())
        return {**final, "streamed": text}

    return call


def details(listed):
    return None if listed is None else [[d.modality.value, d.token_count] for d in listed]


def usage_of(usage):
    return {
        "prompt": usage.prompt_token_count,
        "candidates": usage.candidates_token_count,
        "total": usage.total_token_count,
        "thoughts": usage.thoughts_token_count,
        "traffic_type": usage.traffic_type.value if usage.traffic_type else None,
        "prompt_details": details(usage.prompt_tokens_details),
        "candidates_details": details(usage.candidates_tokens_details),
    }


def generate(case, on=google):
    def call():
        reply = on.models.generate_content(model=case, contents="Explain how AI works in a few words")
        return {"id": reply.response_id, "text": reply.text, "usage": usage_of(reply.usage_metadata)}

    return call


def generate_stream(case):
    def call():
        text, usages = "", []
        for chunk in google.models.generate_content_stream(model=case, contents="Explain how AI works in a few words"):
            text += chunk.text or ""
            usages.append(usage_of(chunk.usage_metadata))
        return {"text": text, "first": usages[0], "last": usages[-1], "chunks": len(usages)}

    return call


def embed(case):
    def call():
        reply = google.models.embed_content(
            model=case,
            contents=["What is life?", "Rayleigh scattering makes the sky blue."],
            config=types.EmbedContentConfig(output_dimensionality=4, task_type="RETRIEVAL_DOCUMENT"),
        )
        return {
            "vectors": [e.values for e in reply.embeddings],
            "token_counts": [e.statistics.token_count for e in reply.embeddings],
            "truncated": [e.statistics.truncated for e in reply.embeddings],
            "billable_characters": None if reply.metadata is None else reply.metadata.billable_character_count,
        }

    return call


def chat(case):
    def call():
        reply = chat_client.chat.completions.create(model=f"google/{case}", messages=MESSAGES)
        usage = reply.usage
        return {
            "id": reply.id,
            "text": reply.choices[0].message.content,
            "usage": None
            if usage is None
            else [usage.prompt_tokens, usage.completion_tokens, usage.total_tokens],
        }

    return call


def chat_stream(case):
    def call():
        text, usage = "", None
        stream = chat_client.chat.completions.create(
            model=f"google/{case}", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        for chunk in stream:
            for choice in chunk.choices:
                text += choice.delta.content or ""
            if chunk.usage is not None:
                usage = [chunk.usage.prompt_tokens, chunk.usage.completion_tokens, chunk.usage.total_tokens]
        return {"text": text, "usage": usage}

    return call


for case in ("valid", "figure", "reject"):
    row(f"message.{case}", message(case))
for case in ("valid", "figure", "reject"):
    row(f"message-stream.{case}", message_stream(case))
row("message.retry-default", message("retry-default"))
row("message.retry-advised", message("retry-advised", on=advised))
for case in ("valid", "figure", "reject"):
    row(f"generate.{case}", generate(case))
for case in ("valid", "figure", "reject"):
    row(f"generate-stream.{case}", generate_stream(case))
row("generate.retry-default", generate("retry-genai-default"))
row("generate.retry-configured", generate("retry-genai-configured", on=retrying))
for case in ("valid", "figure", "reject"):
    row(f"embed.{case}", embed(case))
for case in ("valid", "figure", "reject"):
    row(f"chat.{case}", chat(case))
for case in ("valid", "reject"):
    row(f"chat-stream.{case}", chat_stream(case))

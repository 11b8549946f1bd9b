"""The ollama SDK through probity, the way an app uses it: chat, whole and
streamed, and embed. The `model` names the case the fake upstream answers
(tests/it/sdks.rs). One JSON line per row (rows.py)."""

import ollama

from rows import MESSAGES, PROBITY, row

client = ollama.Client(host=f"{PROBITY}/ollama")


def chat(case):
    def call():
        reply = client.chat(model=case, messages=MESSAGES, stream=False)
        return {"text": reply.message.content, "prompt_eval_count": reply.prompt_eval_count, "eval_count": reply.eval_count}

    return call


def chat_stream(case):
    def call():
        text, last = "", None
        for part in client.chat(model=case, messages=MESSAGES, stream=True):
            text += part.message.content or ""
            last = part
        return {"text": text, "prompt_eval_count": last.prompt_eval_count, "eval_count": last.eval_count}

    return call


def embed(case):
    def call():
        reply = client.embed(model=case, input=["Why is the sky blue?", "Why is the grass green?"])
        return {
            "vectors": [list(v) for v in reply.embeddings],
            "prompt_eval_count": reply.prompt_eval_count,
            "total_duration": reply.total_duration,
        }

    return call


for case in ("valid", "figure", "reject"):
    row(f"chat.{case}", chat(case))
    row(f"chat-stream.{case}", chat_stream(case))
    row(f"embed.{case}", embed(case))

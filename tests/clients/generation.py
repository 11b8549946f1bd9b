"""Drives one official Python SDK through probity for a non-streamed and a
streamed call, the way an app would: only the base URL changes. Prints what
the app saw, as one JSON line per call."""

import json
import os
import sys

sdk = sys.argv[1]
base = os.environ["PROBE_BASE_URL"]
messages = [{"role": "user", "content": "Say hello"}]


def show(**seen):
    print(json.dumps(seen))
    sys.stdout.flush()


if sdk == "openai":
    import openai

    client = openai.OpenAI(base_url=base, api_key="sk-app", max_retries=0)
    reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    show(text=reply.choices[0].message.content, input=reply.usage.prompt_tokens, output=reply.usage.completion_tokens)
    text, usage = "", None
    for chunk in client.chat.completions.create(
        model="gpt-4o-mini", messages=messages, stream=True, stream_options={"include_usage": True}
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.usage is not None:
            usage = chunk.usage
    show(text=text, input=usage.prompt_tokens, output=usage.completion_tokens)

elif sdk == "anthropic":
    import anthropic

    client = anthropic.Anthropic(base_url=base, api_key="sk-ant-app", max_retries=0)
    reply = client.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=messages)
    show(text=reply.content[0].text, input=reply.usage.input_tokens, output=reply.usage.output_tokens)
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=64, messages=messages) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    show(text=text, input=final.usage.input_tokens, output=final.usage.output_tokens)

elif sdk == "ollama":
    import ollama

    client = ollama.Client(host=base)
    reply = client.chat(model="llama3.2:3b", messages=messages, stream=False)
    show(text=reply.message.content, input=reply.prompt_eval_count, output=reply.eval_count)
    text, last = "", None
    for part in client.chat(model="llama3.2:3b", messages=messages, stream=True):
        text += part.message.content or ""
        last = part
    show(text=text, input=last.prompt_eval_count, output=last.eval_count)

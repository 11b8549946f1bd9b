"""Claude on Bedrock through Anthropic's own SDK (anthropic.AnthropicBedrock),
the way an app uses it: a message through `invoke`, and streamed through
`invoke-with-response-stream` (AWS's event stream, each chunk one Anthropic
event in base64). The model id's version names the case the fake upstream
answers (tests/it/sdks/bedrock_anthropic.rs). One JSON line per row
(rows.py). The SDK signs with dummy AWS credentials: the route holds a
Bedrock API key and drops the signature."""

from anthropic import AnthropicBedrock

from rows import MESSAGES, PROBITY, dummy_aws, row

dummy_aws()
CLAUDE = "anthropic.claude-3-haiku-20240307-v1"


def bedrock(prefix):
    # The SDK's defaults (two retries), as an app has them.
    return AnthropicBedrock(
        base_url=f"{PROBITY}/{prefix}",
        aws_access_key="AKIDEXAMPLE",
        aws_secret_key="dummy-secret",
        aws_region="us-east-1",
    )


client = bedrock("bedrock")
# The same upstream behind a route with retry_invalid_response = true.
advised = bedrock("bedrock-retry")


def seen(message):
    return {
        "id": message.id,
        "text": "".join(block.text for block in message.content if block.type == "text"),
        "input_tokens": message.usage.input_tokens,
        "output_tokens": message.usage.output_tokens,
    }


def message(case, on=client):
    return lambda: seen(on.messages.create(model=f"{CLAUDE}:{case}", max_tokens=512, messages=MESSAGES))


def message_stream(case):
    def call():
        with client.messages.stream(model=f"{CLAUDE}:{case}", max_tokens=512, messages=MESSAGES) as stream:
            text = "".join(stream.text_stream)
            final = seen(stream.get_final_message())
        # What the app printed as it came equals the final message's text.
        return {**final, "streamed": text}

    return call


def events(case):
    """The raw events (`stream=True`): Bedrock's own figures ride on the
    last, beside Anthropic's (the stream helper's events drop them)."""

    def call():
        text, metrics = "", None
        for event in client.messages.create(model=f"{CLAUDE}:{case}", max_tokens=512, messages=MESSAGES, stream=True):
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                text += event.delta.text
            if event.type == "message_stop":
                metrics = event.to_dict().get("amazon-bedrock-invocationMetrics")
        return {"text": text, "metrics": metrics}

    return call


for case in ("valid", "figure", "reject"):
    row(f"message.{case}", message(case))
for case in ("valid", "figure", "falling", "reject", "reject-frame", "throttled"):
    row(f"message-stream.{case}", message_stream(case))
for case in ("valid", "metrics"):
    row(f"events.{case}", events(case))
row("message.retry-default", message("retry-default"))
row("message.retry-advised", message("retry-advised", on=advised))

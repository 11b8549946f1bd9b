from anthropic import Anthropic

client = Anthropic(base_url="http://127.0.0.1:8080/anthropic")
message = client.messages.create(
    model="claude-sonnet-4-6",
    max_tokens=256,
    messages=[{"role": "user", "content": "Say hello."}],
)
print(message.content[0].text)
print("output tokens:", message.usage.output_tokens)

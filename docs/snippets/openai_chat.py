from openai import OpenAI

# Only the base URL changes: probity sits in front of the provider, and
# the route injects the provider key (OPENAI_API_KEY here is any value).
client = OpenAI(base_url="http://127.0.0.1:8080/openai/v1")
answer = client.chat.completions.create(
    model="gpt-4.1-mini",
    messages=[{"role": "user", "content": "Say hello."}],
)
print(answer.choices[0].message.content)
# A figure probity found malformed reads as None, never as a wrong number.
print("prompt tokens:", answer.usage.prompt_tokens if answer.usage else None)

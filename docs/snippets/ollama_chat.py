from ollama import Client

client = Client(host="http://127.0.0.1:8080/ollama")
response = client.chat(
    model="llama3.2",
    messages=[{"role": "user", "content": "Say hello."}],
)
print(response.message.content)
print("eval count:", response.eval_count)

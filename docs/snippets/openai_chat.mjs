import OpenAI from "openai";

// Only the base URL changes; the route injects the provider key.
const client = new OpenAI({ baseURL: "http://127.0.0.1:8080/openai/v1" });
const answer = await client.chat.completions.create({
  model: "gpt-4.1-mini",
  messages: [{ role: "user", content: "Say hello." }],
});
console.log(answer.choices[0].message.content);
// A figure probity found malformed reads as null, never as a wrong number.
console.log("prompt tokens:", answer.usage?.prompt_tokens ?? null);

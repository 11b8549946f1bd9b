// The openai SDK through probity, the way an app uses it: embeddings and
// chat completions, whole and streamed. The `model` names the case the fake
// upstream answers (tests/it/sdks.rs). One JSON line per row (rows.mjs).

import OpenAI from 'openai';

import { MESSAGES, PROBITY, row } from './rows.mjs';

// The SDK's defaults (two retries), as an app has them.
const client = new OpenAI({ baseURL: `${PROBITY}/openai/v1`, apiKey: 'unused' });
// The same upstream behind a route with retry_invalid_response = true.
const advised = new OpenAI({ baseURL: `${PROBITY}/openai-retry/v1`, apiKey: 'unused' });

function usageOf(usage) {
  if (usage == null) return null;
  const details = usage.prompt_tokens_details;
  return {
    prompt_tokens: usage.prompt_tokens,
    completion_tokens: usage.completion_tokens,
    total_tokens: usage.total_tokens,
    cached_tokens: details == null ? null : details.cached_tokens,
  };
}

const embeddings = (model) => async () => {
  // The SDK asks for base64 and decodes it: the vectors are numbers.
  const reply = await client.embeddings.create({ model, input: ['document 0', 'document 1'] });
  return {
    id: reply.id,
    vectors: reply.data.map((d) => Array.from(d.embedding)),
    prompt_tokens: reply.usage.prompt_tokens,
    total_tokens: reply.usage.total_tokens,
  };
};

const chat = (model, on = client) => async () => {
  const reply = await on.chat.completions.create({ model, messages: MESSAGES });
  return { id: reply.id, text: reply.choices[0].message.content, usage: usageOf(reply.usage) };
};

const chatStream = (model) => async () => {
  const ids = [];
  let text = '';
  let usage = null;
  const stream = await client.chat.completions.create({
    model,
    messages: MESSAGES,
    stream: true,
    stream_options: { include_usage: true },
  });
  for await (const chunk of stream) {
    ids.push(chunk.id);
    if (chunk.choices.length > 0 && chunk.choices[0].delta.content) text += chunk.choices[0].delta.content;
    if (chunk.usage != null) usage = usageOf(chunk.usage);
  }
  return { ids, text, usage };
};

for (const c of ['valid', 'figure', 'collapse', 'id', 'reject']) await row(`embeddings.${c}`, embeddings(c));
for (const c of ['valid', 'figure', 'details', 'collapse', 'id', 'relation', 'reject']) await row(`chat.${c}`, chat(c));
for (const c of ['valid', 'figure', 'collapse', 'id', 'relation', 'reject']) await row(`chat-stream.${c}`, chatStream(c));
await row('chat.retry-default', chat('retry-default'));
await row('chat.retry-advised', chat('retry-advised', advised));

// AzureOpenAI through probity, the way an app on Azure uses it: embeddings
// and chat completions, whole and streamed, with the resource's key held by
// the route (`/azure`), or the app's own key or Entra token passed through
// (`/azure-own`). The `model` (the deployment) names the case the fake
// resource answers (tests/it/sdks/azure.rs). One JSON line per row (rows.mjs).

import { AzureOpenAI } from 'openai';

import { MESSAGES, PROBITY, row } from './rows.mjs';

const apiVersion = '2024-10-21';
// The SDK's defaults (two retries), as an app has them.
const azure = (prefix, credential) => new AzureOpenAI({ endpoint: `${PROBITY}/${prefix}`, apiVersion, ...credential });
const client = azure('azure', { apiKey: 'client-azure-key' });
const advised = azure('azure-retry', { apiKey: 'client-azure-key' });
const ownKey = azure('azure-own', { apiKey: 'client-azure-key' });
const entra = azure('azure-own', { azureADTokenProvider: async () => 'entra-token-0123' });
// An Entra token sent to the route that holds the key: replaced by the key.
const entraReplaced = azure('azure', { azureADTokenProvider: async () => 'entra-token-0123' });

function usageOf(usage) {
  if (usage == null) return null;
  return {
    prompt_tokens: usage.prompt_tokens,
    completion_tokens: usage.completion_tokens,
    total_tokens: usage.total_tokens,
  };
}

const embeddings = (model) => async () => {
  // The SDK asks for base64 and decodes it: the vectors are numbers.
  const reply = await client.embeddings.create({ model, input: ['document 0', 'document 1'] });
  return {
    vectors: reply.data.map((d) => Array.from(d.embedding)),
    prompt_tokens: reply.usage.prompt_tokens,
    total_tokens: reply.usage.total_tokens,
  };
};

const chat = (model, on = client) => async () => {
  const reply = await on.chat.completions.create({ model, messages: MESSAGES });
  return {
    id: reply.id,
    text: reply.choices[0].message.content,
    usage: usageOf(reply.usage),
    // Azure's filter results, which the SDK's types do not name.
    prompt_filters: reply.prompt_filter_results.length,
    choice_filtered: reply.choices[0].content_filter_results.hate.filtered,
  };
};

const chatStream = (model) => async () => {
  const ids = [];
  const offsets = [];
  let text = '';
  let usage = null;
  let filterChunks = 0;
  const stream = await client.chat.completions.create({
    model,
    messages: MESSAGES,
    stream: true,
    stream_options: { include_usage: true },
  });
  for await (const chunk of stream) {
    ids.push(chunk.id);
    // Azure's filter chunks: `object` empty.
    if (chunk.object === '') filterChunks += 1;
    for (const choice of chunk.choices) {
      // An Asynchronous Filter chunk's choice has no `delta`.
      text += choice.delta?.content ?? '';
      if (choice.content_filter_offsets) offsets.push(choice.content_filter_offsets.end_offset);
    }
    if (chunk.usage != null) usage = usageOf(chunk.usage);
  }
  return { ids, text, usage, filter_chunks: filterChunks, offsets };
};

for (const c of ['valid', 'figure', 'reject']) await row(`embeddings.${c}`, embeddings(c));
for (const c of ['valid', 'figure', 'reject']) await row(`chat.${c}`, chat(c));
await row('chat.own-key', chat('own-key', ownKey));
await row('chat.entra', chat('entra', entra));
await row('chat.entra-replaced', chat('entra-replaced', entraReplaced));
for (const c of ['valid', 'figure', 'id', 'reject']) await row(`chat-stream.${c}`, chatStream(c));
await row('chat-stream.async-filter', chatStream('async-filter'));
await row('chat.retry-default', chat('retry-default'));
await row('chat.retry-advised', chat('retry-advised', advised));

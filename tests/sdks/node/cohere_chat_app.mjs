// The cohere-ai SDK's chat (CohereClientV2 chat, chatStream) through
// probity, the way an app uses it: plain, with tools, with documents it
// cites. The `model` names the case the fake upstream answers
// (tests/it/sdks/cohere_chat.rs). One JSON line per row (rows.mjs).

import { CohereClientV2 } from 'cohere-ai';

import { MESSAGES, PROBITY, row } from './rows.mjs';

// The SDK retries every 5xx, whatever x-should-retry says: no retries here
// keeps the rejection rows fast, but for the one row that counts them.
const client = new CohereClientV2({ token: 'unused', baseUrl: `${PROBITY}/cohere`, maxRetries: 0 });
const retrying = new CohereClientV2({ token: 'unused', baseUrl: `${PROBITY}/cohere` });
const degrading = new CohereClientV2({ token: 'unused', baseUrl: `${PROBITY}/cohere-degrade`, maxRetries: 0 });

const TOOLS = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'gets the weather of a given location',
    parameters: { type: 'object', properties: { location: { type: 'string' } }, required: ['location'] },
  },
}];
const PENGUINS = [{ role: 'user', content: 'Where do the tallest penguins live?' }];
// Two documents Cohere names itself (doc:0:0, doc:0:1), one named here.
const DOCUMENTS = [
  { data: { title: 'Tall penguins', snippet: 'Emperor penguins are the tallest.' } },
  { data: { title: 'Penguin habitats', snippet: 'Emperor penguins only live in Antarctica.' } },
  { id: 'animals', data: { title: 'What are animals?', snippet: 'Animals are different from plants.' } },
];

function usageOf(usage) {
  if (usage == null) return null;
  const billed = usage.billedUnits;
  const tokens = usage.tokens;
  return {
    billed_units: billed == null ? null : { input_tokens: billed.inputTokens, output_tokens: billed.outputTokens },
    tokens: tokens == null ? null : { input_tokens: tokens.inputTokens, output_tokens: tokens.outputTokens },
  };
}

const sourcesOf = (citations) => (citations ?? []).flatMap((c) => (c.sources ?? []).map((s) => s.id));
const verdict = (raw) => ({
  output: raw.headers.get('probity-output'),
  reason: raw.headers.get('probity-output-reason'),
});

const chat = (model, sdk = client) => async () => {
  const { data, rawResponse } = await sdk.chat({ model, messages: MESSAGES }).withRawResponse();
  return {
    id: data.id,
    finish_reason: data.finishReason,
    text: data.message.content[0].text,
    usage: usageOf(data.usage),
    output: rawResponse.headers.get('probity-output'),
  };
};

const tools = async () => {
  const { data, rawResponse } = await client.chat({ model: 'tools', messages: MESSAGES, tools: TOOLS }).withRawResponse();
  return {
    finish_reason: data.finishReason,
    calls: data.message.toolCalls.map((c) => [c.function.name, c.function.arguments]),
    ...verdict(rawResponse),
  };
};

const cited = (model, sdk = client, answer = false) => async () => {
  const { data, rawResponse } = await sdk.chat({ model, messages: PENGUINS, documents: DOCUMENTS }).withRawResponse();
  const text = data.message.content[0].text;
  return {
    ...(answer ? { answer: JSON.parse(text) } : { text }),
    sources: sourcesOf(data.message.citations),
    ...verdict(rawResponse),
  };
};

const stream = (model, documents) => async () => {
  const seen = { id: null, text: '', finish_reason: null, usage: null, sources: [], error: null };
  const events = await client.chatStream({ model, messages: MESSAGES, ...(documents ? { documents } : {}) });
  for await (const event of events) {
    if (event.type === 'message-start') {
      seen.id = event.id;
    } else if (event.type === 'content-delta') {
      seen.text += event.delta.message.content.text;
    } else if (event.type === 'citation-start') {
      seen.sources.push(...sourcesOf([event.delta.message.citations]));
    } else if (event.type === 'message-end') {
      seen.finish_reason = event.delta.finishReason;
      seen.usage = usageOf(event.delta.usage);
      const error = event.delta.error ?? null;
      // What names the invariant in probity's message.
      seen.error = error && (error.includes('content_block_invalid') ? 'content_block_invalid' : error);
    }
  }
  return seen;
};

for (const c of ['valid', 'figure', 'reject']) {
  await row(`chat.${c}`, chat(c));
}
await row('chat.tools', tools);
await row('chat.citations', cited('citations'));
await row('chat.citation-unknown', cited('citation-unknown'));
await row('chat.citation-degrade', cited('citation-degrade', degrading, true));
await row('chat.citation-retried', cited('citation-retried', retrying));
for (const c of ['valid', 'figure', 'reject']) {
  await row(`chat-stream.${c}`, stream(c));
}
await row('chat-stream.citation-unknown', stream('citation-unknown', DOCUMENTS));
await row('chat.retry-default', chat('retry-default', retrying));

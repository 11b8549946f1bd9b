// The anthropic SDK through probity, the way an app uses it: a message,
// whole and streamed. The `model` names the case the fake upstream answers
// (tests/it/sdks.rs). One JSON line per row (rows.mjs).

import Anthropic from '@anthropic-ai/sdk';

import { MESSAGES, PROBITY, row } from './rows.mjs';

// The SDK's defaults (two retries), as an app has them.
const client = new Anthropic({ baseURL: `${PROBITY}/anthropic`, apiKey: 'unused' });
// The same upstream behind a route with retry_invalid_response = true.
const advised = new Anthropic({ baseURL: `${PROBITY}/anthropic-retry`, apiKey: 'unused' });

function seen(message) {
  const tools = message.usage.server_tool_use;
  return {
    id: message.id,
    text: message.content.filter((block) => block.type === 'text').map((block) => block.text).join(''),
    input_tokens: message.usage.input_tokens,
    output_tokens: message.usage.output_tokens,
    web_search_requests: tools == null ? null : tools.web_search_requests,
  };
}

const message = (model, on = client) => async () =>
  seen(await on.messages.create({ model, max_tokens: 1024, messages: MESSAGES }));

const messageStream = (model) => async () => {
  let streamed = '';
  const stream = client.messages.stream({ model, max_tokens: 1024, messages: MESSAGES });
  stream.on('text', (text) => {
    streamed += text;
  });
  // What the app printed as it came equals the final message's text.
  return { ...seen(await stream.finalMessage()), streamed };
};

for (const c of ['valid', 'figure', 'details', 'collapse', 'id', 'relation', 'reject']) await row(`message.${c}`, message(c));
for (const c of ['valid', 'figure', 'collapse', 'collapse-delta', 'id', 'reject']) {
  await row(`message-stream.${c}`, messageStream(c));
}
await row('message.retry-default', message('retry-default'));
await row('message.retry-advised', message('retry-advised', advised));

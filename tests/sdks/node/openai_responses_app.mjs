// The openai SDK's Responses API through probity, the way an app uses it:
// `responses.create` plain and with `text.format`, and `responses.stream`.
// The `model` names the case the fake upstream answers (tests/it/sdks.rs). One
// JSON line per row (rows.mjs).

import OpenAI from 'openai';

import { PROBITY, row } from './rows.mjs';

const client = new OpenAI({ baseURL: `${PROBITY}/openai/v1`, apiKey: 'unused' });

const CITY = {
  type: 'json_schema',
  name: 'city',
  strict: true,
  schema: {
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
    additionalProperties: false,
  },
};

function usageOf(usage) {
  if (usage == null) return null;
  const details = usage.input_tokens_details;
  return {
    input_tokens: usage.input_tokens,
    output_tokens: usage.output_tokens,
    total_tokens: usage.total_tokens,
    cached_tokens: details == null ? null : details.cached_tokens,
  };
}

const create = (model) => async () => {
  const reply = await client.responses.create({ model, input: 'Name the capital of France.' });
  return { id: reply.id, text: reply.output_text, usage: usageOf(reply.usage) };
};

// `text.format` is the contract; the route annotates (its default).
const formatted = (model) => async () => {
  const { data, response } = await client.responses
    .create({ model, input: 'Which city is the capital of France?', text: { format: CITY } })
    .withResponse();
  return {
    text: data.output_text,
    output: response.headers.get('probity-output'),
    reason: response.headers.get('probity-output-reason'),
  };
};

const stream = (model) => async () => {
  const deltas = [];
  const events = client.responses.stream({ model, input: 'Name the capital of France.' });
  for await (const event of events) {
    if (event.type === 'response.output_text.delta') deltas.push(event.delta);
  }
  const final = await events.finalResponse();
  return { deltas, text: final.output_text, usage: usageOf(final.usage) };
};

for (const c of ['valid', 'figure', 'details', 'collapse', 'id', 'relation', 'reject']) await row(`responses.${c}`, create(c));
for (const c of ['format', 'format-invalid']) await row(`responses.${c}`, formatted(c));
for (const c of ['valid', 'figure', 'collapse', 'reject']) await row(`responses-stream.${c}`, stream(c));

// The AWS SDK for JavaScript v3 through probity, the way an app on AWS
// uses it: `BedrockRuntimeClient` with `endpoint` at probity and dummy
// credentials (the route holds the Bedrock key), `ConverseCommand` and
// `ConverseStreamCommand`. Retries off (`maxAttempts: 1`), as probity's
// manual advises (docs/src/apps.md) for a corrupt answer. The model id's version (after its
// last `:`) names the case the fake upstream answers (tests/it/sdks.rs).
// One JSON line per row (rows.mjs).

import { BedrockRuntimeClient, ConverseCommand, ConverseStreamCommand } from '@aws-sdk/client-bedrock-runtime';

import { MESSAGES, PROBITY, row } from './rows.mjs';

const client = new BedrockRuntimeClient({
  region: 'us-east-1',
  endpoint: `${PROBITY}/bedrock`,
  credentials: { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'dummy-secret' },
  maxAttempts: 1,
});
const ask = (c) => ({
  modelId: `anthropic.claude-3-haiku-20240307-v1:${c}`,
  messages: [{ role: 'user', content: [{ text: MESSAGES[0].content }] }],
});
// The SDK leaves a null member undefined: the app reads it as absent.
const usageOf = (usage) => ({
  inputTokens: usage.inputTokens ?? null,
  outputTokens: usage.outputTokens ?? null,
  totalTokens: usage.totalTokens ?? null,
});

const converse = (c) => async () => {
  const reply = await client.send(new ConverseCommand(ask(c)));
  // `usage` and `metrics` read unguarded, as AWS's examples do.
  return {
    text: reply.output.message.content[0].text,
    stop: reply.stopReason,
    usage: usageOf(reply.usage),
    latency: reply.metrics.latencyMs ?? null,
  };
};

const converseStream = (c) => async () => {
  const reply = await client.send(new ConverseStreamCommand(ask(c)));
  const seen = { events: [], deltas: [] };
  for await (const event of reply.stream) {
    const name = Object.keys(event).find((k) => event[k] !== undefined);
    seen.events.push(name);
    if (event.contentBlockDelta) seen.deltas.push(event.contentBlockDelta.delta.text);
    if (event.messageStop) seen.stop = event.messageStop.stopReason;
    if (event.metadata) {
      seen.usage = usageOf(event.metadata.usage);
      seen.latency = event.metadata.metrics.latencyMs ?? null;
    }
  }
  return seen;
};

for (const c of ['valid', 'figure', 'collapse', 'relation', 'reject']) await row(`converse.${c}`, converse(c));
for (const c of ['valid', 'figure', 'collapse', 'reject', 'reject-frame']) await row(`converse-stream.${c}`, converseStream(c));

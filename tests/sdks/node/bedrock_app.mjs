// The AWS SDK for JavaScript v3 through probity, the way an app on AWS
// uses it: `BedrockRuntimeClient` with `endpoint` at probity and dummy
// credentials (probity holds the real one), `ConverseCommand` and
// `ConverseStreamCommand`, each once sound, once with a malformed count
// (read as absent) and once broken (the SDK's own exception with
// probity's message). Retries off (`maxAttempts: 1`), as probity's README
// advises for a corrupt answer. One JSON line per row (rows.mjs).

import { BedrockRuntimeClient, ConverseCommand, ConverseStreamCommand } from '@aws-sdk/client-bedrock-runtime';

import { PROBITY, row } from './rows.mjs';

const client = new BedrockRuntimeClient({
  region: 'us-east-1',
  endpoint: `${PROBITY}/bedrock`,
  credentials: { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'dummy-secret' },
  maxAttempts: 1,
});
const modelId = 'anthropic.claude-3-haiku-20240307-v1:0';
const ask = (text) => ({ modelId, messages: [{ role: 'user', content: [{ text }] }] });

const converse = (prompt) => async () => {
  const reply = await client.send(new ConverseCommand(ask(prompt)));
  return {
    text: reply.output.message.content[0].text,
    stop: reply.stopReason,
    input: reply.usage.inputTokens ?? null,
    output: reply.usage.outputTokens,
    latency: reply.metrics.latencyMs,
  };
};

const converseStream = (prompt) => async () => {
  const reply = await client.send(new ConverseStreamCommand(ask(prompt)));
  let text = '';
  let seen = {};
  try {
    for await (const event of reply.stream) {
      if (event.contentBlockDelta) text += event.contentBlockDelta.delta.text ?? '';
      if (event.messageStop) seen.stop = event.messageStop.stopReason;
      if (event.metadata) {
        seen.input = event.metadata.usage.inputTokens ?? null;
        seen.output = event.metadata.usage.outputTokens;
        seen.latency = event.metadata.metrics.latencyMs;
      }
    }
  } catch (err) {
    return { text, raised: err.name, message: err.message };
  }
  return { text, ...seen };
};

for (const c of ['Say hello', 'Say hello (malformed)', 'Say hello (broken)']) await row(`converse.${c}`, converse(c));
for (const c of ['Say hello', 'Say hello (malformed)', 'Say hello (broken)']) await row(`converse-stream.${c}`, converseStream(c));

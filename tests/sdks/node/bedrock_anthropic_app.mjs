// Claude on Bedrock through Anthropic's own SDK (@anthropic-ai/bedrock-sdk),
// the way an app uses it: a message through `invoke`, and streamed through
// `invoke-with-response-stream` (AWS's event stream, each chunk one
// Anthropic event in base64). The model id's version names the case the
// fake upstream answers (tests/it/sdks/bedrock_anthropic.rs). One JSON line
// per row (rows.mjs). The SDK signs with dummy AWS credentials: the route
// holds a Bedrock API key and drops the signature.
import { AnthropicBedrock } from '@anthropic-ai/bedrock-sdk';
import { MESSAGES, PROBITY, row } from './rows.mjs';

const CLAUDE = 'anthropic.claude-3-haiku-20240307-v1';

// The SDK's defaults (two retries), as an app has them.
const bedrock = (prefix) =>
  new AnthropicBedrock({
    baseURL: `${PROBITY}/${prefix}`,
    awsAccessKey: 'AKIDEXAMPLE',
    awsSecretKey: 'dummy-secret',
    awsRegion: 'us-east-1',
  });
const client = bedrock('bedrock');
// The same upstream behind a route with retry_invalid_response = true.
const advised = bedrock('bedrock-retry');

const seen = (message) => ({
  id: message.id,
  text: message.content.filter((b) => b.type === 'text').map((b) => b.text).join(''),
  input_tokens: message.usage.input_tokens,
  output_tokens: message.usage.output_tokens,
});

const message = (caseName, on = client) => async () =>
  seen(await on.messages.create({ model: `${CLAUDE}:${caseName}`, max_tokens: 512, messages: MESSAGES }));

const messageStream = (caseName) => async () => {
  const stream = client.messages.stream({ model: `${CLAUDE}:${caseName}`, max_tokens: 512, messages: MESSAGES });
  let text = '';
  stream.on('text', (delta) => {
    text += delta;
  });
  const final = seen(await stream.finalMessage());
  // What the app printed as it came equals the final message's text.
  return { ...final, streamed: text };
};

// The raw events (`stream: true`): Bedrock's own figures ride on the last,
// beside Anthropic's.
const events = (caseName) => async () => {
  const stream = await client.messages.create({
    model: `${CLAUDE}:${caseName}`, max_tokens: 512, messages: MESSAGES, stream: true,
  });
  let text = '';
  let metrics = null;
  for await (const event of stream) {
    if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
    if (event.type === 'message_stop') metrics = event['amazon-bedrock-invocationMetrics'] ?? null;
  }
  return { text, metrics };
};

for (const c of ['valid', 'figure', 'reject']) await row(`message.${c}`, message(c));
for (const c of ['valid', 'figure', 'falling', 'reject', 'reject-frame', 'throttled']) {
  await row(`message-stream.${c}`, messageStream(c));
}
for (const c of ['valid', 'metrics']) await row(`events.${c}`, events(c));
await row('message.retry-default', message('retry-default'));
await row('message.retry-advised', message('retry-advised', advised));

// Vertex AI's Node SDKs through probity, the way an app on Google Cloud uses
// them: @anthropic-ai/vertex-sdk (Claude: :rawPredict, :streamRawPredict),
// @google/genai with vertexai (Gemini: :generateContent,
// :streamGenerateContent; embeddings: :predict) and openai against Vertex's
// OpenAI-compatible endpoint. The model (in the path, or the openai
// request's `model`) names the case the fake Vertex answers
// (tests/it/sdks/vertex.rs). The credential is an OAuth access token, sent as
// `Authorization: Bearer`. One JSON line per row (rows.mjs).

import { AnthropicVertex } from '@anthropic-ai/vertex-sdk';
import { GoogleGenAI } from '@google/genai';
// The auth library both Google SDKs use (their dependency).
import { OAuth2Client } from 'google-auth-library';
import OpenAI from 'openai';

import { MESSAGES, PROBITY, row } from './rows.mjs';

const projectId = 'my-project';
const region = 'us-east5';
const token = 'ya29.vertex-access-token';

// A Google auth client holding the access token (no Application Default
// Credentials on this machine).
function tokenClient() {
  const authClient = new OAuth2Client();
  authClient.setCredentials({ access_token: token, expiry_date: Date.now() + 3600 * 1000 });
  return authClient;
}

// The SDK's defaults (two retries), as an app has them.
const claude = (prefix) =>
  new AnthropicVertex({ region, projectId, authClient: tokenClient(), baseURL: `${PROBITY}/${prefix}/v1` });
const client = claude('vertex');
const advised = claude('vertex-retry');

function gemini(retryOptions) {
  return new GoogleGenAI({
    vertexai: true,
    project: projectId,
    location: region,
    googleAuthOptions: { authClient: tokenClient() },
    httpOptions: { baseUrl: `${PROBITY}/vertex/`, retryOptions },
  });
}
const google = gemini(undefined);
// @google/genai retries only when told to (retryOptions): 502 is one of
// the codes it retries then.
const retrying = gemini({ attempts: 2, initialDelay: 0.01, maxDelay: 0.01 });
const chatClient = new OpenAI({
  baseURL: `${PROBITY}/vertex/v1/projects/${projectId}/locations/${region}/endpoints/openapi`,
  apiKey: token,
});

function claudeSeen(message) {
  return {
    id: message.id,
    text: message.content.filter((b) => b.type === 'text').map((b) => b.text).join(''),
    input_tokens: message.usage.input_tokens,
    output_tokens: message.usage.output_tokens,
  };
}

const message = (model, on = client) => async () =>
  claudeSeen(await on.messages.create({ model, max_tokens: 1024, messages: MESSAGES }));

const messageStream = (model) => async () => {
  const stream = client.messages.stream({ model, max_tokens: 1024, messages: MESSAGES });
  let streamed = '';
  stream.on('text', (text) => {
    streamed += text;
  });
  const final = claudeSeen(await stream.finalMessage());
  return { ...final, streamed };
};

const details = (listed) => (listed == null ? null : listed.map((d) => [d.modality, d.tokenCount]));

function usageOf(usage) {
  return {
    prompt: usage.promptTokenCount,
    candidates: usage.candidatesTokenCount,
    total: usage.totalTokenCount,
    thoughts: usage.thoughtsTokenCount,
    traffic_type: usage.trafficType,
    prompt_details: details(usage.promptTokensDetails),
    candidates_details: details(usage.candidatesTokensDetails),
  };
}

const contents = 'Explain how AI works in a few words';

const generate = (model, on = google) => async () => {
  const reply = await on.models.generateContent({ model, contents });
  return { id: reply.responseId, text: reply.text, usage: usageOf(reply.usageMetadata) };
};

const generateStream = (model) => async () => {
  let text = '';
  const usages = [];
  for await (const chunk of await google.models.generateContentStream({ model, contents })) {
    text += chunk.text ?? '';
    usages.push(usageOf(chunk.usageMetadata));
  }
  return { text, first: usages[0], last: usages[usages.length - 1], chunks: usages.length };
};

const embed = (model) => async () => {
  const reply = await google.models.embedContent({
    model,
    contents: ['What is life?', 'Rayleigh scattering makes the sky blue.'],
    config: { outputDimensionality: 4, taskType: 'RETRIEVAL_DOCUMENT' },
  });
  return {
    vectors: reply.embeddings.map((e) => e.values),
    token_counts: reply.embeddings.map((e) => e.statistics.tokenCount),
    truncated: reply.embeddings.map((e) => e.statistics.truncated),
    billable_characters: reply.metadata?.billableCharacterCount ?? null,
  };
};

const usageList = (u) => (u == null ? null : [u.prompt_tokens, u.completion_tokens, u.total_tokens]);

const chat = (model) => async () => {
  const reply = await chatClient.chat.completions.create({ model: `google/${model}`, messages: MESSAGES });
  return { id: reply.id, text: reply.choices[0].message.content, usage: usageList(reply.usage) };
};

const chatStream = (model) => async () => {
  let text = '';
  let usage = null;
  const stream = await chatClient.chat.completions.create({
    model: `google/${model}`,
    messages: MESSAGES,
    stream: true,
    stream_options: { include_usage: true },
  });
  for await (const chunk of stream) {
    for (const choice of chunk.choices) text += choice.delta?.content ?? '';
    if (chunk.usage != null) usage = usageList(chunk.usage);
  }
  return { text, usage };
};

for (const c of ['valid', 'figure', 'reject']) await row(`message.${c}`, message(c));
for (const c of ['valid', 'figure', 'reject']) await row(`message-stream.${c}`, messageStream(c));
await row('message.retry-default', message('retry-default'));
await row('message.retry-advised', message('retry-advised', advised));
for (const c of ['valid', 'figure', 'reject']) await row(`generate.${c}`, generate(c));
for (const c of ['valid', 'figure', 'reject']) await row(`generate-stream.${c}`, generateStream(c));
await row('generate.retry-default', generate('retry-genai-default'));
await row('generate.retry-configured', generate('retry-genai-configured', retrying));
for (const c of ['valid', 'figure', 'reject']) await row(`embed.${c}`, embed(c));
for (const c of ['valid', 'figure', 'reject']) await row(`chat.${c}`, chat(c));
for (const c of ['valid', 'reject']) await row(`chat-stream.${c}`, chatStream(c));

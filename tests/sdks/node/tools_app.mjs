// Tool calls through probity with the Node SDKs' own tool helpers, the twin
// of tests/sdks/tools_app.py (tests/it/sdk_tools.rs): openai
// `chat.completions.stream` and `create(...).withResponse()` with a tool,
// `responses.stream` and `responses.create`, anthropic `messages.stream`
// with a tool, ollama `chat({tools})`. The `model` names the case the fake
// upstream answers. One JSON line per row (rows.mjs), each named `node.…`.

import Anthropic from '@anthropic-ai/sdk';
import { Ollama } from 'ollama';
import OpenAI from 'openai';

import { MESSAGES, PROBITY, row } from './rows.mjs';

const SCHEMA = {
  type: 'object',
  properties: { city: { type: 'string' }, unit: { enum: ['celsius', 'fahrenheit'] } },
  required: ['city'],
};
const CHAT_TOOL = { type: 'function', function: { name: 'get_weather', parameters: SCHEMA } };
const RESPONSES_TOOL = { type: 'function', name: 'get_weather', parameters: SCHEMA };

const chat = new OpenAI({ baseURL: `${PROBITY}/openai/v1`, apiKey: 'unused' });
const claude = new Anthropic({ baseURL: `${PROBITY}/anthropic`, apiKey: 'unused' });
const llama = new Ollama({ host: `${PROBITY}/ollama` });

const verdict = (headers) => ({
  output: headers.get('probity-output'),
  reason: headers.get('probity-output-reason'),
});

const chatStream = (model) => async () => {
  const stream = chat.chat.completions.stream({ model, messages: MESSAGES, tools: [CHAT_TOOL] });
  const done = await stream.finalChatCompletion();
  const { name, arguments: args } = done.choices[0].message.tool_calls[0].function;
  return { name, arguments: args };
};

const chatCreate = (model) => async () => {
  const { data, response } = await chat.chat.completions
    .create({ model, messages: MESSAGES, tools: [CHAT_TOOL] })
    .withResponse();
  const { name, arguments: args } = data.choices[0].message.tool_calls[0].function;
  return { name, arguments: args, ...verdict(response.headers) };
};

const responsesStream = (model) => async () => {
  const stream = chat.responses.stream({ model, input: 'Weather in Paris?', tools: [RESPONSES_TOOL] });
  let deltas = '';
  stream.on('response.function_call_arguments.delta', (event) => {
    deltas += event.delta;
  });
  const done = await stream.finalResponse();
  const item = done.output.find((i) => i.type === 'function_call');
  return { name: item.name, arguments: item.arguments, deltas };
};

const responsesCreate = (model) => async () => {
  const { data, response } = await chat.responses
    .create({ model, input: 'Weather in Paris?', tools: [RESPONSES_TOOL] })
    .withResponse();
  const item = data.output.find((i) => i.type === 'function_call');
  return { name: item.name, arguments: item.arguments, ...verdict(response.headers) };
};

const anthropicStream = (model) => async () => {
  const stream = claude.messages.stream({
    model,
    max_tokens: 1024,
    messages: MESSAGES,
    tools: [{ name: 'get_weather', description: 'Weather', input_schema: SCHEMA }],
  });
  const done = await stream.finalMessage();
  const block = done.content.find((b) => b.type === 'tool_use');
  return { name: block.name, input: block.input };
};

const ollamaChat = (model) => async () => {
  const done = await llama.chat({ model, messages: MESSAGES, tools: [CHAT_TOOL] });
  const call = done.message.tool_calls[0].function;
  return { name: call.name, arguments: call.arguments };
};

await row('node.openai.stream.cut', chatStream('cut'));
await row('node.openai.create.schema', chatCreate('schema'));
await row('node.responses.stream.valid', responsesStream('valid'));
await row('node.responses.create.schema', responsesCreate('schema'));
await row('node.anthropic.stream.unknown', anthropicStream('unknown'));
await row('node.ollama.chat.schema', ollamaChat('schema'));

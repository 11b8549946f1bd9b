// The ollama SDK through probity, the way an app uses it: chat, whole and
// streamed, and embed. The `model` names the case the fake upstream
// answers (tests/it/sdks.rs). One JSON line per row (rows.mjs).

import { Ollama } from 'ollama';

import { MESSAGES, PROBITY, row } from './rows.mjs';

const client = new Ollama({ host: `${PROBITY}/ollama` });

const chat = (model) => async () => {
  const reply = await client.chat({ model, messages: MESSAGES, stream: false });
  return { text: reply.message.content, prompt_eval_count: reply.prompt_eval_count, eval_count: reply.eval_count };
};

const chatStream = (model) => async () => {
  let text = '';
  let last = null;
  for await (const part of await client.chat({ model, messages: MESSAGES, stream: true })) {
    text += part.message.content ?? '';
    last = part;
  }
  return { text, prompt_eval_count: last.prompt_eval_count, eval_count: last.eval_count };
};

const embed = (model) => async () => {
  const reply = await client.embed({ model, input: ['Why is the sky blue?', 'Why is the grass green?'] });
  return {
    vectors: reply.embeddings,
    prompt_eval_count: reply.prompt_eval_count,
    total_duration: reply.total_duration,
  };
};

for (const c of ['valid', 'figure', 'reject']) {
  await row(`chat.${c}`, chat(c));
  await row(`chat-stream.${c}`, chatStream(c));
  await row(`embed.${c}`, embed(c));
}

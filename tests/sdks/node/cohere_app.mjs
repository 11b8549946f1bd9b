// The cohere-ai SDK (CohereClientV2) through probity, the way an app uses
// it: embed and rerank. The `model` names the case the fake upstream
// answers (tests/it/sdks.rs). One JSON line per row (rows.mjs).

import { CohereClientV2 } from 'cohere-ai';

import { PROBITY, row } from './rows.mjs';

// The SDK retries every 5xx, whatever x-should-retry says (two retries, a
// second apart and more): no retries here keeps the rejection rows fast.
const client = new CohereClientV2({ token: 'unused', baseUrl: `${PROBITY}/cohere`, maxRetries: 0 });

const QUERY = 'What is the capital of the United States?';
const DOCUMENTS = [
  'Carson City is the capital city of the American state of Nevada.',
  'The Commonwealth of the Northern Mariana Islands is a group of islands in the Pacific Ocean. Its capital is Saipan.',
  'Capitalization or capitalisation in English grammar is the use of a capital letter at the start of a word.',
  'Washington, D.C. (also known as simply Washington or D.C.) is the capital of the United States.',
  'Capital punishment has existed in the United States since before it was a country.',
];

function metaOf(meta) {
  const billed = meta.billedUnits;
  const tokens = meta.tokens;
  return {
    billed_units: billed == null ? null : { input_tokens: billed.inputTokens, search_units: billed.searchUnits },
    tokens: tokens == null ? null : { input_tokens: tokens.inputTokens, output_tokens: tokens.outputTokens },
  };
}

const embed = (model) => async () => {
  const reply = await client.embed({
    model,
    texts: ['hello', 'goodbye'],
    inputType: 'search_document',
    embeddingTypes: ['float'],
  });
  return { id: reply.id, vectors: reply.embeddings.float, meta: metaOf(reply.meta) };
};

const rerank = (model) => async () => {
  const reply = await client.rerank({ model, query: QUERY, documents: DOCUMENTS, topN: 3 });
  return {
    id: reply.id,
    results: reply.results.map((r) => [r.index, r.relevanceScore]),
    meta: metaOf(reply.meta),
  };
};

for (const c of ['valid', 'figure', 'collapse', 'id', 'reject']) {
  await row(`embed.${c}`, embed(c));
  await row(`rerank.${c}`, rerank(c));
}

"""The cohere SDK (ClientV2) through probity, the way an app uses it: embed
and rerank. The `model` names the case the fake upstream answers
(tests/it/sdks.rs). One JSON line per row (rows.py)."""

import cohere

from rows import PROBITY, row

# The SDK retries every 5xx, whatever x-should-retry says (two retries, one
# second apart and more): no retries here keeps the rejection rows fast.
client = cohere.ClientV2(api_key="unused", base_url=f"{PROBITY}/cohere", max_retries=0)

QUERY = "What is the capital of the United States?"
DOCUMENTS = [
    "Carson City is the capital city of the American state of Nevada.",
    "The Commonwealth of the Northern Mariana Islands is a group of islands in the Pacific Ocean. Its capital is Saipan.",
    "Capitalization or capitalisation in English grammar is the use of a capital letter at the start of a word.",
    "Washington, D.C. (also known as simply Washington or D.C.) is the capital of the United States.",
    "Capital punishment has existed in the United States since before it was a country.",
]


def meta_of(meta):
    billed, tokens = meta.billed_units, meta.tokens
    return {
        "billed_units": None if billed is None else {
            "input_tokens": billed.input_tokens,
            "search_units": billed.search_units,
        },
        "tokens": None if tokens is None else {
            "input_tokens": tokens.input_tokens,
            "output_tokens": tokens.output_tokens,
        },
    }


def embed(case):
    def call():
        reply = client.embed(
            model=case, texts=["hello", "goodbye"], input_type="search_document", embedding_types=["float"]
        )
        return {"id": reply.id, "vectors": reply.embeddings.float_, "meta": meta_of(reply.meta)}

    return call


def rerank(case):
    def call():
        reply = client.rerank(model=case, query=QUERY, documents=DOCUMENTS, top_n=3)
        return {
            "id": reply.id,
            "results": [[r.index, r.relevance_score] for r in reply.results],
            "meta": meta_of(reply.meta),
        }

    return call


for case in ("valid", "figure", "collapse", "id", "reject"):
    row(f"embed.{case}", embed(case))
    row(f"rerank.{case}", rerank(case))

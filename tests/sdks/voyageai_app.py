"""The voyageai SDK through probity, the way an app uses it: embed and
rerank. The `model` names the case the fake upstream answers
(tests/it/sdks.rs). One JSON line per row (rows.py)."""

import voyageai

from rows import PROBITY, row

# The SDK's defaults: no retries.
client = voyageai.Client(api_key="unused", base_url=f"{PROBITY}/voyage/v1")

QUERY = "When is Apple's conference call scheduled?"
DOCUMENTS = [
    "The Mediterranean diet emphasizes fish, olive oil, and vegetables, believed to reduce chronic diseases.",
    "Photosynthesis in plants converts light energy into glucose and produces essential oxygen.",
    "20th-century innovations, from radios to smartphones, centered on electronic advancements.",
    "Apple's conference call to discuss fourth fiscal quarter results is scheduled for Thursday, November 2, 2023.",
]


def embed(case):
    def call():
        # The SDK asks for base64 and decodes it: the vectors are floats.
        reply = client.embed(["Sample text 1", "Sample text 2"], model=case, input_type="document")
        return {"vectors": [list(v) for v in reply.embeddings], "total_tokens": reply.total_tokens}

    return call


def rerank(case):
    def call():
        reply = client.rerank(QUERY, DOCUMENTS, model=case, top_k=2)
        return {
            "results": [[r.index, r.relevance_score] for r in reply.results],
            "total_tokens": reply.total_tokens,
        }

    return call


for case in ("valid", "figure", "reject"):
    row(f"embed.{case}", embed(case))
    row(f"rerank.{case}", rerank(case))

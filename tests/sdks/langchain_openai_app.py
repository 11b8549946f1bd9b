"""langchain-openai through probity, the way an app uses it:
OpenAIEmbeddings and ChatOpenAI (invoke and stream). The `model` names the
case the fake upstream answers (tests/it/sdks.rs). One JSON line per row
(rows.py)."""

from langchain_openai import ChatOpenAI, OpenAIEmbeddings

from rows import MESSAGES, PROBITY, row

BASE = f"{PROBITY}/openai/v1"
PROMPT = MESSAGES[0]["content"]


def embeddings(case):
    def call():
        # check_embedding_ctx_length=False sends the texts as text: its
        # default tokenizes them with tiktoken, which downloads its tables.
        model = OpenAIEmbeddings(model=case, base_url=BASE, api_key="unused", check_embedding_ctx_length=False)
        # langchain hands the app the vectors only.
        return {"vectors": model.embed_documents(["document 0", "document 1"])}

    return call


def usage_metadata(message):
    usage = message.usage_metadata
    if usage is None:
        return None
    # langchain's own summary: it reads a missing or null count as 0.
    summary = {key: usage[key] for key in ("input_tokens", "output_tokens", "total_tokens")}
    return {**summary, "cache_read": usage.get("input_token_details", {}).get("cache_read")}


def chat(case):
    def call():
        message = ChatOpenAI(model=case, base_url=BASE, api_key="unused").invoke(PROMPT)
        token_usage = message.response_metadata["token_usage"]
        return {
            "id": message.response_metadata.get("id"),
            "text": message.content,
            # The provider's figures, as the SDK parsed them.
            "token_usage": None if token_usage is None else {
                key: token_usage.get(key) for key in ("prompt_tokens", "completion_tokens", "total_tokens")
            },
            "usage_metadata": usage_metadata(message),
        }

    return call


def chat_stream(case):
    def call():
        model = ChatOpenAI(model=case, base_url=BASE, api_key="unused", stream_usage=True)
        full = None
        for chunk in model.stream(PROMPT):
            full = chunk if full is None else full + chunk
        return {"text": full.content, "usage_metadata": usage_metadata(full)}

    return call


for case in ("valid", "figure", "collapse", "id", "reject"):
    row(f"embeddings.{case}", embeddings(case))
for case in ("valid", "figure", "details", "collapse", "id", "reject"):
    row(f"chat.{case}", chat(case))
for case in ("valid", "figure", "collapse", "id", "reject"):
    row(f"chat-stream.{case}", chat_stream(case))

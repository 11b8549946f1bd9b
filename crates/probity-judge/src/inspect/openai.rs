//! OpenAI and OpenAI-compatible servers (vLLM, llama.cpp, LM Studio, Ollama's
//! and TEI's `/v1`): `/v1/chat/completions`, `/v1/completions`,
//! `/v1/embeddings`, the Jina-style `/rerank` that vLLM and llama.cpp serve,
//! and the Responses API (`responses.rs`).

use super::stream::{self, Event, EventCheck, Framing, Seen};
use super::{held, Dialect, Endpoint, Field, HeldInvariant, RequestShape, Response, StreamSpec};
use crate::batch::{BatchSpec, Vectors};
use crate::contract::{self, Answer, Arguments, OutputSpec, Requested, StreamedAnswer, ToolCall};
use crate::contract::{StreamedCalls, ToolSpec};
use crate::figures::{self, Convention, Figure, Related, Relation, Under};
use crate::invariants::{self, Echo, EchoedDocument, Expect, Fault, Form, Ranking};
use crate::json::{Kind, Object};
use crate::violation::{Invariant, Violation};

pub(super) struct OpenAi;

/// Figures of `/v1/embeddings` and `/rerank` (`/id` is vLLM's).
/// `usage` is required in OpenAI's embeddings schema (and typed so in its
/// SDKs): it keeps its object.
pub(super) const FIGURES: &[Figure] = &[
    Figure::required("/usage"),
    Figure::id("/id"),
    Figure::count("/usage/prompt_tokens").tokens("input"),
    Figure::count("/usage/total_tokens").tokens("total"),
];

/// `/v1/embeddings`: `input` a string or an array (of strings, of token
/// ids, of arrays of token ids); `dimensions` an integer.
pub(super) const EMBEDDINGS_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::required("input", &[Kind::String, Kind::Array]),
        Field::optional("dimensions", &[Kind::Number]),
    ],
};

/// OpenAI's embeddings `usage`: no relation is stated, and an embedding
/// has no output, so the most a check may ask is `prompt_tokens ≤
/// total_tokens` (openai-python `types/create_embedding_response.py`).
pub(super) const RELATIONS: &[Relation] = &[Relation::at_most(
    "prompt_tokens<=total_tokens",
    "/usage/prompt_tokens",
    "/usage/total_tokens",
)];

/// What `invariants::openai_data` holds of OpenAI's `data` (floats, or
/// base64 of float32 with `encoding_format: "base64"`).
pub(super) const EMBEDDINGS_HELD: &[HeldInvariant] = &super::data_held(
    "`data` holds one item per input (`input`: a string or `int[]` is 1, an array its length)",
    "every element of a vector is a finite number",
    "a base64 vector is padded base64 of whole little-endian float32s",
    "every vector has one length, `dimensions` when the request sets it",
);

pub(super) const EMBEDDINGS: Endpoint = Endpoint {
    operation: "embeddings",
    request: &EMBEDDINGS_REQUEST,
    check: embeddings,
    invariants: EMBEDDINGS_HELD,
    figures: FIGURES,
    relations: RELATIONS,
    header_figures: &[],
    stream: None,
    output: None,
    batch: Some(BatchSpec {
        inputs: &["input"],
        vectors: Vectors::OPENAI_DATA,
        request: &EMBEDDINGS_REQUEST,
    }),
};

/// Figures of `/v1/chat/completions` and `/v1/completions`.
pub(super) const GENERATION_FIGURES: &[Figure] = &[
    Figure::id("/id"),
    Figure::count("/usage/prompt_tokens").tokens("input"),
    Figure::count("/usage/completion_tokens").tokens("output"),
    Figure::count("/usage/total_tokens").tokens("total"),
    Figure::count("/usage/prompt_tokens_details/*"),
    Figure::count("/usage/completion_tokens_details/*"),
];

/// What openai-python `types/completion_usage.py` defines between chat and
/// completion figures: `total_tokens` is "Total number of tokens used in
/// the request (prompt + completion)"; each `prompt_tokens_details` member
/// is "… present in the prompt"; `reasoning_tokens` and the prediction
/// tokens are "still counted in the total completion tokens". Under xAI's
/// convention reasoning is counted outside `completion_tokens` and inside
/// `total_tokens` (docs.x.ai, "consumption and rate limits").
pub(super) const GENERATION_RELATIONS: &[Relation] = &[
    Relation::sum(
        "total_tokens=prompt_tokens+completion_tokens",
        "/usage/total_tokens",
        &["/usage/prompt_tokens", "/usage/completion_tokens"],
        &[],
    )
    .under(Under::Provider),
    Relation::sum(
        "total_tokens=prompt_tokens+completion_tokens+reasoning_tokens",
        "/usage/total_tokens",
        &["/usage/prompt_tokens", "/usage/completion_tokens"],
        &["/usage/completion_tokens_details/reasoning_tokens"],
    )
    .under(Under::Xai),
    Relation::at_most(
        "cached_tokens<=prompt_tokens",
        "/usage/prompt_tokens_details/cached_tokens",
        "/usage/prompt_tokens",
    ),
    Relation::at_most(
        "prompt_tokens_details.audio_tokens<=prompt_tokens",
        "/usage/prompt_tokens_details/audio_tokens",
        "/usage/prompt_tokens",
    ),
    Relation::at_most(
        "prompt_tokens_details.text_tokens<=prompt_tokens",
        "/usage/prompt_tokens_details/text_tokens",
        "/usage/prompt_tokens",
    ),
    Relation::at_most(
        "prompt_tokens_details.image_tokens<=prompt_tokens",
        "/usage/prompt_tokens_details/image_tokens",
        "/usage/prompt_tokens",
    ),
    Relation::at_most(
        "cache_write_tokens<=prompt_tokens",
        "/usage/prompt_tokens_details/cache_write_tokens",
        "/usage/prompt_tokens",
    ),
    Relation::at_most(
        "reasoning_tokens<=completion_tokens",
        "/usage/completion_tokens_details/reasoning_tokens",
        "/usage/completion_tokens",
    )
    .under(Under::Provider),
    Relation::parts_at_most(
        "prediction_tokens<=completion_tokens",
        &[
            "/usage/completion_tokens_details/accepted_prediction_tokens",
            "/usage/completion_tokens_details/rejected_prediction_tokens",
        ],
        "/usage/completion_tokens",
    )
    .under(Under::Provider),
    Relation::at_most(
        "completion_tokens_details.audio_tokens<=completion_tokens",
        "/usage/completion_tokens_details/audio_tokens",
        "/usage/completion_tokens",
    ),
    Relation::at_most(
        "completion_tokens_details.text_tokens<=completion_tokens",
        "/usage/completion_tokens_details/text_tokens",
        "/usage/completion_tokens",
    )
    .under(Under::Provider),
];

/// `/v1/chat/completions`: `n` choices, `stream`, the prompt in
/// `messages`, the contract in `response_format`, the declared `tools`.
/// OpenAI's reference types every optional one "or null".
const CHAT_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::required("messages", &[Kind::Array]),
        Field::optional("n", &[Kind::Number]),
        Field::optional("stream", &[Kind::Bool]),
        Field::optional("response_format", &[Kind::Object]),
        Field::optional("tools", &[Kind::Array]),
    ],
};

/// What `chat` holds of a whole chat answer.
const CHAT_HELD: &[HeldInvariant] = &[
    held(
        Invariant::PayloadMissing,
        "the body is an object with a `choices` array",
    ),
    held(
        Invariant::ChoiceCountMismatch,
        "`choices` holds `n` choices (default 1)",
    ),
    held(
        Invariant::ChoiceInvalid,
        "each choice is an object with a `message` object",
    ),
    held(
        Invariant::ChoiceIndexInvalid,
        "each choice's `index` is in `0..n`, each once",
    ),
    held(
        Invariant::ToolArgumentsType,
        "each `message.tool_calls[].function.arguments` is a JSON string",
    ),
];

/// What `ChatEvents` holds of a chat or completions stream.
const CHUNKS_HELD: &[HeldInvariant] = &[
    held(
        Invariant::PayloadMissing,
        "a chunk's `choices` (when present) is an array",
    ),
    held(
        Invariant::ChoiceIndexInvalid,
        "each of a chunk's choices is an object whose `index` is one of the `n` asked for",
    ),
    held(
        Invariant::ToolArgumentsType,
        "a chunk's `tool_calls[].function.arguments` fragment is a string",
    ),
    held(Invariant::StreamAfterDone, "nothing follows `data: [DONE]`"),
];

/// How a chat stream is judged (`azure` takes it with its own judge).
pub(super) const CHAT_STREAM: StreamSpec = StreamSpec {
    asked: super::stream_true,
    framing: Framing::Sse,
    comments: true,
    start: |request| {
        let tools = contract::declared_functions(request).is_some();
        Ok(Box::new(ChatEvents::new(
            choices_of(request, false)?,
            tools,
        )))
    },
    invariants: CHUNKS_HELD,
    unread: || Box::new(ChatEvents::new(usize::MAX, false)),
};

pub(super) const CHAT: Endpoint = Endpoint {
    operation: "chat",
    request: &CHAT_REQUEST,
    check: chat,
    invariants: CHAT_HELD,
    figures: GENERATION_FIGURES,
    relations: GENERATION_RELATIONS,
    header_figures: &[],
    stream: Some(CHAT_STREAM),
    output: Some(OUTPUT),
    batch: None,
};

/// Chat answers: each choice's `message.content`; the contract from
/// `response_format`, the prompt from the last user message; the tool
/// calls each choice's `message.tool_calls`.
const OUTPUT: OutputSpec = OutputSpec {
    task: "chat_completions",
    requested: requested_format,
    prompt: last_user_message,
    answers: choice_answers,
    tools: Some(ToolSpec {
        declared: contract::declared_functions,
        calls: choice_calls,
    }),
    citations: None,
};

/// `/v1/completions`: `n` choices per prompt of `prompt` (a string, or an
/// array of strings or token ids; nullable in OpenAI's spec), `stream`.
const COMPLETIONS_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::optional("prompt", &[Kind::String, Kind::Array]),
        Field::optional("n", &[Kind::Number]),
        Field::optional("stream", &[Kind::Bool]),
    ],
};

/// How a completions stream is judged (`azure` takes it with its own judge).
pub(super) const COMPLETIONS_STREAM: StreamSpec = StreamSpec {
    asked: super::stream_true,
    framing: Framing::Sse,
    comments: true,
    start: |request| Ok(Box::new(ChatEvents::new(choices_of(request, true)?, false))),
    invariants: CHUNKS_HELD,
    unread: || Box::new(ChatEvents::new(usize::MAX, false)),
};

pub(super) const COMPLETIONS: Endpoint = Endpoint {
    operation: "text_completion",
    request: &COMPLETIONS_REQUEST,
    check: completions,
    invariants: &[
        held(Invariant::PayloadMissing, "the body is an object with a `choices` array"),
        held(
            Invariant::ChoiceCountMismatch,
            "`choices` holds `n` (default 1) per prompt (`prompt`: a string or `int[]` is 1, an array its length)",
        ),
        held(Invariant::ChoiceInvalid, "each choice is an object whose `text` is a string"),
        held(Invariant::ChoiceIndexInvalid, "each choice's `index` is in range, each once"),
    ],
    figures: GENERATION_FIGURES,
    relations: GENERATION_RELATIONS,
    header_figures: &[],
    stream: Some(COMPLETIONS_STREAM),
    output: None,
    batch: None,
};

/// vLLM's and llama.cpp's `/rerank`: `documents` (vLLM also takes a
/// multimodal `{"content": [...]}` object), `top_n`, `return_documents`.
const RERANK_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::required("documents", &[Kind::Array, Kind::Object]),
        Field::optional("top_n", &[Kind::Number]),
        Field::optional("return_documents", &[Kind::Bool]),
    ],
};

/// What `invariants::ranking` holds of `results`, documents echoed as
/// `{"text": …}`.
pub(super) const RERANK_HELD: &[HeldInvariant] = &super::ranking_held(
    "the body has a `results` array",
    "at most one result per document, and at most `top_n` when set",
    "a result's `document`, when present, is `{\"text\": …}`",
);

const RERANK: Endpoint = Endpoint {
    operation: "rerank",
    request: &RERANK_REQUEST,
    check: rerank,
    invariants: RERANK_HELD,
    figures: FIGURES,
    relations: &[],
    header_figures: &[],
    stream: None,
    output: None,
    batch: None,
};

impl Dialect for OpenAi {
    fn name(&self) -> &'static str {
        "openai"
    }

    fn unreachable_hint(&self) -> &'static str {
        "for the hosted API, check this machine's DNS and outbound HTTPS access; for a local \
         OpenAI-compatible server (vLLM, llama.cpp, Ollama's /v1), start it at that address"
    }

    fn endpoints(&self) -> super::Endpoints {
        &[
            ("/chat/completions", &CHAT),
            ("/completions", &COMPLETIONS),
            ("/embeddings", &EMBEDDINGS),
            ("/rerank", &RERANK),
            ("/responses", &super::responses::CREATE),
        ]
    }

    /// The table, then `POST …/responses/{id}/cancel`, which answers the
    /// stored response object (an id is no suffix).
    fn endpoint(&self, path: &str) -> Option<&'static Endpoint> {
        super::by_suffix(self.endpoints(), path)
            .or_else(|| super::responses::stored(path, true).then_some(&super::responses::STORED))
    }

    /// `GET …/responses/{id}` answers the stored response object; with
    /// `?stream=true` it replays the stream from `starting_after`, which
    /// passes unchecked (no request body says it is a stream).
    fn read(&self, path: &str, query: Option<&str>) -> Option<&'static Endpoint> {
        let streamed = query.is_some_and(|q| q.split('&').any(|p| p == "stream=true"));
        (super::responses::stored(path, false) && !streamed).then_some(&super::responses::STORED)
    }

    fn unlisted(&self) -> &'static [&'static Endpoint] {
        static UNLISTED: [&Endpoint; 1] = [&super::responses::STORED];
        &UNLISTED
    }

    fn conventions(&self) -> &'static [Convention] {
        &[Convention::Provider, Convention::Xai, Convention::Off]
    }

    /// xAI's API counts reasoning outside `completion_tokens`.
    fn convention_of(&self, host: &str) -> Convention {
        match host.eq_ignore_ascii_case("api.x.ai") {
            true => Convention::Xai,
            false => Convention::Provider,
        }
    }

    fn realtime(&self, path: &str) -> bool {
        path.ends_with("/realtime")
    }
}

/// `data` holds one vector per input, floats or (with `encoding_format:
/// "base64"`) base64 of little-endian float32.
pub(super) fn embeddings(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let expect = Expect {
        count: invariants::count_inputs(request.present("input"))?,
        dimension: invariants::optional_count(request, "dimensions")?,
    };
    invariants::openai_data(response.object()?, expect, Form::FloatOrBase64)?;
    Ok(())
}

/// `response_format`: `json_schema` (its `schema`) or `json_object`.
fn requested_format(request: &Object<'_>) -> Requested {
    let Some(format) = request.present("response_format").and_then(|f| f.object()) else {
        return Requested::Nothing;
    };
    match format.get("type").and_then(|t| t.string()).as_deref() {
        Some("json_object") => Requested::Json,
        Some("json_schema") => format
            .present("json_schema")
            .and_then(|j| j.object())
            .and_then(|j| j.present("schema"))
            .and_then(|schema| serde_json::from_str(schema.text()).ok())
            .map_or(Requested::Json, Requested::Schema),
        _ => Requested::Nothing,
    }
}

/// The text of the last `user` message: a string, or its text parts joined.
pub(super) fn last_user_message(request: &Object<'_>) -> Option<String> {
    let messages = request.present("messages")?.objects()?;
    let message = messages
        .iter()
        .rev()
        .flatten()
        .find(|m| m.get("role").and_then(|r| r.string()).as_deref() == Some("user"))?;
    let content = message.present("content")?;
    if let Some(text) = content.string() {
        return Some(text.into_owned());
    }
    let parts = content.objects()?;
    let texts: Vec<String> = parts
        .iter()
        .flatten()
        .filter_map(|p| {
            p.present("text")
                .and_then(|t| t.string())
                .map(|t| t.into_owned())
        })
        .collect();
    Some(texts.concat())
}

fn choice_answers<'a>(_request: &Object<'_>, response: &Object<'a>) -> Vec<Answer<'a>> {
    let Some(choices) = response.present("choices").and_then(|c| c.objects()) else {
        return Vec::new();
    };
    choices
        .into_iter()
        .flatten()
        .map(|choice| {
            let message = choice.present("message").and_then(|m| m.object());
            let finish = choice.get("finish_reason").and_then(|f| f.string());
            Answer {
                // `null` content is kept: it is what a degraded answer replaces.
                content: message.as_ref().and_then(|m| m.get("content")),
                more: Vec::new(),
                truncated: finish.as_deref() == Some("length"),
                refusal: message
                    .as_ref()
                    .and_then(|m| m.present("refusal"))
                    .is_some(),
            }
        })
        .collect()
}

/// Every function call of every choice: `message.tool_calls[].function`,
/// its `arguments` a JSON string (its type is the payload's invariant).
fn choice_calls(response: &Object<'_>) -> Vec<ToolCall> {
    let choices = response
        .present("choices")
        .and_then(|c| c.objects())
        .unwrap_or_default();
    let mut calls = Vec::new();
    for choice in choices.iter().flatten() {
        let message = choice.present("message").and_then(|m| m.object());
        let list = message
            .and_then(|m| m.present("tool_calls"))
            .and_then(|t| t.objects())
            .unwrap_or_default();
        for call in list.iter().flatten() {
            if !is_function(call) {
                continue;
            }
            let function = call.present("function").and_then(|f| f.object());
            let arguments = function
                .as_ref()
                .and_then(|f| f.present("arguments"))
                .and_then(|a| a.string());
            calls.push(ToolCall {
                name: function.as_ref().and_then(contract::name_of),
                arguments: arguments.map_or(Arguments::Absent, |a| Arguments::Text(a.into_owned())),
            });
        }
    }
    calls
}

/// A tool call of `type` `function` (the default); a `custom` tool's call
/// carries free text, not JSON arguments.
fn is_function(call: &Object<'_>) -> bool {
    call.get("type")
        .and_then(|t| t.string())
        .is_none_or(|t| t == "function")
}

/// A function call's `arguments`, when present, is a JSON string: an
/// object there (as llama.cpp has sent) breaks the wire's type, and the
/// OpenAI SDKs' parsing helpers with it. `at`: where the call is.
fn arguments_type(call: &Object<'_>, at: &dyn Fn() -> String) -> Result<(), Violation> {
    if !is_function(call) {
        return Ok(());
    }
    let arguments = call
        .present("function")
        .and_then(|f| f.object())
        .and_then(|f| f.present("arguments"));
    match arguments {
        Some(arguments) if arguments.kind() != Kind::String => Err(invariants::violation(
            Invariant::ToolArgumentsType,
            format!(
                "{}.function.arguments should be a JSON string, found {}",
                at(),
                format!("{:?}", arguments.kind()).to_lowercase()
            ),
        )),
        _ => Ok(()),
    }
}

/// Every `tool_calls[]` entry of a message (or a delta) has arguments of
/// the wire's type.
fn tool_calls_type(message: &Object<'_>, at: &str) -> Result<(), Violation> {
    let list = message
        .present("tool_calls")
        .and_then(|t| t.objects())
        .unwrap_or_default();
    for (j, call) in list.iter().enumerate() {
        if let Some(call) = call {
            arguments_type(call, &|| format!("{at}.tool_calls[{j}]"))?;
        }
    }
    Ok(())
}

/// How many choices a request asks for: `n` (default 1), per prompt for
/// `/v1/completions`.
pub(super) fn choices_of(request: &Object<'_>, per_prompt: bool) -> Result<usize, Fault> {
    let n = invariants::optional_count(request, "n")?.unwrap_or(1);
    if !per_prompt {
        return Ok(n);
    }
    let prompts = match request.present("prompt") {
        None => 1,
        prompt => invariants::count_inputs(prompt)?,
    };
    Ok(n * prompts)
}

/// A streamed chat or completion: `data: {chunk}` events, then `data: [DONE]`.
/// Each chunk is judged on its own with the same figure table (usage may
/// ride on any chunk: the `include_usage` chunk, llama.cpp's and Gemini's
/// last content chunk, vLLM's running usage on every chunk).
pub(super) struct ChatEvents {
    choices: usize,
    /// The figure table a chunk is judged by: [`GENERATION_FIGURES`],
    /// unless a dialect knows chunks of its own (Azure's filter chunks).
    table: fn(&Object<'_>) -> &'static [Figure],
    done: bool,
    /// The first choice's answer, gathered from its deltas.
    answer: StreamedAnswer,
    /// Every choice's tool calls, when the request declared tools.
    calls: Option<StreamedCalls>,
}

impl ChatEvents {
    pub(super) fn new(choices: usize, tools: bool) -> Self {
        Self {
            choices,
            table: |_| GENERATION_FIGURES,
            done: false,
            answer: StreamedAnswer::default(),
            calls: tools.then(StreamedCalls::default),
        }
    }

    /// The same judge, each chunk's figures read by the table `table` gives.
    pub(super) fn judged_by(self, table: fn(&Object<'_>) -> &'static [Figure]) -> Self {
        Self { table, ..self }
    }

    /// A delta's tool call fragments, joined per choice and `index`: the
    /// first names the function, each adds to its `arguments`.
    fn gather_calls(&mut self, choice: u64, delta: &Object<'_>) -> Result<(), Violation> {
        tool_calls_type(delta, &format!("a chunk's choices[{choice}].delta"))?;
        let Some(calls) = &mut self.calls else {
            return Ok(());
        };
        let list = delta
            .present("tool_calls")
            .and_then(|t| t.objects())
            .unwrap_or_default();
        for (j, call) in list.iter().enumerate() {
            let Some(call) = call.as_ref().filter(|c| is_function(c)) else {
                continue;
            };
            let index = call
                .get("index")
                .and_then(|i| i.count())
                .unwrap_or(j as u64);
            let key = (choice << 32) | (index & 0xffff_ffff);
            let function = call.present("function").and_then(|f| f.object());
            calls.start(key, function.as_ref().and_then(contract::name_of), None);
            let fragment = function
                .as_ref()
                .and_then(|f| f.present("arguments"))
                .and_then(|a| a.string());
            if let Some(fragment) = fragment {
                calls.append(key, &fragment);
            }
        }
        Ok(())
    }

    fn gather(&mut self, choice: &Object<'_>) -> Result<(), Violation> {
        let index = choice.get("index").and_then(|i| i.count());
        if let (Some(index), Some(delta)) =
            (index, choice.present("delta").and_then(|d| d.object()))
        {
            self.gather_calls(index, &delta)?;
        }
        if index != Some(0) {
            return Ok(());
        }
        if let Some(delta) = choice.present("delta").and_then(|d| d.object()) {
            if let Some(text) = delta.present("content").and_then(|c| c.string()) {
                self.answer.push(&text);
            }
            self.answer.refusal |= delta.present("refusal").is_some();
        }
        if choice
            .get("finish_reason")
            .and_then(|f| f.string())
            .as_deref()
            == Some("length")
        {
            self.answer.truncated = true;
        }
        Ok(())
    }
}

impl EventCheck for ChatEvents {
    fn event(&mut self, event: &Event<'_>, convention: Convention) -> Result<Seen, Violation> {
        let Some(data) = event.data.as_deref() else {
            return Ok(Seen::Nothing); // a comment: `: ping`, `: OPENROUTER PROCESSING`
        };
        if self.done {
            return Err(invariants::violation(
                Invariant::StreamAfterDone,
                "the stream went on after `data: [DONE]`".into(),
            ));
        }
        if data.trim_ascii() == b"[DONE]" {
            self.done = true;
            return Ok(Seen::Nothing);
        }
        let doc = stream::event_object(data)?;
        let chunk = doc.object().unwrap_or_default();
        if chunk.get("error").is_some() {
            return Ok(Seen::UpstreamError); // passes: the SDK raises it
        }
        if let Some(choices) = chunk.present("choices") {
            let choices = choices.objects().ok_or_else(|| {
                invariants::violation(
                    Invariant::PayloadMissing,
                    "a chunk's `choices` is not an array".into(),
                )
            })?;
            for (i, choice) in choices.iter().enumerate() {
                if let Some(choice) = choice {
                    self.gather(choice)?;
                }
                let index = choice
                    .as_ref()
                    .and_then(|c| c.present("index"))
                    .and_then(|x| x.count());
                if index.is_none_or(|x| x >= self.choices as u64) {
                    return Err(invariants::violation(
                        Invariant::ChoiceIndexInvalid,
                        format!(
                            "a chunk's choices[{i}].index is not one of the {} choices asked for",
                            self.choices
                        ),
                    ));
                }
            }
        }
        Ok(Seen::Figures(figures::judge(
            data,
            &chunk,
            (self.table)(&chunk),
            Related {
                relations: GENERATION_RELATIONS,
                convention,
            },
        )))
    }

    fn error_event(&self, error: &serde_json::Value) -> Vec<u8> {
        let data = serde_json::json!({ "error": error }).to_string();
        stream::write_event(Framing::Sse, None, data.as_bytes(), None)
    }

    fn answer(&self) -> Option<&StreamedAnswer> {
        Some(&self.answer)
    }

    fn calls(&self) -> Option<&StreamedCalls> {
        self.calls.as_ref()
    }

    fn ends(&self, event: &Event<'_>) -> bool {
        event
            .data
            .as_deref()
            .is_some_and(|d| d.trim_ascii() == b"[DONE]")
    }
}

/// `choices` holds `n` choices (default 1), each with a `message` object.
/// What the model wrote is not checked here: that is the output contract's.
pub(super) fn chat(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let n = invariants::optional_count(request, "n")?.unwrap_or(1);
    invariants::choices(response.object()?, n, &format!("n = {n}"), |i, choice| {
        let at = || format!("choices[{i}].message");
        let message = invariants::member(
            choice,
            "message",
            Kind::Object,
            Invariant::ChoiceInvalid,
            &at,
        )?;
        match message.object() {
            Some(message) => tool_calls_type(&message, &at()),
            None => Ok(()),
        }
    })?;
    Ok(())
}

/// `choices` holds `n` choices per prompt, each with a `text` string.
fn completions(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let n = invariants::optional_count(request, "n")?.unwrap_or(1);
    let prompts = match request.present("prompt") {
        None => 1,
        prompt => invariants::count_inputs(prompt)?,
    };
    let what = format!("n = {n} for {prompts} prompts");
    invariants::choices(response.object()?, n * prompts, &what, |i, choice| {
        let at = || format!("choices[{i}].text");
        invariants::member(choice, "text", Kind::String, Invariant::ChoiceInvalid, &at).map(|_| ())
    })?;
    Ok(())
}

/// vLLM / llama.cpp rerank: `results` like Jina's; documents echoed as
/// objects when they are echoed at all (llama.cpp does not).
fn rerank(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let expect = Ranking {
        echo: Echo::Optional(EchoedDocument::Object),
        ..invariants::document_ranking(request, "top_n", false, EchoedDocument::Object)?
    };
    invariants::ranking("results", response.object()?.get("results"), expect)?;
    Ok(())
}

//! Ollama's native API: `/api/chat`, `/api/generate`, `/api/embed`, the
//! legacy `/api/embeddings`, and its OpenAI-compatible `/v1/chat/completions`
//! and `/v1/embeddings` (checked as OpenAI's).

use super::stream::{self, Event, EventCheck, Framing, Seen};
use super::{held, Dialect, Endpoint, Field, HeldInvariant, RequestShape, Response, StreamSpec};
use crate::batch::{BatchSpec, Item, Vectors};
use crate::contract::{self, Answer, Arguments, OutputSpec, Requested, StreamedAnswer, ToolCall};
use crate::contract::{StreamedCalls, ToolSpec};
use crate::figures::{self, Figure};
use crate::invariants::{self, Expect, Fault, Form};
use crate::json::{Kind, Object};
use crate::violation::{Invariant, Violation};

pub(super) struct Ollama;

// Ollama decodes with Go's encoding/json, which reads `null` into any
// field as its zero value: every field may be `null`.

/// `/api/embed`: `input` a string or an array of strings, `dimensions`.
const EMBED_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::optional("input", &[Kind::String, Kind::Array]),
        Field::optional("dimensions", &[Kind::Number]),
    ],
};

/// Ollama omits zero counts (`omitempty`), so absent figures are normal.
const EMBED: Endpoint = Endpoint {
    operation: "embeddings",
    request: &EMBED_REQUEST,
    check: embed,
    invariants: &[
        held(
            Invariant::PayloadMissing,
            "the body has an `embeddings` array",
        ),
        held(
            Invariant::EmbeddingCountMismatch,
            "`embeddings` holds one vector per input (`input`: a string is 1, an array its length)",
        ),
        held(
            Invariant::EmbeddingValueInvalid,
            "every element of a vector is a finite number",
        ),
        held(
            Invariant::EmbeddingDimensionMismatch,
            "every vector has one length, `dimensions` when the request sets it",
        ),
    ],
    figures: &[
        Figure::count("/prompt_eval_count").tokens("input"),
        Figure::count("/total_duration"),
        Figure::count("/load_duration"),
    ],
    relations: &[],
    header_figures: &[],
    stream: None,
    output: None,
    batch: Some(BatchSpec {
        inputs: &["input"],
        vectors: Vectors {
            list: "embeddings",
            item: Item::Vector,
            by_type: false,
            echoed: &[],
        },
        request: &EMBED_REQUEST,
    }),
};

/// Generation figures sit on the final (`done: true`) object.
const GENERATION_FIGURES: &[Figure] = &[
    Figure::count("/prompt_eval_count").tokens("input"),
    Figure::count("/eval_count").tokens("output"),
    Figure::count("/total_duration"),
    Figure::count("/load_duration"),
    Figure::count("/prompt_eval_duration"),
    Figure::count("/eval_duration"),
];

/// `/api/chat`: `stream` (default true), the prompt in `messages`, the
/// contract in `format` (`"json"` or a JSON Schema), the declared `tools`.
const CHAT_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::optional("messages", &[Kind::Array]),
        Field::optional("stream", &[Kind::Bool]),
        Field::optional("format", &[Kind::String, Kind::Object]),
        Field::optional("tools", &[Kind::Array]),
    ],
};

/// What `shape` holds of a chat answer, whole or one line of a stream.
const CHAT_HELD: &[HeldInvariant] = &[CHAT_SHAPE, CHAT_TOOLS];
const CHAT_SHAPE: HeldInvariant = held(
    Invariant::PayloadMissing,
    "the object has a `message` object and a boolean `done`",
);
const CHAT_TOOLS: HeldInvariant = held(
    Invariant::ToolArgumentsType,
    "each `message.tool_calls[].function.arguments` is an object",
);

/// A stream's lines are each held as a whole answer, and end at `done`.
const AFTER_DONE: HeldInvariant = held(
    Invariant::StreamAfterDone,
    "no line follows the `done: true` line",
);

const CHAT: Endpoint = Endpoint {
    operation: "chat",
    request: &CHAT_REQUEST,
    check: chat,
    invariants: CHAT_HELD,
    figures: GENERATION_FIGURES,
    relations: &[],
    header_figures: &[],
    stream: Some(StreamSpec {
        asked: streams_unless_false,
        framing: Framing::Ndjson,
        comments: true,
        start: |request| {
            let mut lines = Lines::new("message", Kind::Object);
            lines.calls = contract::declared_functions(request).map(|_| StreamedCalls::default());
            Ok(Box::new(lines))
        },
        invariants: &[CHAT_SHAPE, CHAT_TOOLS, AFTER_DONE],
        unread: || Box::new(Lines::new("message", Kind::Object)),
    }),
    output: Some(CHAT_OUTPUT),
    batch: None,
};

/// `/api/generate`: `stream` (default true), the prompt in `prompt`, the
/// contract in `format`.
const GENERATE_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::optional("prompt", &[Kind::String]),
        Field::optional("stream", &[Kind::Bool]),
        Field::optional("format", &[Kind::String, Kind::Object]),
    ],
};

/// What `shape` holds of a generate answer, whole or one line.
const GENERATE_HELD: HeldInvariant = held(
    Invariant::PayloadMissing,
    "the object has a `response` string and a boolean `done`",
);

const GENERATE: Endpoint = Endpoint {
    operation: "text_completion",
    request: &GENERATE_REQUEST,
    check: generate,
    invariants: &[GENERATE_HELD],
    figures: GENERATION_FIGURES,
    relations: &[],
    header_figures: &[],
    stream: Some(StreamSpec {
        asked: streams_unless_false,
        framing: Framing::Ndjson,
        comments: true,
        start: |_| Ok(Box::new(Lines::new("response", Kind::String))),
        invariants: &[GENERATE_HELD, AFTER_DONE],
        unread: || Box::new(Lines::new("response", Kind::String)),
    }),
    output: Some(GENERATE_OUTPUT),
    batch: None,
};

const CHAT_OUTPUT: OutputSpec = OutputSpec {
    task: "ollama_chat",
    requested: requested_format,
    prompt: super::openai::last_user_message,
    answers: |_, response| answer(response, "message"),
    tools: Some(ToolSpec {
        declared: contract::declared_functions,
        calls: |response| message_calls(response).unwrap_or_default(),
    }),
    citations: None,
};

/// `message.tool_calls[].function`: its `name` and `arguments`, an object
/// on the wire (anything else is the payload's fault: the ollama SDKs
/// type it as a mapping).
fn message_calls(response: &Object<'_>) -> Result<Vec<ToolCall>, Violation> {
    let list = response
        .present("message")
        .and_then(|m| m.object())
        .and_then(|m| m.present("tool_calls"))
        .and_then(|t| t.objects())
        .unwrap_or_default();
    let mut calls = Vec::new();
    for (i, call) in list.iter().enumerate() {
        let Some(function) = call
            .as_ref()
            .and_then(|c| c.present("function"))
            .and_then(|f| f.object())
        else {
            continue;
        };
        let arguments = match function.present("arguments") {
            Some(a) if a.kind() == Kind::Object => Arguments::Json(a.text().to_string()),
            Some(a) => {
                return Err(invariants::violation(
                    Invariant::ToolArgumentsType,
                    format!(
                        "message.tool_calls[{i}].function.arguments should be an object, found {}",
                        format!("{:?}", a.kind()).to_lowercase()
                    ),
                ))
            }
            None => Arguments::Absent,
        };
        calls.push(ToolCall {
            name: contract::name_of(&function),
            arguments,
        });
    }
    Ok(calls)
}

const GENERATE_OUTPUT: OutputSpec = OutputSpec {
    task: "ollama_generate",
    requested: requested_format,
    prompt: |request| {
        request
            .present("prompt")
            .and_then(|p| p.string())
            .map(|p| p.into_owned())
    },
    answers: |_, response| answer(response, "response"),
    tools: None,
    citations: None,
};

/// `format`: `"json"`, or a JSON Schema object.
fn requested_format(request: &Object<'_>) -> Requested {
    match request.present("format") {
        Some(format) if format.kind() == Kind::Object => {
            serde_json::from_str(format.text()).map_or(Requested::Json, Requested::Schema)
        }
        Some(format) if format.string().as_deref() == Some("json") => Requested::Json,
        _ => Requested::Nothing,
    }
}

/// The one answer: `message.content` (chat) or `response` (generate).
fn answer<'a>(response: &Object<'a>, member: &str) -> Vec<Answer<'a>> {
    let content = match member {
        "message" => response
            .present("message")
            .and_then(|m| m.object())
            .and_then(|m| m.present("content")),
        _ => response.present(member),
    };
    let done_reason = response.get("done_reason").and_then(|d| d.string());
    vec![Answer {
        content,
        more: Vec::new(),
        truncated: done_reason.as_deref() == Some("length"),
        refusal: false,
    }]
}

/// Ollama streams chat and generate answers unless `"stream": false`.
fn streams_unless_false(request: &Object<'_>) -> bool {
    request.get("stream").and_then(|s| s.boolean()) != Some(false)
}

/// A streamed chat or generation (the default when `stream` is absent):
/// one object per line, `done: false` until one final `done: true` line
/// that carries the figures.
struct Lines {
    /// The member holding the text: `message` (an object) or `response`.
    text: &'static str,
    kind: Kind,
    done: bool,
    answer: StreamedAnswer,
    /// The tool calls, when a chat request declared tools.
    calls: Option<StreamedCalls>,
}

impl Lines {
    fn new(text: &'static str, kind: Kind) -> Self {
        Self {
            text,
            kind,
            done: false,
            answer: StreamedAnswer::default(),
            calls: None,
        }
    }
}

impl EventCheck for Lines {
    fn event(&mut self, event: &Event<'_>, _: figures::Convention) -> Result<Seen, Violation> {
        let Some(data) = event.data.as_deref() else {
            return Ok(Seen::Nothing);
        };
        if self.done {
            return Err(invariants::violation(
                Invariant::StreamAfterDone,
                "the stream went on after its `done: true` line".into(),
            ));
        }
        let doc = stream::event_object(data)?;
        let line = doc.object().unwrap_or_default();
        if line.get("error").is_some() {
            return Ok(Seen::UpstreamError); // passes: the SDK raises it
        }
        self.done = shape(&line, self.text, self.kind)?;
        if self.text == "message" {
            let calls = message_calls(&line)?;
            if let Some(gathered) = &mut self.calls {
                calls.into_iter().for_each(|call| gathered.whole(call));
            }
        }
        if let Some(Answer {
            content: Some(text),
            truncated,
            ..
        }) = answer(&line, self.text).pop()
        {
            if let Some(text) = text.string() {
                self.answer.push(&text);
            }
            self.answer.truncated |= truncated;
        }
        // Ollama defines no relation between its figures.
        Ok(Seen::Figures(figures::judge(
            data,
            &line,
            GENERATION_FIGURES,
            figures::Related::NONE,
        )))
    }

    /// Ollama's clients read `error` as a string.
    fn error_event(&self, error: &serde_json::Value) -> Vec<u8> {
        let text = format!(
            "{}: {}",
            error["type"].as_str().unwrap_or("error"),
            error["message"].as_str().unwrap_or("")
        );
        let line = serde_json::json!({
            "error": text,
            "type": error["type"],
            "code": error["code"],
            "request_id": error["request_id"],
        });
        stream::write_event(Framing::Ndjson, None, line.to_string().as_bytes(), None)
    }

    fn answer(&self) -> Option<&StreamedAnswer> {
        Some(&self.answer)
    }

    fn calls(&self) -> Option<&StreamedCalls> {
        self.calls.as_ref()
    }
}

/// `/api/embeddings`: one `prompt`, which the check does not need.
const LEGACY_EMBEDDINGS_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[Field::optional("prompt", &[Kind::String])],
};

const LEGACY_EMBEDDINGS: Endpoint = Endpoint {
    operation: "embeddings",
    request: &LEGACY_EMBEDDINGS_REQUEST,
    check: legacy_embeddings,
    invariants: &[
        held(
            Invariant::PayloadMissing,
            "the body has an `embedding` array",
        ),
        held(
            Invariant::EmbeddingValueInvalid,
            "every element of the vector is a finite number",
        ),
        held(
            Invariant::EmbeddingDimensionMismatch,
            "the vector is not empty",
        ),
    ],
    figures: &[],
    relations: &[],
    header_figures: &[],
    stream: None,
    output: None,
    batch: None,
};

impl Dialect for Ollama {
    fn name(&self) -> &'static str {
        "ollama"
    }

    fn error_envelope(&self) -> super::Envelope {
        super::Envelope::Flat {
            message: "error",
            kind: None,
        }
    }

    fn unreachable_hint(&self) -> &'static str {
        "is Ollama running? Start it with `ollama serve` (it listens on 127.0.0.1:11434), \
         or set this route's upstream to where it listens"
    }

    fn endpoints(&self) -> super::Endpoints {
        &[
            ("/api/chat", &CHAT),
            ("/api/generate", &GENERATE),
            ("/v1/chat/completions", &super::openai::CHAT),
            ("/api/embed", &EMBED),
            ("/api/embeddings", &LEGACY_EMBEDDINGS),
            ("/v1/embeddings", &super::openai::EMBEDDINGS),
        ]
    }
}

/// `embeddings` holds one float vector per input.
fn embed(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let expect = Expect {
        count: invariants::count_inputs(request.present("input"))?,
        dimension: invariants::optional_count(request, "dimensions")?,
    };
    let list = response.object()?.get("embeddings");
    invariants::vector_list("embeddings", list, expect, Form::Float)?;
    Ok(())
}

/// The shape of a chat or generate object, whole or one line of a stream:
/// its text member (`message` object, `response` string) and a boolean
/// `done`, whose value it returns.
fn shape(object: &Object<'_>, text: &'static str, kind: Kind) -> Result<bool, Violation> {
    invariants::member(object, text, kind, Invariant::PayloadMissing, &|| {
        text.into()
    })?;
    let done = invariants::member(
        object,
        "done",
        Kind::Bool,
        Invariant::PayloadMissing,
        &|| "done".into(),
    )?;
    Ok(done.boolean() == Some(true))
}

/// A `message` object and a boolean `done`.
fn chat(_request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    shape(response.object()?, "message", Kind::Object)?;
    message_calls(response.object()?)?;
    Ok(())
}

/// A `response` string and a boolean `done`.
fn generate(_request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    shape(response.object()?, "response", Kind::String)?;
    Ok(())
}

/// One prompt, one non-empty `embedding`.
fn legacy_embeddings(_request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let vector = response
        .object()?
        .present("embedding")
        .filter(|v| v.kind() == Kind::Array)
        .ok_or_else(|| {
            invariants::violation(
                Invariant::PayloadMissing,
                "the response has no `embedding` array".into(),
            )
        })?;
    let dim = invariants::dimension(vector, Form::Float, &|| "embedding".into())?;
    if dim == 0 {
        return Err(invariants::violation(
            Invariant::EmbeddingDimensionMismatch,
            "expected a non-empty embedding, got 0 dimensions".into(),
        )
        .into());
    }
    Ok(())
}

//! Cohere's chat (`/v2/chat`), whole and streamed, after cohere-python's
//! `v2/types/v2chat_response.py` and `v2chat_stream_response.py`. Its
//! answer is one assistant `message` of typed `content` blocks, function
//! `tool_calls` whose `arguments` are JSON text, and `citations` whose
//! sources name the `documents` the request supplied; its `usage` figures
//! are numbers (`typing.Optional[float]` in `types/usage*.py`).

use crate::contract::{self, Answer, Arguments, CitationSpec, Documents, OutputSpec};
use crate::contract::{Requested, StreamedAnswer, StreamedCalls, ToolCall, ToolSpec};
use crate::figures::{self, Convention, Figure, Related};
use crate::inspect::stream::{self, Event, EventCheck, Framing, Seen};
use crate::inspect::{held, Endpoint, Field, HeldInvariant, RequestShape, Response, StreamSpec};
use crate::invariants::{self, Fault};
use crate::json::{Kind, Object};
use crate::violation::{Invariant, Violation};

/// `usage` of a chat answer (and, streamed, of `message-end`'s `delta`).
const FIGURES: &[Figure] = &[
    Figure::id("/id"),
    Figure::number("/usage/billed_units/input_tokens").tokens("billed_input"),
    Figure::number("/usage/billed_units/output_tokens").tokens("billed_output"),
    Figure::number("/usage/billed_units/search_units"),
    Figure::number("/usage/billed_units/classifications"),
    Figure::number("/usage/tokens/input_tokens").tokens("input"),
    Figure::number("/usage/tokens/output_tokens").tokens("output"),
    Figure::number("/usage/cached_tokens"),
];

/// `message-end`'s `delta.usage`: the stream's only figures.
const END_FIGURES: &[Figure] = &[
    Figure::number("/delta/usage/billed_units/input_tokens").tokens("billed_input"),
    Figure::number("/delta/usage/billed_units/output_tokens").tokens("billed_output"),
    Figure::number("/delta/usage/billed_units/search_units"),
    Figure::number("/delta/usage/billed_units/classifications"),
    Figure::number("/delta/usage/tokens/input_tokens").tokens("input"),
    Figure::number("/delta/usage/tokens/output_tokens").tokens("output"),
    Figure::number("/delta/usage/cached_tokens"),
];

/// `message-start`'s `id`.
const START_FIGURES: &[Figure] = &[Figure::id("/id")];

/// `/v2/chat`: the prompt in `messages`, `stream`, the declared `tools`,
/// the `documents` citations name, the `response_format` asked.
const CHAT_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::required("messages", &[Kind::Array]),
        Field::optional("stream", &[Kind::Bool]),
        Field::optional("tools", &[Kind::Array]),
        Field::optional("documents", &[Kind::Array]),
        Field::optional("response_format", &[Kind::Object]),
    ],
};

const CHAT_HELD: &[HeldInvariant] = &[
    held(
        Invariant::PayloadMissing,
        "the body is an object with a `message` object",
    ),
    held(Invariant::RoleInvalid, "`message.role` is `assistant`"),
    held(
        Invariant::ContentBlockInvalid,
        "`message.content`, when present, is an array of objects each with a string `type`",
    ),
    held(
        Invariant::ToolArgumentsType,
        "each `message.tool_calls[].function.arguments` is a string (JSON text)",
    ),
];

const EVENTS_HELD: &[HeldInvariant] = &[
    held(
        Invariant::ContentBlockInvalid,
        "a `content-*` event names its block `index`; a `content-delta` or `content-end` names a block that was started",
    ),
    held(
        Invariant::ToolArgumentsType,
        "a `tool-call-start`'s or `tool-call-delta`'s `function.arguments` is a string",
    ),
];

pub(super) const CHAT: Endpoint = Endpoint {
    operation: "chat",
    request: &CHAT_REQUEST,
    check: chat,
    invariants: CHAT_HELD,
    figures: FIGURES,
    relations: &[],
    header_figures: &[],
    stream: Some(StreamSpec {
        asked: crate::inspect::stream_true,
        framing: Framing::Sse,
        comments: true,
        start: |request| {
            let tools = contract::declared_functions(request).is_some();
            Ok(Box::new(CohereChatEvents::new(tools)))
        },
        invariants: EVENTS_HELD,
        unread: || Box::new(CohereChatEvents::new(false)),
    }),
    output: Some(OUTPUT),
    batch: None,
};

/// The first text block is the answer; `response_format` the contract;
/// the function tools' calls judged; the document sources of `citations`
/// judged against the request's `documents`.
const OUTPUT: OutputSpec = OutputSpec {
    task: "cohere_chat",
    requested,
    prompt: crate::inspect::openai::last_user_message,
    answers,
    tools: Some(ToolSpec {
        declared: contract::declared_functions,
        calls,
    }),
    citations: Some(CitationSpec {
        supplied: documents,
        cited,
    }),
};

/// `response_format: {"type": "json_object", "json_schema"?}`: the schema
/// sits right under `json_schema` (`types/response_format_v2.py`).
fn requested(request: &Object<'_>) -> Requested {
    let Some(format) = request.present("response_format").and_then(|f| f.object()) else {
        return Requested::Nothing;
    };
    if format.get("type").and_then(|t| t.string()).as_deref() != Some("json_object") {
        return Requested::Nothing;
    }
    format
        .present("json_schema")
        .and_then(|schema| serde_json::from_str(schema.text()).ok())
        .map_or(Requested::Json, Requested::Schema)
}

fn message<'a>(response: &Object<'a>) -> Option<Object<'a>> {
    response.present("message").and_then(|m| m.object())
}

/// The first `text` block's `text` (a `thinking` block is not the answer).
fn answers<'a>(_request: &Object<'_>, response: &Object<'a>) -> Vec<Answer<'a>> {
    let blocks = message(response)
        .and_then(|m| m.present("content"))
        .and_then(|c| c.objects())
        .unwrap_or_default();
    let content = blocks
        .iter()
        .flatten()
        .find(|b| b.get("type").and_then(|t| t.string()).as_deref() == Some("text"))
        .and_then(|b| b.get("text"));
    let finish = response.get("finish_reason").and_then(|f| f.string());
    vec![Answer {
        content,
        more: Vec::new(),
        truncated: finish.as_deref() == Some("MAX_TOKENS"),
        refusal: false,
    }]
}

/// Every `message.tool_calls[]`: its function's name and JSON text.
fn calls(response: &Object<'_>) -> Vec<ToolCall> {
    let list = message(response)
        .and_then(|m| m.present("tool_calls"))
        .and_then(|t| t.objects())
        .unwrap_or_default();
    list.iter()
        .flatten()
        .map(|call| {
            let function = call.present("function").and_then(|f| f.object());
            let arguments = function
                .as_ref()
                .and_then(|f| f.present("arguments"))
                .and_then(|a| a.string());
            ToolCall {
                name: function.as_ref().and_then(contract::name_of),
                arguments: arguments.map_or(Arguments::Absent, |a| Arguments::Text(a.into_owned())),
            }
        })
        .collect()
}

/// The request's `documents`: a string or an object without `id` is
/// named by Cohere (`doc:0:<position>`, docs.cohere.com "Documents and
/// Citations"); an object's `id` names it otherwise (`types/document.py`).
fn documents(request: &Object<'_>) -> Option<Documents> {
    let list = request.present("documents")?.array()?;
    let mut supplied = Documents {
        named: Vec::new(),
        unnamed: Vec::new(),
        generated,
    };
    for (at, document) in list.iter().enumerate() {
        let id = document
            .object()
            .and_then(|d| d.present("id").and_then(|i| i.string()));
        match id {
            Some(id) => supplied.named.push(id.into_owned()),
            None => supplied.unnamed.push(at),
        }
    }
    Some(supplied)
}

/// The position an id Cohere made names: `doc:` and numbers joined by
/// `:`, the last the document's position (`doc:0:1` is the second).
fn generated(id: &str) -> Option<usize> {
    let parts: Vec<&str> = id.strip_prefix("doc:")?.split(':').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    parts.last()?.parse().ok()
}

/// The ids of a citation's `document` sources (a `tool` source names a
/// tool result of the conversation, not a supplied document).
fn source_ids(citation: &Object<'_>, into: &mut Vec<String>) {
    let sources = citation
        .present("sources")
        .and_then(|s| s.objects())
        .unwrap_or_default();
    for source in sources.iter().flatten() {
        if source.get("type").and_then(|t| t.string()).as_deref() != Some("document") {
            continue;
        }
        if let Some(id) = source.present("id").and_then(|i| i.string()) {
            into.push(id.into_owned());
        }
    }
}

fn cited(response: &Object<'_>) -> Vec<String> {
    let citations = message(response)
        .and_then(|m| m.present("citations"))
        .and_then(|c| c.objects())
        .unwrap_or_default();
    let mut ids = Vec::new();
    for citation in citations.iter().flatten() {
        source_ids(citation, &mut ids);
    }
    ids
}

/// A function's `arguments`, where present, is JSON text on the wire (the
/// SDKs type it `str`): anything else is the payload's fault.
fn arguments_type(call: &Object<'_>, at: &dyn Fn() -> String) -> Result<(), Violation> {
    let arguments = call
        .present("function")
        .and_then(|f| f.object())
        .and_then(|f| f.present("arguments"));
    match arguments {
        Some(found) if found.kind() != Kind::String => Err(invariants::violation(
            Invariant::ToolArgumentsType,
            format!(
                "{}.function.arguments should be a string, found {}",
                at(),
                format!("{:?}", found.kind()).to_lowercase()
            ),
        )),
        _ => Ok(()),
    }
}

/// `message` an object whose `role` is `assistant`, `content` typed
/// blocks, each tool call's `arguments` a string.
fn chat(_request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let root = response.object()?;
    let message = invariants::member(
        root,
        "message",
        Kind::Object,
        Invariant::PayloadMissing,
        &|| "message".into(),
    )?;
    let message = message.object().unwrap_or_default();
    let role = message.get("role").and_then(|r| r.string());
    if role.as_deref() != Some("assistant") {
        return Err(invariants::violation(
            Invariant::RoleInvalid,
            format!(
                "message.role should be \"assistant\", found {}",
                message.get("role").map_or("nothing", |r| r.text())
            ),
        )
        .into());
    }
    if let Some(content) = message.present("content") {
        let blocks = content.objects().ok_or_else(|| {
            invariants::violation(
                Invariant::ContentBlockInvalid,
                "message.content is not an array of blocks".into(),
            )
        })?;
        for (i, block) in blocks.iter().enumerate() {
            let at = || format!("message.content[{i}].type");
            let block = block.as_ref().ok_or_else(|| {
                invariants::violation(
                    Invariant::ContentBlockInvalid,
                    format!("message.content[{i}] is not an object"),
                )
            })?;
            invariants::member(
                block,
                "type",
                Kind::String,
                Invariant::ContentBlockInvalid,
                &at,
            )?;
        }
    }
    let calls = message
        .present("tool_calls")
        .and_then(|t| t.objects())
        .unwrap_or_default();
    for (i, call) in calls.iter().enumerate() {
        if let Some(call) = call {
            arguments_type(call, &|| format!("message.tool_calls[{i}]"))?;
        }
    }
    Ok(())
}

/// A streamed chat: events named by their `type` (and `event:` line).
/// Figures sit in `message-start`'s `id` and `message-end`'s
/// `delta.usage`; a content block must be started before it is added to
/// or ended; unknown event types (`debug`) pass as they came.
struct CohereChatEvents {
    blocks: Vec<u64>,
    text: StreamedAnswer,
    /// The tool calls, by index, when the request declared tools.
    calls: Option<StreamedCalls>,
    cited: Vec<String>,
}

impl CohereChatEvents {
    fn new(tools: bool) -> Self {
        Self {
            blocks: Vec::new(),
            text: StreamedAnswer::default(),
            calls: tools.then(StreamedCalls::default),
            cited: Vec::new(),
        }
    }

    /// `delta.message` of an event.
    fn delta_message<'a>(body: &Object<'a>) -> Option<Object<'a>> {
        body.present("delta")
            .and_then(|d| d.object())
            .and_then(|d| d.present("message"))
            .and_then(|m| m.object())
    }

    fn content(&mut self, body: &Object<'_>, kind: &str) -> Result<(), Violation> {
        let index = body
            .present("index")
            .and_then(|i| i.count())
            .ok_or_else(|| {
                invariants::violation(
                    Invariant::ContentBlockInvalid,
                    format!("{kind} has no block index"),
                )
            })?;
        if kind == "content-start" {
            self.blocks.push(index);
        } else if !self.blocks.contains(&index) {
            return Err(invariants::violation(
                Invariant::ContentBlockInvalid,
                format!("{kind} for block {index}, which was never started"),
            ));
        }
        let text = Self::delta_message(body)
            .and_then(|m| m.present("content"))
            .and_then(|c| c.object())
            .and_then(|c| c.present("text"))
            .and_then(|t| t.string());
        if let Some(text) = text {
            self.text.push(&text);
        }
        Ok(())
    }

    fn tool_call(&mut self, body: &Object<'_>, kind: &str) -> Result<(), Violation> {
        let Some(call) = Self::delta_message(body)
            .and_then(|m| m.present("tool_calls"))
            .and_then(|c| c.object())
        else {
            return Ok(());
        };
        arguments_type(&call, &|| format!("{kind}.delta.message.tool_calls"))?;
        let (Some(calls), Some(index)) = (
            &mut self.calls,
            body.present("index").and_then(|i| i.count()),
        ) else {
            return Ok(());
        };
        let function = call.present("function").and_then(|f| f.object());
        calls.start(index, function.as_ref().and_then(contract::name_of), None);
        let fragment = function
            .as_ref()
            .and_then(|f| f.present("arguments"))
            .and_then(|a| a.string());
        if let Some(fragment) = fragment {
            calls.append(index, &fragment);
        }
        Ok(())
    }

    fn message_end(&mut self, data: &[u8], body: &Object<'_>, convention: Convention) -> Seen {
        let finish = body
            .present("delta")
            .and_then(|d| d.object())
            .and_then(|d| d.get("finish_reason").and_then(|f| f.string()));
        self.text.truncated |= finish.as_deref() == Some("MAX_TOKENS");
        let related = Related {
            relations: &[],
            convention,
        };
        Seen::Figures(figures::judge(data, body, END_FIGURES, related))
    }
}

/// An event's type: its `event:` line, else its data's `type`.
fn kind_of(event: &Event<'_>, body: &Object<'_>) -> Option<String> {
    event.name.map(str::to_string).or_else(|| {
        body.get("type")
            .and_then(|t| t.string())
            .map(|t| t.into_owned())
    })
}

impl EventCheck for CohereChatEvents {
    fn event(&mut self, event: &Event<'_>, convention: Convention) -> Result<Seen, Violation> {
        let Some(data) = event.data.as_deref() else {
            return Ok(Seen::Nothing);
        };
        // The terminator both SDKs stop at (`streamTerminator: "[DONE]"`).
        if data.trim_ascii() == b"[DONE]" {
            return Ok(Seen::Nothing);
        }
        let doc = stream::event_object(data)?;
        let body = doc.object().unwrap_or_default();
        let Some(kind) = kind_of(event, &body) else {
            return Ok(Seen::Nothing);
        };
        match kind.as_str() {
            "message-start" => {
                let related = Related {
                    relations: &[],
                    convention,
                };
                Ok(Seen::Figures(figures::judge(
                    data,
                    &body,
                    START_FIGURES,
                    related,
                )))
            }
            "content-start" | "content-delta" | "content-end" => {
                self.content(&body, &kind).map(|()| Seen::Nothing)
            }
            "tool-call-start" | "tool-call-delta" => {
                self.tool_call(&body, &kind).map(|()| Seen::Nothing)
            }
            "citation-start" => {
                let citation = Self::delta_message(&body)
                    .and_then(|m| m.present("citations"))
                    .and_then(|c| c.object());
                if let Some(citation) = citation {
                    source_ids(&citation, &mut self.cited);
                }
                Ok(Seen::Nothing)
            }
            "message-end" => Ok(self.message_end(data, &body, convention)),
            _ => Ok(Seen::Nothing),
        }
    }

    /// Cohere's own word for a failed generation: a `message-end` whose
    /// `finish_reason` is `ERROR` and whose `delta.error` says why
    /// (`types/chat_message_end_event_delta.py`).
    fn error_event(&self, error: &serde_json::Value) -> Vec<u8> {
        let text = format!(
            "{}: {}",
            error["type"].as_str().unwrap_or("error"),
            error["message"].as_str().unwrap_or("")
        );
        let data = serde_json::json!({
            "type": "message-end",
            "delta": {"finish_reason": "ERROR", "error": text},
            "error": error,
        })
        .to_string();
        stream::write_event(Framing::Sse, Some("message-end"), data.as_bytes(), None)
    }

    fn ends(&self, event: &Event<'_>) -> bool {
        event.name == Some("message-end")
    }

    fn answer(&self) -> Option<&StreamedAnswer> {
        Some(&self.text)
    }

    fn calls(&self) -> Option<&StreamedCalls> {
        self.calls.as_ref()
    }

    fn cited(&self) -> &[String] {
        &self.cited
    }
}

#[cfg(test)]
mod tests {
    use super::generated;

    #[test]
    fn cohere_names_an_unnamed_document_by_its_position() {
        assert_eq!(generated("doc:0:1"), Some(1));
        assert_eq!(generated("doc:2"), Some(2));
        for id in ["doc:", "doc:0:x", "doc::1", "web:0:1", "doc:0:-1"] {
            assert_eq!(generated(id), None, "{id}");
        }
    }
}

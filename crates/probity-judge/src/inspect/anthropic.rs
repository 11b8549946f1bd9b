//! Anthropic's Messages API (`/v1/messages`): the credential goes in
//! `x-api-key`, and the API refuses a request without `anthropic-version`.

use super::stream::{self, Event, EventCheck, Framing, Seen};
use super::{
    held, CredentialSpec, Dialect, Endpoint, Field, HeldInvariant, RequestShape, Response,
    StreamSpec,
};
use crate::contract::{self, Answer, Arguments, Declared, OutputSpec, Requested, ToolCall};
use crate::contract::{StreamedAnswer, StreamedCalls, ToolSpec};
use crate::figures::{self, Convention, Figure, Related, Relation};
use crate::invariants::{self, Fault};
use crate::json::{Kind, Object};
use crate::violation::{Invariant, Violation};

pub(super) struct Anthropic;

/// `usage` of a message (and, in a stream, of `message_start.message` and
/// `message_delta`).
pub(super) const FIGURES: &[Figure] = &[
    // A message's `usage` is required (the SDKs read it unguarded).
    Figure::required("/usage"),
    Figure::id("/id"),
    Figure::count("/usage/input_tokens").tokens("input"),
    Figure::count("/usage/output_tokens").tokens("output"),
    Figure::count("/usage/cache_creation_input_tokens"),
    Figure::count("/usage/cache_read_input_tokens"),
    Figure::count("/usage/cache_creation/*"),
    Figure::count("/usage/output_tokens_details/*"),
    Figure::count("/usage/server_tool_use/*"),
];

/// `message_delta.usage`: cumulative counts, never to be summed.
const DELTA_FIGURES: &[Figure] = &[
    Figure::required("/usage"),
    Figure::count("/usage/input_tokens")
        .tokens("input")
        .running(),
    Figure::count("/usage/output_tokens")
        .tokens("output")
        .running(),
    Figure::count("/usage/cache_creation_input_tokens").running(),
    Figure::count("/usage/cache_read_input_tokens").running(),
    Figure::count("/usage/cache_creation/*"),
    Figure::count("/usage/output_tokens_details/*"),
    Figure::count("/usage/server_tool_use/*"),
];

/// What anthropic-sdk-python's types define between a message's figures.
/// `input_tokens` counts only the uncached input ("Total input tokens in
/// a request is the summation of `input_tokens`,
/// `cache_creation_input_tokens`, and `cache_read_input_tokens`",
/// `types/usage.py`): no cache figure is bounded by it. The TTL parts of
/// `cache_creation` are of `cache_creation_input_tokens` (their sum being
/// it is not stated: at most it); `output_tokens_details.thinking_tokens`
/// is "Always ≤ `output_tokens`" (`types/output_tokens_details.py`). In a
/// stream each `message_delta` count is cumulative ("The cumulative number
/// of …", `types/message_delta_usage.py`): a later one never falls.
/// `message_start`'s are not a floor for them: a refusal's start says one
/// output token, its delta none (the SDK's own fixture).
pub(super) const RELATIONS: &[Relation] = &[
    Relation::parts_at_most(
        "cache_creation<=cache_creation_input_tokens",
        &[
            "/usage/cache_creation/ephemeral_5m_input_tokens",
            "/usage/cache_creation/ephemeral_1h_input_tokens",
        ],
        "/usage/cache_creation_input_tokens",
    ),
    Relation::at_most(
        "thinking_tokens<=output_tokens",
        "/usage/output_tokens_details/thinking_tokens",
        "/usage/output_tokens",
    ),
];

/// `/v1/messages`: the prompt in `messages`, `stream`, the declared
/// `tools` and the `tool_choice` that may force one.
const MESSAGES_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::required("messages", &[Kind::Array]),
        Field::optional("stream", &[Kind::Bool]),
        Field::optional("tools", &[Kind::Array]),
        Field::optional("tool_choice", &[Kind::Object]),
    ],
};

/// What `messages` holds of a Messages answer (Bedrock's `invoke` on an
/// Anthropic model too).
pub(super) const MESSAGES_HELD: &[HeldInvariant] = &[
    held(
        Invariant::PayloadMissing,
        "the body is an object with a `content` array",
    ),
    held(
        Invariant::ContentBlockInvalid,
        "each content block is an object with a string `type`",
    ),
    held(Invariant::RoleInvalid, "`role` is `assistant`"),
    held(
        Invariant::ToolArgumentsType,
        "a `tool_use` block's `input` is an object",
    ),
];

/// What `MessageEvents` holds of a Messages stream.
const EVENTS_HELD: &[HeldInvariant] = &[
    held(Invariant::PayloadMissing, "`message_start` carries a `message` object"),
    held(
        Invariant::ContentBlockInvalid,
        "a `content_block_*` event names its block `index`; a `_delta` or `_stop` names a block that was started",
    ),
    held(Invariant::ToolArgumentsType, "a `content_block_start`'s `tool_use` `input` is an object"),
];

pub(super) const MESSAGES: Endpoint = Endpoint {
    operation: "chat",
    request: &MESSAGES_REQUEST,
    check: messages,
    invariants: MESSAGES_HELD,
    figures: FIGURES,
    relations: RELATIONS,
    header_figures: &[],
    stream: Some(StreamSpec {
        asked: super::stream_true,
        framing: Framing::Sse,
        comments: true,
        start: |request| {
            let tools = declared_tools(request).is_some();
            Ok(Box::new(MessageEvents::new(forced_tool(request), tools)))
        },
        invariants: EVENTS_HELD,
        unread: || Box::new(MessageEvents::new(None, false)),
    }),
    output: Some(OUTPUT),
    batch: None,
};

/// A forced tool's `input` is the answer; without one, the text.
pub(super) const OUTPUT: OutputSpec = OutputSpec {
    task: "anthropic_messages",
    requested: forced_tool_schema,
    prompt: super::openai::last_user_message,
    answers: message_answer,
    tools: Some(ToolSpec {
        declared: declared_tools,
        calls: message_calls,
    }),
    citations: None,
};

/// `tools[]`: each `name`, with its `input_schema` when it has one (a
/// server tool, such as `web_search`, has none, and its calls are
/// `server_tool_use` blocks, not judged).
fn declared_tools(request: &Object<'_>) -> Option<Declared> {
    let tools = request.present("tools")?.objects()?;
    let tools = tools
        .iter()
        .flatten()
        .filter_map(|t| {
            let schema = t
                .present("input_schema")
                .and_then(|s| serde_json::from_str(s.text()).ok());
            Some((contract::name_of(t)?, schema))
        })
        .collect();
    Some(Declared {
        tools,
        forced: forced_tool(request),
    })
}

/// Every `tool_use` block: its `name` and `input`.
fn message_calls(response: &Object<'_>) -> Vec<ToolCall> {
    let blocks = response
        .present("content")
        .and_then(|c| c.objects())
        .unwrap_or_default();
    blocks
        .iter()
        .flatten()
        .filter(|b| b.get("type").and_then(|t| t.string()).as_deref() == Some("tool_use"))
        .map(|b| ToolCall {
            name: contract::name_of(b),
            arguments: b
                .present("input")
                .map_or(Arguments::Absent, |i| Arguments::Json(i.text().to_string())),
        })
        .collect()
}

/// A `tool_use` block's `input` is an object on the wire (the SDKs type it
/// so): anything else is the payload's fault, not the model's.
fn input_type(block: &Object<'_>, at: &dyn Fn() -> String) -> Result<(), Violation> {
    if block.get("type").and_then(|t| t.string()).as_deref() != Some("tool_use") {
        return Ok(());
    }
    match block.get("input") {
        Some(input) if input.kind() == Kind::Object => Ok(()),
        found => Err(invariants::violation(
            Invariant::ToolArgumentsType,
            format!(
                "{}.input should be an object, found {}",
                at(),
                found.map_or("nothing".to_string(), |f| format!("{:?}", f.kind())
                    .to_lowercase())
            ),
        )),
    }
}

/// `tool_choice: {"type": "tool", "name": X}` forces tool X: its
/// `input_schema` is the contract.
/// The tool that `tool_choice: {"type": "tool", "name": X}` forces.
fn forced_tool(request: &Object<'_>) -> Option<String> {
    request
        .present("tool_choice")
        .and_then(|c| c.object())
        .filter(|c| c.get("type").and_then(|t| t.string()).as_deref() == Some("tool"))
        .and_then(|c| {
            c.get("name")
                .and_then(|n| n.string())
                .map(|n| n.into_owned())
        })
}

fn forced_tool_schema(request: &Object<'_>) -> Requested {
    let Some(name) = forced_tool(request) else {
        return Requested::Nothing;
    };
    let tools = request
        .present("tools")
        .and_then(|t| t.objects())
        .unwrap_or_default();
    tools
        .iter()
        .flatten()
        .find(|t| t.get("name").and_then(|n| n.string()).as_deref() == Some(name.as_str()))
        .and_then(|t| t.present("input_schema"))
        .and_then(|schema| serde_json::from_str(schema.text()).ok())
        .map_or(Requested::Json, Requested::Schema)
}

/// The forced tool's `input` (the block of that name, not merely the first
/// tool call); without a forced tool, the first text block.
fn message_answer<'a>(request: &Object<'_>, response: &Object<'a>) -> Vec<Answer<'a>> {
    let blocks = response
        .present("content")
        .and_then(|c| c.objects())
        .unwrap_or_default();
    let text =
        |b: &Object<'_>, key: &str| b.get(key).and_then(|t| t.string()).map(|t| t.into_owned());
    let content = match forced_tool(request) {
        Some(name) => blocks
            .iter()
            .flatten()
            .find(|b| {
                text(b, "type").as_deref() == Some("tool_use")
                    && text(b, "name") == Some(name.clone())
            })
            .and_then(|b| b.get("input")),
        None => blocks
            .iter()
            .flatten()
            .find(|b| text(b, "type").as_deref() == Some("text"))
            .and_then(|b| b.get("text")),
    };
    let stop = response.get("stop_reason").and_then(|s| s.string());
    vec![Answer {
        content,
        more: Vec::new(),
        truncated: stop.as_deref() == Some("max_tokens"),
        refusal: stop.as_deref() == Some("refusal"),
    }]
}

/// A streamed message: named events. Figures sit in
/// `message_start.message.usage` and `message_delta.usage`; a content block
/// must be started before it is added to or stopped; unknown event types
/// pass as they came.
/// A message's relations under a route's convention.
fn related(convention: Convention) -> Related<'static> {
    Related {
        relations: RELATIONS,
        convention,
    }
}

/// The judge of one Messages stream's events, from its request (`None`:
/// unread, syntax and figures only). Bedrock's
/// `invoke-with-response-stream` carries the same events in its chunks.
pub(super) fn message_events(request: Option<&Object<'_>>) -> Box<dyn EventCheck> {
    Box::new(match request {
        Some(request) => {
            MessageEvents::new(forced_tool(request), declared_tools(request).is_some())
        }
        None => MessageEvents::new(None, false),
    })
}

struct MessageEvents {
    blocks: Vec<u64>,
    /// The forced tool, and the index of its `tool_use` block once started.
    forced: Option<String>,
    forced_block: Option<u64>,
    /// Text deltas and, separately, the forced tool's `input_json_delta`s.
    text: StreamedAnswer,
    tool: StreamedAnswer,
    /// The other `tool_use` blocks, by index, when the request declared tools.
    calls: Option<StreamedCalls>,
}

impl MessageEvents {
    fn new(forced: Option<String>, tools: bool) -> Self {
        Self {
            blocks: Vec::new(),
            forced,
            forced_block: None,
            text: StreamedAnswer::default(),
            tool: StreamedAnswer::default(),
            calls: tools.then(StreamedCalls::default),
        }
    }

    /// A block starts: it may now receive deltas; the forced tool's block
    /// is the answer.
    fn block_started(&mut self, body: &Object<'_>, name: &str) -> Result<(), Violation> {
        let index = block_index(body, name)?;
        self.blocks.push(index);
        let block = body.present("content_block").and_then(|b| b.object());
        let tool = block
            .as_ref()
            .and_then(|b| b.get("name").and_then(|n| n.string()));
        if let Some(block) = &block {
            input_type(block, &|| format!("{name}.content_block"))?;
        }
        if self.forced.is_some() && tool.as_deref() == self.forced.as_deref() {
            self.forced_block.get_or_insert(index);
        }
        let is_tool_use = block
            .as_ref()
            .and_then(|b| b.get("type").and_then(|t| t.string()))
            .as_deref()
            == Some("tool_use");
        if let (Some(calls), true) = (&mut self.calls, is_tool_use) {
            let input = block
                .as_ref()
                .and_then(|b| b.present("input"))
                .map(|i| i.text().to_string());
            calls.start(index, tool.map(|t| t.into_owned()), input);
        }
        Ok(())
    }

    /// A delta or stop for a block, which must have started; its text (or
    /// the forced tool's JSON) is gathered for the answer.
    fn block_delta(&mut self, body: &Object<'_>, name: &str) -> Result<(), Violation> {
        let index = block_index(body, name)?;
        if !self.blocks.contains(&index) {
            return Err(invariants::violation(
                Invariant::ContentBlockInvalid,
                format!("{name} for block {index}, which was never started"),
            ));
        }
        let Some(delta) = body.present("delta").and_then(|d| d.object()) else {
            return Ok(());
        };
        if let Some(text) = delta.present("text").and_then(|t| t.string()) {
            self.text.push(&text);
        }
        if let Some(json) = delta.present("partial_json").and_then(|t| t.string()) {
            if self.forced_block == Some(index) {
                self.tool.push(&json);
            } else if let Some(calls) = &mut self.calls {
                calls.append(index, &json);
            }
        }
        Ok(())
    }
}

impl EventCheck for MessageEvents {
    fn event(&mut self, event: &Event<'_>, convention: Convention) -> Result<Seen, Violation> {
        let Some(data) = event.data.as_deref() else {
            return Ok(Seen::Nothing);
        };
        let known = [
            "message_start",
            "message_delta",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
        ];
        let name = event.name.unwrap_or("");
        if name == "error" {
            return Ok(Seen::UpstreamError); // passes: the SDK raises it
        }
        if !known.contains(&name) {
            return Ok(Seen::Nothing); // ping, message_stop, and what comes next
        }
        let doc = stream::event_object(data)?;
        let body = doc.object().unwrap_or_default();
        match name {
            "message_start" => {
                let message = body
                    .present("message")
                    .and_then(|m| m.object())
                    .ok_or_else(|| {
                        invariants::violation(
                            Invariant::PayloadMissing,
                            "message_start has no `message` object".into(),
                        )
                    })?;
                let figures_found = figures::judge(data, &message, FIGURES, related(convention));
                Ok(Seen::Figures(super::prefixed(figures_found, "/message")))
            }
            "message_delta" => {
                let stop = body
                    .present("delta")
                    .and_then(|d| d.object())
                    .and_then(|d| {
                        d.get("stop_reason")
                            .and_then(|s| s.string())
                            .map(|s| s.into_owned())
                    });
                for answer in [&mut self.text, &mut self.tool] {
                    answer.truncated |= stop.as_deref() == Some("max_tokens");
                    answer.refusal |= stop.as_deref() == Some("refusal");
                }
                Ok(Seen::Figures(figures::judge(
                    data,
                    &body,
                    DELTA_FIGURES,
                    related(convention),
                )))
            }
            "content_block_start" => {
                self.block_started(&body, name)?;
                Ok(Seen::Nothing)
            }
            _ => self.block_delta(&body, name).map(|()| Seen::Nothing),
        }
    }

    fn error_event(&self, error: &serde_json::Value) -> Vec<u8> {
        let data = serde_json::json!({ "type": "error", "error": error }).to_string();
        stream::write_event(Framing::Sse, Some("error"), data.as_bytes(), None)
    }

    /// A tool's input when one was streamed, else the text; the stop reason
    /// rides on the text answer.
    fn ends(&self, event: &Event<'_>) -> bool {
        event.name == Some("message_stop")
    }

    fn answer(&self) -> Option<&StreamedAnswer> {
        Some(if self.tool.text.is_empty() {
            &self.text
        } else {
            &self.tool
        })
    }

    fn calls(&self) -> Option<&StreamedCalls> {
        self.calls.as_ref()
    }
}

fn block_index(body: &Object<'_>, name: &str) -> Result<u64, Violation> {
    body.present("index")
        .and_then(|i| i.count())
        .ok_or_else(|| {
            invariants::violation(
                Invariant::ContentBlockInvalid,
                format!("{name} has no block index"),
            )
        })
}

impl Dialect for Anthropic {
    fn name(&self) -> &'static str {
        "anthropic"
    }

    fn credential(&self) -> &'static CredentialSpec {
        &CredentialSpec {
            header: "x-api-key",
            prefix: "",
            defaults: &[("anthropic-version", "2023-06-01")],
            also: &[],
            query: None,
            signed: &[],
        }
    }

    fn error_envelope(&self) -> super::Envelope {
        super::Envelope::Typed
    }

    fn unreachable_hint(&self) -> &'static str {
        super::HOSTED_HINT
    }

    fn endpoints(&self) -> super::Endpoints {
        &[("/v1/messages", &MESSAGES)]
    }
}

/// `content` is an array of typed blocks, and the `role` is `assistant`.
pub(super) fn messages(_request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let root = response.object()?;
    let content = invariants::member(
        root,
        "content",
        Kind::Array,
        Invariant::PayloadMissing,
        &|| "content".into(),
    )?;
    for (i, block) in content.objects().unwrap_or_default().iter().enumerate() {
        let at = || format!("content[{i}].type");
        match block {
            Some(block) => {
                invariants::member(
                    block,
                    "type",
                    Kind::String,
                    Invariant::ContentBlockInvalid,
                    &at,
                )?;
                input_type(block, &|| format!("content[{i}]"))?;
            }
            None => {
                return Err(invariants::violation(
                    Invariant::ContentBlockInvalid,
                    format!("content[{i}] is not an object"),
                )
                .into())
            }
        }
    }
    let role = root.get("role").and_then(|r| r.string());
    if role.as_deref() != Some("assistant") {
        return Err(invariants::violation(
            Invariant::RoleInvalid,
            format!(
                "role should be \"assistant\", found {}",
                root.get("role").map_or("nothing", |r| r.text())
            ),
        )
        .into());
    }
    Ok(())
}

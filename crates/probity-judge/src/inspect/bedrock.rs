//! Amazon Bedrock Runtime: `POST /model/{modelId}/converse`, matched by the
//! operation that ends the path. A Bedrock API key goes in `Authorization:
//! Bearer`; AWS credentials sign each request anew (SigV4, in `forward`),
//! so the client's own signature headers are removed either way.
//!
//! The shapes are the Bedrock Runtime API reference's (`Converse`,
//! `ConverseOutput`, `ContentBlock`, `TokenUsage`, `ConverseMetrics`), as
//! `aws-sdk-bedrockruntime` and botocore model them.

use super::stream::{Event, EventCheck, Framing, Seen};
use super::{CredentialSpec, Dialect, Endpoint, Field, RequestShape, Response, StreamSpec};
use crate::contract::{self, Answer, Arguments, Declared, OutputSpec, Requested, ToolCall};
use crate::contract::{StreamedAnswer, StreamedCalls, ToolSpec};
use crate::figures::{self, Figure};
use crate::invariants::{self, Fault};
use crate::json::{Json, Kind, Object};
use crate::violation::{Invariant, Violation};

pub(super) struct Bedrock;

/// `usage` and `metrics` are required members of `ConverseResponse`
/// (botocore and the JS SDK read them unguarded), and in them
/// `inputTokens`, `outputTokens`, `totalTokens` and `latencyMs`.
const CONVERSE_FIGURES: &[Figure] = &[
    Figure::required("/usage"),
    Figure::required("/metrics"),
    Figure::count("/usage/inputTokens").tokens("input"),
    Figure::count("/usage/outputTokens").tokens("output"),
    Figure::count("/usage/totalTokens").tokens("total"),
    Figure::count("/usage/cacheReadInputTokens"),
    Figure::count("/usage/cacheWriteInputTokens"),
    Figure::count("/metrics/latencyMs"),
];

/// `converse` and `converse-stream`: the prompt in `messages` (optional
/// beside a prompt resource), the tools and the forced one in `toolConfig`.
const CONVERSE_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::optional("messages", &[Kind::Array]),
        Field::optional("toolConfig", &[Kind::Object]),
    ],
};

const CONVERSE: Endpoint = Endpoint {
    operation: "chat",
    request: &CONVERSE_REQUEST,
    check: converse,
    figures: CONVERSE_FIGURES,
    header_figures: &[],
    stream: None,
    output: Some(OUTPUT),
    batch: None,
};

/// `converse-stream`: the endpoint itself streams, in AWS's binary event
/// frames; no comments (the framing has none).
const CONVERSE_STREAM: Endpoint = Endpoint {
    operation: "chat",
    request: &CONVERSE_REQUEST,
    check: converse,
    figures: CONVERSE_FIGURES,
    header_figures: &[],
    stream: Some(StreamSpec {
        asked: |_| true,
        framing: Framing::EventStream,
        comments: false,
        start: |request| {
            let tools = declared_tools(request).is_some();
            Ok(Box::new(ConverseEvents::new(forced_tool(request), tools)))
        },
        unread: || Box::new(ConverseEvents::new(None, false)),
    }),
    output: Some(OUTPUT),
    batch: None,
};

/// The operations judged whatever the model, by the path's last segment.
const OPERATIONS: super::Endpoints = &[
    ("converse", &CONVERSE),
    ("converse-stream", &CONVERSE_STREAM),
];

/// A forced tool's `input` is the answer (as Anthropic's); without one,
/// the first text block.
const OUTPUT: OutputSpec = OutputSpec {
    task: "bedrock_converse",
    requested: forced_tool_schema,
    prompt: super::openai::last_user_message,
    answers: converse_answer,
    tools: Some(ToolSpec {
        declared: declared_tools,
        calls: converse_calls,
    }),
};

/// `output.message`: an assistant message whose `content` is an array of
/// one-member blocks (`text` a string, `toolUse` an object whose `input`
/// is an object); `stopReason` a string.
fn converse(_request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let root = response.object()?;
    let output = invariants::member(
        root,
        "output",
        Kind::Object,
        Invariant::PayloadMissing,
        &|| "output".into(),
    )?;
    let output = output.object().unwrap_or_default();
    let message = invariants::member(
        &output,
        "message",
        Kind::Object,
        Invariant::PayloadMissing,
        &|| "output.message".into(),
    )?;
    let message = message.object().unwrap_or_default();
    let content = invariants::member(
        &message,
        "content",
        Kind::Array,
        Invariant::PayloadMissing,
        &|| "output.message.content".into(),
    )?;
    for (i, block) in content.objects().unwrap_or_default().iter().enumerate() {
        content_block(block.as_ref(), &|| format!("output.message.content[{i}]"))?;
    }
    let role = message.get("role").and_then(|r| r.string());
    if role.as_deref() != Some("assistant") {
        return Err(invariants::violation(
            Invariant::RoleInvalid,
            format!(
                "output.message.role should be \"assistant\", found {}",
                message.get("role").map_or("nothing", |r| r.text())
            ),
        )
        .into());
    }
    invariants::member(
        root,
        "stopReason",
        Kind::String,
        Invariant::PayloadMissing,
        &|| "stopReason".into(),
    )?;
    Ok(())
}

/// One `ContentBlock` (a union): an object with exactly one member; a
/// `text` member a string, a `toolUse` member an object whose `input` is an
/// object.
pub(super) fn content_block(
    block: Option<&Object<'_>>,
    at: &dyn Fn() -> String,
) -> Result<(), Violation> {
    let Some(block) = block else {
        return Err(invariants::violation(
            Invariant::ContentBlockInvalid,
            format!("{} is not an object", at()),
        ));
    };
    let members: Vec<&str> = block.keys().collect();
    let [member] = members[..] else {
        return Err(invariants::violation(
            Invariant::ContentBlockInvalid,
            format!(
                "{} should have exactly one member, found {}",
                at(),
                members.len()
            ),
        ));
    };
    match member {
        "text" => invariants::member(
            block,
            "text",
            Kind::String,
            Invariant::ContentBlockInvalid,
            &|| format!("{}.text", at()),
        )
        .map(|_| ()),
        "toolUse" => {
            let tool = invariants::member(
                block,
                "toolUse",
                Kind::Object,
                Invariant::ContentBlockInvalid,
                &|| format!("{}.toolUse", at()),
            )?;
            input_type(&tool.object().unwrap_or_default(), &|| {
                format!("{}.toolUse", at())
            })
        }
        // `image`, `reasoningContent`, `citationsContent`... and a member
        // AWS adds later, which the SDKs read as `Unknown`: not a fault.
        _ => Ok(()),
    }
}

/// A `toolUse`'s `input` is an object on the wire (a JSON document in
/// AWS's model, always an object for a tool's input): anything else is
/// the payload's fault, not the model's.
fn input_type(tool: &Object<'_>, at: &dyn Fn() -> String) -> Result<(), Violation> {
    match tool.get("input") {
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

/// The blocks of `output.message.content`.
fn blocks<'a>(response: &Object<'a>) -> Vec<Option<Object<'a>>> {
    response
        .present("output")
        .and_then(|o| o.object())
        .and_then(|o| o.present("message"))
        .and_then(|m| m.object())
        .and_then(|m| m.present("content"))
        .and_then(|c| c.objects())
        .unwrap_or_default()
}

/// `toolConfig.tools[].toolSpec`: each `name`, with its
/// `inputSchema.json`. `None` when the request declares none.
pub(super) fn declared_tools(request: &Object<'_>) -> Option<Declared> {
    let config = request.present("toolConfig")?.object()?;
    let tools = config.present("tools")?.objects()?;
    let tools = tools
        .iter()
        .flatten()
        .filter_map(|t| t.present("toolSpec")?.object())
        .filter_map(|spec| Some((contract::name_of(&spec)?, input_schema(&spec))))
        .collect();
    Some(Declared {
        tools,
        forced: forced_tool(request),
    })
}

/// A `toolSpec`'s `inputSchema.json`, when it is there.
fn input_schema(spec: &Object<'_>) -> Option<serde_json::Value> {
    let schema = spec.present("inputSchema")?.object()?;
    serde_json::from_str(schema.present("json")?.text()).ok()
}

/// `toolConfig.toolChoice: {"tool": {"name": X}}` forces tool X.
pub(super) fn forced_tool(request: &Object<'_>) -> Option<String> {
    let config = request.present("toolConfig")?.object()?;
    let choice = config.present("toolChoice")?.object()?;
    let tool = choice.present("tool")?.object()?;
    contract::name_of(&tool)
}

/// The forced tool's `inputSchema.json` is the contract.
fn forced_tool_schema(request: &Object<'_>) -> Requested {
    let Some(name) = forced_tool(request) else {
        return Requested::Nothing;
    };
    let tools = request
        .present("toolConfig")
        .and_then(|c| c.object())
        .and_then(|c| c.present("tools"))
        .and_then(|t| t.objects())
        .unwrap_or_default();
    tools
        .iter()
        .flatten()
        .filter_map(|t| t.present("toolSpec")?.object())
        .find(|spec| contract::name_of(spec).as_deref() == Some(name.as_str()))
        .and_then(|spec| input_schema(&spec))
        .map_or(Requested::Json, Requested::Schema)
}

/// Every `toolUse` block: its `name` and `input`.
fn converse_calls(response: &Object<'_>) -> Vec<ToolCall> {
    blocks(response)
        .iter()
        .flatten()
        .filter_map(|b| b.present("toolUse")?.object())
        .map(|tool| ToolCall {
            name: contract::name_of(&tool),
            arguments: tool
                .present("input")
                .map_or(Arguments::Absent, |i| Arguments::Json(i.text().to_string())),
        })
        .collect()
}

/// Whether a stop reason says the answer was cut, or refused.
pub(super) fn stop(reason: Option<&str>) -> (bool, bool) {
    (
        reason == Some("max_tokens"),
        matches!(reason, Some("guardrail_intervened" | "content_filtered")),
    )
}

/// The forced tool's `input`; without a forced tool, the first text block.
fn converse_answer<'a>(request: &Object<'_>, response: &Object<'a>) -> Vec<Answer<'a>> {
    let blocks = blocks(response);
    let content: Option<Json<'a>> = match forced_tool(request) {
        Some(name) => blocks
            .iter()
            .flatten()
            .filter_map(|b| b.present("toolUse")?.object())
            .find(|tool| contract::name_of(tool).as_deref() == Some(name.as_str()))
            .and_then(|tool| tool.get("input")),
        None => blocks.iter().flatten().find_map(|b| b.present("text")),
    };
    let reason = response.get("stopReason").and_then(|s| s.string());
    let (truncated, refusal) = stop(reason.as_deref());
    vec![Answer {
        content,
        more: Vec::new(),
        truncated,
        refusal,
    }]
}

/// A `converse-stream` answer, frame by frame, judged by `:event-type`:
/// `metadata` carries the figures (its `usage` and `metrics` required, as
/// in a whole answer); `contentBlockDelta`s carry text and tool-input
/// fragments, gathered for the output contract; `messageStop` its
/// `stopReason`. A frame that cannot be read breaks the stream; an
/// exception frame passes as it came (the SDK raises it).
struct ConverseEvents {
    forced: Option<String>,
    /// The forced tool's block, once started.
    forced_block: Option<u64>,
    text: StreamedAnswer,
    tool: StreamedAnswer,
    calls: Option<StreamedCalls>,
}

impl ConverseEvents {
    fn new(forced: Option<String>, tools: bool) -> Self {
        Self {
            forced,
            forced_block: None,
            text: StreamedAnswer::default(),
            tool: StreamedAnswer::default(),
            calls: tools.then(StreamedCalls::default),
        }
    }

    /// `contentBlockStart`: a `toolUse` block starts (text blocks have no
    /// start event).
    fn started(&mut self, body: &Object<'_>) -> Result<(), Violation> {
        let index = block_index(body, "contentBlockStart")?;
        let tool = body
            .present("start")
            .and_then(|s| s.object())
            .and_then(|s| s.present("toolUse"))
            .and_then(|t| t.object());
        let Some(tool) = tool else {
            return Ok(());
        };
        let name = contract::name_of(&tool);
        if self.forced.is_some() && name == self.forced {
            self.forced_block.get_or_insert(index);
        } else if let Some(calls) = &mut self.calls {
            calls.start(index, name, None);
        }
        Ok(())
    }

    /// `contentBlockDelta`: text, or a fragment of a tool's input (a
    /// string on the wire).
    fn delta(&mut self, body: &Object<'_>) -> Result<(), Violation> {
        let index = block_index(body, "contentBlockDelta")?;
        let Some(delta) = body.present("delta").and_then(|d| d.object()) else {
            return Ok(());
        };
        if let Some(text) = delta.present("text").and_then(|t| t.string()) {
            self.text.push(&text);
        }
        let Some(tool) = delta.present("toolUse").and_then(|t| t.object()) else {
            return Ok(());
        };
        let input = invariants::member(
            &tool,
            "input",
            Kind::String,
            Invariant::ToolArgumentsType,
            &|| "contentBlockDelta.delta.toolUse.input".into(),
        )?;
        let fragment = input.string().unwrap_or_default();
        if self.forced_block == Some(index) {
            self.tool.push(&fragment);
        } else if let Some(calls) = &mut self.calls {
            calls.append(index, &fragment);
        }
        Ok(())
    }
}

fn block_index(body: &Object<'_>, name: &str) -> Result<u64, Violation> {
    body.present("contentBlockIndex")
        .and_then(|i| i.count())
        .ok_or_else(|| {
            invariants::violation(
                Invariant::ContentBlockInvalid,
                format!("{name} has no contentBlockIndex"),
            )
        })
}

impl EventCheck for ConverseEvents {
    fn event(&mut self, event: &Event<'_>) -> Result<Seen, Violation> {
        if let Some(fault) = event.fault {
            return Err(invariants::violation(
                Invariant::EventStreamInvalid,
                fault.describe().into(),
            ));
        }
        if event.exception.is_some() {
            return Ok(Seen::UpstreamError); // relayed: the SDK raises it
        }
        let (Some(data), Some(name)) = (event.data.as_deref(), event.name) else {
            return Ok(Seen::Nothing);
        };
        let known = [
            "contentBlockStart",
            "contentBlockDelta",
            "messageStop",
            "metadata",
        ];
        if !known.contains(&name) {
            return Ok(Seen::Nothing); // messageStart, contentBlockStop, and what comes next
        }
        let doc = super::stream::event_object(data)?;
        let body = doc.object().unwrap_or_default();
        match name {
            "contentBlockStart" => self.started(&body).map(|()| Seen::Nothing),
            "contentBlockDelta" => self.delta(&body).map(|()| Seen::Nothing),
            "messageStop" => {
                invariants::member(
                    &body,
                    "stopReason",
                    Kind::String,
                    Invariant::PayloadMissing,
                    &|| "messageStop.stopReason".into(),
                )?;
                Ok(Seen::Nothing)
            }
            _ => Ok(Seen::Figures(figures::judge(data, &body, CONVERSE_FIGURES))),
        }
    }

    /// probity's own exception frame: an `:exception-type` the SDKs know
    /// (so boto3 and the JS SDK raise it with the payload's `message`),
    /// the usual error object as its payload.
    fn error_event(&self, error: &serde_json::Value) -> Vec<u8> {
        let payload = serde_json::to_vec(error).unwrap_or_default();
        super::eventstream::encode(
            &[
                (":exception-type", exception_type(error)),
                (":content-type", "application/json"),
                (":message-type", "exception"),
            ],
            &payload,
        )
    }

    fn ends(&self, event: &Event<'_>) -> bool {
        event.name == Some("messageStop")
    }

    /// The stop reason, read right before the verdict.
    fn closing(&mut self, event: &Event<'_>) {
        let doc = event
            .data
            .as_deref()
            .and_then(|d| crate::json::Document::parse(d).ok());
        let reason = doc.as_ref().and_then(|d| d.object()).and_then(|o| {
            o.get("stopReason")
                .and_then(|s| s.string())
                .map(|s| s.into_owned())
        });
        let (truncated, refusal) = stop(reason.as_deref());
        for answer in [&mut self.text, &mut self.tool] {
            answer.truncated |= truncated;
            answer.refusal |= refusal;
        }
    }

    fn answer(&self) -> Option<&StreamedAnswer> {
        Some(if self.forced_block.is_some() {
            &self.tool
        } else {
            &self.text
        })
    }

    fn calls(&self) -> Option<&StreamedCalls> {
        self.calls.as_ref()
    }
}

/// The `:exception-type` of probity's exception frame, one of those the
/// `ConverseStreamOutput` union names: `internalServerException` for
/// probity's own fault, `serviceUnavailableException` for an upstream
/// that stalled or dropped, `modelStreamErrorException` for the rest (a
/// broken answer, one over the route's limit).
fn exception_type(error: &serde_json::Value) -> &'static str {
    match error.get("type").and_then(|t| t.as_str()) {
        Some("internal_error") => "internalServerException",
        Some("upstream_timeout" | "upstream_reset") => "serviceUnavailableException",
        _ => "modelStreamErrorException",
    }
}

/// InvokeModel's header figures (Bedrock's own, beside the model's body).
const INVOKE_HEADERS: &[crate::figures::HeaderFigure] = &[
    crate::figures::header_figure!("x-amzn-bedrock-input-token-count"),
    crate::figures::header_figure!("x-amzn-bedrock-output-token-count"),
    crate::figures::header_figure!("x-amzn-bedrock-invocation-latency"),
];

/// Titan Text Embeddings v2's body: one `inputText`, `dimensions`, the
/// `embeddingTypes` asked.
const TITAN_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::required("inputText", &[Kind::String]),
        Field::optional("dimensions", &[Kind::Number]),
        Field::optional("embeddingTypes", &[Kind::Array]),
    ],
};

/// An Anthropic model's body: a Messages request without `stream` (a
/// stream is `invoke-with-response-stream`, not judged).
const INVOKE_ANTHROPIC_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::required("messages", &[Kind::Array]),
        Field::optional("tools", &[Kind::Array]),
        Field::optional("tool_choice", &[Kind::Object]),
    ],
};

/// `invoke` on Titan Text Embeddings v2.
const INVOKE_TITAN: Endpoint = Endpoint {
    operation: "embeddings",
    request: &TITAN_REQUEST,
    check: titan_embed,
    figures: &[Figure::count("/inputTextTokenCount").tokens("input")],
    header_figures: INVOKE_HEADERS,
    stream: None,
    output: None,
    batch: None,
};

/// `invoke` on Cohere Embed: Cohere's v1 embed shapes.
const INVOKE_COHERE: Endpoint = Endpoint {
    operation: "embeddings",
    request: &super::cohere::EMBED_REQUEST,
    check: |request, response| super::cohere::embed(request, response, true),
    figures: super::cohere::EMBED_FIGURES,
    header_figures: INVOKE_HEADERS,
    stream: None,
    output: None,
    batch: None,
};

/// `invoke` on an Anthropic model: a Messages body and answer.
const INVOKE_ANTHROPIC: Endpoint = Endpoint {
    operation: "chat",
    request: &INVOKE_ANTHROPIC_REQUEST,
    check: super::anthropic::messages,
    figures: super::anthropic::FIGURES,
    header_figures: INVOKE_HEADERS,
    stream: None,
    output: Some(super::anthropic::OUTPUT),
    batch: None,
};

/// The model families `invoke` is judged for, by the name a route's
/// `model_families` maps an id to.
pub(crate) const FAMILIES: &[&str] = &["titan-embed-text-v2", "cohere-embed", "anthropic"];

fn family_endpoint(family: &str) -> Option<&'static Endpoint> {
    match family {
        "titan-embed-text-v2" => Some(&INVOKE_TITAN),
        "cohere-embed" => Some(&INVOKE_COHERE),
        "anthropic" => Some(&INVOKE_ANTHROPIC),
        _ => None,
    }
}

/// The family of a model id as the path carries it, percent-decoded
/// (boto3 and the JS SDK send `:` as `%3A`, an ARN's `/` as `%2F`): a
/// foundation model or inference-profile ARN names its model after its
/// last `/`; a cross-region profile's `us.`, `eu.`, `apac.`... goes before
/// the provider. `None`: a family probity does not judge, or an ARN that
/// names no model (an application inference profile).
pub(crate) fn family(model_id: &str) -> Option<&'static str> {
    let id = model_id.rsplit('/').next().unwrap_or(model_id);
    let id = match id.split_once('.') {
        Some((region, rest)) if rest.contains('.') && !PROVIDERS.contains(&region) => rest,
        _ => id,
    };
    if id.starts_with("amazon.titan-embed-text-v2") {
        Some("titan-embed-text-v2")
    } else if id.starts_with("cohere.embed-") {
        Some("cohere-embed")
    } else if id.starts_with("anthropic.") {
        Some("anthropic")
    } else {
        None
    }
}

/// The providers a Bedrock model id starts with (a cross-region profile
/// puts a geography before one).
const PROVIDERS: &[&str] = &[
    "amazon",
    "anthropic",
    "cohere",
    "meta",
    "mistral",
    "ai21",
    "deepseek",
    "writer",
    "openai",
    "qwen",
    "twelvelabs",
    "stability",
    "luma",
];

/// The model id of a `/model/{modelId}/{operation}` path, percent-decoded.
pub(crate) fn model_id(path: &str) -> Option<String> {
    let (before, _operation) = path.rsplit_once('/')?;
    let (model, id) = before.rsplit_once('/')?;
    model.ends_with("/model").then(|| {
        let decoded = crate::json::percent_decoded(id);
        String::from_utf8_lossy(&decoded).into_owned()
    })
}

/// The reason an `invoke` passes uninspected: its model's family is not
/// one probity judges (and the route maps it to none).
pub(crate) const FAMILY_UNKNOWN: &str = "model_family_unknown";

/// Titan Text Embeddings v2: `embedding`, one finite vector (of
/// `dimensions` when asked) unless `embeddingTypes` leaves `float` out;
/// `embeddingsByType` holding each asked type (`binary` as 0/1 integers).
fn titan_embed(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let dimensions = invariants::optional_count(request, "dimensions")?;
    let types: Option<Vec<String>> = match request.present("embeddingTypes") {
        None => None,
        Some(list) => Some(
            list.array()
                .ok_or(Fault::Uninspectable(invariants::REQUEST_SHAPE))?
                .iter()
                .map(|t| t.string().map(|s| s.into_owned()))
                .collect::<Option<_>>()
                .ok_or(Fault::Uninspectable(invariants::REQUEST_SHAPE))?,
        ),
    };
    let root = response.object()?;
    let float = types
        .as_ref()
        .is_none_or(|t| t.iter().any(|t| t == "float"));
    if float {
        let embedding = root.present("embedding").ok_or_else(|| {
            invariants::violation(
                Invariant::PayloadMissing,
                "the response has no `embedding`".into(),
            )
        })?;
        titan_vector(embedding, invariants::Form::Float, dimensions, "embedding")?;
    }
    let Some(types) = types else {
        return Ok(());
    };
    let by_type = root
        .present("embeddingsByType")
        .and_then(|e| e.object())
        .ok_or_else(|| {
            invariants::violation(
                Invariant::PayloadMissing,
                "embeddingTypes was asked and the response has no `embeddingsByType` object".into(),
            )
        })?;
    for kind in &types {
        let form = match kind.as_str() {
            "float" => invariants::Form::Float,
            "binary" => invariants::Form::Integer { min: 0, max: 1 },
            _ => return Err(Fault::Uninspectable(invariants::REQUEST_SHAPE)),
        };
        let vector = by_type.present(kind).ok_or_else(|| {
            invariants::violation(
                Invariant::PayloadMissing,
                format!("embeddingsByType has no `{kind}`, which was asked"),
            )
        })?;
        titan_vector(
            vector,
            form,
            dimensions,
            &format!("embeddingsByType.{kind}"),
        )?;
    }
    Ok(())
}

fn titan_vector(
    vector: Json<'_>,
    form: invariants::Form,
    dimensions: Option<usize>,
    label: &str,
) -> Result<(), Violation> {
    let found = invariants::dimension(vector, form, &|| label.to_string())?;
    match dimensions {
        Some(asked) if asked != found => Err(invariants::violation(
            Invariant::EmbeddingDimensionMismatch,
            format!("expected {asked} dimensions as requested, {label} has {found}"),
        )),
        _ if found == 0 => Err(invariants::violation(
            Invariant::EmbeddingDimensionMismatch,
            format!("expected a non-empty embedding, {label} has 0 dimensions"),
        )),
        _ => Ok(()),
    }
}

/// The operation a path (as sent upstream) names: `converse` in
/// `/model/{modelId}/converse`.
fn operation(path: &str) -> Option<&str> {
    let (before, operation) = path.rsplit_once('/')?;
    let (model, _id) = before.rsplit_once('/')?;
    model.ends_with("/model").then_some(operation)
}

impl Dialect for Bedrock {
    fn name(&self) -> &'static str {
        "bedrock"
    }

    fn provider(&self) -> &'static str {
        "aws.bedrock"
    }

    fn credential(&self) -> &'static CredentialSpec {
        &CredentialSpec {
            header: "authorization",
            prefix: "Bearer ",
            defaults: &[],
            also: &[],
            query: None,
            // The client's SigV4 signature (boto3's and the JS SDK's, made
            // with whatever credentials they hold; `Authorization` is the
            // header above) is not for the upstream.
            signed: &["x-amz-date", "x-amz-security-token", "x-amz-content-sha256"],
        }
    }

    fn error_envelope(&self) -> super::Envelope {
        super::Envelope::Amazon
    }

    fn unreachable_hint(&self) -> &'static str {
        super::HOSTED_HINT
    }

    fn model(&self, path: &str) -> Option<String> {
        model_id(path)
    }

    fn family(&self, name: &str) -> Option<&'static Endpoint> {
        family_endpoint(name)
    }

    fn families(&self) -> &'static [&'static str] {
        FAMILIES
    }

    fn unjudged(&self, path: &str) -> Option<&'static str> {
        (operation(path)? == "invoke" && self.endpoint(path).is_none()).then_some(FAMILY_UNKNOWN)
    }

    /// Keyed by operation; `invoke` is each model family's (`family`).
    fn endpoints(&self) -> super::Endpoints {
        OPERATIONS
    }

    fn endpoint(&self, path: &str) -> Option<&'static Endpoint> {
        match operation(path)? {
            "invoke" => family_endpoint(family(&model_id(path)?)?),
            operation => OPERATIONS
                .iter()
                .find(|(name, _)| *name == operation)
                .map(|(_, endpoint)| *endpoint),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_family_is_read_from_the_decoded_id() {
        let of = |path: &str| model_id(path).and_then(|id| family(&id));
        assert_eq!(
            of("/model/amazon.titan-embed-text-v2%3A0/invoke"),
            Some("titan-embed-text-v2")
        );
        assert_eq!(
            of("/model/cohere.embed-english-v3/invoke"),
            Some("cohere-embed")
        );
        assert_eq!(
            of("/model/us.anthropic.claude-3-5-haiku-20241022-v1%3A0/invoke"),
            Some("anthropic")
        );
        assert_eq!(
            of("/model/eu.cohere.embed-v4%3A0/invoke"),
            Some("cohere-embed")
        );
        let arn = "arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-sonnet-4-5-20250929-v1%3A0";
        assert_eq!(of(&format!("/model/{arn}/invoke")), Some("anthropic"));
        let app = "arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Aapplication-inference-profile%2Fa1b2c3";
        assert_eq!(of(&format!("/model/{app}/invoke")), None, "names no model");
        assert_eq!(of("/model/amazon.titan-embed-text-v1/invoke"), None);
        assert_eq!(of("/model/meta.llama3-8b-instruct-v1%3A0/invoke"), None);
        assert_eq!(
            model_id(&format!("/model/{arn}/invoke")).as_deref(),
            Some("arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-5-20250929-v1:0")
        );
    }

    #[test]
    fn the_operation_ends_a_model_path() {
        assert_eq!(
            operation("/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"),
            Some("converse")
        );
        assert_eq!(
            operation("/base/model/us.amazon.nova-lite-v1:0/converse-stream"),
            Some("converse-stream")
        );
        assert_eq!(operation("/converse"), None);
        assert_eq!(operation("/models/x/converse"), None);
    }
}

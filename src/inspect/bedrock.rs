//! Amazon Bedrock Runtime: `POST /model/{modelId}/converse`, matched by the
//! operation that ends the path. A Bedrock API key goes in `Authorization:
//! Bearer`; AWS credentials sign each request anew (SigV4, in `forward`),
//! so the client's own signature headers are removed either way.
//!
//! The shapes are the Bedrock Runtime API reference's (`Converse`,
//! `ConverseOutput`, `ContentBlock`, `TokenUsage`, `ConverseMetrics`), as
//! `aws-sdk-bedrockruntime` and botocore model them.

use super::{CredentialSpec, Dialect, Endpoint, Response};
use crate::contract::ToolSpec;
use crate::contract::{self, Answer, Arguments, Call, Declared, OutputSpec, Requested};
use crate::figures::Figure;
use crate::invariants::{self, Fault};
use crate::json::{Json, Kind, Object};
use crate::violation::Violation;

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

const CONVERSE: Endpoint = Endpoint {
    operation: "chat",
    check: converse,
    figures: CONVERSE_FIGURES,
    header_figures: &[],
    stream: None,
    output: Some(OUTPUT),
    batch: None,
};

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
    let output = invariants::member(root, "output", Kind::Object, "payload_missing", &|| {
        "output".into()
    })?;
    let output = output.object().unwrap_or_default();
    let message = invariants::member(&output, "message", Kind::Object, "payload_missing", &|| {
        "output.message".into()
    })?;
    let message = message.object().unwrap_or_default();
    let content = invariants::member(&message, "content", Kind::Array, "payload_missing", &|| {
        "output.message.content".into()
    })?;
    for (i, block) in content.objects().unwrap_or_default().iter().enumerate() {
        content_block(block.as_ref(), &|| format!("output.message.content[{i}]"))?;
    }
    let role = message.get("role").and_then(|r| r.string());
    if role.as_deref() != Some("assistant") {
        return Err(invariants::violation(
            "role_invalid",
            format!(
                "output.message.role should be \"assistant\", found {}",
                message.get("role").map_or("nothing", |r| r.text())
            ),
        )
        .into());
    }
    invariants::member(root, "stopReason", Kind::String, "payload_missing", &|| {
        "stopReason".into()
    })?;
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
            "content_block_invalid",
            format!("{} is not an object", at()),
        ));
    };
    let members: Vec<&str> = block.keys().collect();
    let [member] = members[..] else {
        return Err(invariants::violation(
            "content_block_invalid",
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
            "content_block_invalid",
            &|| format!("{}.text", at()),
        )
        .map(|_| ()),
        "toolUse" => {
            let tool = invariants::member(
                block,
                "toolUse",
                Kind::Object,
                "content_block_invalid",
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
            "tool_arguments_type",
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
fn converse_calls(response: &Object<'_>) -> Vec<Call> {
    blocks(response)
        .iter()
        .flatten()
        .filter_map(|b| b.present("toolUse")?.object())
        .map(|tool| Call {
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

    fn endpoint(&self, path: &str) -> Option<&'static Endpoint> {
        match operation(path)? {
            "converse" => Some(&CONVERSE),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

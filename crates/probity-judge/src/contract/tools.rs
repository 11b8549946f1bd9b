//! Tool calls judged against the tools a request declares: a call is output
//! the app executes, so an unusable one is counted like an unusable answer.
//! Part of `contract`; each dialect says where its tools and calls are (an
//! [`OutputSpec`](super::OutputSpec)'s [`ToolSpec`], and a stream judge's
//! [`StreamedCalls`]), this file judges them the same way for all.
//!
//! The wire type of the arguments (a JSON string in OpenAI's dialect, an
//! object in the others) is the payload's, checked by each dialect as an
//! invariant (`tool_arguments_type`); what is judged here is what the model
//! put in them.

use std::sync::Arc;

use serde_json::Value;

use super::{Compiled, OutputFindings, Reason, SchemaCache};
use crate::json::Object;

/// How many calls of a response are named in the verdict's sentences:
/// the counters get every reason, a sentence need not list a hundred calls.
const NAMED_CALLS: usize = 4;

/// A dialect's tool calls: the tools a request declares and the calls of a
/// whole response (a stream's are gathered by its judge).
pub(crate) struct ToolSpec {
    /// The declared tools; `None` when the request declares none.
    pub(crate) declared: fn(&Object<'_>) -> Option<Declared>,
    /// Every tool call of a whole response.
    pub(crate) calls: fn(&Object<'_>) -> Vec<ToolCall>,
}

/// The tools a request declares: each name with its JSON Schema, if any.
#[derive(Debug, Default, Clone)]
pub(crate) struct Declared {
    pub(crate) tools: Vec<(String, Option<Value>)>,
    /// A tool whose input is the answer (Anthropic's forced tool): judged
    /// by the answer's contract, not as a call.
    pub(crate) forced: Option<String>,
}

/// One tool call, as the dialect found it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolCall {
    /// The tool's name; `None` when the call names none (or not as a string).
    pub(crate) name: Option<String>,
    pub(crate) arguments: Arguments,
}

/// A call's arguments.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Arguments {
    /// Text that must be exactly one JSON object: OpenAI's string, or the
    /// joined fragments of a stream.
    Text(String),
    /// A JSON value, as sent (Anthropic `input`, Gemini `args`, Ollama
    /// `arguments`).
    Json(String),
    /// No arguments where the dialect requires them.
    Absent,
}

/// The declared tools, their schemas compiled (through the schema cache).
pub(crate) struct Tools {
    tools: Vec<(String, Option<Arc<Compiled>>)>,
    forced: Option<String>,
}

impl Tools {
    pub(crate) fn compile(declared: Declared, cache: &SchemaCache) -> Self {
        let tools = declared
            .tools
            .into_iter()
            .map(|(name, schema)| {
                let compiled = schema.as_ref().and_then(|s| cache.get(s));
                (name, compiled)
            })
            .collect();
        Self {
            tools,
            forced: declared.forced,
        }
    }

    /// Whether a tool's input is the answer.
    pub(crate) fn forces(&self) -> bool {
        self.forced.is_some()
    }

    /// The calls judged here: the forced tool's are the answer.
    pub(crate) fn judged<'c>(&self, calls: &'c [ToolCall]) -> Vec<&'c ToolCall> {
        calls
            .iter()
            .filter(|c| self.forced.is_none() || c.name != self.forced)
            .collect()
    }

    /// Every call's reasons, into the response's one set of findings.
    pub(crate) fn judge(&self, calls: &[ToolCall], found: &mut OutputFindings) {
        for (i, call) in self.judged(calls).into_iter().enumerate() {
            let mut of_call = Vec::new();
            self.judge_one(call, &mut of_call);
            for (reason, finding) in of_call {
                let sentence = match (&call.name, i < NAMED_CALLS) {
                    (Some(name), true) => format!("tool call {i} ({name}): {finding}"),
                    _ => format!("tool call {i}: {finding}"),
                };
                found.add(reason, sentence);
            }
        }
    }

    fn judge_one(&self, call: &ToolCall, found: &mut Vec<(Reason, String)>) {
        let tool = call
            .name
            .as_ref()
            .and_then(|name| self.tools.iter().find(|(t, _)| t == name));
        if tool.is_none() {
            let finding = match &call.name {
                Some(name) => format!("\"{name}\" is not a declared tool"),
                None => "it names no tool".into(),
            };
            found.push((Reason::ToolUnknown, finding));
        }
        let value = match &call.arguments {
            Arguments::Text(text) | Arguments::Json(text) => {
                match serde_json::from_str::<Value>(text) {
                    Ok(value) => value,
                    Err(_) => {
                        let finding = "its arguments are not exactly one JSON value".into();
                        return found.push((Reason::ToolArgumentsInvalidJson, finding));
                    }
                }
            }
            Arguments::Absent => Value::Null,
        };
        if !value.is_object() {
            let finding = "its arguments are not a JSON object".into();
            return found.push((Reason::ToolArgumentsNotObject, finding));
        }
        if let Some((_, Some(schema))) = tool {
            if let Some(failure) = schema.first_failure(&value) {
                found.push((Reason::ToolArgumentsSchema, failure));
            }
        }
    }
}

/// The tool calls of a stream, gathered from its events: fragments joined
/// per call (by the key the dialect gives: OpenAI's choice and `index`,
/// Anthropic's block index), whole calls (Gemini, Ollama) as they come.
/// Bounded by the stream itself: the route's `max_response_bytes`.
#[derive(Debug, Default)]
pub(crate) struct StreamedCalls {
    calls: Vec<(u64, Option<String>, Fragments)>,
}

#[derive(Debug)]
enum Fragments {
    /// Joined text, and the call's whole value from its start event (an
    /// Anthropic `tool_use` block's `input`, used when no fragment came).
    Joined(String, Option<String>),
    Whole(Arguments),
}

impl StreamedCalls {
    fn slot(&mut self, key: u64) -> Option<&mut (u64, Option<String>, Fragments)> {
        if !self.calls.iter().any(|(k, _, _)| *k == key) {
            let fragments = Fragments::Joined(String::new(), None);
            self.calls.push((key, None, fragments));
        }
        self.calls.iter_mut().find(|(k, _, _)| *k == key)
    }

    /// A call starts or goes on: its name (the first one given is kept) and
    /// the value its start event holds.
    pub(crate) fn start(&mut self, key: u64, name: Option<String>, initial: Option<String>) {
        let Some(slot) = self.slot(key) else {
            return;
        };
        if slot.1.is_none() {
            slot.1 = name;
        }
        if let (Fragments::Joined(_, start @ None), Some(initial)) = (&mut slot.2, initial) {
            *start = Some(initial);
        }
    }

    /// A fragment of a started call's arguments (a fragment of anything
    /// else, such as a server tool's block, is not a call's).
    pub(crate) fn append(&mut self, key: u64, fragment: &str) {
        let call = self.calls.iter_mut().find(|(k, _, _)| *k == key);
        if let Some((_, _, Fragments::Joined(text, _))) = call {
            text.push_str(fragment);
        }
    }

    /// A call whose arguments a later event repeats whole (the Responses
    /// API's `function_call_arguments.done`, `output_item.done` and its
    /// terminal response): that is what the SDKs hand the app, so it
    /// replaces the fragments joined so far.
    pub(crate) fn finish(&mut self, key: u64, name: Option<String>, arguments: String) {
        let Some(slot) = self.slot(key) else {
            return;
        };
        if name.is_some() {
            slot.1 = name;
        }
        slot.2 = Fragments::Whole(Arguments::Text(arguments));
    }

    /// A call that came whole.
    pub(crate) fn whole(&mut self, call: ToolCall) {
        let key = u64::MAX - self.calls.len() as u64;
        self.calls
            .push((key, call.name, Fragments::Whole(call.arguments)));
    }

    /// The calls so far, in the order they started.
    pub(crate) fn calls(&self) -> Vec<ToolCall> {
        self.calls
            .iter()
            .map(|(_, name, fragments)| ToolCall {
                name: name.clone(),
                arguments: match fragments {
                    Fragments::Whole(arguments) => arguments.clone(),
                    Fragments::Joined(text, Some(start)) if text.is_empty() => {
                        Arguments::Json(start.clone())
                    }
                    Fragments::Joined(text, _) => Arguments::Text(text.clone()),
                },
            })
            .collect()
    }
}

/// `tools[].function.{name, parameters}` of OpenAI's chat and Ollama's
/// chat: function tools only (a `custom` tool takes free text).
pub(crate) fn declared_functions(request: &Object<'_>) -> Option<Declared> {
    let tools = request.present("tools")?.objects()?;
    let tools = tools
        .iter()
        .flatten()
        .filter(|t| {
            t.get("type")
                .and_then(|k| k.string())
                .is_none_or(|k| k == "function")
        })
        .filter_map(|t| t.present("function")?.object())
        .filter_map(|f| function(&f))
        .collect();
    Some(Declared {
        tools,
        forced: None,
    })
}

/// A function's `name` and `parameters` (its JSON Schema, if any): nested
/// under `function` in chat, flat in the Responses API.
pub(crate) fn function(declared: &Object<'_>) -> Option<(String, Option<serde_json::Value>)> {
    let name = declared.get("name")?.string()?.into_owned();
    let schema = declared
        .present("parameters")
        .and_then(|p| serde_json::from_str(p.text()).ok());
    Some((name, schema))
}

/// A call's name, when it is a string.
pub(crate) fn name_of(object: &Object<'_>) -> Option<String> {
    object
        .get("name")
        .and_then(|n| n.string())
        .map(|n| n.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Tools {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
            "additionalProperties": false
        });
        let declared = Declared {
            tools: vec![("weather".into(), Some(schema)), ("now".into(), None)],
            forced: Some("record".into()),
        };
        Tools::compile(declared, &SchemaCache::new(4))
    }

    fn reasons(name: &str, arguments: Arguments) -> Vec<Reason> {
        let mut found = OutputFindings::default();
        let call = ToolCall {
            name: Some(name.into()),
            arguments,
        };
        tools().judge(&[call], &mut found);
        found.reasons
    }

    #[test]
    fn each_reason_of_a_call() {
        let text = |t: &str| Arguments::Text(t.into());
        assert!(reasons("weather", text(r#"{"city": "Paris"}"#)).is_empty());
        assert!(reasons("now", Arguments::Json("{}".into())).is_empty());
        assert_eq!(reasons("wether", text("{}")), ["tool_unknown"]);
        assert_eq!(
            reasons("weather", text(r#"{"city": "Par"#)),
            ["tool_arguments_invalid_json"]
        );
        assert_eq!(
            reasons("weather", text(r#"{"city": "a"}{"city": "b"}"#)),
            ["tool_arguments_invalid_json"],
            "two values are not one"
        );
        assert_eq!(
            reasons("weather", text("[1]")),
            ["tool_arguments_not_object"]
        );
        assert_eq!(
            reasons("now", Arguments::Absent),
            ["tool_arguments_not_object"]
        );
        assert_eq!(
            reasons("weather", text(r#"{"city": "Paris", "unit": "k"}"#)),
            ["tool_arguments_schema"],
            "an enum miss is a schema failure"
        );
        assert!(
            reasons("record", text("cut")).is_empty(),
            "the forced tool is the answer's"
        );
    }

    #[test]
    fn fragments_are_joined_per_call() {
        let mut calls = StreamedCalls::default();
        calls.start(1, Some("weather".into()), Some("{}".into()));
        calls.start(0, Some("now".into()), Some("{}".into()));
        calls.append(1, r#"{"city""#);
        calls.append(7, "not a call's");
        calls.start(1, Some("other".into()), None);
        calls.append(1, r#": "Paris"}"#);
        calls.whole(ToolCall {
            name: None,
            arguments: Arguments::Absent,
        });
        let got = calls.calls();
        assert_eq!(got[0].name.as_deref(), Some("weather"));
        assert_eq!(
            got[0].arguments,
            Arguments::Text(r#"{"city": "Paris"}"#.into())
        );
        assert_eq!(
            got[1].arguments,
            Arguments::Json("{}".into()),
            "no fragment: the start's value"
        );
        assert_eq!(got[2].arguments, Arguments::Absent);
    }
}

//! OpenAI's Responses API on the `openai` dialect (and every server that
//! speaks it: Azure's `/openai/v1`, OpenRouter, vLLM, Ollama's and LM
//! Studio's `/v1`): `POST …/responses`, whole or streamed, and the two
//! calls that answer a stored response object, `GET …/responses/{id}` and
//! `POST …/responses/{id}/cancel`. `openai.rs`'s endpoint table sends them
//! here.
//!
//! A stream is named SSE events, each `{"type": …, "sequence_number": n}`,
//! with no `[DONE]`: it ends with a terminal event (`response.completed`,
//! `.incomplete`, `.failed`) carrying the whole response object.

use super::stream::{self, Event, EventCheck, Framing, Seen};
use super::{held, Endpoint, Field, HeldInvariant, RequestShape, Response, StreamSpec};
use crate::contract::{
    Answer, Arguments, Declared, OutputSpec, Requested, StreamedAnswer, StreamedCalls, ToolCall,
    ToolSpec,
};
use crate::figures::{self, Convention, Figure, FigureFindings, Related, Relation, Under};
use crate::invariants::{self, Fault};
use crate::json::{Kind, Object};
use crate::violation::{Invariant, Violation};

/// The figures of a response object, whole or under an event's
/// `/response`. `usage` is optional in the SDKs (`Optional[ResponseUsage]`,
/// `null` while in progress), but once present they type its two details
/// records as required: those keep their object.
pub(super) const FIGURES: &[Figure] = &[
    Figure::required("/usage/input_tokens_details"),
    Figure::required("/usage/output_tokens_details"),
    Figure::id("/id"),
    Figure::count("/usage/input_tokens").tokens("input"),
    Figure::count("/usage/output_tokens").tokens("output"),
    Figure::count("/usage/total_tokens").tokens("total"),
    Figure::count("/usage/input_tokens_details/*"),
    Figure::count("/usage/output_tokens_details/*"),
];

/// What openai-python's `types/responses/response_usage.py` and the
/// reasoning guide define: cached and cache-written tokens are of the
/// input, reasoning tokens "billed as output tokens" are of the output,
/// and the total is input and output (as OpenAI's examples have it).
/// xAI counts reasoning apart: only the input's details hold there.
pub(super) const RELATIONS: &[Relation] = &[
    Relation::sum(
        "total_tokens=input_tokens+output_tokens",
        "/usage/total_tokens",
        &["/usage/input_tokens", "/usage/output_tokens"],
        &[],
    )
    .under(Under::Provider),
    Relation::at_most(
        "cached_tokens<=input_tokens",
        "/usage/input_tokens_details/cached_tokens",
        "/usage/input_tokens",
    ),
    Relation::at_most(
        "cache_write_tokens<=input_tokens",
        "/usage/input_tokens_details/cache_write_tokens",
        "/usage/input_tokens",
    ),
    Relation::at_most(
        "reasoning_tokens<=output_tokens",
        "/usage/output_tokens_details/reasoning_tokens",
        "/usage/output_tokens",
    )
    .under(Under::Provider),
];

/// What the output contract reads: the prompt in `input` (a string or an
/// array of items; optional beside `prompt` and `previous_response_id`),
/// the contract in `text.format`, the declared `tools`.
const OUTPUT_FIELDS: &[Field] = &[
    Field::optional("input", &[Kind::String, Kind::Array]),
    Field::optional("text", &[Kind::Object]),
    Field::optional("tools", &[Kind::Array]),
];

/// `POST …/responses`: the output contract's fields, and `stream`.
const CREATE_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::optional("input", &[Kind::String, Kind::Array]),
        Field::optional("text", &[Kind::Object]),
        Field::optional("tools", &[Kind::Array]),
        Field::optional("stream", &[Kind::Bool]),
    ],
};

/// `GET …/responses/{id}` and its cancel carry no body: an empty one asks
/// for nothing.
const STORED_REQUEST: RequestShape = RequestShape {
    body: false,
    fields: OUTPUT_FIELDS,
};

/// What `response_object` holds of a response object, whole or under a
/// stream event's `response`.
const RESPONSE_HELD: &[HeldInvariant] = &[
    held(Invariant::PayloadMissing, "the body is an object whose `output` is an array"),
    held(Invariant::ResponseObjectInvalid, "`object`, when present, is `\"response\"`"),
    held(
        Invariant::ResponseStatusInvalid,
        "`status`, when present, is one of `completed`, `incomplete`, `failed`, `in_progress`, `queued`, `cancelled`",
    ),
    held(Invariant::ResponseItemInvalid, "each `output` item is an object with a string `type`"),
    held(
        Invariant::ResponseContentInvalid,
        "a `message` item's `content` is an array of parts with a string `type`, an `output_text` part's `text` a string",
    ),
    held(
        Invariant::ResponseFunctionCallInvalid,
        "a `function_call` item's `call_id`, `name` and `arguments` are strings",
    ),
];

/// What `ResponseEvents` holds of a Responses stream: its events, and the
/// response objects and items they carry, each as a whole answer's.
const EVENTS_HELD: &[HeldInvariant] = &[
    held(
        Invariant::ResponseEventInvalid,
        "each event has a string `type`; a `response.*` lifecycle event carries its `response` object",
    ),
    held(
        Invariant::ResponseSequenceInvalid,
        "`sequence_number`, when present, is a count that rises by one from event to event",
    ),
    held(Invariant::PayloadMissing, "a lifecycle event's `response.output` is an array"),
    held(
        Invariant::ResponseObjectInvalid,
        "a lifecycle event's `response.object`, when present, is `\"response\"`",
    ),
    held(
        Invariant::ResponseStatusInvalid,
        "a lifecycle event's `response.status`, when present, is one the API defines",
    ),
    held(
        Invariant::ResponseItemInvalid,
        "each item (in `response.output`, an `output_item` event's `item`) is an object with a string `type`",
    ),
    held(
        Invariant::ResponseContentInvalid,
        "a `message` item's `content` is an array of parts with a string `type`, an `output_text` part's `text` a string",
    ),
    held(
        Invariant::ResponseFunctionCallInvalid,
        "a `function_call` item's `call_id`, `name` and `arguments` are strings",
    ),
    held(
        Invariant::StreamAfterDone,
        "nothing follows the terminal event (`response.completed`, `.incomplete`, `.failed`)",
    ),
];

/// `POST …/responses`: a response object, or with `stream: true` its events.
pub(super) const CREATE: Endpoint = Endpoint {
    operation: "chat",
    request: &CREATE_REQUEST,
    check: response_object,
    invariants: RESPONSE_HELD,
    figures: FIGURES,
    relations: RELATIONS,
    header_figures: &[],
    stream: Some(StreamSpec {
        asked: super::stream_true,
        framing: Framing::Sse,
        comments: true,
        start: |request| {
            Ok(Box::new(ResponseEvents::new(
                declared_tools(request).is_some(),
            )))
        },
        invariants: EVENTS_HELD,
        unread: || Box::new(ResponseEvents::new(false)),
    }),
    output: Some(OUTPUT),
    batch: None,
};

/// How [`STORED`] is reached, as the reference prints it: no table lists
/// it (an id is no suffix).
pub(super) const STORED_PATHS: &[(&str, &str)] = &[
    ("GET", "…/responses/{id}"),
    ("POST", "…/responses/{id}/cancel"),
];

/// `GET …/responses/{id}` and `POST …/responses/{id}/cancel`: the stored
/// response object, judged as a created one. No request asks for its
/// output contract, so none applies unless the route configures one. A
/// static: the three ways to it (`endpoint`, `read`, `unlisted`) give one
/// address.
pub(super) static STORED: Endpoint = Endpoint {
    operation: "chat",
    request: &STORED_REQUEST,
    check: response_object,
    invariants: RESPONSE_HELD,
    figures: FIGURES,
    relations: RELATIONS,
    header_figures: &[],
    stream: None,
    output: Some(OUTPUT),
    batch: None,
};

/// The joined `output_text` of the message items is the answer; the
/// contract from `text.format`, the prompt from the last user input.
const OUTPUT: OutputSpec = OutputSpec {
    task: "responses",
    requested: requested_format,
    prompt: last_user_input,
    answers: output_answer,
    tools: Some(ToolSpec {
        declared: declared_tools,
        calls: response_calls,
    }),
    citations: None,
};

/// The function tools of a Responses request: `{"type": "function",
/// "name", "parameters"}`, flat (chat nests them under `function`). Built-in
/// tools (web search, file search…) are the provider's to run, not calls.
fn declared_tools(request: &Object<'_>) -> Option<Declared> {
    let tools = request.present("tools")?.objects()?;
    let tools = tools
        .iter()
        .flatten()
        .filter(|t| t.get("type").and_then(|k| k.string()).as_deref() == Some("function"))
        .filter_map(|t| crate::contract::function(t))
        .collect();
    Some(Declared {
        tools,
        forced: None,
    })
}

/// Every `function_call` item of a whole response: its name and its
/// `arguments`, a JSON string (its shape is a payload invariant).
fn response_calls(response: &Object<'_>) -> Vec<ToolCall> {
    function_calls(response)
        .iter()
        .map(|item| ToolCall {
            name: crate::contract::name_of(item),
            arguments: item
                .present("arguments")
                .and_then(|a| a.string())
                .map_or(Arguments::Absent, |a| Arguments::Text(a.into_owned())),
        })
        .collect()
}

/// The values `status` may take (openai-python `ResponseStatus`).
const STATUSES: &[&str] = &[
    "completed",
    "incomplete",
    "failed",
    "in_progress",
    "queued",
    "cancelled",
];

/// The events that end a stream: each carries the final response object.
const TERMINAL: &[&str] = &[
    "response.completed",
    "response.incomplete",
    "response.failed",
];

/// The events that carry a whole response object under `/response`.
const CARRY_RESPONSE: &[&str] = &[
    "response.created",
    "response.in_progress",
    "response.queued",
    "response.completed",
    "response.incomplete",
    "response.failed",
];

/// Whether `path` (as sent upstream) names one stored response,
/// `…/responses/{id}`, or its cancel, `…/responses/{id}/cancel`.
pub(super) fn stored(path: &str, cancel: bool) -> bool {
    let path = match cancel {
        true => path.strip_suffix("/cancel"),
        false => Some(path),
    };
    let Some((before, id)) = path.and_then(|p| p.rsplit_once('/')) else {
        return false;
    };
    // `input_tokens` and `compact` are POST-only calls that answer other objects.
    before.ends_with("/responses") && !id.is_empty() && !matches!(id, "input_tokens" | "compact")
}

/// The payload of a response object: `object` is `"response"` when
/// present, `status` one of [`STATUSES`], `output` an array of items (see
/// [`output_item`]). What the model wrote is the contract's.
fn response_object(_request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    Ok(check_response(response.object()?, "")?)
}

/// [`response_object`] on a response object found at `at` (`""`, or an
/// event's `response`).
fn check_response(root: &Object<'_>, at: &str) -> Result<(), Violation> {
    if let Some(object) = root.present("object") {
        if object.string().as_deref() != Some("response") {
            return Err(invariants::violation(
                Invariant::ResponseObjectInvalid,
                format!(
                    "{at}object should be \"response\", got {}",
                    short(object.text())
                ),
            ));
        }
    }
    if let Some(status) = root.present("status") {
        let known = status.string().is_some_and(|s| STATUSES.contains(&&*s));
        if !known {
            return Err(invariants::violation(
                Invariant::ResponseStatusInvalid,
                format!(
                    "{at}status should be one of {}, got {}",
                    STATUSES.join(", "),
                    short(status.text())
                ),
            ));
        }
    }
    let output = root.present("output").ok_or_else(|| {
        invariants::violation(Invariant::PayloadMissing, format!("{at}output is missing"))
    })?;
    let items = output.objects().ok_or_else(|| {
        invariants::violation(
            Invariant::PayloadMissing,
            format!("{at}output is not an array"),
        )
    })?;
    for (i, item) in items.iter().enumerate() {
        output_item(item.as_ref(), &format!("{at}output[{i}]"))?;
    }
    Ok(())
}

/// One output item: an object with a string `type`; a `message`'s
/// `content` an array of parts with a string `type`, an `output_text`
/// part's `text` a string; a `function_call`'s `name`, `call_id` and
/// `arguments` strings (whether the arguments suit the tool is a tool
/// call's judgement, not the payload's).
fn output_item(item: Option<&Object<'_>>, at: &str) -> Result<(), Violation> {
    let kind = item.and_then(|i| i.get("type")).and_then(|t| t.string());
    let (Some(item), Some(kind)) = (item, kind) else {
        return Err(invariants::violation(
            Invariant::ResponseItemInvalid,
            format!("{at} should be an object with a string `type`"),
        ));
    };
    match &*kind {
        "message" => message_content(item, at),
        "function_call" => {
            for key in ["name", "call_id", "arguments"] {
                if item.get(key).map(|v| v.kind()) != Some(Kind::String) {
                    return Err(invariants::violation(
                        Invariant::ResponseFunctionCallInvalid,
                        format!("{at}.{key} should be a string (a function_call item)"),
                    ));
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn message_content(item: &Object<'_>, at: &str) -> Result<(), Violation> {
    let invalid = |what: String| invariants::violation(Invariant::ResponseContentInvalid, what);
    let parts = item
        .present("content")
        .and_then(|c| c.objects())
        .ok_or_else(|| invalid(format!("{at}.content should be an array of parts")))?;
    for (j, part) in parts.iter().enumerate() {
        let kind = part
            .as_ref()
            .and_then(|p| p.get("type"))
            .and_then(|t| t.string());
        match (part, kind.as_deref()) {
            (Some(part), Some("output_text")) => {
                if part.get("text").map(|t| t.kind()) != Some(Kind::String) {
                    return Err(invalid(format!(
                        "{at}.content[{j}].text should be a string (an output_text part)"
                    )));
                }
            }
            (Some(_), Some(_)) => {}
            _ => {
                return Err(invalid(format!(
                    "{at}.content[{j}] should be an object with a string `type`"
                )))
            }
        }
    }
    Ok(())
}

/// A value's text for a message, cut short.
fn short(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", text.get(..at).unwrap_or_default()),
        None => text.to_string(),
    }
}

/// The output items of a response object that are function calls (`type:
/// "function_call"`), in order: what a tool-call judgement reads (their
/// `name`, `call_id` and `arguments` are strings once the payload passed).
fn function_calls<'a>(response: &Object<'a>) -> Vec<Object<'a>> {
    output_items(response, "function_call")
}

fn is_function_call(item: &Object<'_>) -> bool {
    item.get("type").and_then(|t| t.string()).as_deref() == Some("function_call")
}

/// The output items of `kind`, in order.
fn output_items<'a>(response: &Object<'a>, kind: &str) -> Vec<Object<'a>> {
    let items = response
        .present("output")
        .and_then(|o| o.objects())
        .unwrap_or_default();
    items
        .into_iter()
        .flatten()
        .filter(|item| item.get("type").and_then(|t| t.string()).as_deref() == Some(kind))
        .collect()
}

/// `text.format`: `json_schema` (its `schema`, flat beside `name`) or
/// `json_object`; `text` (the default) asks for nothing.
fn requested_format(request: &Object<'_>) -> Requested {
    let format = request
        .present("text")
        .and_then(|t| t.object())
        .and_then(|t| t.present("format"))
        .and_then(|f| f.object());
    let Some(format) = format else {
        return Requested::Nothing;
    };
    match format.get("type").and_then(|t| t.string()).as_deref() {
        Some("json_object") => Requested::Json,
        Some("json_schema") => format
            .present("schema")
            .and_then(|schema| serde_json::from_str(schema.text()).ok())
            .map_or(Requested::Json, Requested::Schema),
        _ => Requested::Nothing,
    }
}

/// The prompt: `input` when it is a string, else the last `user` item's
/// text (a string `content`, or its `input_text` parts joined).
fn last_user_input(request: &Object<'_>) -> Option<String> {
    let input = request.present("input")?;
    if let Some(text) = input.string() {
        return Some(text.into_owned());
    }
    let items = input.objects()?;
    let item = items
        .iter()
        .rev()
        .flatten()
        .find(|m| m.get("role").and_then(|r| r.string()).as_deref() == Some("user"))?;
    let content = item.present("content")?;
    if let Some(text) = content.string() {
        return Some(text.into_owned());
    }
    let texts: Vec<String> = content
        .objects()?
        .iter()
        .flatten()
        .filter_map(|p| p.present("text").and_then(|t| t.string()))
        .map(|t| t.into_owned())
        .collect();
    Some(texts.concat())
}

/// One answer: every `output_text` part of every `message` item, joined in
/// order (as the SDKs' `output_text` joins them); truncated when the
/// response is incomplete for `max_output_tokens`, a refusal when a
/// message holds a `refusal` part.
fn output_answer<'a>(_request: &Object<'_>, response: &Object<'a>) -> Vec<Answer<'a>> {
    let mut texts = Vec::new();
    let mut refusal = false;
    for message in output_items(response, "message") {
        let parts = message
            .present("content")
            .and_then(|c| c.objects())
            .unwrap_or_default();
        for part in parts.iter().flatten() {
            match part.get("type").and_then(|t| t.string()).as_deref() {
                Some("output_text") => texts.extend(part.get("text")),
                Some("refusal") => refusal = true,
                _ => {}
            }
        }
    }
    let mut texts = texts.into_iter();
    vec![Answer {
        content: texts.next(),
        more: texts.collect(),
        truncated: truncated(response),
        refusal,
    }]
}

/// `incomplete_details.reason` is `max_output_tokens`.
fn truncated(response: &Object<'_>) -> bool {
    response
        .present("incomplete_details")
        .and_then(|d| d.object())
        .and_then(|d| d.get("reason"))
        .and_then(|r| r.string())
        .as_deref()
        == Some("max_output_tokens")
}

/// A streamed response, judged event by event by its `type`.
struct ResponseEvents {
    /// The last `sequence_number` seen: each must be greater.
    sequence: Option<u64>,
    /// A terminal event passed: nothing may follow.
    done: bool,
    /// The `output_text` deltas, joined; the terminal event says whether
    /// the answer was cut.
    answer: StreamedAnswer,
    /// The function calls, when the request declared tools: keyed by
    /// `output_index`, as the SDKs' stream accumulators key them.
    calls: Option<StreamedCalls>,
    /// Each function call item's `id` and its `output_index`, for a delta
    /// that names only its `item_id`.
    items: Vec<(String, u64)>,
    /// The route's convention for relations between figures.
    convention: Convention,
}

impl ResponseEvents {
    fn new(tools: bool) -> Self {
        Self {
            sequence: None,
            done: false,
            answer: StreamedAnswer::default(),
            calls: tools.then(StreamedCalls::default),
            items: Vec::new(),
            convention: Convention::Provider,
        }
    }

    /// `sequence_number`, when present: a count greater than the last one
    /// delivered.
    fn sequence(&self, event: &Object<'_>, kind: &str) -> Result<Option<u64>, Violation> {
        let Some(number) = event.present("sequence_number") else {
            return Ok(None); // some compatible servers send none
        };
        let Some(number) = number.count() else {
            return Err(invariants::violation(
                Invariant::ResponseSequenceInvalid,
                format!(
                    "{kind}'s sequence_number should be a count, got {}",
                    short(number.text())
                ),
            ));
        };
        if let Some(last) = self.sequence.filter(|last| number <= *last) {
            return Err(invariants::violation(
                Invariant::ResponseSequenceInvalid,
                format!("{kind}'s sequence_number {number} does not follow {last}"),
            ));
        }
        Ok(Some(number))
    }

    /// Judges one event's data by its `type`.
    fn judge(&mut self, data: &[u8]) -> Result<Seen, Violation> {
        let doc = stream::event_object(data)?;
        let body = doc.object().unwrap_or_default();
        let kind = body.get("type").and_then(|t| t.string()).ok_or_else(|| {
            invariants::violation(
                Invariant::ResponseEventInvalid,
                "a stream event has no string `type`".into(),
            )
        })?;
        let number = self.sequence(&body, &kind)?;
        let judged = if CARRY_RESPONSE.contains(&&*kind) {
            self.response(data, &body, &kind).map(Seen::Figures)
        } else if kind == "error" {
            Ok(Seen::UpstreamError) // passes: the SDK raises it
        } else {
            // Every type this judge does not know passes.
            self.gather(&body, &kind).map(|()| Seen::Nothing)
        };
        // Only a delivered event moves the sequence (an error event follows it).
        if judged.is_ok() {
            self.sequence = number.or(self.sequence);
        }
        judged
    }

    /// What an event adds to the answer, and its items' payload checks.
    fn gather(&mut self, event: &Object<'_>, kind: &str) -> Result<(), Violation> {
        match kind {
            "response.output_text.delta" => {
                if let Some(delta) = event.present("delta").and_then(|d| d.string()) {
                    self.answer.push(&delta);
                }
            }
            "response.refusal.delta" | "response.refusal.done" => self.answer.refusal = true,
            "response.output_item.added" | "response.output_item.done" => {
                let item = event.present("item").and_then(|i| i.object());
                output_item(item.as_ref(), &format!("{kind}'s item"))?;
                if let Some(item) = item.filter(|i| is_function_call(i)) {
                    self.gather_item(event, &item, kind == "response.output_item.done");
                }
            }
            "response.function_call_arguments.delta" if self.calls.is_some() => {
                let delta = event.present("delta").and_then(|d| d.string());
                if let (Some(key), Some(delta), Some(calls)) =
                    (self.call_key(event), delta, &mut self.calls)
                {
                    calls.append(key, &delta);
                }
            }
            "response.function_call_arguments.done" if self.calls.is_some() => {
                let arguments = event.present("arguments").and_then(|a| a.string());
                if let (Some(key), Some(arguments), Some(calls)) =
                    (self.call_key(event), arguments, &mut self.calls)
                {
                    calls.finish(key, crate::contract::name_of(event), arguments.into_owned());
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// A `function_call` item starts (its name, and what `arguments` holds
    /// already) or is done (its whole `arguments`).
    fn gather_item(&mut self, event: &Object<'_>, item: &Object<'_>, done: bool) {
        let (Some(calls), Some(key)) = (
            &mut self.calls,
            event.get("output_index").and_then(|i| i.count()),
        ) else {
            return; // no tools declared: no call is judged
        };
        if let Some(id) = item.get("id").and_then(|i| i.string()) {
            if !self.items.iter().any(|(known, _)| *known == *id) {
                self.items.push((id.into_owned(), key));
            }
        }
        let name = crate::contract::name_of(item);
        let arguments = item.get("arguments").and_then(|a| a.string());
        match (done, arguments) {
            (true, Some(arguments)) => calls.finish(key, name, arguments.into_owned()),
            (_, arguments) => {
                calls.start(key, name, None);
                calls.append(key, arguments.as_deref().unwrap_or_default());
            }
        }
    }

    /// The call an arguments event is of: its `output_index`, else the
    /// index its `item_id` was added at.
    fn call_key(&self, event: &Object<'_>) -> Option<u64> {
        if let Some(index) = event.get("output_index").and_then(|i| i.count()) {
            return Some(index);
        }
        let id = event.get("item_id").and_then(|i| i.string())?;
        self.items
            .iter()
            .find(|(known, _)| *known == *id)
            .map(|(_, key)| *key)
    }

    /// An event carrying a response object: its payload, and its figures
    /// under `/response`.
    fn response(
        &mut self,
        data: &[u8],
        event: &Object<'_>,
        kind: &str,
    ) -> Result<FigureFindings, Violation> {
        let response = event
            .present("response")
            .and_then(|r| r.object())
            .ok_or_else(|| {
                invariants::violation(
                    Invariant::ResponseEventInvalid,
                    format!("{kind} has no `response` object"),
                )
            })?;
        check_response(&response, &format!("{kind}'s response."))?;
        if TERMINAL.contains(&kind) {
            self.done = true;
            self.answer.truncated |= truncated(&response);
        }
        Ok(super::prefixed(
            figures::judge(
                data,
                &response,
                FIGURES,
                Related {
                    relations: RELATIONS,
                    convention: self.convention,
                },
            ),
            "/response",
        ))
    }
}

impl EventCheck for ResponseEvents {
    fn event(&mut self, event: &Event<'_>, convention: Convention) -> Result<Seen, Violation> {
        self.convention = convention;
        let Some(data) = event.data.as_deref() else {
            return Ok(Seen::Nothing); // a comment or keep-alive
        };
        if self.done {
            return Err(invariants::violation(
                Invariant::StreamAfterDone,
                "the stream went on after its terminal event".into(),
            ));
        }
        self.judge(data)
    }

    /// The dialect's own error event, so that the SDKs read it as one:
    /// `code` probity's error type, `sequence_number` the next one. The
    /// usual error object rides along under `error`: openai-python's
    /// stream raises `APIError` with its message.
    fn error_event(&self, error: &serde_json::Value) -> Vec<u8> {
        let data = serde_json::json!({
            "type": "error",
            "code": error.get("type"),
            "message": error.get("message"),
            "param": error.get("code"),
            "sequence_number": self.sequence.map_or(0, |n| n.saturating_add(1)),
            "error": error,
        })
        .to_string();
        stream::write_event(Framing::Sse, Some("error"), data.as_bytes(), None)
    }

    /// By the `event:` name, or (a server that sends none) the data's `type`.
    fn ends(&self, event: &Event<'_>) -> bool {
        #[derive(serde::Deserialize)]
        struct Typed<'a> {
            #[serde(borrow, rename = "type")]
            kind: std::borrow::Cow<'a, str>,
        }
        match (event.name, event.data.as_deref()) {
            (Some(name), _) => TERMINAL.contains(&name),
            (None, Some(data)) => serde_json::from_slice::<Typed<'_>>(data)
                .is_ok_and(|typed| TERMINAL.contains(&&*typed.kind)),
            (None, None) => false,
        }
    }

    /// A terminal event's response says whether the answer was cut, and
    /// holds every function call whole: the calls the SDKs' final response
    /// gives the app.
    fn closing(&mut self, event: &Event<'_>) {
        let doc = event.data.as_deref().map(crate::json::Document::parse);
        let response = match &doc {
            Some(Ok(doc)) => doc.object().and_then(|e| e.present("response")?.object()),
            _ => None,
        };
        let Some(response) = response else {
            return;
        };
        self.answer.truncated |= truncated(&response);
        let (Some(calls), Some(items)) = (
            &mut self.calls,
            response.present("output").and_then(|o| o.objects()),
        ) else {
            return;
        };
        for (index, item) in items.iter().enumerate() {
            let Some(item) = item.as_ref().filter(|i| is_function_call(i)) else {
                continue;
            };
            if let Some(arguments) = item.get("arguments").and_then(|a| a.string()) {
                let name = crate::contract::name_of(item);
                calls.finish(index as u64, name, arguments.into_owned());
            }
        }
    }

    fn answer(&self) -> Option<&StreamedAnswer> {
        Some(&self.answer)
    }

    fn calls(&self) -> Option<&StreamedCalls> {
        self.calls.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_paths_the_reference_prints_reach_the_stored_endpoint() {
        use crate::inspect::Dialect;
        let openai = super::super::openai::OpenAi;
        for (method, path) in STORED_PATHS {
            let path = path.replace('…', "/v1").replace("{id}", "resp_1");
            let reached = match *method {
                "GET" => openai.read(&path, None),
                _ => openai.endpoint(&path),
            };
            assert!(
                reached.is_some_and(|e| std::ptr::eq(e, &STORED)),
                "{method} {path}"
            );
        }
    }

    #[test]
    fn stored_paths_are_one_response_or_its_cancel() {
        assert!(stored("/v1/responses/resp_1", false));
        assert!(stored("/openai/v1/responses/resp_1/cancel", true));
        assert!(!stored("/v1/responses/resp_1/cancel", false));
        assert!(!stored("/v1/responses/resp_1/input_items", false));
        assert!(!stored("/v1/responses/", false));
        assert!(!stored("/v1/responses/input_tokens", false));
        assert!(!stored("/v1/responses", false));
    }
}

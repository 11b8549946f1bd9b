//! Google Gemini's native Generative Language API (`v1beta`, and `v1`,
//! which google-genai 3.x uses by default): `…/models/{model}:embedContent`,
//! `:batchEmbedContents`, `:generateContent` and `:streamGenerateContent`,
//! matched by the custom method that ends the path. The key goes in
//! `x-goog-api-key`.
//!
//! Google's JSON mapping of its protos accepts a request member in
//! lowerCamelCase or in its proto name (`candidateCount` or
//! `candidate_count`): both are read, the camel-case one first. Answers are
//! always camel case.

use serde_json::Value;

use super::stream::{self, Event, EventCheck, Framing, Seen};
use super::{
    held, CredentialSpec, Dialect, Endpoint, Field, HeldInvariant, RequestShape, Response,
    StreamSpec,
};
use crate::batch::{BatchSpec, Item, Vectors};
use crate::contract::{self, Answer, Arguments, Declared, OutputSpec, Requested, ToolCall};
use crate::contract::{StreamedAnswer, StreamedCalls, ToolSpec};
use crate::figures::{self, Convention, Figure, Related, Relation};
use crate::invariants::{self, Fault, Form, REQUEST_SHAPE};
use crate::json::{Json, Kind, Object};
use crate::violation::{Invariant, Violation};

pub(super) struct Gemini;

/// Embedding answers: the google-genai SDK reads a `usageMetadata` (its
/// `UsageMetadata`) from them; Google's REST reference shows none. Judged
/// when present, like any other figure.
const EMBED_FIGURES: &[Figure] = &[
    Figure::count("/usageMetadata/promptTokenCount").tokens("input"),
    Figure::count("/usageMetadata/totalTokenCount").tokens("total"),
];

// Google's JSON mapping of its protos reads `null` as the field's default
// and an int32 from a number or a decimal string: every field may be
// `null`, a count a string.

/// `:embedContent`: the `content` embedded, `outputDimensionality`.
const EMBED_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::optional("content", &[Kind::Object]),
        Field::optional("outputDimensionality", &[Kind::Number, Kind::String]),
        Field::optional("output_dimensionality", &[Kind::Number, Kind::String]),
    ],
};

/// `:batchEmbedContents`: one embedContent request per input in `requests`.
const BATCH_EMBED_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[Field::optional("requests", &[Kind::Array])],
};

/// `:generateContent` and `:streamGenerateContent`: the prompt in
/// `contents`, `candidateCount` and the contract in `generationConfig`,
/// the declared `tools`.
const GENERATE_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::optional("contents", &[Kind::Array]),
        Field::optional("generationConfig", &[Kind::Object]),
        Field::optional("generation_config", &[Kind::Object]),
        Field::optional("tools", &[Kind::Array]),
    ],
};

const EMBED: Endpoint = Endpoint {
    operation: "embeddings",
    request: &EMBED_REQUEST,
    check: embed,
    invariants: &[
        held(
            Invariant::PayloadMissing,
            "the body has an `embedding` object with `values`",
        ),
        held(
            Invariant::EmbeddingValueInvalid,
            "every element of `values` is a finite number",
        ),
        held(
            Invariant::EmbeddingDimensionMismatch,
            "`values` is not empty, and of `outputDimensionality` when the request sets it",
        ),
    ],
    figures: EMBED_FIGURES,
    relations: &[],
    header_figures: &[],
    stream: None,
    output: None,
    batch: None,
};

/// `embeddings: [{values}]`, one per request, in order, with no index.
const BATCH_EMBED: Endpoint = Endpoint {
    operation: "embeddings",
    request: &BATCH_EMBED_REQUEST,
    check: batch_embed,
    invariants: &[
        held(Invariant::PayloadMissing, "the body has an `embeddings` array"),
        held(Invariant::EmbeddingCountMismatch, "`embeddings` holds one item per request of `requests`"),
        held(Invariant::EmbeddingItemInvalid, "each item is an object with `values`"),
        held(Invariant::EmbeddingValueInvalid, "every element of `values` is a finite number"),
        held(
            Invariant::EmbeddingDimensionMismatch,
            "each vector is of its request's `outputDimensionality`; those that asked none all of one length",
        ),
    ],
    figures: EMBED_FIGURES,
    relations: &[],
    header_figures: &[],
    stream: None,
    output: None,
    batch: Some(BatchSpec {
        inputs: &["requests"],
        vectors: Vectors {
            list: "embeddings",
            item: Item::Object {
                vector: "values",
                index: None,
            },
            by_type: false,
            echoed: &[],
        },
        request: &BATCH_EMBED_REQUEST,
    }),
};

/// `GenerateContentResponse`: the response id and `usageMetadata`. The
/// per-modality lists (`promptTokensDetails`, ...) are arrays of
/// `{modality, tokenCount}`, not records of figures: left as they came.
/// In a stream each chunk's `usageMetadata` restates the counts so far: a
/// later one never falls (a client takes the last, never sums them).
const GENERATION_FIGURES: &[Figure] = &[
    Figure::id("/responseId"),
    Figure::count("/usageMetadata/promptTokenCount")
        .tokens("input")
        .running(),
    Figure::count("/usageMetadata/candidatesTokenCount")
        .tokens("output")
        .running(),
    Figure::count("/usageMetadata/totalTokenCount")
        .tokens("total")
        .running(),
    Figure::count("/usageMetadata/thoughtsTokenCount").running(),
    Figure::count("/usageMetadata/cachedContentTokenCount").running(),
    Figure::count("/usageMetadata/toolUsePromptTokenCount").running(),
];

/// What google-genai's `GenerateContentResponseUsageMetadata` defines:
/// `totalTokenCount` "is the sum of `prompt_token_count`,
/// `candidates_token_count`, `tool_use_prompt_token_count`, and
/// `thoughts_token_count`" (an absent one is none of it), and the cached
/// content is "still the total effective prompt size meaning this
/// includes the number of tokens in the cached content" (a part of the
/// prompt, unlike Anthropic's).
const GENERATION_RELATIONS: &[Relation] = &[
    Relation::sum(
        "totalTokenCount=prompt+candidates+toolUsePrompt+thoughts",
        "/usageMetadata/totalTokenCount",
        &["/usageMetadata/promptTokenCount"],
        &[
            "/usageMetadata/candidatesTokenCount",
            "/usageMetadata/toolUsePromptTokenCount",
            "/usageMetadata/thoughtsTokenCount",
        ],
    ),
    Relation::at_most(
        "cachedContentTokenCount<=promptTokenCount",
        "/usageMetadata/cachedContentTokenCount",
        "/usageMetadata/promptTokenCount",
    ),
];

/// What `candidates` holds of a streamed chunk's candidates (a whole
/// answer's are the same, and it must have some: [`ANSWER_HELD`]).
const CANDIDATES: &[HeldInvariant] = &[
    held(
        Invariant::PayloadMissing,
        "`candidates`, when present, is an array",
    ),
    CANDIDATE_COUNT,
    CANDIDATE_SHAPE,
    CANDIDATE_INDEX,
    FUNCTION_ARGS,
];
const CANDIDATE_COUNT: HeldInvariant = held(
    Invariant::ChoiceCountMismatch,
    "`candidates` (when present) holds at most `generationConfig.candidateCount` (default 1)",
);
const CANDIDATE_SHAPE: HeldInvariant = held(
    Invariant::ChoiceInvalid,
    "each candidate is an object; its `content` (when present) an object, its `parts` (when present) an array of objects",
);
const CANDIDATE_INDEX: HeldInvariant = held(
    Invariant::ChoiceIndexInvalid,
    "each candidate's `index` (when present) is in range, once",
);
const FUNCTION_ARGS: HeldInvariant = held(
    Invariant::ToolArgumentsType,
    "a `functionCall` part's `args` is an object",
);

/// A whole answer: one of `candidates` or `promptFeedback`, and its
/// candidates as [`CANDIDATES`].
const ANSWER_HELD: &[HeldInvariant] = &[
    held(
        Invariant::PayloadMissing,
        "the body has `candidates` (an array) or `promptFeedback` (a blocked prompt)",
    ),
    CANDIDATE_COUNT,
    CANDIDATE_SHAPE,
    CANDIDATE_INDEX,
    FUNCTION_ARGS,
];

/// A streamed answer read whole (without `alt=sse`), each element a chunk.
const ARRAY_HELD: &[HeldInvariant] = &[
    held(
        Invariant::PayloadMissing,
        "read whole (without `alt=sse`), the body is one answer or an array of them; each element an object with `candidates` or `promptFeedback`",
    ),
    CANDIDATE_COUNT,
    CANDIDATE_SHAPE,
    CANDIDATE_INDEX,
    FUNCTION_ARGS,
];

pub(super) const GENERATE: Endpoint = Endpoint {
    operation: "generate_content",
    request: &GENERATE_REQUEST,
    check: generate,
    invariants: ANSWER_HELD,
    figures: GENERATION_FIGURES,
    relations: GENERATION_RELATIONS,
    header_figures: &[],
    stream: None,
    output: Some(OUTPUT),
    batch: None,
};

/// The endpoint itself asks for a stream. With `?alt=sse` it is SSE, one
/// whole `GenerateContentResponse` per event and no `[DONE]`; without, one
/// JSON array of them, which is read whole and judged by [`streamed_document`].
///
/// No comment lines: the google-genai SDK parses every line that does not
/// start with `data: ` as JSON, so a `: probity-normalized` comment would
/// break the app's stream. The pointers are in the capture and the metrics.
pub(super) const STREAM_GENERATE: Endpoint = Endpoint {
    operation: "generate_content",
    request: &GENERATE_REQUEST,
    check: streamed_document,
    invariants: ARRAY_HELD,
    figures: GENERATION_FIGURES,
    relations: GENERATION_RELATIONS,
    header_figures: &[],
    stream: Some(StreamSpec {
        asked: |_| true,
        framing: Framing::Sse,
        comments: false,
        start: |request| {
            Ok(Box::new(GenerateEvents {
                candidates: Some(candidate_count(request)?),
                answer: StreamedAnswer::default(),
                calls: declared_functions(request).map(|_| StreamedCalls::default()),
            }))
        },
        invariants: CANDIDATES,
        unread: || {
            Box::new(GenerateEvents {
                candidates: None,
                answer: StreamedAnswer::default(),
                calls: None,
            })
        },
    }),
    output: Some(OUTPUT),
    batch: None,
};

/// JSON mode: `generationConfig.responseMimeType = "application/json"`,
/// with `responseJsonSchema` (JSON Schema) or `responseSchema` (Google's
/// OpenAPI subset, translated); the prompt is the last user turn's text.
const OUTPUT: OutputSpec = OutputSpec {
    task: "gemini_generate_content",
    requested: requested_format,
    prompt: last_user_text,
    answers: candidate_answers,
    tools: Some(ToolSpec {
        declared: declared_functions,
        calls: |response| {
            let mut calls = Vec::new();
            for candidate in list(response, "candidates").iter().flatten() {
                function_calls(candidate, &mut calls);
            }
            calls
        },
    }),
    citations: None,
};

/// An array member's objects (none when it is absent or not an array).
fn list<'a>(object: &Object<'a>, key: &str) -> Vec<Option<Object<'a>>> {
    object
        .present(key)
        .and_then(|l| l.objects())
        .unwrap_or_default()
}

/// `tools[].functionDeclarations[]`: each `name`, with its
/// `parametersJsonSchema` (JSON Schema) or `parameters` (Google's OpenAPI
/// subset, translated as `responseSchema` is). `None` when no function is
/// declared (a `googleSearch` tool makes no calls).
fn declared_functions(request: &Object<'_>) -> Option<Declared> {
    let mut tools = Vec::new();
    let mut any = false;
    for tool in request.present("tools")?.objects()?.into_iter().flatten() {
        let Some(declarations) = member(&tool, "functionDeclarations", "function_declarations")
            .and_then(|d| d.objects())
        else {
            continue;
        };
        any = true;
        for declaration in declarations.into_iter().flatten() {
            let Some(name) = contract::name_of(&declaration) else {
                continue;
            };
            let parse = |schema: Json<'_>| serde_json::from_str::<Value>(schema.text()).ok();
            let schema = member(
                &declaration,
                "parametersJsonSchema",
                "parameters_json_schema",
            )
            .and_then(parse)
            .or_else(|| {
                member(&declaration, "parameters", "parameters")
                    .and_then(parse)
                    .map(json_schema)
            });
            tools.push((name, schema));
        }
    }
    any.then_some(Declared {
        tools,
        forced: None,
    })
}

/// A candidate's `functionCall` parts: `name` and `args` (an object;
/// absent for a function without parameters).
fn function_calls(candidate: &Object<'_>, calls: &mut Vec<ToolCall>) {
    let parts = candidate
        .present("content")
        .and_then(|c| c.object())
        .map(|c| list(&c, "parts"))
        .unwrap_or_default();
    for call in parts
        .iter()
        .flatten()
        .filter_map(|p| p.present("functionCall")?.object())
    {
        calls.push(ToolCall {
            name: contract::name_of(&call),
            arguments: Arguments::Json(
                call.present("args")
                    .map_or_else(|| "{}".to_string(), |a| a.text().to_string()),
            ),
        });
    }
}

/// A `functionCall`'s `args` is an object on the wire (a `Struct`): the
/// payload's fault otherwise.
fn args_type(part: &Object<'_>, at: &dyn Fn() -> String) -> Result<(), Violation> {
    let args = part
        .present("functionCall")
        .and_then(|c| c.object())
        .and_then(|c| c.present("args"));
    match args {
        Some(args) if args.kind() != crate::json::Kind::Object => Err(invariants::violation(
            Invariant::ToolArgumentsType,
            format!(
                "{}.functionCall.args should be an object, found {}",
                at(),
                format!("{:?}", args.kind()).to_lowercase()
            ),
        )),
        _ => Ok(()),
    }
}

impl Dialect for Gemini {
    fn name(&self) -> &'static str {
        "gemini"
    }

    fn provider(&self) -> &'static str {
        "gcp.gemini"
    }

    fn credential(&self) -> &'static CredentialSpec {
        &CredentialSpec {
            header: "x-goog-api-key",
            prefix: "",
            defaults: &[],
            also: &[],
            query: Some("key"),
            signed: &[],
        }
    }

    fn error_envelope(&self) -> super::Envelope {
        super::Envelope::Google
    }

    fn unreachable_hint(&self) -> &'static str {
        super::HOSTED_HINT
    }

    /// Keyed by custom method, not by suffix.
    fn endpoints(&self) -> super::Endpoints {
        METHODS
    }

    /// By the custom method of the path's last segment, not a suffix
    /// (its colon may come percent-encoded).
    fn endpoint(&self, path: &str) -> Option<&'static Endpoint> {
        let method = method(path)?;
        METHODS
            .iter()
            .find(|(name, _)| *name == method)
            .map(|(_, endpoint)| *endpoint)
    }
}

/// The custom methods probity checks, and their endpoints.
const METHODS: super::Endpoints = &[
    ("embedContent", &EMBED),
    ("batchEmbedContents", &BATCH_EMBED),
    ("generateContent", &GENERATE),
    ("streamGenerateContent", &STREAM_GENERATE),
];

/// The custom method of a path's last segment (`models/x:generateContent`
/// → `generateContent`), its colon written plainly or percent-encoded.
pub(super) fn method(path: &str) -> Option<&str> {
    let segment = &path[path.rfind('/').map_or(0, |i| i + 1)..];
    if let Some(at) = segment.rfind(':') {
        return Some(&segment[at + 1..]);
    }
    let at = segment.to_ascii_lowercase().rfind("%3a")?;
    Some(&segment[at + 3..])
}

/// A request member under its camel-case name or its proto name.
fn member<'a>(object: &Object<'a>, camel: &str, snake: &str) -> Option<Json<'a>> {
    object.present(camel).or_else(|| object.present(snake))
}

/// An optional count under either name.
fn optional_count(object: &Object<'_>, camel: &str, snake: &str) -> Result<Option<usize>, Fault> {
    let key = if object.present(camel).is_some() {
        camel
    } else {
        snake
    };
    invariants::optional_count(object, key)
}

// ------------------------------------------------------------------ embeddings

fn output_dimensionality(request: &Object<'_>) -> Result<Option<usize>, Fault> {
    optional_count(request, "outputDimensionality", "output_dimensionality")
}

/// One vector: a non-empty array of finite numbers, of the requested length
/// when one was asked. Returns its length.
pub(super) fn vector(
    values: Json<'_>,
    requested: Option<usize>,
    label: &str,
) -> Result<usize, Violation> {
    let dim = invariants::dimension(values, Form::Float, &|| label.to_string())?;
    if dim == 0 {
        return Err(invariants::violation(
            Invariant::EmbeddingDimensionMismatch,
            format!("expected a non-empty embedding, {label} has 0 dimensions"),
        ));
    }
    match requested {
        Some(requested) if requested != dim => Err(invariants::violation(
            Invariant::EmbeddingDimensionMismatch,
            format!("expected {requested} dimensions as requested, {label} has {dim}"),
        )),
        _ => Ok(dim),
    }
}

/// `embedding.values`: one vector.
fn embed(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let requested = output_dimensionality(request)?;
    let embedding = response
        .object()?
        .present("embedding")
        .and_then(|e| e.object())
        .ok_or_else(|| {
            invariants::violation(
                Invariant::PayloadMissing,
                "the response has no `embedding` object".into(),
            )
        })?;
    let values = embedding.present("values").ok_or_else(|| {
        invariants::violation(
            Invariant::PayloadMissing,
            "the response's `embedding` has no `values`".into(),
        )
    })?;
    vector(values, requested, "embedding.values")?;
    Ok(())
}

/// `embeddings` holds one `{values}` per request, in order: each of the
/// length its request asked for (`outputDimensionality`), and those whose
/// request asked none all of one length.
fn batch_embed(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let requests = request
        .present("requests")
        .and_then(|r| r.objects())
        .ok_or(Fault::Uninspectable(REQUEST_SHAPE))?;
    let requested = requests
        .iter()
        .map(|r| match r {
            Some(r) => output_dimensionality(r),
            None => Err(Fault::Uninspectable(REQUEST_SHAPE)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let items = response
        .object()?
        .present("embeddings")
        .and_then(|e| e.objects())
        .ok_or_else(|| {
            invariants::violation(
                Invariant::PayloadMissing,
                "the response has no `embeddings` array".into(),
            )
        })?;
    invariants::count_matches(items.len(), requested.len())?;
    let mut unasked: Option<(usize, usize)> = None;
    for (i, (item, requested)) in items.iter().zip(&requested).enumerate() {
        let item = item.as_ref().ok_or_else(|| {
            invariants::violation(
                Invariant::EmbeddingItemInvalid,
                format!("embeddings[{i}] is not an object"),
            )
        })?;
        let values = item.present("values").ok_or_else(|| {
            invariants::violation(
                Invariant::EmbeddingItemInvalid,
                format!("embeddings[{i}] has no values"),
            )
        })?;
        let dim = vector(values, *requested, &format!("embeddings[{i}].values"))?;
        if requested.is_none() {
            match unasked {
                None => unasked = Some((i, dim)),
                Some((first, d)) if d != dim => {
                    return Err(invariants::violation(
                        Invariant::EmbeddingDimensionMismatch,
                        format!(
                            "vectors differ in length: embeddings[{first}] has {d} dimensions, \
                             embeddings[{i}] has {dim}"
                        ),
                    )
                    .into())
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

// ------------------------------------------------------------------ generation

/// `generationConfig` (or `generation_config`), when it is an object.
fn generation_config<'a>(request: &Object<'a>) -> Option<Object<'a>> {
    member(request, "generationConfig", "generation_config").and_then(|c| c.object())
}

/// `generationConfig.candidateCount`, default 1.
fn candidate_count(request: &Object<'_>) -> Result<usize, Fault> {
    let config = match member(request, "generationConfig", "generation_config") {
        None => return Ok(1),
        Some(config) => config.object().ok_or(Fault::Uninspectable(REQUEST_SHAPE))?,
    };
    Ok(optional_count(&config, "candidateCount", "candidate_count")?.unwrap_or(1))
}

/// `candidates`, when present: an array of at most `asked` objects, each
/// `index` (when present) in `0..asked` once, each `content` (when present)
/// an object whose `parts` (when present) is an array of objects. A
/// content without `parts` is legitimate: Gemini sends `{"role": "model"}`
/// when thinking used every output token (`MAX_TOKENS`) and none on a
/// `SAFETY` or `RECITATION` stop. Returns whether there were candidates.
fn candidates(root: &Object<'_>, asked: Option<usize>) -> Result<bool, Violation> {
    let Some(list) = root.present("candidates") else {
        return Ok(false);
    };
    let list = list.objects().ok_or_else(|| {
        invariants::violation(
            Invariant::PayloadMissing,
            "`candidates` is not an array".into(),
        )
    })?;
    if let Some(asked) = asked.filter(|asked| list.len() > *asked) {
        return Err(invariants::violation(
            Invariant::ChoiceCountMismatch,
            format!(
                "expected at most {asked} candidates (candidateCount = {asked}), got {}",
                list.len()
            ),
        ));
    }
    // Unknown (the request was unreadable): each index still at most once.
    let mut seen = std::collections::BTreeSet::new();
    for (i, candidate) in list.iter().enumerate() {
        let candidate = candidate.as_ref().ok_or_else(|| {
            invariants::violation(
                Invariant::ChoiceInvalid,
                format!("candidates[{i}] is not an object"),
            )
        })?;
        if let Some(index) = candidate.present("index") {
            match index.count().and_then(|x| usize::try_from(x).ok()) {
                Some(x) if asked.is_none_or(|asked| x < asked) && seen.insert(x) => {}
                _ => {
                    let range = asked.map_or_else(|| "0..".into(), |asked| format!("0..{asked}"));
                    return Err(invariants::violation(
                        Invariant::ChoiceIndexInvalid,
                        format!(
                            "candidates[{i}].index is {}, expected each of {range} at most once",
                            index.text()
                        ),
                    ));
                }
            }
        }
        let Some(content) = candidate.present("content") else {
            continue;
        };
        let content = content.object().ok_or_else(|| {
            invariants::violation(
                Invariant::ChoiceInvalid,
                format!("candidates[{i}].content should be an object"),
            )
        })?;
        if let Some(parts) = content.present("parts") {
            let parts = parts.objects().ok_or_else(|| {
                invariants::violation(
                    Invariant::ChoiceInvalid,
                    format!("candidates[{i}].content.parts should be an array"),
                )
            })?;
            if let Some(j) = parts.iter().position(Option::is_none) {
                return Err(invariants::violation(
                    Invariant::ChoiceInvalid,
                    format!("candidates[{i}].content.parts[{j}] is not an object"),
                ));
            }
            for (j, part) in parts.iter().enumerate() {
                if let Some(part) = part {
                    args_type(part, &|| format!("candidates[{i}].content.parts[{j}]"))?;
                }
            }
        }
    }
    Ok(true)
}

/// A whole answer: candidates as above, and either some candidates or a
/// `promptFeedback` (a blocked prompt has no candidates, and that is an
/// answer too).
fn whole(root: &Object<'_>, asked: usize) -> Result<(), Violation> {
    if !candidates(root, Some(asked))? && root.present("promptFeedback").is_none() {
        return Err(invariants::violation(
            Invariant::PayloadMissing,
            "the response has neither `candidates` nor `promptFeedback`".into(),
        ));
    }
    Ok(())
}

fn generate(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let asked = candidate_count(request)?;
    whole(response.object()?, asked)?;
    Ok(())
}

/// A stream asked without `alt=sse`: Google sends one JSON array of
/// `GenerateContentResponse` chunks, each judged as a stream chunk. (A
/// single object is judged as a whole answer.) The figures inside the
/// array's elements are not judged: the pipeline judges figures of a root
/// object only.
fn streamed_document(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let asked = candidate_count(request)?;
    if let Some(object) = &response.object {
        whole(object, asked)?;
        return Ok(());
    }
    let chunks = response.root.objects().ok_or_else(|| {
        invariants::violation(
            Invariant::PayloadMissing,
            "the response is neither an object nor an array of them".into(),
        )
    })?;
    for (i, chunk) in chunks.iter().enumerate() {
        let chunk = chunk.as_ref().ok_or_else(|| {
            invariants::violation(
                Invariant::PayloadMissing,
                format!("element {i} is not an object"),
            )
        })?;
        if chunk.get("error").is_none() {
            candidates(chunk, Some(asked))?;
        }
    }
    Ok(())
}

/// A streamed `GenerateContentResponse` per SSE event: each judged on its
/// own (candidates as a whole answer's, but a chunk may have none: the last
/// often carries only `usageMetadata`), its figures with the full table
/// (usage is cumulative, so the last sound value of each kind counts).
///
/// Framed by lines (see [`STREAM_GENERATE`]): each `data:` line is one
/// chunk (Google writes each on one line); blank lines, comments and other
/// fields pass. A line the framing hands over may still hold several SSE
/// lines ended by a lone `\r`: each is read.
struct GenerateEvents {
    /// The candidates asked for; `None` when the request could not be read.
    candidates: Option<usize>,
    /// The first candidate's text, gathered from its chunks.
    answer: StreamedAnswer,
    /// Every candidate's function calls, when the request declared some.
    calls: Option<StreamedCalls>,
}

impl EventCheck for GenerateEvents {
    fn event(&mut self, event: &Event<'_>, convention: Convention) -> Result<Seen, Violation> {
        let Some(data) = event.data.as_deref() else {
            return Ok(Seen::Nothing); // a keep-alive
        };
        if data.trim_ascii().is_empty() {
            return Ok(Seen::Nothing);
        }
        let doc = stream::event_object(data)?;
        let chunk = doc.object().unwrap_or_default();
        if chunk.get("error").is_some() {
            return Ok(Seen::UpstreamError); // passes: the SDK raises it
        }
        candidates(&chunk, self.candidates)?;
        gather(&chunk, &mut self.answer);
        if let Some(calls) = &mut self.calls {
            let mut found = Vec::new();
            for candidate in list(&chunk, "candidates").iter().flatten() {
                function_calls(candidate, &mut found);
            }
            found.into_iter().for_each(|call| calls.whole(call));
        }
        Ok(Seen::Figures(figures::judge(
            data,
            &chunk,
            GENERATION_FIGURES,
            Related {
                relations: GENERATION_RELATIONS,
                convention,
            },
        )))
    }

    /// Google's error shape (`google.rpc.Status`), as probity's whole
    /// error responses in this dialect: an HTTP `code` (an integer:
    /// google-genai compares it with 400 and 500), a gRPC `status`, and
    /// probity's `code` as the `reason` of a `google.rpc.ErrorInfo` whose
    /// metadata holds its `type`, `route` and `request_id`.
    fn error_event(&self, error: &Value) -> Vec<u8> {
        let (code, status) = match error["type"].as_str() {
            Some("upstream_timeout") => (504, "DEADLINE_EXCEEDED"),
            Some("internal_error") => (500, "INTERNAL"),
            _ => (502, "UNAVAILABLE"),
        };
        let data = serde_json::json!({
            "error": {
                "code": code,
                "message": error["message"],
                "status": status,
                "details": [{
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": error["code"],
                    "domain": "probity",
                    "metadata": {
                        "type": error["type"],
                        "route": error["route"],
                        "request_id": error["request_id"],
                    },
                }],
            }
        })
        .to_string();
        stream::write_event(Framing::Sse, None, data.as_bytes(), None)
    }

    fn answer(&self) -> Option<&StreamedAnswer> {
        Some(&self.answer)
    }

    fn calls(&self) -> Option<&StreamedCalls> {
        self.calls.as_ref()
    }
}

// ------------------------------------------------------------------ output

/// Finish reasons where Google withheld the answer: counted as a refusal.
const WITHHELD: &[&str] = &[
    "SAFETY",
    "RECITATION",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "IMAGE_SAFETY",
];

/// The text parts of a candidate's content, thoughts left out.
fn text_parts<'a>(candidate: &Object<'a>) -> Vec<Json<'a>> {
    let parts = candidate
        .present("content")
        .and_then(|c| c.object())
        .and_then(|c| c.present("parts"))
        .and_then(|p| p.objects())
        .unwrap_or_default();
    parts
        .into_iter()
        .flatten()
        .filter(|p| p.get("thought").and_then(|t| t.boolean()) != Some(true))
        .filter_map(|p| p.present("text"))
        .collect()
}

fn finish_reason(candidate: &Object<'_>) -> Option<String> {
    candidate
        .get("finishReason")
        .and_then(|f| f.string())
        .map(|f| f.into_owned())
}

fn blocked(response: &Object<'_>) -> bool {
    response
        .present("promptFeedback")
        .and_then(|f| f.object())
        .is_some_and(|f| f.present("blockReason").is_some())
}

/// Each candidate's answer: its text part. The contract judges one JSON
/// value per answer, borrowed from the body, so of several text parts the
/// first is judged (Gemini answers JSON mode in one part). A blocked
/// prompt is one refused answer.
fn candidate_answers<'a>(_request: &Object<'_>, response: &Object<'a>) -> Vec<Answer<'a>> {
    let list = response
        .present("candidates")
        .and_then(|c| c.objects())
        .unwrap_or_default();
    if list.is_empty() && blocked(response) {
        return vec![Answer {
            content: None,
            more: Vec::new(),
            truncated: false,
            refusal: true,
        }];
    }
    list.into_iter()
        .flatten()
        .map(|candidate| {
            let finish = finish_reason(&candidate);
            Answer {
                content: text_parts(&candidate).first().copied(),
                more: Vec::new(),
                truncated: finish.as_deref() == Some("MAX_TOKENS"),
                refusal: finish.is_some_and(|f| WITHHELD.contains(&f.as_str())),
            }
        })
        .collect()
}

/// Gathers the first candidate's text from a chunk.
fn gather(chunk: &Object<'_>, answer: &mut StreamedAnswer) {
    answer.refusal |= blocked(chunk);
    let list = chunk
        .present("candidates")
        .and_then(|c| c.objects())
        .unwrap_or_default();
    let first = list
        .into_iter()
        .flatten()
        .find(|c| c.present("index").is_none_or(|i| i.count() == Some(0)));
    let Some(candidate) = first else {
        return;
    };
    for text in text_parts(&candidate) {
        if let Some(text) = text.string() {
            answer.push(&text);
        }
    }
    match finish_reason(&candidate).as_deref() {
        Some("MAX_TOKENS") => answer.truncated = true,
        Some(reason) if WITHHELD.contains(&reason) => answer.refusal = true,
        _ => {}
    }
}

/// JSON mode: `responseMimeType: "application/json"`, with
/// `responseJsonSchema` (a JSON Schema) or `responseSchema` (translated).
fn requested_format(request: &Object<'_>) -> Requested {
    let Some(config) = generation_config(request) else {
        return Requested::Nothing;
    };
    let mime = member(&config, "responseMimeType", "response_mime_type").and_then(|m| m.string());
    if mime.as_deref() != Some("application/json") {
        return Requested::Nothing;
    }
    let parse = |schema: Json<'_>| serde_json::from_str::<Value>(schema.text()).ok();
    if let Some(schema) =
        member(&config, "responseJsonSchema", "response_json_schema").and_then(parse)
    {
        return Requested::Schema(schema);
    }
    match member(&config, "responseSchema", "response_schema").and_then(parse) {
        Some(schema) => Requested::Schema(json_schema(schema)),
        None => Requested::Json,
    }
}

/// Google's `Schema` (an OpenAPI 3.0 subset) as JSON Schema: type names in
/// lower case, `nullable: true` as a `null` type, `format` and
/// `propertyOrdering` dropped (a format is only a hint to the model).
/// Members JSON Schema does not know are ignored by it, which can only
/// make the check looser, never stricter.
fn json_schema(schema: Value) -> Value {
    let Value::Object(members) = schema else {
        return schema;
    };
    let nullable = members.get("nullable") == Some(&Value::Bool(true));
    let mut out = serde_json::Map::new();
    for (key, value) in members {
        match key.as_str() {
            "type" => {
                let Some(name) = value.as_str().map(str::to_ascii_lowercase) else {
                    continue;
                };
                if name == "type_unspecified" {
                    continue;
                }
                let name = Value::String(name);
                let kind = if nullable {
                    Value::Array(vec![name, Value::from("null")])
                } else {
                    name
                };
                out.insert(key, kind);
            }
            "nullable" | "format" | "propertyOrdering" | "property_ordering" => {}
            "properties" => {
                let properties = match value {
                    Value::Object(properties) => Value::Object(
                        properties
                            .into_iter()
                            .map(|(name, s)| (name, json_schema(s)))
                            .collect(),
                    ),
                    other => other,
                };
                out.insert(key, properties);
            }
            "items" => {
                out.insert(key, json_schema(value));
            }
            "anyOf" | "any_of" => {
                let any = match value {
                    Value::Array(list) => Value::Array(list.into_iter().map(json_schema).collect()),
                    other => other,
                };
                out.insert("anyOf".into(), any);
            }
            _ => {
                out.insert(key, value);
            }
        }
    }
    Value::Object(out)
}

/// The text of the last user turn of `contents` (a turn without a role is
/// the user's), its text parts joined.
fn last_user_text(request: &Object<'_>) -> Option<String> {
    let contents = request.present("contents")?.objects()?;
    let turn = contents.iter().rev().flatten().find(|c| {
        c.get("role")
            .and_then(|r| r.string())
            .is_none_or(|r| r == "user")
    })?;
    let parts = turn.present("parts")?.objects()?;
    let texts: Vec<String> = parts
        .iter()
        .flatten()
        .filter_map(|p| p.present("text").and_then(|t| t.string()))
        .map(|t| t.into_owned())
        .collect();
    Some(texts.concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_the_custom_method_of_the_last_segment() {
        // Which endpoint, by what it has: a stream, a batch, an output.
        let at = |path: &str| {
            Gemini.endpoint(path).map(|e| {
                (
                    e.stream.is_some(),
                    e.batch.is_some(),
                    e.output.is_some(),
                    e.figures.len(),
                )
            })
        };
        let base = "/v1beta/models/gemini-2.5-flash";
        assert_eq!(
            at(&format!("{base}:generateContent")),
            Some((false, false, true, 7))
        );
        assert_eq!(
            at(&format!("{base}%3AstreamGenerateContent")),
            Some((true, false, true, 7))
        );
        assert_eq!(
            at("/gw/v1beta/models/gemini-embedding-001:batchEmbedContents"),
            Some((false, true, false, 2))
        );
        assert_eq!(
            at("/v1beta/tunedModels/t-1:embedContent"),
            Some((false, false, false, 2))
        );
        assert_eq!(at(&format!("{base}:countTokens")), None);
        assert_eq!(at("/v1beta/models"), None);
        assert_eq!(at("/v1beta/a:generateContent/models"), None);
    }

    #[test]
    fn google_schemas_become_json_schemas() {
        let schema = serde_json::json!({
            "type": "OBJECT",
            "properties": {
                "answer": {"type": "STRING", "nullable": true},
                "n": {"type": "INTEGER", "format": "int32"},
                "tags": {"type": "ARRAY", "items": {"type": "STRING", "enum": ["a", "b"]}},
                "any": {"anyOf": [{"type": "NUMBER"}, {"type": "BOOLEAN"}]}
            },
            "required": ["answer"],
            "propertyOrdering": ["answer", "n"]
        });
        assert_eq!(
            json_schema(schema),
            serde_json::json!({
                "type": "object",
                "properties": {
                    "answer": {"type": ["string", "null"]},
                    "n": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
                    "any": {"anyOf": [{"type": "number"}, {"type": "boolean"}]}
                },
                "required": ["answer"]
            })
        );
    }

    #[test]
    fn the_error_event_is_googles_shape_with_probitys_fields() {
        let check = GenerateEvents {
            candidates: Some(1),
            answer: StreamedAnswer::default(),
            calls: None,
        };
        let error = serde_json::json!({
            "type": "provider_invalid_response", "code": "choice_index_invalid",
            "message": "m", "route": "gemini", "request_id": "r"
        });
        let event = check.error_event(&error);
        let text = std::str::from_utf8(&event).unwrap();
        let data: Value =
            serde_json::from_str(text.strip_prefix("data: ").unwrap().trim_end()).unwrap();
        assert_eq!(data["error"]["code"], 502);
        assert_eq!(data["error"]["status"], "UNAVAILABLE");
        assert_eq!(
            data["error"]["details"][0]["metadata"]["type"],
            "provider_invalid_response"
        );
        assert_eq!(
            data["error"]["details"][0]["reason"],
            "choice_index_invalid"
        );
        let timeout = serde_json::json!({"type": "upstream_timeout", "code": "idle_timeout_ms"});
        let event = check.error_event(&timeout);
        assert!(std::str::from_utf8(&event)
            .unwrap()
            .contains("\"DEADLINE_EXCEEDED\""));
    }
}

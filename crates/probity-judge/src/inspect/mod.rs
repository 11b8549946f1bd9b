//! Response inspection, per provider dialect: the step after `forward` on the
//! way back (`forward` → **`inspect`** → `server`).
//!
//! A [`Dialect`] is handed a complete exchange (the request and the upstream
//! response) and returns a [`Verdict`]: pass the bytes on untouched, rewrite
//! them, or reject them as a payload violation. Each provider lives in its own
//! file; adding one means adding a file and a line in [`dialect`], never
//! touching the pipeline. The shared checks live in `invariants` (payload)
//! and `figures` (ancillary figures).

mod anthropic;
mod azure;
mod bedrock;
mod cohere;
pub(crate) mod eventstream;
mod findings;
mod gemini;
mod hosted;
mod jina;
mod ollama;
mod openai;
mod passthrough;
pub mod realtime;
mod responses;
pub mod stream;
mod stream_judge;
mod tei;
mod vertex;
mod voyage;

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use http::header::HeaderName;
use http::{HeaderMap, Method, StatusCode};

use crate::batch::{self, BatchSpec};
use crate::contract::ContractConfig;
use crate::contract::{self, Contract, OutputFindings, OutputSpec, SchemaCache};
use crate::figures::{self, Convention, Figure, FigureFindings, HeaderFigure, Related, Relation};
use crate::invariants::Fault;
use crate::json::{self, Document, Json, Object, Scanner};
use crate::violation::{Invariant, Violation};
use stream::{EventCheck, Framing};

pub(crate) use crate::request::{Field, RequestShape};
pub use findings::Findings;
pub use stream_judge::StreamJudge;

/// The dialect table: one line per provider. A route's `dialect` names one
/// of these; adding a provider means adding its file and one line here.
pub(crate) const DIALECTS: &[&dyn Dialect] = &[
    &openai::OpenAi,
    &azure::Azure,
    &ollama::Ollama,
    &cohere::Cohere,
    &jina::JINA,
    &tei::Tei,
    &voyage::VOYAGE,
    &anthropic::Anthropic,
    &gemini::Gemini,
    &bedrock::Bedrock,
    &vertex::Vertex,
    &passthrough::Passthrough,
];

/// The dialect of this name.
pub fn dialect(name: &str) -> Option<&'static dyn Dialect> {
    DIALECTS.iter().copied().find(|d| d.name() == name)
}

/// Every dialect's name, in table order: what a route's `dialect` may be.
pub fn names() -> Vec<&'static str> {
    DIALECTS.iter().map(|d| d.name()).collect()
}

/// A payload check: the request and its response, a broken invariant or
/// why it cannot be checked.
pub(crate) type Check = fn(&Object<'_>, &Response<'_>) -> Result<(), Fault>;

/// A dialect's endpoint table: `(path suffix, endpoint)`, first match wins.
pub type Endpoints = &'static [(&'static str, &'static Endpoint)];

/// The first endpoint of `table` whose suffix ends `path`.
pub(crate) fn by_suffix(table: Endpoints, path: &str) -> Option<&'static Endpoint> {
    table
        .iter()
        .find(|(suffix, _)| path.ends_with(suffix))
        .map(|(_, endpoint)| *endpoint)
}

/// How one provider speaks: how it takes a credential, what to tell a user
/// who cannot reach it, and how its responses are judged.
pub trait Dialect: Send + Sync {
    /// The name a route's `dialect` key uses, e.g. `openai`.
    fn name(&self) -> &'static str;

    /// The provider, as OpenTelemetry's `gen_ai.provider.name` says it.
    fn provider(&self) -> &'static str {
        self.name()
    }

    /// How the provider takes a configured credential. Most take
    /// `Authorization: Bearer`.
    fn credential(&self) -> &'static CredentialSpec {
        &BEARER
    }

    /// The remedy named in `upstream_unreachable` errors.
    fn unreachable_hint(&self) -> &'static str;

    /// The shape of this provider's error bodies, so that its SDK puts
    /// probity's message into the exception it raises. Most speak OpenAI's.
    fn error_envelope(&self) -> Envelope {
        Envelope::Nested
    }

    /// The endpoints this dialect checks, as data: path suffixes (as sent
    /// upstream) and their endpoints, the first match winning (so
    /// `/chat/completions` comes before `/completions`). Matched by the
    /// end, a gateway's base path (`/openai/deployments/x/embeddings`) does
    /// not hide an endpoint. A dialect whose paths are not suffixes keys
    /// its table by what [`Dialect::endpoint`] matches instead (Gemini's
    /// `:method`, Bedrock's operation).
    fn endpoints(&self) -> Endpoints {
        &[]
    }

    /// The endpoints [`Dialect::endpoint`] or [`Dialect::read`] reach that
    /// no table lists (openai's stored response, named by its id): with
    /// [`Dialect::endpoints`] and the families, every endpoint the dialect
    /// judges.
    fn unlisted(&self) -> &'static [&'static Endpoint] {
        &[]
    }

    /// The endpoint a request path (as sent upstream) is, when this dialect
    /// checks it: by [`Dialect::endpoints`], unless a dialect's paths are
    /// not suffixes (Gemini's `:method`, a stored response's id).
    fn endpoint(&self, path: &str) -> Option<&'static Endpoint> {
        by_suffix(self.endpoints(), path)
    }

    /// The endpoint a GET to a path (as sent upstream) is, with the
    /// request's query: a GET passes unchecked unless its dialect's table
    /// names it here (openai's `GET …/responses/{id}`, which answers a
    /// response object as a POST does).
    fn read(&self, _path: &str, _query: Option<&str>) -> Option<&'static Endpoint> {
        None
    }

    /// Whether a WebSocket upgrade to this path (as sent upstream) is a
    /// Realtime session probity tunnels (`inspect::realtime`); every other
    /// upgrade is refused.
    fn realtime(&self, _path: &str) -> bool {
        false
    }

    /// The model a path (as sent upstream) names, when the path carries
    /// it (Bedrock's `/model/{modelId}/invoke`): what a route's
    /// `model_families` is keyed by.
    fn model(&self, _path: &str) -> Option<String> {
        None
    }

    /// The endpoint of a model family a route's `model_families` names
    /// (Bedrock's `invoke` bodies are each model's own).
    fn family(&self, _name: &str) -> Option<&'static Endpoint> {
        None
    }

    /// The endpoint of a model family's streamed call, when it has one
    /// probity judges (Bedrock's `invoke-with-response-stream`).
    fn family_stream(&self, _name: &str) -> Option<&'static Endpoint> {
        None
    }

    /// The endpoint a POST to `path` is when a route's `model_families`
    /// names its model's family, whose whole call is `whole`: the family's
    /// streamed call on a streaming path (Bedrock's
    /// `invoke-with-response-stream`), `None` for a call it does not judge.
    fn family_at(&self, whole: &'static Endpoint, _path: &str) -> Option<&'static Endpoint> {
        Some(whole)
    }

    /// The family names [`Dialect::family`] knows.
    fn families(&self) -> &'static [&'static str] {
        &[]
    }

    /// The conventions a route of this dialect may count its figures by
    /// (`relations`): its provider's own, or none; openai's also xAI's.
    fn conventions(&self) -> &'static [Convention] {
        &[Convention::Provider, Convention::Off]
    }

    /// The convention of a route that names none, by its upstream's host:
    /// the provider's own, unless the host is one whose convention is
    /// known to differ (`api.x.ai` on the OpenAI wire).
    fn convention_of(&self, _host: &str) -> Convention {
        Convention::Provider
    }

    /// Why a POST to this path passes uninspected though the dialect
    /// would judge its kind (an `invoke` of a model family probity does
    /// not judge): counted on `probity_uninspected_total`.
    fn unjudged(&self, _path: &str) -> Option<&'static str> {
        None
    }
}

/// The shape of a provider's error body, as data; `error` maps probity's
/// errors into it (with probity's own `type`, `code`, `route` and
/// `request_id` wherever the shape allows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Envelope {
    /// `{"error": {"message", "type", "param", "code"}}`: OpenAI's, which
    /// its SDKs (and most others') read.
    Nested,
    /// `{"type": "error", "error": {"type", "message"}}`: Anthropic's.
    Typed,
    /// `{"<message>": "...", "<kind>"?: "..."}`: the message in the one
    /// member the provider's SDK reads (Ollama `error`, Cohere `message`,
    /// Voyage and Jina `detail`, TEI `error` with `error_type`).
    Flat {
        /// The member holding the message.
        message: &'static str,
        /// The member holding the error's type, if the provider has one.
        kind: Option<&'static str>,
    },
    /// `{"error": {"code": <status>, "message", "status", "details"}}`:
    /// Google's (`google.rpc.Status`).
    Google,
    /// `{"message": "..."}` with the error's code in the
    /// `x-amzn-ErrorType` header: AWS's JSON protocols' (Bedrock's), which
    /// botocore and the JS SDK read into their exception's code and message.
    Amazon,
}

/// How a provider takes its API key, as data: the header, the text before
/// the key, the headers set beside it when the client did not send them,
/// and other headers a client may carry a key for this provider in.
pub struct CredentialSpec {
    /// The header that carries the key.
    pub header: &'static str,
    /// The text before the key (`Bearer `).
    pub prefix: &'static str,
    /// Headers set beside the key when the client did not send them.
    pub defaults: &'static [(&'static str, &'static str)],
    /// Other headers a client may carry a key for this provider in.
    pub also: &'static [&'static str],
    /// The query parameter a client may carry a key in (Gemini's `key`):
    /// removed when the route injects its own, so only one key reaches the
    /// provider.
    pub query: Option<&'static str>,
    /// The headers of a client's own request signature (Bedrock's SigV4:
    /// `X-Amz-Date`...), removed with its key when the route holds the
    /// credential: the signature was not made for the upstream. Never read
    /// as a client token.
    pub signed: &'static [&'static str],
}

/// `Authorization: Bearer <key>`; Azure OpenAI's clients send `api-key`.
pub const BEARER: CredentialSpec = CredentialSpec {
    header: "authorization",
    prefix: "Bearer ",
    defaults: &[],
    also: &["api-key"],
    query: None,
    signed: &[],
};

/// Every header any dialect takes a credential in: a client's own key is
/// removed from all of them when the route injects its configured one.
pub fn credential_headers() -> &'static [HeaderName] {
    static NAMES: std::sync::LazyLock<Vec<HeaderName>> = std::sync::LazyLock::new(|| {
        let mut names: Vec<HeaderName> = Vec::new();
        for dialect in DIALECTS {
            let spec = dialect.credential();
            let named = std::iter::once(&spec.header).chain(spec.also);
            for header in named.chain(spec.signed) {
                let header = HeaderName::from_static(header);
                if !names.contains(&header) {
                    names.push(header);
                }
            }
        }
        names
    });
    &NAMES
}

/// Where any dialect takes a credential: where a client token may be
/// when no route says which.
pub fn credential_specs() -> Vec<&'static CredentialSpec> {
    DIALECTS
        .iter()
        .map(|dialect| dialect.credential())
        .collect()
}

/// One checked endpoint of a dialect: its payload check and its figures.
pub struct Endpoint {
    /// What the endpoint does, as OpenTelemetry's `gen_ai.operation.name`
    /// says it: `chat`, `embeddings`, `rerank`, `generate_content`...
    pub(crate) operation: &'static str,
    /// What the request is: whether it takes a body, and the fields
    /// judging reads, with their kinds. A request that does not fit is
    /// judged as one that is not JSON.
    pub(crate) request: &'static RequestShape,
    /// Checks the payload against what the request asked for.
    pub(crate) check: Check,
    /// What `check` holds, invariant by invariant, as a user reads it
    /// (`probity checks` prints it; the conformance fixtures keep it true).
    pub(crate) invariants: &'static [HeldInvariant],
    /// The ancillary figures in the body.
    pub(crate) figures: &'static [Figure],
    /// The relations the provider defines between them, each under the
    /// conventions it holds in (`figures::relation`).
    pub(crate) relations: &'static [Relation],
    /// The ancillary figures sent as response headers.
    pub(crate) header_figures: &'static [HeaderFigure],
    /// How a streamed answer of this endpoint is judged, event by event.
    pub(crate) stream: Option<StreamSpec>,
    /// Where the model's answers are, for output contracts.
    pub(crate) output: Option<OutputSpec>,
    /// Where the inputs and vectors are, for splitting large batches.
    pub(crate) batch: Option<BatchSpec>,
}

/// A streamed endpoint: whether a request asks for a stream, its framing,
/// and a judge made from the request.
pub(crate) struct StreamSpec {
    pub(crate) asked: fn(&Object<'_>) -> bool,
    pub(crate) framing: Framing,
    /// Whether probity may add SSE comment lines (`: probity-normalized`,
    /// `: probity-output`): an SDK that parses every line that is not
    /// `data:` as JSON (google-genai) breaks on them.
    pub(crate) comments: bool,
    pub(crate) start: fn(&Object<'_>) -> Result<Box<dyn EventCheck>, Fault>,
    /// What the events' judge holds beyond each event's own shape, as
    /// [`Endpoint::invariants`] says it of a whole answer.
    pub(crate) invariants: &'static [HeldInvariant],
    /// The judge when the request cannot be read (not JSON, or a field the
    /// judge needs is the wrong type): the events' syntax and figures, and
    /// nothing the request decides. An unreadable request never lets its
    /// answer pass unjudged.
    pub(crate) unread: fn() -> Box<dyn EventCheck>,
}

/// One payload invariant an endpoint's check holds: its code, and the
/// rule it stands for as a user reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldInvariant {
    /// The code a broken rule is reported with.
    pub invariant: Invariant,
    /// The rule, in one line of Markdown.
    pub rule: &'static str,
}

/// Declares a [`HeldInvariant`] rule.
pub(crate) const fn held(invariant: Invariant, rule: &'static str) -> HeldInvariant {
    HeldInvariant { invariant, rule }
}

/// What `invariants::ranking` holds, for a dialect whose results are in
/// `payload`'s list, limited as `count` says, documents echoed as
/// `document` says: the rules in between are every reranker's.
pub(crate) const fn ranking_held(
    payload: &'static str,
    count: &'static str,
    document: &'static str,
) -> [HeldInvariant; 7] {
    [
        held(Invariant::PayloadMissing, payload),
        held(Invariant::RerankCountExceeded, count),
        held(
            Invariant::RerankResultInvalid,
            "each result is an object with a non-negative integer `index`",
        ),
        held(
            Invariant::RerankIndexOutOfRange,
            "each `index` names a document of the request",
        ),
        held(
            Invariant::RerankIndexDuplicate,
            "no two results rank the same document",
        ),
        held(
            Invariant::RerankScoreInvalid,
            "each `relevance_score` is a finite number",
        ),
        held(Invariant::RerankDocumentInvalid, document),
    ]
}

/// What `invariants::openai_data` holds of a `data` list of embeddings,
/// with the rules that differ by provider (what counts as an input, the
/// element types, the base64 encoding, the dimension asked) given.
pub(crate) const fn data_held(
    count: &'static str,
    value: &'static str,
    base64: &'static str,
    dimension: &'static str,
) -> [HeldInvariant; 7] {
    [
        held(
            Invariant::PayloadMissing,
            "the body is an object with a `data` array",
        ),
        held(Invariant::EmbeddingCountMismatch, count),
        held(
            Invariant::EmbeddingItemInvalid,
            "each item of `data` is an object with an `embedding`",
        ),
        held(
            Invariant::EmbeddingIndexInvalid,
            "each item's `index` is an integer in `0..n`, each once",
        ),
        held(Invariant::EmbeddingValueInvalid, value),
        held(Invariant::EmbeddingBase64Invalid, base64),
        held(Invariant::EmbeddingDimensionMismatch, dimension),
    ]
}

/// What every whole answer to an inspected endpoint is held to before its
/// endpoint's own check: `inspect` parses it, the proxy decodes it.
pub const EVERY_ANSWER: &[HeldInvariant] = &[
    held(Invariant::InvalidEncoding, "a compressed body (`Content-Encoding` gzip, br or zstd) decodes (the proxy decodes it before judging)"),
    held(Invariant::InvalidJson, "the body is JSON"),
];

/// What every event of a judged stream is held to (`stream::data`).
pub const EVERY_EVENT: &[HeldInvariant] = &[held(
    Invariant::InvalidJson,
    "each event's data is a JSON object",
)];

/// What an endpoint that takes split batches holds when it stitches the
/// chunks' answers (`batch::stitch`).
pub const STITCHED: &[HeldInvariant] = &[held(
    Invariant::ChunkDimensionMismatch,
    "the chunks of a split batch answer in one shape (one dimension, one encoding), so they stitch",
)];

/// How an endpoint no table lists is reached (`Dialect::unlisted`), as
/// `(method, path)`: what the reference prints for it.
pub(crate) fn unlisted_paths(endpoint: &Endpoint) -> &'static [(&'static str, &'static str)] {
    if std::ptr::eq(endpoint, &responses::STORED) {
        responses::STORED_PATHS
    } else {
        &[]
    }
}

/// `"stream": true` asks for a stream (OpenAI, Anthropic); absent is no.
pub(crate) fn stream_true(request: &Object<'_>) -> bool {
    request.get("stream").and_then(|s| s.boolean()) == Some(true)
}

/// What a request to an inspected endpoint asked for: this, not the
/// upstream's `content-type`, decides how its answer is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// One JSON document.
    Document,
    /// A stream of events in the endpoint's framing.
    Stream,
    /// The request cannot be read, so it is not known.
    Unknown,
}

impl Endpoint {
    /// What the endpoint does, as OpenTelemetry's `gen_ai.operation.name`
    /// says it: `chat`, `embeddings`, `rerank`, `generate_content`...
    pub fn operation(&self) -> &'static str {
        self.operation
    }

    /// Every payload invariant a whole answer of this endpoint is held
    /// to: [`EVERY_ANSWER`], its check's, and [`STITCHED`] when it takes
    /// split batches.
    pub fn invariants(&self) -> Vec<HeldInvariant> {
        let stitched = if self.batch.is_some() { STITCHED } else { &[] };
        [EVERY_ANSWER, self.invariants, stitched].concat()
    }

    /// Every payload invariant a streamed answer's events are held to
    /// ([`EVERY_EVENT`] and its judge's); `None`: the endpoint does not
    /// stream.
    pub fn stream_invariants(&self) -> Option<Vec<HeldInvariant>> {
        let spec = self.stream.as_ref()?;
        Some([EVERY_EVENT, spec.invariants].concat())
    }

    /// Joins the checked answers of a batch's chunks into one answer of this
    /// endpoint, its figures summed ([`crate::batch::stitch`]).
    /// A chunk whose figures contradict each other under `convention`
    /// reports none of them to the sum.
    pub fn stitch(
        &self,
        parts: &[&batch::Part],
        convention: Convention,
    ) -> Result<batch::Stitched, Violation> {
        let spec = self.batch.as_ref().ok_or_else(|| Violation {
            invariant: Invariant::ChunkDimensionMismatch,
            message: "the endpoint does not take batches".into(),
        })?;
        let related = Related {
            relations: self.relations,
            convention,
        };
        batch::stitch(parts, spec, (self.figures, related), self.header_figures)
    }

    /// Where a large batch's inputs and vectors are, when the endpoint
    /// takes batches that may be split ([`crate::batch::split`]).
    pub fn batch(&self) -> Option<&BatchSpec> {
        self.batch.as_ref()
    }

    /// What `request_body` asks this endpoint for.
    pub fn asked(&self, request_body: &[u8]) -> Asked {
        let Some(spec) = &self.stream else {
            return Asked::Document;
        };
        match self.request.read(request_body) {
            Ok(request) if (spec.asked)(&request.object()) => Asked::Stream,
            Ok(_) => Asked::Document,
            Err(_) => Asked::Unknown,
        }
    }
}

/// Prefixes the pointers of a judgement made on a sub-object of an event
/// (Anthropic's `message_start.message`).
pub(crate) fn prefixed(mut figures_found: FigureFindings, prefix: &str) -> FigureFindings {
    for pointer in &mut figures_found.pointers {
        pointer.insert_str(0, prefix);
    }
    for running in &mut figures_found.running {
        running.pointer.insert_str(0, prefix);
    }
    figures_found
}

/// The judge of a 2xx streamed answer to `endpoint`; `Err` carries the
/// reason it cannot be judged (counted on `probity_uninspected_total`).
/// The framing is the endpoint's, whatever `content-type` the upstream
/// sent.
pub fn stream_judge(
    endpoint: &Endpoint,
    request_body: &[u8],
    contracts: &Contracts<'_>,
) -> Result<StreamJudge, &'static str> {
    let spec = endpoint.stream.as_ref().ok_or("stream_not_asked")?;
    let read = endpoint.request.read(request_body);
    let request = read
        .as_ref()
        .map(crate::request::Readable::object)
        .map_err(|reason| *reason);
    let contract = request.as_ref().ok().and_then(|request| {
        let output = endpoint.output.as_ref()?;
        Contract::of_request(output, request, contracts.config, contracts.cache)
    });
    let (check, uninspected) = match request.as_ref().map(spec.start) {
        Ok(Ok(check)) => (check, None),
        Ok(Err(Fault::Uninspectable(reason))) => ((spec.unread)(), Some(reason)),
        Ok(Err(Fault::Invalid(_))) => ((spec.unread)(), Some(crate::invariants::REQUEST_SHAPE)),
        Err(reason) => ((spec.unread)(), Some(*reason)),
    };
    let comments = spec.comments && spec.framing == Framing::Sse;
    Ok(
        StreamJudge::new(spec.framing, comments, check, contract, uninspected)
            .judging_by(contracts.convention),
    )
}

/// A parsed response body, as checks see it.
pub(crate) struct Response<'a> {
    pub(crate) root: Json<'a>,
    /// The root's members, when the root is an object (parsed once).
    pub(crate) object: Option<Object<'a>>,
}

impl<'a> Response<'a> {
    /// The root object, or the violation for a body that is not one.
    pub(crate) fn object(&self) -> Result<&Object<'a>, Fault> {
        self.object.as_ref().ok_or_else(|| {
            Fault::Invalid(Violation {
                invariant: Invariant::PayloadMissing,
                message: "the response body is not a JSON object".into(),
            })
        })
    }
}

/// A complete exchange, as inspection sees it: borrowed, never copied.
pub struct Exchange<'a> {
    /// The client's method (the dialect's table chose the endpoint by it:
    /// a POST, or a read it names).
    pub method: &'a Method,
    /// The client's request body: what the response must answer.
    pub request_body: &'a Bytes,
    /// The upstream's status: only a 2xx is inspected.
    pub status: StatusCode,
    /// The upstream's headers (header figures).
    pub response_headers: &'a HeaderMap,
    /// The upstream's whole body.
    pub response_body: &'a Bytes,
}

impl<'a> Exchange<'a> {
    /// A 200 answer to a POST, the only exchange judged whole: how an
    /// answer that did not come over a socket (a saved file, a fuzz input)
    /// is judged.
    pub fn answered(
        request_body: &'a Bytes,
        response_headers: &'a HeaderMap,
        response_body: &'a Bytes,
    ) -> Self {
        Self {
            method: &Method::POST,
            request_body,
            status: StatusCode::OK,
            response_headers,
            response_body,
        }
    }
}

/// The route's part in judging, handed to inspection: its output
/// contract, and the convention its figures are counted by.
pub struct Contracts<'a> {
    /// The route's `[routes.contract]`, if any.
    pub config: Option<&'a Arc<ContractConfig>>,
    /// Where compiled schemas are kept.
    pub cache: &'a SchemaCache,
    /// Whose relations between figures hold (`relations`).
    pub convention: Convention,
}

/// What inspection decided about a response: its verdict. What it found
/// is a [`Findings`], the one record of a check's findings that the proxy's
/// metrics, headers, captures and spans all read.
#[derive(Debug)]
pub enum Verdict {
    /// Not an endpoint this dialect checks (or not a 2xx answer to a POST):
    /// passed on as it came.
    Unchecked,
    /// The payload is sound (or could not be checked against an unreadable
    /// request): what was found, and what to send.
    Sound(Box<Sound>),
    /// The payload is corrupt: the client gets a `provider_invalid_response` error.
    Reject(Violation),
}

/// A sound payload: what judging it found, and how it is sent on.
#[derive(Debug)]
pub struct Sound {
    /// What was found: well-formed tokens, malformed figures, the output
    /// contract's findings, why the payload was not checked against its
    /// request, and which answer this is.
    pub findings: Findings,
    /// The body to send instead of the upstream's: malformed figures
    /// nulled, an invalid answer degraded. `None`: the bytes as they came.
    pub body: Option<Bytes>,
    /// The byte ranges of the upstream body that became `null`, sorted and
    /// disjoint (`body` is the upstream's with these replaced, and an
    /// invalid answer degraded).
    pub nulls: Vec<std::ops::Range<usize>>,
    /// The response headers to remove (a malformed header figure).
    pub removed_headers: Vec<&'static str>,
}

/// Which model answered and the response's id, as traces show them: the
/// id only when it is a well-formed figure (a malformed one was nulled).
#[derive(Debug, Default)]
pub struct Identity {
    /// The model that answered, as the response names it.
    pub model: Option<String>,
    /// The response's id, when well-formed.
    pub id: Option<String>,
}

impl Identity {
    /// A streamed event's model and id: at its top (OpenAI, Ollama,
    /// Gemini's `modelVersion` and `responseId`) or in Anthropic's
    /// `message_start.message`. Only non-empty strings count.
    pub(crate) fn of_event(data: &[u8]) -> Self {
        #[derive(serde::Deserialize, Default)]
        #[serde(default)]
        struct Seen<'a> {
            #[serde(borrow)]
            id: Option<&'a serde_json::value::RawValue>,
            #[serde(borrow, rename = "responseId")]
            response_id: Option<&'a serde_json::value::RawValue>,
            #[serde(borrow)]
            model: Option<&'a serde_json::value::RawValue>,
            #[serde(borrow, rename = "modelVersion")]
            model_version: Option<&'a serde_json::value::RawValue>,
            #[serde(borrow)]
            message: Option<&'a serde_json::value::RawValue>,
        }
        let text = |raw: Option<&serde_json::value::RawValue>| {
            let text: Cow<'_, str> = serde_json::from_str(raw?.get()).ok()?;
            (!text.is_empty()).then(|| text.into_owned())
        };
        let Ok(seen) = serde_json::from_slice::<Seen<'_>>(data) else {
            return Self::default();
        };
        let nested = seen
            .message
            .map(|m| Self::of_event(m.get().as_bytes()))
            .unwrap_or_default();
        Self {
            model: text(seen.model)
                .or(text(seen.model_version))
                .or(nested.model),
            id: text(seen.id).or(text(seen.response_id)).or(nested.id),
        }
    }

    fn of(object: &Object<'_>, figures: &[Figure]) -> Self {
        let text = |key: &str| {
            let value = object.get(key)?.string()?;
            (!value.is_empty()).then(|| value.into_owned())
        };
        // The id figure's own domain: a non-empty string, or it was nulled.
        let id = figures
            .iter()
            .find(|f| f.domain == figures::Domain::Id)
            .and_then(|f| f.pointer.strip_prefix('/'))
            .filter(|key| !key.contains('/'))
            .and_then(text);
        Self {
            model: text("model").or_else(|| text("modelVersion")),
            id,
        }
    }
}

/// Judges a complete response to one of a dialect's endpoints.
pub fn inspect(endpoint: &Endpoint, exchange: &Exchange<'_>, contracts: &Contracts<'_>) -> Verdict {
    inspect_scanned(endpoint, exchange, contracts, Scanner::default())
}

/// [`inspect`], with the scan of the response body made while it arrived.
pub fn inspect_scanned(
    endpoint: &Endpoint,
    exchange: &Exchange<'_>,
    contracts: &Contracts<'_>,
    scanner: Scanner,
) -> Verdict {
    inspect_keeping(endpoint, exchange, contracts, scanner).0
}

/// [`inspect_scanned`], giving the finished scan back, so that a later
/// reading of the same body (a chunk's, when it is stitched) does not
/// scan it again.
pub fn inspect_keeping(
    endpoint: &Endpoint,
    exchange: &Exchange<'_>,
    contracts: &Contracts<'_>,
    scanner: Scanner,
) -> (Verdict, Scanner) {
    if !exchange.status.is_success() {
        return (Verdict::Unchecked, scanner);
    }
    // A 2xx answer to an inspected endpoint must be JSON whatever the
    // request said; the payload checks need the request, the figures do not.
    let doc = match Document::scanned(exchange.response_body, scanner) {
        Ok(doc) => doc,
        Err(err) => {
            let violation = Violation {
                invariant: Invariant::InvalidJson,
                message: format!("the response body is not valid JSON ({err})"),
            };
            return (Verdict::Reject(violation), Scanner::default());
        }
    };
    let verdict = judge(endpoint, exchange, contracts, &doc);
    (verdict, doc.into_scanner())
}

/// The figures of a whole answer and of its headers, each alone and then
/// against each other under the route's convention.
fn answer_figures(
    endpoint: &Endpoint,
    exchange: &Exchange<'_>,
    response: &Response<'_>,
    convention: Convention,
) -> FigureFindings {
    let mut figures_found = match (&response.object, endpoint.figures.is_empty()) {
        (Some(object), false) => figures::judge(
            exchange.response_body,
            object,
            endpoint.figures,
            Related {
                relations: endpoint.relations,
                convention,
            },
        ),
        _ => FigureFindings::default(),
    };
    figures::judge_headers(
        exchange.response_headers,
        endpoint.header_figures,
        &mut figures_found,
    );
    figures_found
}

/// Judges a 2xx response whose body is the JSON document `doc`.
fn judge(
    endpoint: &Endpoint,
    exchange: &Exchange<'_>,
    contracts: &Contracts<'_>,
    doc: &Document<'_>,
) -> Verdict {
    let body = exchange.response_body;
    let response = Response {
        root: doc.root(),
        object: doc.object(),
    };
    let read = endpoint.request.read(exchange.request_body);
    let request = read
        .as_ref()
        .map(crate::request::Readable::object)
        .map_err(|reason| *reason);
    let checked = match &request {
        Err(reason) => Err(*reason),
        Ok(request) => match (endpoint.check)(request, &response) {
            Ok(()) => Ok(request),
            Err(Fault::Invalid(violation)) => return Verdict::Reject(violation),
            Err(Fault::Uninspectable(reason)) => Err(reason),
        },
    };
    let figures_found = answer_figures(endpoint, exchange, &response, contracts.convention);

    // Figures and a degraded answer are spliced in one pass.
    let mut replacements: Vec<(std::ops::Range<usize>, Cow<'static, [u8]>)> = figures_found
        .nulls
        .iter()
        .map(|range| (range.clone(), Cow::Borrowed(&b"null"[..])))
        .collect();
    let output = match (&endpoint.output, &response.object, checked) {
        (Some(spec), Some(object), Ok(request)) => contract(spec, request, object, contracts)
            .and_then(|(contract, answers, calls, cited)| {
                judge_output(
                    contract,
                    &answers,
                    (&calls, &cited),
                    body,
                    &mut replacements,
                )
            }),
        _ => None,
    };
    let body = (!replacements.is_empty()).then(|| {
        let mut borrowed: Vec<(std::ops::Range<usize>, &[u8])> = replacements
            .iter()
            .map(|(r, b)| (r.clone(), b.as_ref()))
            .collect();
        json::replace(body, &mut borrowed)
    });
    let identity = response
        .object
        .as_ref()
        .map(|object| Identity::of(object, endpoint.figures))
        .unwrap_or_default();
    let (figures, nulls, removed_headers) = Findings::of_figures(figures_found);
    let findings = Findings {
        uninspected: checked.err(),
        output,
        identity,
        ..figures
    };
    Verdict::Sound(Box::new(Sound {
        findings,
        body,
        nulls,
        removed_headers,
    }))
}

/// What the output contract found in a response's answers, tool calls and
/// cited document ids, under its task (`None`: nothing to judge); with
/// `degrade`, an invalid answer's replacement joins the splice.
fn judge_output(
    contract: Contract,
    answers: &[contract::Answer<'_>],
    (calls, cited): (&[contract::ToolCall], &[String]),
    body: &[u8],
    replacements: &mut Vec<(std::ops::Range<usize>, Cow<'static, [u8]>)>,
) -> Option<(Cow<'static, str>, OutputFindings)> {
    let verdict = contract.judge(answers, calls, cited)?;
    let degraded = contract.degrades(&verdict);
    if degraded {
        let degraded_answer = contract.degraded(&verdict);
        for answer in answers.iter().filter_map(|a| a.content) {
            let bytes = match answer.kind() {
                // Text content (or none: `null`) becomes text.
                json::Kind::String | json::Kind::Null => {
                    serde_json::to_string(&degraded_answer).unwrap_or_default()
                }
                _ => degraded_answer.clone(),
            };
            replacements.push((answer.span(body), Cow::Owned(bytes.into_bytes())));
        }
        // The parts an answer went on in are emptied: the replacement is whole.
        for more in answers.iter().flat_map(|a| &a.more) {
            replacements.push((more.span(body), Cow::Borrowed(&b"\"\""[..])));
        }
    }
    Some((contract.task, verdict))
}

/// The well-formed token figures of a body and its headers (a stitched
/// response's, whose figures are already sums of well-formed ones).
pub fn tokens(endpoint: &Endpoint, body: &[u8], headers: &HeaderMap) -> Vec<(&'static str, u64)> {
    let doc = Document::parse(body).ok();
    let mut figures_found = match doc.as_ref().and_then(Document::object) {
        // Sums of chunks' sound figures keep their relations.
        Some(object) => figures::judge(body, &object, endpoint.figures, Related::NONE),
        None => FigureFindings::default(),
    };
    figures::judge_headers(headers, endpoint.header_figures, &mut figures_found);
    figures_found.tokens
}

/// The contract in force for a request, a response's answers and tool
/// calls, and the document ids its own citations name.
type Judged<'a> = (
    Contract,
    Vec<contract::Answer<'a>>,
    Vec<contract::ToolCall>,
    Vec<String>,
);

/// The contract in force for a request, and the answers, tool calls and
/// cited document ids of its response.
fn contract<'a>(
    spec: &OutputSpec,
    request: &Object<'_>,
    response: &Object<'a>,
    contracts: &Contracts<'_>,
) -> Option<Judged<'a>> {
    let contract = Contract::of_request(spec, request, contracts.config, contracts.cache)?;
    let calls = match (&spec.tools, &contract.tools) {
        (Some(spec), Some(_)) => (spec.calls)(response),
        _ => Vec::new(),
    };
    let cited = match (&spec.citations, &contract.documents) {
        (Some(spec), Some(_)) => (spec.cited)(response),
        _ => Vec::new(),
    };
    Some((contract, (spec.answers)(request, response), calls, cited))
}

/// The hint for providers reached over the public internet.
const HOSTED_HINT: &str = "check this machine's DNS and outbound HTTPS access (egress proxy, \
                           firewall), then the provider's status page";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_maps_every_name_to_its_own_dialect() {
        let names = names();
        for (i, name) in names.iter().enumerate() {
            assert_eq!(dialect(name).map(|d| d.name()), Some(*name));
            assert!(!names[i + 1..].contains(name), "{name} twice");
        }
        assert!(dialect("gemini-x").is_none());
    }

    #[test]
    fn credentials_are_presented_in_each_providers_header() {
        let bearer = dialect("openai").unwrap().credential();
        assert_eq!((bearer.header, bearer.prefix), ("authorization", "Bearer "));
        let anthropic = dialect("anthropic").unwrap().credential();
        assert_eq!((anthropic.header, anthropic.prefix), ("x-api-key", ""));
        assert_eq!(anthropic.defaults, &[("anthropic-version", "2023-06-01")]);
        let every = credential_headers();
        for name in ["authorization", "api-key", "x-api-key"] {
            assert!(every.iter().any(|h| h == name), "{name}");
        }
    }
}

//! Google Cloud's Vertex AI: one host serves every publisher's models under
//! `…/projects/{p}/locations/{l}/publishers/{publisher}/models/{m}:{method}`,
//! and its OpenAI-compatible `…/endpoints/openapi/chat/completions`. The
//! endpoint is chosen by the publisher and the method, and judged as its
//! maker's API is where the body is the maker's: Claude's `:rawPredict`
//! and `:streamRawPredict` as Anthropic's Messages (the body carries
//! `anthropic_version: "vertex-2023-10-16"`, the model is in the path),
//! Gemini's `:generateContent` and `:streamGenerateContent` as Gemini's,
//! the OpenAI-compatible chat as OpenAI's. Only the embeddings of
//! `:predict` are Vertex's own. The credential is a Google OAuth access
//! token in `Authorization: Bearer`.

use super::{anthropic, gemini, openai};
use super::{held, CredentialSpec, Dialect, Endpoint, Field, RequestShape, Response};
use crate::figures::Figure;
use crate::invariants::{self, Fault, REQUEST_SHAPE};
use crate::json::{Kind, Object};
use crate::violation::Invariant;

pub(super) struct Vertex;

/// `:predict` on a text-embedding model: `instances: [{content, task_type?,
/// title?}]`, `parameters: {outputDimensionality?, autoTruncate?}`
/// (Vertex's `TextEmbeddingPredictionParams`).
const PREDICT_REQUEST: RequestShape = RequestShape {
    body: true,
    fields: &[
        Field::optional("instances", &[Kind::Array]),
        Field::optional("parameters", &[Kind::Object]),
    ],
};

/// `metadata.billableCharacterCount`: an integer in Google's recorded
/// answers (`"billableCharacterCount": 11`) and google-genai's
/// `EmbedContentMetadata` (`Optional[int]`). Each prediction's
/// `statistics.token_count` (a float in google-genai's
/// `ContentEmbeddingStatistics`, `4.0` in the aiplatform SDK's tests, `4`
/// on the wire) sits in a list, where no figure table reaches: it passes
/// as it came, as `statistics.truncated` (a flag, not a figure) does.
const PREDICT_FIGURES: &[Figure] = &[Figure::count("/metadata/billableCharacterCount")];

const PREDICT: Endpoint = Endpoint {
    operation: "embeddings",
    request: &PREDICT_REQUEST,
    check: predict,
    invariants: &[
        held(
            Invariant::PayloadMissing,
            "the body is an object with a `predictions` array",
        ),
        held(
            Invariant::EmbeddingCountMismatch,
            "`predictions` holds one item per instance of `instances`",
        ),
        held(
            Invariant::EmbeddingItemInvalid,
            "each prediction is an object with an `embeddings` object holding `values`",
        ),
        held(
            Invariant::EmbeddingValueInvalid,
            "every element of `values` is a finite number",
        ),
        held(
            Invariant::EmbeddingDimensionMismatch,
            "each `values` is not empty, of `parameters.outputDimensionality` when the request sets it, and all of one length",
        ),
    ],
    figures: PREDICT_FIGURES,
    relations: &[],
    header_figures: &[],
    stream: None,
    output: None,
    batch: None,
};

/// The endpoints, keyed by the path they are reached at (the reference
/// prints them; [`Vertex::endpoint`] matches them).
static PATHS: super::Endpoints = &[
    (
        "/publishers/anthropic/models/{model}:rawPredict",
        &anthropic::MESSAGES,
    ),
    (
        "/publishers/anthropic/models/{model}:streamRawPredict",
        &anthropic::MESSAGES,
    ),
    (
        "/publishers/google/models/{model}:generateContent",
        &gemini::GENERATE,
    ),
    (
        "/publishers/google/models/{model}:streamGenerateContent",
        &gemini::STREAM_GENERATE,
    ),
    ("/publishers/google/models/{model}:predict", &PREDICT),
    (OPENAPI_CHAT, &openai::CHAT),
];

/// The OpenAI-compatible chat's path (after the location).
const OPENAPI_CHAT: &str = "/endpoints/openapi/chat/completions";

/// What stands between a publisher and its method in [`PATHS`].
const MODEL: &str = "/models/{model}:";

/// The publisher and custom method of a model path:
/// `…/publishers/google/models/gemini-2.5-flash:generateContent` →
/// `("google", "generateContent")`.
fn publisher_method(path: &str) -> Option<(&str, &str)> {
    let method = gemini::method(path)?;
    let (_, rest) = path.rsplit_once("/publishers/")?;
    let (publisher, model) = rest.split_once('/')?;
    model.starts_with("models/").then_some((publisher, method))
}

impl Dialect for Vertex {
    fn name(&self) -> &'static str {
        "vertex"
    }

    fn provider(&self) -> &'static str {
        "gcp.vertex_ai"
    }

    /// A Google OAuth access token (a service account's or the metadata
    /// server's), as every Vertex client sends it.
    fn credential(&self) -> &'static CredentialSpec {
        &CredentialSpec {
            header: "authorization",
            prefix: "Bearer ",
            defaults: &[],
            also: &[],
            query: None,
            signed: &[],
        }
    }

    fn error_envelope(&self) -> super::Envelope {
        super::Envelope::Google
    }

    fn unreachable_hint(&self) -> &'static str {
        super::HOSTED_HINT
    }

    fn endpoints(&self) -> super::Endpoints {
        PATHS
    }

    /// By publisher and custom method, or the OpenAI-compatible chat's
    /// path; a `gemini` route to Vertex keeps Gemini's own matching.
    fn endpoint(&self, path: &str) -> Option<&'static Endpoint> {
        if path.ends_with(OPENAPI_CHAT) {
            return super::by_suffix(PATHS, OPENAPI_CHAT);
        }
        let (publisher, method) = publisher_method(path)?;
        PATHS
            .iter()
            .find(|(key, _)| {
                key.strip_prefix("/publishers/")
                    .and_then(|rest| rest.split_once(MODEL))
                    .is_some_and(|(p, m)| p == publisher && m == method)
            })
            .map(|(_, endpoint)| *endpoint)
    }
}

/// `parameters.outputDimensionality`, when the request sets it.
fn output_dimensionality(request: &Object<'_>) -> Result<Option<usize>, Fault> {
    match request.present("parameters") {
        None => Ok(None),
        Some(parameters) => {
            let parameters = parameters
                .object()
                .ok_or(Fault::Uninspectable(REQUEST_SHAPE))?;
            invariants::optional_count(&parameters, "outputDimensionality")
        }
    }
}

/// `predictions` holds one `{embeddings: {values, statistics}}` per
/// instance, in order: each vector finite, not empty, of the asked
/// dimension, and all of one length.
fn predict(request: &Object<'_>, response: &Response<'_>) -> Result<(), Fault> {
    let instances = invariants::count_array(request, "instances")?;
    let requested = output_dimensionality(request)?;
    let predictions = response
        .object()?
        .present("predictions")
        .and_then(|p| p.objects())
        .ok_or_else(|| {
            invariants::violation(
                Invariant::PayloadMissing,
                "the response has no `predictions` array".into(),
            )
        })?;
    invariants::count_matches(predictions.len(), instances)?;
    let mut first: Option<usize> = None;
    for (i, prediction) in predictions.iter().enumerate() {
        let values = prediction
            .as_ref()
            .and_then(|p| p.present("embeddings")?.object())
            .and_then(|e| e.present("values"))
            .ok_or_else(|| {
                invariants::violation(
                    Invariant::EmbeddingItemInvalid,
                    format!("predictions[{i}] has no `embeddings.values`"),
                )
            })?;
        let label = format!("predictions[{i}].embeddings.values");
        let dim = gemini::vector(values, requested, &label)?;
        match first {
            Some(first) if first != dim => {
                return Err(invariants::violation(
                    Invariant::EmbeddingDimensionMismatch,
                    format!("{label} has {dim} dimensions, predictions[0] has {first}"),
                )
                .into())
            }
            _ => first = Some(dim),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_publisher_and_method_choose_the_endpoint() {
        let base = "/v1/projects/p/locations/us-east5";
        let found = |path: &str| Vertex.endpoint(&format!("{base}{path}"));
        // The endpoint a path reaches is the one `PATHS` lists under `key`.
        let reaches = |path: &str, key: &str| {
            let listed = PATHS.iter().find(|(k, _)| *k == key).map(|(_, e)| *e);
            matches!((found(path), listed), (Some(a), Some(b)) if std::ptr::eq(a, b))
        };
        let claude = "/publishers/anthropic/models/claude-sonnet-4@20250514";
        let anthropic = "/publishers/anthropic/models/{model}";
        assert!(reaches(
            &format!("{claude}:rawPredict"),
            &format!("{anthropic}:rawPredict")
        ));
        assert!(reaches(
            &format!("{claude}%3AstreamRawPredict"),
            &format!("{anthropic}:streamRawPredict")
        ));
        let gemini = "/publishers/google/models/gemini-2.5-flash";
        let google = "/publishers/google/models/{model}";
        for method in ["generateContent", "streamGenerateContent"] {
            assert!(reaches(
                &format!("{gemini}:{method}"),
                &format!("{google}:{method}")
            ));
        }
        assert!(reaches(
            "/publishers/google/models/text-embedding-005:predict",
            &format!("{google}:predict")
        ));
        assert!(reaches(OPENAPI_CHAT, OPENAPI_CHAT));
        assert!(found(&format!("{claude}:countTokens")).is_none());
        assert!(found(&format!("{gemini}:rawPredict")).is_none());
        assert!(found("/publishers/meta/models/llama:predict").is_none());
        assert!(found("/models/gemini-2.5-flash:generateContent").is_none());
        // A `gemini` route to Vertex keeps Gemini's matching by method.
        let gemini_route = gemini::Gemini.endpoint(&format!("{base}{gemini}:generateContent"));
        assert_eq!(
            gemini_route.map(Endpoint::operation),
            Some("generate_content")
        );
        let claude_on_gemini = gemini::Gemini.endpoint(&format!("{base}{claude}:rawPredict"));
        assert!(claude_on_gemini.is_none());
    }
}

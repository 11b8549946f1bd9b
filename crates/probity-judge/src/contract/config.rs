//! `[routes.contract]`: the settings of an output contract, and the check
//! of their values (every problem, by its key under the table). With the
//! `schema` feature they also describe themselves (`JsonSchema`, and
//! `Serialize` so that the schema carries each default), for the proxy's
//! configuration reference.

use serde::Deserialize;

/// The degraded answer when a route configures none.
pub const DEFAULT_DEGRADED: &str =
    r#"{"answer": "", "sufficient": false, "citations": [], "uncertainty": ["{reason}"]}"#;

/// `[routes.contract]`: an output contract, what a usable answer is beyond
/// its JSON Schema.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "schema", derive(serde::Serialize, schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct ContractConfig {
    /// The `task` label on `probity_model_invalid_output_total`.
    pub task: String,
    /// `annotate` (default) or `degrade`.
    pub on_invalid: OnInvalid,
    /// JSON pointers of the answer's free-text fields.
    pub prose: Vec<String>,
    /// Prose shorter than this (trimmed, in characters) carries no meaning.
    pub min_chars: usize,
    /// Prose longer than this is `too_long`.
    pub max_chars: usize,
    /// Added to the built-in placeholders.
    pub placeholders: Vec<String>,
    /// The answer that replaces an invalid one with `on_invalid = "degrade"`;
    /// `{reason}` becomes the reason sentence.
    pub degraded: String,
    /// `[routes.contract.citations]`.
    pub citations: Option<CitationsConfig>,
}

impl Default for ContractConfig {
    fn default() -> Self {
        Self {
            task: "answer".into(),
            on_invalid: OnInvalid::Annotate,
            prose: Vec::new(),
            min_chars: 1,
            max_chars: 100_000,
            placeholders: Vec::new(),
            degraded: DEFAULT_DEGRADED.into(),
            citations: None,
        }
    }
}

/// What happens to an invalid answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[cfg_attr(feature = "schema", derive(serde::Serialize, schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum OnInvalid {
    /// The body is unchanged; the headers say it is invalid.
    #[default]
    Annotate,
    /// The answer is replaced by the degraded one.
    Degrade,
}

/// `[routes.contract.citations]`: the sources an answer cites must be the
/// ones the request supplied.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "schema", derive(serde::Serialize, schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CitationsConfig {
    /// The JSON pointer of the array of cited source ids in the answer.
    pub output: String,
    /// The JSON pointer of the array of `{id, text}` sources in the
    /// request's prompt document.
    pub sources: String,
    /// An answer that cites nothing is invalid.
    #[serde(default)]
    pub required: bool,
    /// The JSON pointer of the array of strings the answer claims to quote.
    #[serde(default)]
    pub quotes: Option<String>,
}

impl ContractConfig {
    /// The problems of a route's `[routes.contract]`, by key under it.
    pub fn validate(&self, problem: &mut impl FnMut(&str, String)) {
        let contract = self;
        let label = !contract.task.is_empty()
            && contract.task.len() <= 64
            && contract
                .task
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
        if !label {
            problem(
                "task",
                "must be 1 to 64 characters of A-Z, a-z, 0-9, '_', '-', '.' (a metric label)"
                    .into(),
            );
        }
        let pointers = contract
            .prose
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("prose[{i}]"), p));
        let citations = contract.citations.iter().flat_map(|c| {
            [
                ("citations.output".to_string(), &c.output),
                ("citations.sources".to_string(), &c.sources),
            ]
            .into_iter()
            .chain(c.quotes.iter().map(|q| ("citations.quotes".to_string(), q)))
        });
        for (key, pointer) in pointers.chain(citations) {
            if !pointer.starts_with('/') {
                problem(
                    &key,
                    format!("\"{pointer}\" is not a JSON pointer (it starts with '/')"),
                );
            }
        }
        if contract.min_chars > contract.max_chars {
            problem("min_chars", "must not exceed max_chars".into());
        }
        let filled = contract.degraded.replace("{reason}", "reason");
        if serde_json::from_str::<serde_json::Value>(&filled).is_err() {
            problem(
                "degraded",
                "must be JSON (with {reason} inside a string)".into(),
            );
        }
    }
}

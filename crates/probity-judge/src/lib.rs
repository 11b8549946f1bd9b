//! probity's judging core: a model provider's response in, what it found
//! and what the client should receive out. No I/O, no runtime, no clock
//! (as rustls's core): the probity proxy drives it as bytes arrive,
//! `probity inspect` over a saved body, the fuzz targets over their inputs,
//! and an app that calls a provider itself can judge the answer in-process.
//!
//! # What a verdict says
//!
//! [`inspect::inspect`] gives a [`inspect::Verdict`]: unchecked, sound, or
//! rejected; what a check found is an [`inspect::Findings`], the one record
//! the proxy's metrics, headers, captures and spans read.
//!
//! - A broken **payload invariant** (one vector short, a rerank index out of
//!   range, an event stream that cannot be read) is a [`Violation`]: the
//!   answer is unusable, and a proxy fails the call (`provider_invalid_response`).
//! - A malformed **ancillary figure** (a token count of `"abc"`, a negative
//!   one) is not reported: its bytes become `null` and every other byte
//!   stays as it came. Only well-formed counts are ever given back.
//! - An answer that breaks its **output contract** (a schema, prose, its
//!   citations) is usable but degraded: its findings say why, with typed
//!   [`contract::Reason`]s.
//!
//! # The layers, bottom up
//!
//! - [`json`]: a one-pass scanner (fed as the body arrives, if need be)
//!   and borrowed views that know their exact bytes.
//! - [`figures`] and [`invariants`]: the two kinds of check, as tables.
//! - [`contract`]: output contracts (JSON Schema, prose, citations, tools).
//! - [`batch`]: a large embeddings batch split into chunks, and their
//!   answers stitched into one.
//! - [`inspect`]: the providers' dialects (one file each) that say, per
//!   endpoint, which checks apply; [`inspect::inspect`] judges a whole
//!   answer, [`inspect::StreamJudge`] a streamed one event by event, and
//!   [`inspect::stream`] is the framing (SSE, NDJSON, AWS event stream) both
//!   read.
//! - [`outcome::Outcome`]: the one ranking of what an exchange came to.
//!
//! # Judging an answer in-process
//!
//! An app that called OpenAI's embeddings endpoint itself (with
//! `async-openai`, say) judges the bytes it got:
//!
//! ```
//! use bytes::Bytes;
//! use http::HeaderMap;
//! use probity_judge::contract::SchemaCache;
//! use probity_judge::inspect::{self, Contracts, Exchange, Verdict};
//!
//! let endpoint = inspect::dialect("openai")
//!     .and_then(|openai| openai.endpoint("/v1/embeddings"))
//!     .expect("openai judges its embeddings endpoint");
//! let cache = SchemaCache::new(16);
//! let contracts = Contracts { config: None, cache: &cache, convention: Default::default() };
//! let headers = HeaderMap::new();
//! let request = Bytes::from_static(br#"{"model": "text-embedding-3-small", "input": ["a", "b"]}"#);
//!
//! // Two inputs, one vector: the result is corrupt.
//! let short = Bytes::from_static(
//!     br#"{"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
//!         "model": "text-embedding-3-small", "usage": {"prompt_tokens": 2, "total_tokens": 2}}"#,
//! );
//! let verdict = inspect::inspect(endpoint, &Exchange::answered(&request, &headers, &short), &contracts);
//! let Verdict::Reject(violation) = verdict else { panic!("{verdict:?}") };
//! assert_eq!(violation.invariant, "embedding_count_mismatch");
//!
//! // Two vectors, a token count of "abc": sound, the count not reported.
//! let sound = Bytes::from_static(
//!     br#"{"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]},
//!         {"object": "embedding", "index": 1, "embedding": [0.3, 0.4]}],
//!         "model": "text-embedding-3-small", "usage": {"prompt_tokens": "abc", "total_tokens": 2}}"#,
//! );
//! let verdict = inspect::inspect(endpoint, &Exchange::answered(&request, &headers, &sound), &contracts);
//! let Verdict::Sound(sound) = verdict else { panic!("{verdict:?}") };
//! assert_eq!(sound.findings.pointers, ["/usage/prompt_tokens"]);
//! assert_eq!(sound.findings.tokens, [("total", 2)]);
//! let body = sound.body.expect("the malformed figure is nulled");
//! assert!(std::str::from_utf8(&body)?.contains(r#""prompt_tokens": null"#));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A stream is judged as it arrives: [`inspect::stream_judge`] makes the
//! judge from the request, [`inspect::StreamJudge::feed`] takes each piece
//! and gives back what goes on (sound events as the same bytes), and
//! [`inspect::StreamJudge::end`] judges what is left.

pub mod batch;
pub mod contract;
pub mod figures;
pub mod inspect;
pub mod invariants;
pub mod json;
pub mod outcome;
pub mod reference;
pub(crate) mod request;
pub mod violation;

pub use violation::Violation;

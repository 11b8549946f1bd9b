//! probity's integration tests, one module per concern, in one binary.
//!
//! Each module drives the built `probity` binary over real sockets on
//! 127.0.0.1 (through the harness in [`support`]), or reads the source,
//! the fixtures and the deployment files. They are one test binary rather
//! than one per file so that the harness and the dependencies are compiled
//! and linked once: with a binary per file, every file compiled `support`
//! again and linked every dependency into a binary of its own (the 7 GB
//! target that once filled a CI machine's disk). A test is named by its
//! module: `cargo test --test it admission::` runs one file's tests.
//!
//! The tests share one process, so none may change what the process holds
//! for all (environment, current directory, umask): each gives the
//! `probity` it starts its own environment, and files go under
//! [`support::temp_path`]'s unique names.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    unreachable_pub,
    reason = "tests fail loudly: the request path's lints do not apply; the harness's `pub` items serve the test modules"
)]

mod support;

mod admin_access;
mod admin_layers;
mod admin_page;
mod admission;
mod architecture;
mod bedrock_invoke;
mod captures;
mod captures_buckets;
mod chunking;
mod clients;
mod compression;
mod conformance;
mod contract_conformance;
mod contracts;
mod dashboard;
mod deploy;
mod egress;
mod errors;
mod faults;
mod forwarding;
mod fuzz_corpus;
mod fuzz_findings;
mod generation_conformance;
mod google_credentials;
mod hardening;
mod inspection;
mod lifecycle;
mod logs;
mod manual;
mod overhead;
mod passthrough;
mod property;
mod realtime;
mod reference_checks;
mod reference_config;
mod reload;
mod responses;
mod saved_answers;
mod sdk_tools;
mod sdks;
mod slowloris;
mod streams;
mod three_paths;
mod tool_conformance;
mod traces;

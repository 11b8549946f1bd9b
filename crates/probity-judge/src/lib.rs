//! probity's judging core: a model provider's response in, what it found
//! and what the client receives out. No I/O, no runtime: the proxy drives
//! it as bytes arrive, `probity inspect` over a saved body, and an app that
//! calls a provider itself can judge the answer in-process.

pub mod batch;
pub mod contract;
pub mod figures;
pub mod inspect;
pub mod invariants;
pub mod json;
pub mod outcome;
pub mod violation;

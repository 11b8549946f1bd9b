//! probity: a reverse proxy in front of model providers that checks every
//! response it passes on.
//!
//! A request flows `server` → `route` → `forward`; its answer is judged by
//! the core crate `probity_judge` (the dialects, `invariants` for the
//! payload, `figures` for the ancillary figures, `contract` for the model's
//! output) and goes back through `server`. One `context::RequestContext`
//! carries the request from arrival to its log line. `capture` keeps what
//! was rewritten or rejected, `config` is read at start (and on reload),
//! `admin` serves metrics, health and captures on its own port, `error`
//! maps every fault to one HTTP error shape, `telemetry` counts and logs,
//! `trace` exports spans; `opening` tells what a client connection speaks,
//! for both listeners.

pub(crate) mod admin;
pub(crate) mod capture;
pub mod cli;
pub mod config;
pub(crate) mod connector;
pub(crate) mod context;
pub(crate) mod error;
pub mod forward;
pub mod logs;
pub(crate) mod opening;
pub(crate) mod request_id;
pub mod route;
pub mod saved_answer;
pub mod server;
pub mod telemetry;
pub(crate) mod trace;

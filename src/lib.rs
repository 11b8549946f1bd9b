//! probity: a reverse proxy in front of model providers that checks every
//! response it passes on.
//!
//! A request flows `server` → `route` → `forward`; its response flows back
//! through `inspect` (per provider dialect, using `invariants` for the
//! payload and `figures` for the ancillary figures) → `server`. `capture`
//! keeps what was rewritten or rejected, `config` is read once at start,
//! `admin` serves metrics, health and captures on its own port, `error` maps
//! every fault to one HTTP error shape, `telemetry` logs and counts.

pub(crate) mod admin;
pub(crate) mod capture;
pub mod cli;
pub mod config;
pub(crate) mod connector;
pub(crate) mod error;
pub mod forward;
pub mod logs;
pub(crate) mod request_id;
pub mod route;
pub mod saved_answer;
pub mod server;
pub mod telemetry;
pub(crate) mod trace;

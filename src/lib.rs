//! probity: a reverse proxy in front of model providers that checks every
//! response it passes on.
//!
//! A request flows `server` → `route` → `forward`; its response flows back
//! through `inspect` (per provider dialect) → `server`. `config` is read once
//! at start, `admin` serves metrics and health on its own port, `error` maps
//! every fault to one HTTP error shape, `telemetry` logs and counts.

pub mod admin;
pub mod cli;
pub mod config;
pub mod error;
pub mod forward;
pub mod inspect;
pub mod route;
pub mod server;
pub mod telemetry;

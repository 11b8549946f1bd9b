//! The command line: argument structs only; `main` does the wiring.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// A reverse proxy in front of model providers that checks every response it
/// passes on.
#[derive(Debug, Parser)]
#[command(name = "probity", version, about)]
pub struct Cli {
    /// The configuration file; without it, the default compiled into the
    /// binary (config/probity.toml) is used.
    #[arg(long, env = "PROBITY_CONFIG", global = true)]
    pub config: Option<PathBuf>,

    /// Overrides `server.listen` (the proxy's `ip:port`), e.g. in a
    /// container: `0.0.0.0:8080`.
    #[arg(long, env = "PROBITY_LISTEN")]
    pub listen: Option<String>,

    /// Overrides `server.admin_listen` (metrics, health, captures).
    #[arg(long, env = "PROBITY_ADMIN_LISTEN")]
    pub admin_listen: Option<String>,

    /// What to do instead of serving.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validates a configuration file, prints every problem with its key
    /// path, and exits non-zero when there is one.
    CheckConfig {
        /// The file to check.
        path: PathBuf,
    },
    /// Prints the effective routes of the configuration in use (`--config`,
    /// or the embedded default): prefix, upstream, dialect, limits, and
    /// whether a provider key is injected.
    Routes,
    /// The configuration itself.
    Config {
        /// What to do with it.
        #[command(subcommand)]
        what: ConfigCommand,
    },
}

/// `probity config …`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Prints the embedded default configuration (config/probity.toml), to
    /// start a file from: `probity config default > probity.toml`.
    Default,
}

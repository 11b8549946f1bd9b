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
    /// Judges a saved response (a JSON document, or an SSE or NDJSON
    /// stream) offline, exactly as a route would: prints what the client
    /// would receive, and the verdict on stderr (or as JSON with --json).
    /// Exits 0 when it passed or was normalized, 1 when rejected, 2 on a
    /// usage error.
    Inspect {
        /// The route whose dialect judges it (`probity routes` lists them).
        #[arg(long)]
        route: String,
        /// The path after the route prefix, e.g. `/v1/embeddings`.
        #[arg(long)]
        path: String,
        /// The request it answers (its `input`, `stream`, `n`...); without
        /// it, `{}`.
        #[arg(long)]
        request: Option<PathBuf>,
        /// Print the verdict as one JSON object on stderr.
        #[arg(long)]
        json: bool,
        /// The saved response; `-` or nothing reads standard input.
        file: Option<PathBuf>,
    },
    /// Asks the admin listener of the configuration in use for `/healthz`:
    /// exit 0 when it answers 200 (a container's HEALTHCHECK, in an image
    /// with no curl).
    Healthcheck,
    /// Prints what the judging core checks, from its own tables: every
    /// dialect's endpoints, payload invariants, figures, kept records,
    /// relations and the output-contract reasons, as Markdown (the index,
    /// or one dialect's page) or JSON (docs/src/reference/checks* is its
    /// output).
    Checks {
        /// Print JSON instead of Markdown.
        #[arg(long)]
        json: bool,
        /// Only this dialect (`probity checks` lists them).
        #[arg(long)]
        dialect: Option<String>,
        /// Write DIR/checks.md, DIR/checks/<dialect>.md for every dialect
        /// and DIR/checks.json instead of printing.
        #[arg(long, value_name = "DIR")]
        write: Option<PathBuf>,
    },
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
    /// Prints the configuration reference (Markdown): every table and key,
    /// its type, default and what it does, from the configuration's own
    /// definitions (docs/src/reference/config.md is its output).
    Reference,
    /// Prints the configuration's JSON Schema, for an editor to validate and
    /// complete a TOML file with (docs/src/reference/probity.schema.json).
    Schema,
}

//! The `probity` binary: wiring only. Parse the command line, load and
//! validate the configuration (refusing to start on any problem), set up logs
//! and metrics, bind, serve until SIGTERM or SIGINT, drain, exit.

use std::process::ExitCode;

use clap::Parser;
use probity::cli::{Cli, Command};
use probity::config::{self, Config, Problems};
use probity::inspect;
use probity::route::RouteTable;
use probity::server::Probity;
use probity::telemetry;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logs();
    match cli.command {
        Some(Command::CheckConfig { path }) => check_config(&path),
        None => run(&cli),
    }
}

fn check_config(path: &std::path::Path) -> ExitCode {
    let checked = config::load_file(path, &inspect::names()).and_then(|config| {
        RouteTable::build(&config, |var| std::env::var(var).ok()).map(|_| config)
    });
    match checked {
        Ok(config) => {
            println!("{}: ok ({} routes)", path.display(), config.routes.len());
            ExitCode::SUCCESS
        }
        Err(problems) => report(&path.display().to_string(), &problems),
    }
}

fn report(source: &str, problems: &Problems) -> ExitCode {
    eprintln!("{source}: {} problem(s)", problems.0.len());
    for problem in &problems.0 {
        eprintln!("  {problem}");
    }
    ExitCode::FAILURE
}

fn run(cli: &Cli) -> ExitCode {
    let (source, loaded) = match cli.config.as_deref() {
        Some(path) => (
            path.display().to_string(),
            config::load_file(path, &inspect::names()),
        ),
        None => (
            "embedded default configuration".to_string(),
            config::load(config::DEFAULT_TOML, &inspect::names()),
        ),
    };
    let mut config: Config = match loaded {
        Ok(config) => config,
        Err(problems) => return report(&source, &problems),
    };
    // The command line's listeners win; a bad one fails to bind, with its key.
    if let Some(listen) = &cli.listen {
        config.server.listen = listen.clone();
    }
    if let Some(admin) = &cli.admin_listen {
        config.server.admin_listen = admin.clone();
    }
    let routes = match RouteTable::build(&config, |var| std::env::var(var).ok()) {
        Ok(routes) => routes,
        Err(problems) => return report(&source, &problems),
    };

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let metrics = match telemetry::install() {
            Ok(metrics) => metrics,
            Err(err) => {
                eprintln!("cannot install the metrics recorder: {err}");
                return ExitCode::FAILURE;
            }
        };
        let probity = match Probity::bind(&config, routes, metrics).await {
            Ok(probity) => probity,
            Err(err) => {
                eprintln!("{err}");
                return ExitCode::FAILURE;
            }
        };
        if let (Ok(proxy), Ok(admin)) = (probity.proxy_addr(), probity.admin_addr()) {
            tracing::info!(
                proxy = %proxy,
                admin = %admin,
                config = %source,
                routes = config.routes.len(),
                "probity listening"
            );
        }
        probity.serve(shutdown_signal()).await;
        tracing::info!("stopped");
        ExitCode::SUCCESS
    })
}

/// Resolves on the first SIGTERM or SIGINT.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = interrupt => {},
                    _ = terminate.recv() => {},
                }
            }
            Err(_) => {
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
    tracing::info!("shutdown signal received");
}

/// Logs go to stdout: text by default, JSON with `PROBITY_LOG_FORMAT=json`;
/// the level comes from `RUST_LOG` (default `info`).
fn init_logs() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if std::env::var("PROBITY_LOG_FORMAT").is_ok_and(|f| f == "json") {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init();
    } else {
        builder.init();
    }
}

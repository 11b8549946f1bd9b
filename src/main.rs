//! The `probity` binary: wiring only. Parse the command line, load and
//! validate the configuration (refusing to start on any problem), set up logs
//! and metrics, bind, serve until SIGTERM or SIGINT, drain, exit.

use std::process::ExitCode;

use clap::Parser;
use probity::cli::{Cli, Command, ConfigCommand};
use probity::config::{self, Config, Problems};
use probity::route::RouteTable;
use probity::server::Probity;
use probity::telemetry;
use probity_judge::inspect;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `inspect` prints the judged body on stdout, `checks` the reference:
    // no log lines there.
    if !matches!(
        cli.command,
        Some(Command::Inspect { .. } | Command::Checks { .. })
    ) {
        probity::logs::init();
    }
    match &cli.command {
        Some(Command::CheckConfig { path }) => check_config(path),
        Some(Command::Inspect {
            route,
            path,
            request,
            json,
            file,
        }) => inspect_offline(
            &cli,
            route,
            path,
            request.as_deref(),
            *json,
            file.as_deref(),
        ),
        Some(Command::Routes) => routes(&cli),
        Some(Command::Healthcheck) => healthcheck(&cli),
        Some(Command::Checks {
            json,
            dialect,
            write,
        }) => checks(*json, dialect.as_deref(), write.as_deref()),
        Some(Command::Config {
            what: ConfigCommand::Default,
        }) => {
            print!("{}", config::DEFAULT_TOML);
            ExitCode::SUCCESS
        }
        Some(Command::Config {
            what: ConfigCommand::Reference,
        }) => match config::reference::markdown() {
            Ok(page) => {
                print!("{page}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("probity: the configuration reference: {err}");
                ExitCode::FAILURE
            }
        },
        Some(Command::Config {
            what: ConfigCommand::Schema,
        }) => {
            println!("{:#}", config::reference::schema());
            ExitCode::SUCCESS
        }
        None => run(&cli),
    }
}

/// `probity checks`: the reference of what the judging core checks,
/// printed, or written as the manual's reference pages.
fn checks(json: bool, dialect: Option<&str>, write: Option<&std::path::Path>) -> ExitCode {
    use probity_judge::reference;
    if let Some(dir) = write {
        return match write_checks(dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("probity: writing the reference to {}: {err}", dir.display());
                ExitCode::FAILURE
            }
        };
    }
    let page = match (json, dialect) {
        (true, None) => Some(format!("{:#}\n", reference::json())),
        (true, Some(name)) => reference::dialect_json(name).map(|d| format!("{d:#}\n")),
        (false, None) => Some(reference::index()),
        (false, Some(name)) => reference::markdown(name),
    };
    match page {
        Some(page) => {
            // A closed pipe (`| head`) is the reader's choice, not a failure.
            let _ = std::io::Write::write_all(&mut std::io::stdout(), page.as_bytes());
            ExitCode::SUCCESS
        }
        None => {
            let names = inspect::names().join(", ");
            eprintln!(
                "probity: no dialect {:?} (one of {names})",
                dialect.unwrap_or("")
            );
            ExitCode::from(2)
        }
    }
}

/// `DIR/checks.md`, `DIR/checks/<dialect>.md` and `DIR/checks.json`.
fn write_checks(dir: &std::path::Path) -> std::io::Result<()> {
    use probity_judge::reference;
    let pages = dir.join("checks");
    std::fs::create_dir_all(&pages)?;
    std::fs::write(dir.join("checks.md"), reference::index())?;
    std::fs::write(
        dir.join("checks.json"),
        format!("{:#}\n", reference::json()),
    )?;
    for name in inspect::names() {
        let page = reference::markdown(name).unwrap_or_default();
        std::fs::write(pages.join(format!("{name}.md")), page)?;
    }
    Ok(())
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

/// The configuration in use: `--config`, or the embedded default; its
/// problems are reported and end the process.
fn loaded(cli: &Cli) -> Result<Config, ExitCode> {
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
    loaded.map_err(|problems| report(&source, &problems))
}

/// `probity routes`: one line per route, longest prefix first (the order
/// they are matched in).
fn routes(cli: &Cli) -> ExitCode {
    let config = match loaded(cli) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let mut routes: Vec<&config::RouteConfig> = config.routes.iter().collect();
    routes.sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
    println!(
        "{:<12} {:<12} {:<12} {:<44} {:>10} {:>10} {:>12}  key",
        "name", "prefix", "dialect", "upstream", "timeout_ms", "idle_ms", "max_resp_b"
    );
    for route in routes {
        let key = key_of(route);
        println!(
            "{:<12} {:<12} {:<12} {:<44} {:>10} {:>10} {:>12}  {key}",
            route.name,
            route.prefix,
            route.dialect.as_deref().unwrap_or("-"),
            route.upstream,
            route.timeout_ms,
            route.idle_timeout_ms,
            route.max_response_bytes,
        );
    }
    ExitCode::SUCCESS
}

/// What `probity routes` says of a route's credential: the key it
/// injects, the signature or token it makes, or the client's own.
fn key_of(route: &config::RouteConfig) -> String {
    if let Some(region) = &route.aws_region {
        return format!("SigV4-signed for {region}");
    }
    if let Some(source) = &route.google_credentials {
        return match source.as_str() {
            "metadata" => "Google token from the metadata server".to_string(),
            path => format!("Google token from {path}"),
        };
    }
    match &route.api_key_env {
        Some(var) if std::env::var_os(var).is_some_and(|v| !v.is_empty()) => {
            format!("injected from {var}")
        }
        Some(var) => format!("{var} unset: the client's own"),
        None => "the client's own".to_string(),
    }
}

/// `probity inspect`: the verdict on a saved response, exit 0 (passed,
/// normalized, unchecked), 1 (rejected) or 2 (usage).
fn inspect_offline(
    cli: &Cli,
    route: &str,
    path: &str,
    request: Option<&std::path::Path>,
    json: bool,
    file: Option<&std::path::Path>,
) -> ExitCode {
    let usage = |message: String| {
        eprintln!("probity inspect: {message}");
        ExitCode::from(2)
    };
    let config = match loaded(cli) {
        Ok(config) => config,
        Err(_) => return ExitCode::from(2),
    };
    let routes = match RouteTable::build(&config, |_| None) {
        Ok(routes) => routes,
        Err(problems) => return usage(problems.to_string()),
    };
    let request = match request {
        Some(path) => match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(err) => return usage(format!("cannot read {}: {err}", path.display())),
        },
        None => b"{}".to_vec(),
    };
    let response = match file.filter(|f| f.as_os_str() != "-") {
        Some(path) => std::fs::read(path).map_err(|err| format!("{}: {err}", path.display())),
        None => {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
                .map(|_| bytes)
                .map_err(|err| format!("standard input: {err}"))
        }
    };
    let response = match response {
        Ok(bytes) => bytes,
        Err(err) => return usage(format!("cannot read the response: {err}")),
    };
    // A saved document is judged as one, as the proxy does a JSON-typed
    // answer: by the file's extension, else by whether it is one JSON value.
    let document = match file.and_then(|f| f.extension()).and_then(|e| e.to_str()) {
        Some("json") => true,
        Some("sse" | "ndjson" | "jsonl") => false,
        _ => serde_json::from_slice::<serde::de::IgnoredAny>(&response).is_ok(),
    };
    let judged =
        match probity::saved_answer::judge(&routes, route, path, &request, &response, document) {
            Ok(judged) => judged,
            Err(err) => return usage(err.to_string()),
        };
    use std::io::Write;
    let _ = std::io::stdout().write_all(&judged.body);
    eprintln!("{}", verdict(&judged, json));
    if judged.outcome == "rejected" {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The verdict line of `probity inspect`: JSON, or `<outcome>[ <invariant>]
/// [ <pointers>][ contradicting: <relations>][ output invalid: <reasons>]`.
fn verdict(judged: &probity::saved_answer::Report, json: bool) -> String {
    if json {
        return serde_json::to_string(judged).unwrap_or_default();
    }
    let mut line = judged.outcome.to_string();
    if let Some(invariant) = judged.invariant {
        line.push_str(&format!(" {invariant}"));
    }
    if !judged.pointers.is_empty() {
        line.push_str(&format!(" {}", judged.pointers.join(",")));
    }
    if !judged.contradicted.is_empty() {
        line.push_str(&format!(
            " contradicting: {}",
            judged.contradicted.join(",")
        ));
    }
    if !judged.output_reasons.is_empty() {
        line.push_str(&format!(
            " output invalid: {}",
            judged
                .output_reasons
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    line
}

/// `probity healthcheck`: GET /healthz on the admin listener of the
/// configuration in use (an unspecified address is asked on loopback).
fn healthcheck(cli: &Cli) -> ExitCode {
    use std::io::{Read, Write};
    let config = match loaded(cli) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let admin = cli
        .admin_listen
        .as_ref()
        .unwrap_or(&config.server.admin_listen);
    let Ok(mut addr) = admin.parse::<std::net::SocketAddr>() else {
        eprintln!("server.admin_listen {admin} is not an ip:port");
        return ExitCode::FAILURE;
    };
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let timeout = std::time::Duration::from_secs(2);
    let answer = std::net::TcpStream::connect_timeout(&addr, timeout).and_then(|mut stream| {
        stream.set_read_timeout(Some(timeout))?;
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: probity\r\nConnection: close\r\n\r\n")?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer)
    });
    match answer {
        Ok(answer) if answer.starts_with("HTTP/1.1 200") => ExitCode::SUCCESS,
        Ok(answer) => {
            eprintln!(
                "{addr}/healthz: {}",
                answer.lines().next().unwrap_or_default()
            );
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("{addr}/healthz: {err}");
            ExitCode::FAILURE
        }
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
    let source = cli.config.as_deref().map_or_else(
        || "embedded default configuration".to_string(),
        |path| path.display().to_string(),
    );
    let mut config = match loaded(cli) {
        Ok(config) => config,
        Err(code) => return code,
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
        let probity = match Probity::bind(&config, routes, metrics, reread(cli)).await {
            Ok(probity) => probity,
            Err(err) => {
                eprintln!("{err}");
                return ExitCode::FAILURE;
            }
        };
        // Before anyone is told where probity listens: a signal from then on
        // is a graceful stop, never the default kill.
        let shutdown = shutdown_signal();
        if let (Ok(proxy), Ok(admin)) = (probity.proxy_addr(), probity.admin_addr()) {
            tracing::info!(
                proxy = %proxy,
                admin = %admin,
                config = %source,
                routes = %route_list(&config),
                "probity listening"
            );
        }
        probity.serve(shutdown).await;
        tracing::info!("stopped");
        ExitCode::SUCCESS
    })
}

/// Each route as `prefix -> upstream (dialect)`, for the start-up line:
/// what a reader checks first when a call goes somewhere unexpected.
fn route_list(config: &Config) -> String {
    config
        .routes
        .iter()
        .map(|r| {
            let dialect = r.dialect.as_deref().unwrap_or("-");
            format!("{} -> {} ({dialect})", r.prefix, r.upstream)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// How a reload reads the configuration: the same source again (the
/// embedded default can only be re-validated), with the same listener
/// overrides, and the key variables as they are now.
fn reread(cli: &Cli) -> probity::server::ConfigSource {
    let (path, listen, admin) = (
        cli.config.clone(),
        cli.listen.clone(),
        cli.admin_listen.clone(),
    );
    Box::new(move || {
        let dialects = inspect::names();
        let mut config = match &path {
            Some(path) => config::load_file(path, &dialects)?,
            None => config::load(config::DEFAULT_TOML, &dialects)?,
        };
        if let Some(listen) = &listen {
            config.server.listen = listen.clone();
        }
        if let Some(admin) = &admin {
            config.server.admin_listen = admin.clone();
        }
        let routes = RouteTable::build(&config, |var| std::env::var(var).ok())?;
        Ok((config, routes))
    })
}

/// Listens for SIGTERM and SIGINT from the call on (the handlers are
/// installed here, not at the first poll); resolves on the first.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{signal, SignalKind};
        (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        )
    };
    async move {
        #[cfg(unix)]
        match signals {
            (Ok(mut interrupt), Ok(mut terminate)) => {
                tokio::select! {
                    _ = interrupt.recv() => {},
                    _ = terminate.recv() => {},
                }
            }
            (Ok(mut only), Err(_)) | (Err(_), Ok(mut only)) => {
                only.recv().await;
            }
            (Err(_), Err(_)) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!("shutdown signal received");
    }
}

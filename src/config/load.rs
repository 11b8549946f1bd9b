//! Parsing a TOML text into [`Config`], collecting every problem with its key path.
//!
//! serde stops at the first error of a struct. To report *every* bad key, a
//! section that fails as a whole is probed key by key: each key is
//! deserialized alone (all fields have defaults, so a lone key is a complete
//! section), the failing keys are reported at `section.key`, and the section is
//! rebuilt from the keys that passed so validation can still judge them.

use std::fmt;
use std::path::Path;

use serde::de::DeserializeOwned;

use super::{
    AdminConfig, CaptureConfig, ClientConfig, Config, RouteConfig, ServerConfig, TelemetryConfig,
};

/// One thing wrong with a configuration, at a key path such as `routes[2].upstream`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The key path, e.g. `routes[2].upstream`.
    pub path: String,
    /// What is wrong and what is expected.
    pub message: String,
}

impl Problem {
    /// A problem at a key path.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found in one file, in file order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Problems(pub Vec<Problem>);

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

/// The top-level tables a file may hold.
const TOP_LEVEL_KEYS: &[&str] = &[
    "server",
    "routes",
    "capture",
    "clients",
    "telemetry",
    "admin",
];

/// Reads and loads a file; an unreadable file is one problem at the path `file`.
pub fn load_file(path: &Path, dialects: &[&str]) -> Result<Config, Problems> {
    match std::fs::read_to_string(path) {
        Ok(text) => load(&text, dialects),
        Err(err) => Err(Problems(vec![Problem::new(
            "file",
            format!("cannot read {}: {err}", path.display()),
        )])),
    }
}

/// Parses and validates a configuration text; `dialects` are the names a
/// route may use (the dialect table's, which this module does not know).
pub fn load(text: &str, dialects: &[&str]) -> Result<Config, Problems> {
    let table: toml::Table = match text.parse() {
        Ok(table) => table,
        // A syntax error leaves nothing to probe: report it with its line.
        Err(err) => return Err(Problems(vec![Problem::new("file", one_line(&err))])),
    };

    let mut problems = Vec::new();
    let mut config = Config::default();
    for (key, value) in table {
        match key.as_str() {
            "server" => config.server = section::<ServerConfig>(value, "server", &mut problems),
            "capture" => config.capture = section::<CaptureConfig>(value, "capture", &mut problems),
            "telemetry" => {
                config.telemetry = section::<TelemetryConfig>(value, "telemetry", &mut problems);
            }
            "admin" => config.admin = section::<AdminConfig>(value, "admin", &mut problems),
            "routes" => config.routes = tables::<RouteConfig>(value, "routes", &mut problems),
            "clients" => config.clients = tables::<ClientConfig>(value, "clients", &mut problems),
            _ => problems.push(Problem::new(
                key,
                format!("unknown key; known keys: {}", TOP_LEVEL_KEYS.join(", ")),
            )),
        }
    }

    // A key already reported while parsing is not reported again by
    // validation (e.g. `upstream = 5` is a type error, not also "missing").
    for problem in config.validate(dialects) {
        if !problems.iter().any(|p| p.path == problem.path) {
            problems.push(problem);
        }
    }
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(Problems(problems))
    }
}

/// Deserializes an array of tables (`[[routes]]`), each at `key[i]`.
fn tables<T: DeserializeOwned + Default>(
    value: toml::Value,
    key: &str,
    problems: &mut Vec<Problem>,
) -> Vec<T> {
    match value {
        toml::Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| section::<T>(item, &format!("{key}[{i}]"), problems))
            .collect(),
        _ => {
            problems.push(Problem::new(
                key,
                format!("must be an array of tables: write each as a [[{key}]] table"),
            ));
            Vec::new()
        }
    }
}

/// Deserializes one section, reporting each bad key at `path.key`.
fn section<T: DeserializeOwned + Default>(
    value: toml::Value,
    path: &str,
    problems: &mut Vec<Problem>,
) -> T {
    let whole = match value.clone().try_into::<T>() {
        Ok(parsed) => return parsed,
        Err(err) => err,
    };
    let toml::Value::Table(table) = value else {
        problems.push(Problem::new(path, "must be a table"));
        return T::default();
    };
    let mut sound = toml::Table::new();
    let before = problems.len();
    for (key, item) in table {
        let mut alone = toml::Table::new();
        alone.insert(key.clone(), item.clone());
        match toml::Value::Table(alone).try_into::<T>() {
            Ok(_) => {
                sound.insert(key, item);
            }
            Err(err) => problems.push(Problem::new(format!("{path}.{key}"), one_line(&err))),
        }
    }
    if problems.len() == before {
        // Every key passed alone but not together: report the whole section.
        problems.push(Problem::new(path, one_line(&whole)));
        return T::default();
    }
    toml::Value::Table(sound).try_into().unwrap_or_default()
}

/// toml's messages can span lines (a source excerpt); a problem is one line.
fn one_line(err: &dyn fmt::Display) -> String {
    let text = err.to_string();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('|') && !l.starts_with("TOML parse error"))
        .filter(|l| !l.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .collect();
    let location = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("TOML parse error at "));
    match location {
        Some(at) => format!("{} (at {at})", lines.join(" ")),
        None => lines.join(" "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<String> {
        load(text, &probity_judge::inspect::names())
            .expect_err("expected problems")
            .0
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn every_bad_key_is_reported_with_its_path() {
        let found = problems(
            r#"
            [server]
            max_connections = "many"
            listen = "nowhere"
            colour = "blue"

            [[routes]]
            name = "a"
            prefix = "/a"
            upstream = "http://127.0.0.1:1"
            dialect = "passthrough"

            [[routes]]
            name = "b"
            prefix = "/b"
            upstream = "ftp://example.com"
            dialect = "klingon"
            tiemout_ms = 5
            timeout_ms = -1
            "#,
        );
        let has = |prefix: &str| found.iter().any(|p| p.starts_with(prefix));
        assert!(has("server.max_connections: invalid type"), "{found:#?}");
        assert!(has("server.colour: unknown field"), "{found:#?}");
        assert!(has("server.listen: not an ip:port"), "{found:#?}");
        assert!(has("routes[1].upstream: not an http(s) URL"), "{found:#?}");
        assert!(
            has("routes[1].dialect: unknown dialect \"klingon\": one of openai"),
            "{found:#?}"
        );
        assert!(has("routes[1].tiemout_ms: unknown field"), "{found:#?}");
        assert!(has("routes[1].timeout_ms: invalid value"), "{found:#?}");
        assert_eq!(found.len(), 7, "{found:#?}");
    }

    #[test]
    fn a_key_with_a_type_error_is_not_also_reported_missing() {
        let found = problems(
            r#"
            [[routes]]
            name = "a"
            prefix = "/a"
            upstream = 5
            dialect = "passthrough"
            "#,
        );
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(found[0].starts_with("routes[0].upstream: invalid type"));
    }

    #[test]
    fn a_syntax_error_names_its_line() {
        let found = problems("[server\nlisten = 1");
        assert_eq!(found.len(), 1);
        assert!(found[0].starts_with("file: "), "{found:?}");
        assert!(found[0].contains("line 1"), "{found:?}");
    }

    #[test]
    fn unknown_top_level_tables_and_a_non_array_routes_are_reported() {
        let found = problems("routes = 3\n[sever]\nlisten = \"x\"\n");
        assert!(found
            .iter()
            .any(|p| p.starts_with("routes: must be an array")));
        assert!(found.iter().any(|p| p.starts_with("sever: unknown key")));
    }
}

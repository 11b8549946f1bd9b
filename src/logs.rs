//! Log lines on stdout: text by default, JSON with
//! `PROBITY_LOG_FORMAT=json`; the level from `RUST_LOG` (default `info`).
//!
//! The text form is logfmt: `key=value`, a value quoted only when it must
//! be (a space, a quote, `=`, or empty), whatever way the field was
//! recorded. tracing's own text form quotes a `&str` field and not a
//! `%display` one, so the same kind of value was written two ways.
//! Colour only on a terminal: in a file or a collector escape codes are
//! noise (and cost a tenth of each line's formatting).

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::{FormatFields, Writer};

/// Installs the process's log subscriber.
pub fn init() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stdout().is_terminal());
    if std::env::var("PROBITY_LOG_FORMAT").is_ok_and(|f| f == "json") {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init();
    } else {
        builder.fmt_fields(Logfmt).init();
    }
}

/// The fields of a text line, in logfmt.
#[derive(Debug, Default, Clone, Copy)]
pub struct Logfmt;

impl<'writer> FormatFields<'writer> for Logfmt {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut line = Line {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut line);
        line.result
    }
}

struct Line<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl Line<'_> {
    /// What goes before the next field: nothing before the first.
    fn separator(&mut self) -> &'static str {
        if std::mem::replace(&mut self.first, false) {
            ""
        } else {
            " "
        }
    }

    fn pair(&mut self, name: &str, value: &str) {
        if self.result.is_err() {
            return;
        }
        let separator = self.separator();
        self.result = if name == "message" {
            // The message leads the line, as prose.
            write!(self.writer, "{separator}{value}")
        } else {
            write!(self.writer, "{separator}{name}=").and_then(|()| quoted(&mut self.writer, value))
        };
    }
}

/// A value as logfmt writes it: bare when it can be, else quoted with `"`
/// and `\` escaped.
fn quoted(writer: &mut Writer<'_>, value: &str) -> fmt::Result {
    let bare = !value.is_empty()
        && !value
            .chars()
            .any(|c| c == ' ' || c == '"' || c == '=' || c == '\\' || c.is_control());
    if bare {
        return writer.write_str(value);
    }
    writer.write_char('"')?;
    for c in value.chars() {
        match c {
            '"' => writer.write_str("\\\"")?,
            '\\' => writer.write_str("\\\\")?,
            '\n' => writer.write_str("\\n")?,
            c if c.is_control() => write!(writer, "\\u{{{:x}}}", c as u32)?,
            c => writer.write_char(c)?,
        }
    }
    writer.write_char('"')
}

impl Line<'_> {
    /// A number: never quoted, so written straight to the line (as
    /// `Debug` writes it, the form it had when it went through a string).
    fn number(&mut self, name: &str, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        let separator = self.separator();
        self.result = write!(self.writer, "{separator}{name}={value:?}");
    }
}

thread_local! {
    /// Where a `Debug` or `%display` value is formatted before it is
    /// quoted: one buffer a thread, so a request's line allocates nothing
    /// for it (it allocated once per such field).
    static SCRATCH: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

impl Visit for Line<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.pair(field.name(), value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.number(field.name(), &value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.number(field.name(), &value);
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.number(field.name(), &value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.number(field.name(), &value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        use std::fmt::Write as _;
        // `%display` fields arrive here too, as their Display text.
        let taken = SCRATCH.try_with(|scratch| {
            let Ok(mut text) = scratch.try_borrow_mut() else {
                return false;
            };
            text.clear();
            let _ = write!(text, "{value:?}");
            self.pair(field.name(), &text);
            // A rare long value (an error's chain) is not kept for good.
            if text.capacity() > 4096 {
                *text = String::new();
            }
            true
        });
        // A log line inside a Debug impl (reentrant), or at thread exit.
        if taken != Ok(true) {
            self.pair(field.name(), &format!("{value:?}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(value: &str) -> String {
        let mut out = String::new();
        quoted(&mut Writer::new(&mut out), value).unwrap();
        out
    }

    #[test]
    fn values_are_quoted_only_when_they_must_be() {
        assert_eq!(line("openai"), "openai");
        assert_eq!(line("127.0.0.1:8080"), "127.0.0.1:8080");
        assert_eq!(line(""), "\"\"");
        assert_eq!(line("no route"), "\"no route\"");
        assert_eq!(line("a=b"), "\"a=b\"");
        assert_eq!(line("say \"hi\"\n"), "\"say \\\"hi\\\"\\n\"");
        assert_eq!(line("\u{1b}[31m"), "\"\\u{1b}[31m\"");
    }
}

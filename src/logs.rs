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
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::{FormatFields, Writer};

/// Installs the process's log subscriber.
pub fn init() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::stdout().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    let json = std::env::var("PROBITY_LOG_FORMAT").is_ok_and(|f| f == "json");
    let _ = FORMAT.set(if json {
        Format::Json
    } else {
        Format::Text { ansi }
    });
    if json {
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
fn quoted(writer: &mut impl fmt::Write, value: &str) -> fmt::Result {
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

// ------------------------------------------------------- the request line

/// How the request line is written, chosen once by [`init`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// logfmt, as tracing's text form with [`Logfmt`] writes it; the level
    /// and target coloured as tracing colours them when `ansi`.
    Text { ansi: bool },
    /// One JSON object, as tracing's JSON form with flattened fields.
    Json,
}

static FORMAT: std::sync::OnceLock<Format> = std::sync::OnceLock::new();

/// One field of the request line.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LineValue<'a> {
    Text(&'a str),
    Count(u64),
    /// Milliseconds to the microsecond (`0.621`), as the line has always
    /// carried durations.
    Millis(Duration),
    Flag(bool),
}

thread_local! {
    /// The line is built here and written with one call: a buffer a
    /// thread, never a new one a line.
    static LINE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// `YYYY-MM-DDTHH:MM:SS` of the second last written, and that second.
    static SECOND: std::cell::Cell<(u64, [u8; 19])> = const { std::cell::Cell::new((u64::MAX, [0; 19])) };
}

/// Writes the `request` line (INFO, under `target`: the caller checked
/// that `RUST_LOG` lets it through), with the fields in order and those
/// that are `None` left out, as tracing would.
///
/// It is the line every request writes, so it is written by hand: through
/// tracing's formatter it took 14 thousand instructions, a sixth of a
/// passthrough request's userland work; here about two. Every other line
/// still goes through tracing.
pub(crate) fn request(target: &str, fields: &[(&str, Option<LineValue<'_>>)]) {
    let Some(&format) = FORMAT.get() else {
        return;
    };
    let written = LINE.try_with(|line| {
        let Ok(mut line) = line.try_borrow_mut() else {
            return false;
        };
        line.clear();
        write_line(&mut line, format, target, fields);
        if line.capacity() > 16 * 1024 {
            *line = Vec::new();
        }
        true
    });
    if written != Ok(true) {
        // Reentrant (a line inside a line), or at thread exit: a line of its own.
        write_line(&mut Vec::new(), format, target, fields);
    }
}

/// Builds the line in `line` and writes it with one call, under stdout's
/// lock as tracing's lines are.
fn write_line(
    line: &mut Vec<u8>,
    format: Format,
    target: &str,
    fields: &[(&str, Option<LineValue<'_>>)],
) {
    use std::io::Write as _;
    match format {
        Format::Text { ansi } => text_line(line, ansi, target, fields),
        Format::Json => json_line(line, target, fields),
    }
    line.push(b'\n');
    let _ = std::io::stdout().lock().write_all(line);
}

fn text_line(
    line: &mut Vec<u8>,
    ansi: bool,
    target: &str,
    fields: &[(&str, Option<LineValue<'_>>)],
) {
    timestamp(line);
    // As tracing's full text form: the level padded to five, the target.
    if ansi {
        line.extend_from_slice(b" \x1b[32m INFO\x1b[0m \x1b[2m");
        line.extend_from_slice(target.as_bytes());
        line.extend_from_slice(b"\x1b[0m\x1b[2m:\x1b[0m request");
    } else {
        line.extend_from_slice(b"  INFO ");
        line.extend_from_slice(target.as_bytes());
        line.extend_from_slice(b": request");
    }
    for (name, value) in fields {
        let Some(value) = value else { continue };
        line.push(b' ');
        line.extend_from_slice(name.as_bytes());
        line.push(b'=');
        match *value {
            LineValue::Text(text) => {
                let _ = quoted(&mut LineText(line), text);
            }
            LineValue::Count(n) => decimal(line, n),
            LineValue::Millis(duration) => millis(line, duration),
            LineValue::Flag(flag) => line.extend_from_slice(if flag { b"true" } else { b"false" }),
        }
    }
}

fn json_line(line: &mut Vec<u8>, target: &str, fields: &[(&str, Option<LineValue<'_>>)]) {
    line.extend_from_slice(b"{\"timestamp\":\"");
    timestamp(line);
    line.extend_from_slice(b"\",\"level\":\"INFO\",\"message\":\"request\"");
    for (name, value) in fields {
        let Some(value) = value else { continue };
        line.extend_from_slice(b",\"");
        line.extend_from_slice(name.as_bytes());
        line.extend_from_slice(b"\":");
        match *value {
            LineValue::Text(text) => json_string(line, text),
            LineValue::Count(n) => decimal(line, n),
            LineValue::Millis(duration) => millis(line, duration),
            LineValue::Flag(flag) => line.extend_from_slice(if flag { b"true" } else { b"false" }),
        }
    }
    line.extend_from_slice(b",\"target\":");
    json_string(line, target);
    line.push(b'}');
}

/// The request line's bytes, written to as text: a logfmt value goes
/// through the one [`quoted`] that tracing's lines use.
struct LineText<'a>(&'a mut Vec<u8>);

impl fmt::Write for LineText<'_> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        self.0.extend_from_slice(text.as_bytes());
        Ok(())
    }
}

/// A JSON string (RFC 8259 §7).
fn json_string(line: &mut Vec<u8>, value: &str) {
    line.push(b'"');
    for &b in value.as_bytes() {
        match b {
            b'"' => line.extend_from_slice(b"\\\""),
            b'\\' => line.extend_from_slice(b"\\\\"),
            b'\n' => line.extend_from_slice(b"\\n"),
            b'\r' => line.extend_from_slice(b"\\r"),
            b'\t' => line.extend_from_slice(b"\\t"),
            0..=0x1f => {
                use std::io::Write as _;
                let _ = write!(line, "\\u{b:04x}");
            }
            _ => line.push(b),
        }
    }
    line.push(b'"');
}

fn decimal(line: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        if let Some(d) = digits.get_mut(at) {
            *d = b'0' + (n % 10) as u8;
        }
        n /= 10;
        if n == 0 {
            break;
        }
    }
    line.extend_from_slice(digits.get(at..).unwrap_or_default());
}

/// Milliseconds rounded to the microsecond, written as the shortest
/// decimal with at least one fraction digit (`0.621`, `12.5`, `3.0`), as
/// the f64 the line carried before printed.
fn millis(line: &mut Vec<u8>, duration: Duration) {
    let micros = u64::try_from((duration.as_nanos() + 500) / 1_000).unwrap_or(u64::MAX);
    decimal(line, micros / 1_000);
    line.push(b'.');
    let fraction = micros % 1_000;
    let digits = [
        (fraction / 100) as u8,
        (fraction / 10 % 10) as u8,
        (fraction % 10) as u8,
    ];
    let keep = digits
        .iter()
        .rposition(|&d| d != 0)
        .map_or(1, |last| last + 1);
    for d in digits.iter().take(keep) {
        line.push(b'0' + d);
    }
}

/// `2026-12-05T02:44:11.271835Z`, tracing's UTC form; the date and time
/// of day are made once a second.
fn timestamp(line: &mut Vec<u8>) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = now.as_secs();
    let prefix = SECOND
        .try_with(|cached| {
            let (second, text) = cached.get();
            if second == seconds {
                return text;
            }
            let text = civil(seconds);
            cached.set((seconds, text));
            text
        })
        .unwrap_or_else(|_| civil(seconds));
    line.extend_from_slice(&prefix);
    line.push(b'.');
    let micros = now.subsec_micros();
    let mut digits = [b'0'; 6];
    let mut rest = micros;
    for d in digits.iter_mut().rev() {
        *d = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    line.extend_from_slice(&digits);
    line.push(b'Z');
}

/// `YYYY-MM-DDTHH:MM:SS` of a Unix time (Howard Hinnant's days-to-civil).
fn civil(seconds: u64) -> [u8; 19] {
    let days = (seconds / 86_400) as i64;
    let of_day = seconds % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mut text = [0u8; 19];
    let mut put = |at: usize, value: u64, width: usize| {
        let mut value = value;
        for i in (0..width).rev() {
            if let Some(slot) = text.get_mut(at + i) {
                *slot = b'0' + (value % 10) as u8;
            }
            value /= 10;
        }
    };
    put(0, year.clamp(0, 9999) as u64, 4);
    put(5, month as u64, 2);
    put(8, day as u64, 2);
    put(11, of_day / 3_600, 2);
    put(14, of_day / 60 % 60, 2);
    put(17, of_day % 60, 2);
    for (at, separator) in [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')] {
        if let Some(slot) = text.get_mut(at) {
            *slot = separator;
        }
    }
    text
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

    fn text(fields: &[(&str, Option<LineValue<'_>>)]) -> String {
        let mut line = Vec::new();
        text_line(&mut line, false, "probity::events", fields);
        String::from_utf8(line).unwrap()
    }

    #[test]
    fn the_request_line_is_the_one_tracing_wrote() {
        let line = text(&[
            ("request_id", Some(LineValue::Text("abc"))),
            ("route", Some(LineValue::Text("no route"))),
            ("upstream_status", None),
            ("status", Some(LineValue::Count(200))),
            (
                "duration_ms",
                Some(LineValue::Millis(Duration::from_nanos(621_499))),
            ),
            ("captured", Some(LineValue::Flag(false))),
        ]);
        // `2026-12-05T02:44:11.271835Z  INFO probity::events: request ...`
        let (stamp, rest) = line.split_once("  INFO ").unwrap();
        assert_eq!(stamp.len(), 27, "{stamp}");
        assert!(
            stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T',
            "{stamp}"
        );
        assert_eq!(
            rest,
            "probity::events: request request_id=abc route=\"no route\" status=200 \
             duration_ms=0.621 captured=false"
        );
        let mut json = Vec::new();
        json_line(
            &mut json,
            "probity::events",
            &[
                ("path", Some(LineValue::Text("/a\"b\\c\u{1}"))),
                ("outcome", None),
            ],
        );
        let parsed: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(parsed["path"], "/a\"b\\c\u{1}");
        assert_eq!(parsed["message"], "request");
        assert_eq!(parsed["target"], "probity::events");
        assert!(parsed.get("outcome").is_none());
    }

    #[test]
    fn durations_are_milliseconds_to_the_microsecond_as_f64_printed_them() {
        for nanos in [
            0u64,
            1,
            499,
            500,
            621_000,
            1_500_000,
            3_000_000,
            12_345_678_901,
            999_999_999,
        ] {
            let mut line = Vec::new();
            millis(&mut line, Duration::from_nanos(nanos));
            let before = ((nanos as f64 / 1e9) * 1e6).round() / 1e3;
            assert_eq!(
                String::from_utf8(line).unwrap(),
                format!("{before:?}"),
                "{nanos} ns"
            );
        }
    }

    #[test]
    fn unix_times_become_utc_dates() {
        let text = |seconds| String::from_utf8(civil(seconds).to_vec()).unwrap();
        assert_eq!(text(0), "1970-01-01T00:00:00");
        assert_eq!(text(951_782_400), "2000-02-29T00:00:00");
        assert_eq!(text(1_764_902_651), "2025-12-05T02:44:11");
        assert_eq!(text(4_107_542_399), "2100-02-28T23:59:59");
    }
}

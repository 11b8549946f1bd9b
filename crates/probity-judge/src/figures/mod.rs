//! Ancillary figures: what a provider reports *about* a call (usage counters,
//! billed units, durations, the response id), judged one by one.
//!
//! The rule: a malformed figure is *not reported*. Its bytes become `null`,
//! surgically: every other byte of the body stays as it came. It is never
//! coerced, clamped or parsed into something else (`"12"` is not 12, `-1` is
//! not 0), and it never reaches a metric or a log. A record (the object
//! holding figures, like `/usage`) left with no well-formed figure becomes
//! `null` as a whole. `null` or an absent member is not reported, which is
//! normal and left alone.
//!
//! Each dialect lists its figures in a fixed table of [`Figure`]s, so the
//! `figure` label of `probity_malformed_figures_total` is bounded, and
//! beside it the [`Relation`]s its provider defines between them
//! (`relation`): figures that contradict each other are not reported
//! either, counted apart (`probity_figure_contradictions_total`).

mod relation;

pub use relation::Convention;
pub(crate) use relation::{Relation, Rule, Under};

use std::borrow::Cow;
use std::ops::Range;

use http::HeaderMap;

use crate::json::{Json, Object};

/// The type and domain a figure must fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Domain {
    /// A non-negative integer written as one: token counts, nanoseconds.
    Count,
    /// A non-negative finite number: Cohere types its `meta` figures as numbers.
    Number,
    /// A non-empty string: the response id.
    Id,
    /// Not a figure: a record the provider's schema (and its SDKs' types)
    /// requires, so it keeps its object whatever its figures, which are
    /// nulled one by one (an SDK reads `usage.output_tokens` unguarded).
    Required,
}

/// One ancillary figure in a dialect's table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Figure {
    /// A JSON pointer into the response body, e.g. `/usage/prompt_tokens`;
    /// a last segment `*` stands for every member of that record (the
    /// `figure` label stays the wildcard, so it is bounded).
    pub(crate) pointer: &'static str,
    pub(crate) domain: Domain,
    /// The `kind` label on `probity_tokens_total` when this counts tokens.
    pub tokens: Option<&'static str>,
    /// In a stream, a running total: each report restates it so far, and
    /// a later one below an earlier one is a contradiction.
    pub(crate) running: bool,
}

impl Figure {
    pub(crate) const fn count(pointer: &'static str) -> Self {
        Self {
            pointer,
            domain: Domain::Count,
            tokens: None,
            running: false,
        }
    }

    pub(crate) const fn number(pointer: &'static str) -> Self {
        Self {
            pointer,
            domain: Domain::Number,
            tokens: None,
            running: false,
        }
    }

    /// A record that must stay an object (see [`Domain::Required`]).
    pub(crate) const fn required(pointer: &'static str) -> Self {
        Self {
            pointer,
            domain: Domain::Required,
            tokens: None,
            running: false,
        }
    }

    pub(crate) const fn id(pointer: &'static str) -> Self {
        Self {
            pointer,
            domain: Domain::Id,
            tokens: None,
            running: false,
        }
    }

    /// Marks the figure as a stream's running total (see [`Figure::running`]).
    pub(crate) const fn running(mut self) -> Self {
        self.running = true;
        self
    }

    /// Marks the figure as a token count of this kind.
    pub(crate) const fn tokens(mut self, kind: &'static str) -> Self {
        self.tokens = Some(kind);
        self
    }

    /// The pointer of the record holding this figure (`""` for the root).
    pub(crate) fn record(&self) -> &'static str {
        &self.pointer[..self.pointer.rfind('/').unwrap_or(0)]
    }

    fn key(&self) -> &'static str {
        &self.pointer[self.pointer.rfind('/').map_or(0, |i| i + 1)..]
    }
}

/// A figure sent as a response header (TEI's `x-compute-*` family): a
/// non-negative integer in ASCII digits. Made with [`header_figure!`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeaderFigure {
    pub(crate) name: &'static str,
    /// `header:<name>`: its `figure` label and its `probity-normalized` entry.
    pub(crate) label: &'static str,
    pub tokens: Option<&'static str>,
}

/// A [`HeaderFigure`] of this header name, optionally a token count of a
/// kind. Crate-private, as `HeaderFigure`'s fields are: not exported (a
/// `#[macro_export]` would put it on the crate's public surface, unusable).
macro_rules! header_figure {
    ($name:literal) => {
        $crate::figures::HeaderFigure {
            name: $name,
            label: concat!("header:", $name),
            tokens: None,
        }
    };
    ($name:literal, tokens = $kind:literal) => {
        $crate::figures::HeaderFigure {
            name: $name,
            label: concat!("header:", $name),
            tokens: Some($kind),
        }
    };
}
pub(crate) use header_figure;

/// What judging a response's figures found.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct FigureFindings {
    /// Byte ranges of the body to replace with `null`, sorted, disjoint.
    pub(crate) nulls: Vec<Range<usize>>,
    /// The `probity-normalized` list: malformed figures in table order, then
    /// the records that collapsed, then `header:<name>` for removed headers.
    pub(crate) pointers: Vec<String>,
    /// The `figure` labels to count, one per malformed figure or record.
    pub(crate) malformed: Vec<&'static str>,
    /// Headers to remove from the response.
    pub(crate) removed_headers: Vec<&'static str>,
    /// Well-formed token counts, by kind: the only figures metrics may see.
    pub(crate) tokens: Vec<(&'static str, u64)>,
    /// The relations whose figures contradicted each other, by name: those
    /// figures are nulled and listed, but not counted as malformed.
    pub(crate) contradicted: Vec<&'static str>,
    /// The well-formed running totals (a stream's judge compares them with
    /// the event before).
    pub(crate) running: Vec<Running>,
}

/// A well-formed running total in one event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Running {
    /// Its table pointer: the same figure in every event.
    pub(crate) figure: &'static str,
    /// Its pointer in the event (under a prefix, for a figure in a
    /// sub-object of the event).
    pub(crate) pointer: String,
    pub(crate) value: u64,
    pub(crate) span: Range<usize>,
    pub(crate) tokens: Option<&'static str>,
}

/// The relations a table's figures are judged by, under a route's
/// convention.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Related<'r> {
    pub(crate) relations: &'r [Relation],
    pub(crate) convention: Convention,
}

impl Related<'static> {
    /// No relation: each figure alone.
    pub(crate) const NONE: Self = Self {
        relations: &[],
        convention: Convention::Off,
    };
}

impl FigureFindings {
    pub(crate) fn is_clean(&self) -> bool {
        self.pointers.is_empty()
    }
}

enum FigureValue {
    /// Absent or `null`: not reported.
    Absent,
    Sound(Option<u64>),
    Malformed(Range<usize>),
    /// Well-formed alone, and contradicted by a figure it is defined
    /// against.
    Contradicted(Range<usize>),
}

/// One concrete figure of a body: a table entry, or one member under a
/// wildcard entry.
struct FigureEntry<'a, 't, 'o> {
    figure: &'t Figure,
    /// Under a wildcard, the member's key when it reads exactly; the
    /// concrete pointer is written only for a figure that is reported.
    member: Option<&'o str>,
    /// The value, when present and not `null`.
    value: Option<Json<'a>>,
    /// Present as `null`: reported as not reported (often by probity
    /// itself), which a relation cannot read as none.
    null: bool,
}

impl FigureEntry<'_, '_, '_> {
    /// The concrete pointer, for the `probity-normalized` list. A key
    /// holding a lone surrogate escape has no exact pointer in UTF-8: it
    /// is listed as the wildcard itself.
    fn pointer(&self) -> Cow<'static, str> {
        match self.member {
            Some(key) => Cow::Owned(format!("{}/{}", self.figure.record(), escape_token(key))),
            None => Cow::Borrowed(self.figure.pointer),
        }
    }

    /// Whether this is the figure at `pointer` (a relation names a member
    /// under a wildcard by its own pointer).
    fn is(&self, pointer: &str) -> bool {
        match self.member {
            None => self.figure.pointer == pointer,
            Some(key) => pointer
                .strip_prefix(self.figure.record())
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|rest| rest == key),
        }
    }

    /// Whether the figure lies inside the record at `record`.
    fn under(&self, record: &str) -> bool {
        match self.member {
            Some(_) => self.figure.record() == record || under(self.figure.record(), record),
            None => under(self.figure.pointer, record),
        }
    }
}

/// A record as found in the body.
enum Record<'a> {
    Absent,
    /// Present but not an object: malformed as a whole.
    Broken(Range<usize>),
    Object(Object<'a>, Range<usize>),
}

/// Judges the body figures of `table` in a response whose root object is
/// `root`, borrowed from `body`, each alone and then against each other
/// (`related`).
pub(crate) fn judge(
    body: &[u8],
    root: &Object<'_>,
    table: &[Figure],
    related: Related<'_>,
) -> FigureFindings {
    let records = records(root, table, body);
    let entries = entries(root, table, &records);
    // Every figure on its own.
    let mut readings: Vec<FigureValue> = entries
        .iter()
        .map(|entry| match entry.value {
            None => FigureValue::Absent,
            Some(value) => read(entry.figure.domain, value, body),
        })
        .collect();
    // Then the relations between those that are sound.
    let contradicted = contradict(&entries, &mut readings, related, body);
    let collapsed = collapsed(table, &records, &entries, &readings);
    let mut figures_found = report(body, &records, &entries, &readings, &collapsed);
    figures_found.contradicted = contradicted;
    figures_found
}

/// Judges every relation of `related` that holds under its convention
/// among sound figures; the figures of each one breached become
/// [`FigureValue::Contradicted`]. The names of those breached.
fn contradict(
    entries: &[FigureEntry<'_, '_, '_>],
    readings: &mut [FigureValue],
    related: Related<'_>,
    body: &[u8],
) -> Vec<&'static str> {
    let mut breached: Vec<&'static str> = Vec::new();
    // No two counts, no contradiction: most events of a stream carry none
    // (a chat chunk's `"usage": null`), and pay nothing for the relations.
    let counts = readings
        .iter()
        .filter(|r| matches!(r, FigureValue::Sound(Some(_))))
        .count();
    if counts < 2 || related.convention == Convention::Off {
        return breached;
    }
    let mut involved: Vec<usize> = Vec::new();
    for relation in related.relations {
        if !relation.holds(related.convention) {
            continue;
        }
        // Absent is none of a sum (Gemini omits a zero count, as proto3's
        // JSON does); `null` is not reported, and decides nothing: judging
        // a rewritten body again finds what the first judgement left.
        let term = |pointer: &str| match entries.iter().position(|e| e.is(pointer)) {
            None => relation::Term::Absent,
            Some(i) => match (readings.get(i), entries.get(i).is_some_and(|e| e.null)) {
                (Some(FigureValue::Sound(Some(n))), _) => relation::Term::Count(*n),
                (Some(FigureValue::Absent) | None, false) => relation::Term::Absent,
                _ => relation::Term::Unknown,
            },
        };
        if relation.breached(term) != Some(true) {
            continue;
        }
        breached.push(relation.name);
        for pointer in relation.pointers() {
            if let Some(i) = entries.iter().position(|e| e.is(pointer)) {
                if !involved.contains(&i) {
                    involved.push(i);
                }
            }
        }
    }
    // Marked once all are judged: a figure one relation contradicts still
    // decides the others it is in.
    for i in involved {
        let span = entries.get(i).and_then(|e| e.value).map(|v| v.span(body));
        if let (Some(reading @ FigureValue::Sound(_)), Some(span)) = (readings.get_mut(i), span) {
            *reading = FigureValue::Contradicted(span);
        }
    }
    breached
}

/// The records of a table, each looked up once; the root is never a record
/// to collapse.
fn records<'a>(
    root: &Object<'a>,
    table: &[Figure],
    body: &[u8],
) -> Vec<(&'static str, Record<'a>)> {
    let mut records: Vec<(&'static str, Record<'_>)> = Vec::new();
    for figure in table {
        let pointer = figure.record();
        if !pointer.is_empty() && !records.iter().any(|(p, _)| *p == pointer) {
            // From the deepest record already found above it, so that a
            // nested record does not read its parents' members again.
            let above = records
                .iter()
                .filter(|(p, _)| under(pointer, p))
                .max_by_key(|(p, _)| p.len());
            let record = match above {
                Some((p, Record::Object(object, _))) => {
                    find_record(object, pointer.get(p.len()..).unwrap_or_default(), body)
                }
                Some(_) => Record::Absent,
                None => find_record(root, pointer, body),
            };
            records.push((pointer, record));
        }
    }
    records
}

/// The concrete figures of a body: a table entry, or for a wildcard
/// (`/usage/prompt_tokens_details/*`) every member of its record.
fn entries<'a, 't, 'o>(
    root: &'o Object<'a>,
    table: &'t [Figure],
    records: &'o [(&'static str, Record<'a>)],
) -> Vec<FigureEntry<'a, 't, 'o>> {
    let mut entries = Vec::with_capacity(table.len());
    for figure in table.iter().filter(|f| f.domain != Domain::Required) {
        let record = figure.record();
        let object = if record.is_empty() {
            Some(root)
        } else {
            match records.iter().find(|(p, _)| *p == record) {
                Some((_, Record::Object(object, _))) => Some(object),
                _ => None,
            }
        };
        if figure.key() != "*" {
            let got = object.and_then(|o| o.get(figure.key()));
            entries.push(FigureEntry {
                figure,
                member: None,
                value: got.filter(|v| !v.is_null()),
                null: got.is_some_and(|v| v.is_null()),
            });
            continue;
        }
        // `keys` gives a duplicated key once: its last copy is the one read,
        // so it is the one judged (two entries for one span would splice it
        // twice).
        for (key, value, exact) in object.into_iter().flat_map(|o| o.members()) {
            // A member the table lists as a record of its own (Realtime's
            // `cached_tokens_details`) is judged there, member by member.
            if nested_record(table, record, key) {
                continue;
            }
            entries.push(FigureEntry {
                figure,
                member: exact.then_some(key),
                value: Some(value).filter(|v| !v.is_null()),
                null: value.is_null(),
            });
        }
    }
    entries
}

/// Whether the table has a record at `record/key`.
fn nested_record(table: &[Figure], record: &str, key: &str) -> bool {
    table.iter().any(|f| {
        f.record()
            .strip_prefix(record)
            .and_then(|rest| rest.strip_prefix('/'))
            .is_some_and(|rest| rest == &*escape_token(key))
    })
}

/// Whether the table marks the record at `pointer` as required.
pub(crate) fn required(table: &[Figure], pointer: &str) -> bool {
    table
        .iter()
        .any(|f| f.domain == Domain::Required && f.pointer == pointer)
}

/// Whether `pointer` lies inside the record at `record`.
fn under(pointer: &str, record: &str) -> bool {
    pointer
        .strip_prefix(record)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// The records that collapse: those that lost a figure and keep none
/// (nested records count as part of their parent).
fn collapsed(
    table: &[Figure],
    records: &[(&'static str, Record<'_>)],
    entries: &[FigureEntry<'_, '_, '_>],
    readings: &[FigureValue],
) -> Vec<(&'static str, Range<usize>)> {
    let mut collapsed = Vec::new();
    for (pointer, record) in records {
        let Record::Object(_, span) = record else {
            continue;
        };
        if required(table, pointer) {
            continue;
        }
        let mut lost = false;
        let mut kept = false;
        for (reading, entry) in readings.iter().zip(entries) {
            if entry.under(pointer) {
                lost |= matches!(
                    reading,
                    FigureValue::Malformed(_) | FigureValue::Contradicted(_)
                );
                kept |= matches!(reading, FigureValue::Sound(_));
            }
        }
        if lost && !kept {
            collapsed.push((*pointer, span.clone()));
        }
    }
    collapsed
}

/// The judgement: malformed figures, broken records, then collapsed ones,
/// each nulled unless an outer record is nulled whole.
fn report(
    body: &[u8],
    records: &[(&'static str, Record<'_>)],
    entries: &[FigureEntry<'_, '_, '_>],
    readings: &[FigureValue],
    collapsed: &[(&'static str, Range<usize>)],
) -> FigureFindings {
    let mut figures_found = FigureFindings::default();
    let nulled_whole = |pointer: &str| collapsed.iter().any(|(r, _)| under(pointer, r));
    for (reading, entry) in readings.iter().zip(entries) {
        match reading {
            FigureValue::Malformed(span) | FigureValue::Contradicted(span) => {
                // Inexact keys share the wildcard's pointer: listed once.
                let pointer = entry.pointer();
                let listed = matches!(pointer, Cow::Borrowed(p) if p.ends_with("/*"))
                    && figures_found.pointers.iter().any(|p| *p == pointer);
                if !listed {
                    figures_found.pointers.push(pointer.to_string());
                }
                // A contradiction is counted by its relation, not as a
                // malformed figure.
                if matches!(reading, FigureValue::Malformed(_)) {
                    figures_found.malformed.push(entry.figure.pointer);
                }
                if !nulled_whole(&pointer) {
                    figures_found.nulls.push(span.clone());
                }
            }
            FigureValue::Sound(Some(n)) => {
                if let Some(kind) = entry.figure.tokens {
                    figures_found.tokens.push((kind, *n));
                }
                if let (true, Some(value)) = (entry.figure.running, entry.value) {
                    figures_found.running.push(Running {
                        figure: entry.figure.pointer,
                        pointer: entry.figure.pointer.to_string(),
                        value: *n,
                        span: value.span(body),
                        tokens: entry.figure.tokens,
                    });
                }
            }
            FigureValue::Sound(None) | FigureValue::Absent => {}
        }
    }
    for (pointer, record) in records {
        if let Record::Broken(span) = record {
            figures_found.pointers.push(pointer.to_string());
            figures_found.malformed.push(pointer);
            if !nulled_whole(pointer) {
                figures_found.nulls.push(span.clone());
            }
        }
    }
    for (pointer, span) in collapsed {
        figures_found.pointers.push(pointer.to_string());
        if !nulled_whole(pointer) {
            figures_found.nulls.push(span.clone());
        }
    }
    figures_found.nulls.sort_by_key(|r| r.start);
    figures_found
}

/// Walks from an object (the root, or a record found before) to the record
/// at `pointer` below it.
fn find_record<'a>(root: &Object<'a>, pointer: &str, body: &[u8]) -> Record<'a> {
    let mut value: Option<Json<'a>> = None;
    for segment in pointer.split('/').skip(1) {
        let next = match value {
            None => root.present(segment),
            Some(parent) => match parent.object() {
                Some(object) => object.present(segment),
                // A parent that is not an object is reported at its own pointer.
                None => None,
            },
        };
        match next {
            Some(v) => value = Some(v),
            None => return Record::Absent,
        }
    }
    match value {
        None => Record::Absent,
        Some(v) => match v.object() {
            Some(object) => Record::Object(object, v.span(body)),
            None => Record::Broken(v.span(body)),
        },
    }
}

/// Judges header figures; malformed ones are to be removed.
pub(crate) fn judge_headers(
    headers: &HeaderMap,
    table: &[HeaderFigure],
    figures_found: &mut FigureFindings,
) {
    for figure in table {
        let mut values = headers.get_all(figure.name).iter();
        let Some(first) = values.next() else { continue };
        let single = values.next().is_none();
        let count = first
            .to_str()
            .ok()
            .filter(|v| single && !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse::<u64>().ok());
        match count {
            Some(n) => {
                if let Some(kind) = figure.tokens {
                    figures_found.tokens.push((kind, n));
                }
            }
            None => {
                figures_found.pointers.push(figure.label.to_string());
                figures_found.malformed.push(figure.label);
                figures_found.removed_headers.push(figure.name);
            }
        }
    }
}

fn read(domain: Domain, value: Json<'_>, body: &[u8]) -> FigureValue {
    let sound = match domain {
        Domain::Count => value.count().map(Some),
        Domain::Number => value
            .number()
            .filter(|n| *n >= 0.0 && !value.text().starts_with('-'))
            // Counted only when it is a whole number a `u64` holds exactly: 2^64
            // and beyond is sound but never saturated into a metric.
            .map(|n| (n.fract() == 0.0 && n < u64::MAX as f64).then_some(n as u64)),
        Domain::Id => value.string().filter(|s| !s.is_empty()).map(|_| None),
        // A record marker is never read as a figure.
        Domain::Required => Some(None),
    };
    match sound {
        Some(n) => FigureValue::Sound(n),
        None => FigureValue::Malformed(value.span(body)),
    }
}

/// Escapes a key as one RFC 6901 reference token (`~` → `~0`, `/` → `~1`).
fn escape_token(key: &str) -> Cow<'_, str> {
    if key.contains(['~', '/']) {
        Cow::Owned(key.replace('~', "~0").replace('/', "~1"))
    } else {
        Cow::Borrowed(key)
    }
}

/// The longest `probity-normalized` list: HTTP clients cap a header line
/// (Python's `http.client` at 64 KiB, many proxies at 8 KiB).
pub(crate) const LIST_LIMIT: usize = 4096;

/// The `probity-normalized` list for a header or an SSE comment: pointers
/// comma-separated, each in its URI-fragment form (RFC 6901 §6: bytes
/// outside visible ASCII, and `%`, `,`, `;`, percent-encoded, so the list
/// stays one unambiguous line), at most [`LIST_LIMIT`] bytes: the first
/// pointers, then `;+N more`. The capture keeps the full list.
pub fn normalized_list(pointers: &[String]) -> String {
    let encoded: Vec<String> = pointers.iter().map(|p| fragment(p)).collect();
    let whole = encoded.iter().map(String::len).sum::<usize>() + encoded.len().saturating_sub(1);
    if whole <= LIST_LIMIT {
        return encoded.join(",");
    }
    // Too long: the first pointers that fit beside the exact tail they need.
    let mut out = String::new();
    for (shown, pointer) in encoded.iter().enumerate() {
        let separator = usize::from(!out.is_empty());
        let after = out.len() + separator + pointer.len();
        if after + more(encoded.len() - shown - 1).len() > LIST_LIMIT {
            out.push_str(&more(encoded.len() - shown));
            return out;
        }
        if separator == 1 {
            out.push(',');
        }
        out.push_str(pointer);
    }
    out
}

/// The tail of a cut list.
fn more(left: usize) -> String {
    format!(";+{left} more")
}

/// A pointer in its URI-fragment form (RFC 6901 §6).
fn fragment(pointer: &str) -> String {
    let mut encoded = String::with_capacity(pointer.len());
    for byte in pointer.bytes() {
        if byte.is_ascii_graphic() && !matches!(byte, b'%' | b',' | b';') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{splice, Document};

    const TABLE: &[Figure] = &[
        Figure::id("/id"),
        Figure::count("/usage/prompt_tokens").tokens("input"),
        Figure::count("/usage/total_tokens").tokens("total"),
    ];

    fn run(body: &str) -> (String, FigureFindings) {
        let doc = Document::parse(body.as_bytes()).unwrap();
        let json = doc.root();
        let root = json.object().unwrap();
        let figures_found = judge(body.as_bytes(), &root, TABLE, Related::NONE);
        let out = splice(body.as_bytes(), &figures_found.nulls);
        (String::from_utf8(out.to_vec()).unwrap(), figures_found)
    }

    #[test]
    fn a_sound_body_is_clean_and_counts_its_tokens() {
        let (out, j) = run(r#"{"id":"e-1","usage":{"prompt_tokens":8,"total_tokens":8}}"#);
        assert!(j.is_clean());
        assert_eq!(j.tokens, [("input", 8), ("total", 8)]);
        assert_eq!(
            out,
            r#"{"id":"e-1","usage":{"prompt_tokens":8,"total_tokens":8}}"#
        );
    }

    #[test]
    fn each_malformed_form_is_nulled_on_its_own() {
        for bad in [
            r#""8""#, r#""abc""#, "-1", "8.5", "8.0", "1e3", "true", "{}", "[]", "-0",
        ] {
            let body = format!(r#"{{"usage": {{"prompt_tokens": {bad}, "total_tokens": 8}}}}"#);
            let (out, j) = run(&body);
            assert_eq!(
                out, r#"{"usage": {"prompt_tokens": null, "total_tokens": 8}}"#,
                "{bad}"
            );
            assert_eq!(j.pointers, ["/usage/prompt_tokens"]);
            assert_eq!(
                j.tokens,
                [("total", 8)],
                "a malformed figure is never counted"
            );
        }
    }

    #[test]
    fn a_record_left_with_no_sound_figure_collapses() {
        let (out, j) =
            run(r#"{"id": "x", "usage": {"prompt_tokens": "8", "total_tokens": -8}, "z": 1}"#);
        assert_eq!(out, r#"{"id": "x", "usage": null, "z": 1}"#);
        assert_eq!(
            j.pointers,
            ["/usage/prompt_tokens", "/usage/total_tokens", "/usage"]
        );
        assert_eq!(j.malformed, ["/usage/prompt_tokens", "/usage/total_tokens"]);
        let (out, _) = run(r#"{"usage": {"prompt_tokens": "8", "total_tokens": null}}"#);
        assert_eq!(out, r#"{"usage": null}"#);
    }

    #[test]
    fn absent_and_null_figures_are_not_reported() {
        for body in [
            r#"{"usage": {"prompt_tokens": null}}"#,
            r#"{"usage": null}"#,
            r#"{}"#,
            r#"{"id": null}"#,
        ] {
            let (out, j) = run(body);
            assert!(j.is_clean(), "{body}");
            assert_eq!(out, body);
        }
    }

    #[test]
    fn ids_must_be_non_empty_strings() {
        for bad in [r#""""#, "5", "true", "{}"] {
            let (out, j) = run(&format!(r#"{{"id": {bad}}}"#));
            assert_eq!(out, r#"{"id": null}"#);
            assert_eq!(j.pointers, ["/id"]);
        }
    }

    #[test]
    fn a_required_record_keeps_its_object_and_nulls_its_figures() {
        let table = &[
            Figure::required("/usage"),
            Figure::count("/usage/input_tokens").tokens("input"),
            Figure::count("/usage/output_tokens").tokens("output"),
            Figure::count("/usage/server_tool_use/*"),
        ];
        let judged = |body: &str| {
            let doc = Document::parse(body.as_bytes()).unwrap();
            let json = doc.root();
            let j = judge(
                body.as_bytes(),
                &json.object().unwrap(),
                table,
                Related::NONE,
            );
            let out = String::from_utf8(splice(body.as_bytes(), &j.nulls).to_vec()).unwrap();
            (out, j.pointers)
        };
        let (out, pointers) = judged(r#"{"usage": {"input_tokens": "3", "output_tokens": -1}}"#);
        assert_eq!(
            out,
            r#"{"usage": {"input_tokens": null, "output_tokens": null}}"#
        );
        assert_eq!(pointers, ["/usage/input_tokens", "/usage/output_tokens"]);
        // A record inside it that the schema does not require still collapses.
        let (out, pointers) = judged(
            r#"{"usage": {"input_tokens": 3, "server_tool_use": {"web_search_requests": "1"}}}"#,
        );
        assert_eq!(
            out,
            r#"{"usage": {"input_tokens": 3, "server_tool_use": null}}"#
        );
        assert_eq!(
            pointers,
            [
                "/usage/server_tool_use/web_search_requests",
                "/usage/server_tool_use"
            ]
        );
        // Not an object at all: nothing to keep, it is nulled.
        let (out, pointers) = judged(r#"{"usage": "n/a"}"#);
        assert_eq!(out, r#"{"usage": null}"#);
        assert_eq!(pointers, ["/usage"]);
    }

    #[test]
    fn a_record_that_is_not_an_object_is_nulled() {
        let (out, j) = run(r#"{"usage": "n/a"}"#);
        assert_eq!(out, r#"{"usage": null}"#);
        assert_eq!(j.pointers, ["/usage"]);
    }

    #[test]
    fn numbers_accept_any_non_negative_number() {
        let table = &[Figure::number("/meta/billed_units/input_tokens").tokens("billed_input")];
        for (value, ok) in [
            ("2", true),
            ("2.0", true),
            ("1e3", true),
            ("-2", false),
            ("\"2\"", false),
        ] {
            let body = format!(r#"{{"meta": {{"billed_units": {{"input_tokens": {value}}}}}}}"#);
            let doc = Document::parse(body.as_bytes()).unwrap();
            let json = doc.root();
            let j = judge(
                body.as_bytes(),
                &json.object().unwrap(),
                table,
                Related::NONE,
            );
            assert_eq!(j.is_clean(), ok, "{value}");
        }
    }

    #[test]
    fn a_wildcard_judges_every_member_of_its_record() {
        let table = &[
            Figure::count("/usage/prompt_tokens").tokens("input"),
            Figure::count("/usage/prompt_tokens_details/*"),
        ];
        let body = r#"{"usage": {"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": "0", "audio_tokens": 0, "new_kind": -2}}}"#;
        let doc = Document::parse(body.as_bytes()).unwrap();
        let json = doc.root();
        let j = judge(
            body.as_bytes(),
            &json.object().unwrap(),
            table,
            Related::NONE,
        );
        let out = String::from_utf8(splice(body.as_bytes(), &j.nulls).to_vec()).unwrap();
        assert_eq!(
            out,
            r#"{"usage": {"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": null, "audio_tokens": 0, "new_kind": null}}}"#
        );
        assert_eq!(
            j.pointers,
            [
                "/usage/prompt_tokens_details/cached_tokens",
                "/usage/prompt_tokens_details/new_kind"
            ]
        );
        assert_eq!(j.malformed, ["/usage/prompt_tokens_details/*"; 2]);
        // All malformed: the details record collapses; usage keeps its sound figure.
        let body =
            r#"{"usage": {"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": true}}}"#;
        let doc = Document::parse(body.as_bytes()).unwrap();
        let json = doc.root();
        let j = judge(
            body.as_bytes(),
            &json.object().unwrap(),
            table,
            Related::NONE,
        );
        let out = String::from_utf8(splice(body.as_bytes(), &j.nulls).to_vec()).unwrap();
        assert_eq!(
            out,
            r#"{"usage": {"prompt_tokens": 9, "prompt_tokens_details": null}}"#
        );
    }

    #[test]
    fn a_duplicated_key_in_a_wildcard_record_is_judged_once_by_its_last_copy() {
        let table = &[Figure::count("/usage/prompt_tokens_details/*")];
        let body = r#"{"usage":{"prompt_tokens_details":{"audio_tokens":0,"cached_tokens":1,"cached_tokens":"x"}}}"#;
        let doc = Document::parse(body.as_bytes()).unwrap();
        let json = doc.root();
        let j = judge(
            body.as_bytes(),
            &json.object().unwrap(),
            table,
            Related::NONE,
        );
        assert_eq!(j.pointers, ["/usage/prompt_tokens_details/cached_tokens"]);
        let out = String::from_utf8(splice(body.as_bytes(), &j.nulls).to_vec()).unwrap();
        assert_eq!(
            out,
            r#"{"usage":{"prompt_tokens_details":{"audio_tokens":0,"cached_tokens":1,"cached_tokens":null}}}"#
        );
    }

    #[test]
    fn wildcard_pointers_are_rfc_6901_and_the_list_is_encoded_and_bounded() {
        let table = &[Figure::count("/u/*")];
        let body = r#"{"u":{"caché":"x","a/b":"x","t~":"x","ok":1}}"#;
        let doc = Document::parse(body.as_bytes()).unwrap();
        let json = doc.root();
        let j = judge(
            body.as_bytes(),
            &json.object().unwrap(),
            table,
            Related::NONE,
        );
        assert_eq!(j.pointers, ["/u/caché", "/u/a~1b", "/u/t~0"]);
        assert_eq!(j.malformed, ["/u/*"; 3]);
        assert_eq!(normalized_list(&j.pointers), "/u/cach%C3%A9,/u/a~1b,/u/t~0");
        let many: Vec<String> = (0..3000).map(|i| format!("/usage/details/k{i}")).collect();
        let list = normalized_list(&many);
        assert!(list.len() <= LIST_LIMIT, "{}", list.len());
        let (shown, tail) = list.split_once(';').unwrap();
        let shown = shown.split(',').count();
        assert_eq!(tail, format!("+{} more", 3000 - shown));
        assert_eq!(
            normalized_list(&many[..2]),
            "/usage/details/k0,/usage/details/k1"
        );
    }

    #[test]
    fn the_list_is_whole_up_to_exactly_the_limit() {
        // One pointer, and several, of 4,095, 4,096 and 4,097 bytes in all.
        for total in [LIST_LIMIT - 1, LIST_LIMIT, LIST_LIMIT + 1] {
            let one = vec![format!("/{}", "k".repeat(total - 1))];
            let list = normalized_list(&one);
            if total <= LIST_LIMIT {
                assert_eq!(list, one[0], "one pointer of {total} bytes");
            } else {
                assert_eq!(list, ";+1 more");
            }
            // 41 pointers of 99 bytes and commas, the last one filling up.
            let mut several: Vec<String> = (0..40).map(|i| format!("/{i:0>98}")).collect();
            let used = 40 * 99 + 40;
            several.push(format!("/{}", "z".repeat(total - used - 1)));
            let list = normalized_list(&several);
            if total <= LIST_LIMIT {
                assert_eq!(list, several.join(","), "{total} bytes in all");
                assert_eq!(list.len(), total);
            } else {
                assert!(list.len() <= LIST_LIMIT, "{}", list.len());
                assert!(list.ends_with(";+1 more"), "{list}");
                assert_eq!(list, format!("{};+1 more", several[..40].join(",")));
            }
        }
        // A cut list is as long as its shown pointers and its tail allow.
        let many: Vec<String> = (0..100).map(|i| format!("/{i:0>99}")).collect();
        let list = normalized_list(&many);
        assert!(list.len() <= LIST_LIMIT);
        let (shown, tail) = list.split_once(';').unwrap();
        let shown = shown.split(',').count();
        assert_eq!(tail, format!("+{} more", 100 - shown));
        assert!(
            list.len() + 101 > LIST_LIMIT,
            "one more pointer would not fit"
        );
    }

    #[test]
    fn malformed_header_figures_are_removed() {
        let table = &[
            crate::figures::header_figure!("x-compute-tokens", tokens = "input"),
            crate::figures::header_figure!("x-total-time"),
        ];
        let mut headers = HeaderMap::new();
        headers.insert("x-compute-tokens", "12".parse().unwrap());
        headers.insert("x-total-time", "1.5".parse().unwrap());
        let mut j = FigureFindings::default();
        judge_headers(&headers, table, &mut j);
        assert_eq!(j.pointers, ["header:x-total-time"]);
        assert_eq!(j.removed_headers, ["x-total-time"]);
        assert_eq!(j.tokens, [("input", 12)]);
    }
}

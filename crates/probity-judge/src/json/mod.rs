//! Borrowed views of a JSON document: what inspection reads, without
//! building a tree or converting numbers it does not need.
//!
//! [`Document::parse`] checks a body in one pass ([`Scanner`], which can
//! also be fed the body frame by frame as it arrives) and keeps a
//! small tape of where each value sits. A [`Json`] is a view of one value:
//! its exact text in the body, so it knows its own byte span (that is what
//! lets `figures` replace exactly one value's bytes and leave every other
//! byte of the body as it came), and its place on the tape, so reading an
//! object's members or an array's elements walks the tape instead of
//! parsing the text again. Vectors are checked by [`scan_numbers`], which
//! reads the summary the scan left for each array of numbers.

mod scan;

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use bytes::{Bytes, BytesMut};

pub use scan::{ParseError, Scanner};
use scan::{Tape, ESCAPED, NONE};

/// A parsed document: its text and its tape. Views borrow from it.
pub struct Document<'t> {
    text: &'t str,
    tape: Tape,
}

impl<'t> Document<'t> {
    /// Checks a whole document, once.
    pub fn parse(bytes: &'t [u8]) -> Result<Self, ParseError> {
        Self::scanned(bytes, Scanner::default())
    }

    /// The document a scanner was fed as it arrived: only what it has not
    /// scanned yet is scanned now.
    pub fn scanned(bytes: &'t [u8], scanner: Scanner) -> Result<Self, ParseError> {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| ParseError::new("the body is not UTF-8", e.valid_up_to()))?;
        let tape = scanner.finish(bytes)?;
        Ok(Self { text, tape })
    }

    /// The finished scan, to read the same bytes again without a scan.
    pub fn into_scanner(self) -> Scanner {
        Scanner::finished(self.tape)
    }

    /// The root value.
    pub fn root(&self) -> Json<'_> {
        self.view(0)
    }

    /// The root's members, when the root is an object.
    pub fn object(&self) -> Option<Object<'_>> {
        self.root().object()
    }

    fn view(&self, node: u32) -> Json<'_> {
        let text = self
            .tape
            .nodes
            .get(node as usize)
            .and_then(|n| self.text.get(n.start as usize..n.end as usize))
            .unwrap_or_default();
        Json {
            doc: self,
            text,
            node,
        }
    }
}

/// One JSON value, borrowed from the document it came from.
/// Its text is always valid JSON: a `Json` is only made by a parse.
#[derive(Clone, Copy)]
pub struct Json<'a> {
    doc: &'a Document<'a>,
    text: &'a str,
    /// Its tape entry; [`NONE`] for a number inside an array.
    node: u32,
}

impl fmt::Debug for Json<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text)
    }
}

/// The kind of a value, read from its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `{`.
    Object,
    /// `[`.
    Array,
    /// `"`.
    String,
    /// A number.
    Number,
    /// `true` or `false`.
    Bool,
    /// `null`.
    Null,
}

impl<'a> Json<'a> {
    /// The value's exact text.
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// Where this value sits in `document` (which it must borrow from).
    pub fn span(&self, document: &[u8]) -> Range<usize> {
        let start = self.text.as_ptr() as usize - document.as_ptr() as usize;
        start..start + self.text.len()
    }

    /// What kind of value it is.
    pub fn kind(&self) -> Kind {
        match self.text().as_bytes().first() {
            Some(b'{') => Kind::Object,
            Some(b'[') => Kind::Array,
            Some(b'"') => Kind::String,
            Some(b't' | b'f') => Kind::Bool,
            Some(b'n') => Kind::Null,
            _ => Kind::Number,
        }
    }

    /// Whether it is `null`.
    pub fn is_null(&self) -> bool {
        self.kind() == Kind::Null
    }

    /// The tape entries after this container's own, up to its end.
    fn children(&self) -> Range<u32> {
        let end = self
            .doc
            .tape
            .nodes
            .get(self.node as usize)
            .map_or(self.node, |n| n.next);
        self.node.saturating_add(1)..end
    }

    /// The members of an object, in document order; `None` for a non-object.
    pub fn object(&self) -> Option<Object<'a>> {
        if self.kind() != Kind::Object {
            return None;
        }
        let nodes = &self.doc.tape.nodes;
        let Range { start: mut at, end } = self.children();
        // Counted first, down the tape's `next` links, so the members are
        // allocated once rather than regrown (an answer's top level has
        // more than the four a first growth gives).
        let (mut count, mut next) = (0, at);
        while next < end {
            count += 1;
            next = nodes.get(next as usize + 1)?.next;
        }
        let mut members = Vec::with_capacity(count);
        while at < end {
            // A key's entry, then its value's subtree.
            let key = self.doc.view(at);
            let value = self.doc.view(at + 1);
            let (name, exact) = key.unescaped();
            members.push((name, value, exact));
            at = nodes.get(at as usize + 1)?.next;
        }
        Some(Object(members))
    }

    /// The elements of an array; `None` for a non-array.
    pub fn array(&self) -> Option<Vec<Json<'a>>> {
        if self.kind() != Kind::Array {
            return None;
        }
        let nodes = &self.doc.tape.nodes;
        let Range {
            start: mut child,
            end,
        } = self.children();
        let holds_numbers = nodes.get(self.node as usize)?.aux != NONE;
        let mut items = Vec::new();
        if !holds_numbers {
            while child < end {
                items.push(self.doc.view(child));
                child = nodes.get(child as usize)?.next;
            }
            return Some(items);
        }
        // Numbers have no tape entry: they fill the gaps between entries.
        let base = nodes.get(self.node as usize)?.start as usize;
        let bytes = self.text.as_bytes();
        let mut at = 1;
        loop {
            at = scan::skip_space(bytes, at);
            match bytes.get(at) {
                None | Some(b']') => return Some(items),
                _ => {}
            }
            match nodes.get(child as usize).filter(|_| child < end) {
                Some(node) if node.start as usize - base == at => {
                    items.push(self.doc.view(child));
                    at = node.end as usize - base;
                    child = node.next;
                }
                _ => {
                    let start = at;
                    at = scan::number(bytes, at).ok()?.0;
                    let text = self.text.get(start..at)?;
                    items.push(Json {
                        doc: self.doc,
                        text,
                        node: NONE,
                    });
                }
            }
            at = scan::skip_space(bytes, at);
            if bytes.get(at) == Some(&b',') {
                at += 1;
            }
        }
    }

    /// The elements of an array with the members of each element that is
    /// an object; `None` for a non-array.
    pub fn objects(&self) -> Option<Vec<Option<Object<'a>>>> {
        let items = self.array()?;
        Some(items.iter().map(Json::object).collect())
    }

    /// A string's value (unescaped only when it has escapes). A lone UTF-16
    /// surrogate escape (`"\ud800"`, what JavaScript emits for a string cut
    /// inside an emoji) is valid JSON: it reads as U+FFFD, never as "not a
    /// string".
    pub fn string(&self) -> Option<Cow<'a, str>> {
        if self.kind() != Kind::String {
            return None;
        }
        Some(self.unescaped().0)
    }

    /// A string token's value, unescaped only when the scan saw an escape
    /// (a base64 vector is not searched again for a backslash).
    fn unescaped(&self) -> (Cow<'a, str>, bool) {
        let escaped = self
            .doc
            .tape
            .nodes
            .get(self.node as usize)
            .is_some_and(|n| n.aux == ESCAPED);
        if escaped {
            return unescape(self.text);
        }
        let inner = self.text.get(1..self.text.len().saturating_sub(1));
        (Cow::Borrowed(inner.unwrap_or_default()), true)
    }

    /// A non-negative integer written as one (`8`, never `8.0`, `"8"` or `-0`).
    pub fn count(&self) -> Option<u64> {
        let text = self.text();
        if text.bytes().all(|b| b.is_ascii_digit()) {
            text.parse().ok()
        } else {
            None
        }
    }

    /// A finite number, in any JSON number form.
    pub fn number(&self) -> Option<f64> {
        if self.kind() != Kind::Number {
            return None;
        }
        self.text().parse::<f64>().ok().filter(|n| n.is_finite())
    }

    /// `true` or `false`.
    pub fn boolean(&self) -> Option<bool> {
        match self.text() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        }
    }
}

/// A string token's value (quotes included in `token`), and whether it
/// read exactly: a lone surrogate escape reads as U+FFFD.
fn unescape(token: &str) -> (Cow<'_, str>, bool) {
    let inner = token
        .get(1..token.len().saturating_sub(1))
        .unwrap_or_default();
    let mut out = String::with_capacity(inner.len());
    let mut exact = true;
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let decoded = match chars.next() {
            Some('b') => '\u{8}',
            Some('f') => '\u{c}',
            Some('n') => '\n',
            Some('r') => '\r',
            Some('t') => '\t',
            Some('u') => {
                let (c, whole) = unicode_escape(&mut chars);
                exact &= whole;
                c
            }
            Some(other) => other,
            None => break,
        };
        out.push(decoded);
    }
    (Cow::Owned(out), exact)
}

/// The character of a `\uXXXX` escape (the `\u` already read), joining a
/// surrogate pair; `false` when it is a lone surrogate (read as U+FFFD).
fn unicode_escape(chars: &mut std::str::Chars<'_>) -> (char, bool) {
    let hex = |chars: &mut std::str::Chars<'_>| -> Option<u32> {
        let digits = chars.as_str().get(..4)?;
        let value = u32::from_str_radix(digits, 16).ok()?;
        chars.nth(3);
        Some(value)
    };
    let Some(first) = hex(chars) else {
        return ('\u{fffd}', false);
    };
    if (0xD800..0xDC00).contains(&first) {
        // A high surrogate: whole only when a low one follows.
        let rest = chars.as_str();
        if let Some(low) = rest.strip_prefix("\\u") {
            let mut after = low.chars();
            if let Some(second) = hex(&mut after).filter(|s| (0xDC00..0xE000).contains(s)) {
                *chars = after;
                let joined = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
                return (char::from_u32(joined).unwrap_or('\u{fffd}'), true);
            }
        }
        return ('\u{fffd}', false);
    }
    match char::from_u32(first) {
        Some(c) => (c, true),
        None => ('\u{fffd}', false),
    }
}

#[cfg(test)]
impl Json<'static> {
    /// A test's value, from a static text: the document is leaked so the
    /// view can outlive the statement.
    pub fn leak(text: &'static [u8]) -> Json<'static> {
        Box::leak(Box::new(Document::parse(text).unwrap())).root()
    }
}

/// An object's members, in document order.
/// Each member: its key (lossy where the key holds a lone surrogate
/// escape), its value, and whether the key reads exactly.
#[derive(Default)]
pub struct Object<'a>(Vec<(Cow<'a, str>, Json<'a>, bool)>);

impl<'a> Object<'a> {
    /// The member with this key. JSON leaves duplicate keys undefined; the
    /// last one wins here, as in serde_json, Python and JavaScript, which is
    /// what the provider and the app both read.
    pub fn get(&self, key: &str) -> Option<Json<'a>> {
        self.0
            .iter()
            .rev()
            .find(|(k, _, _)| k == key)
            .map(|(_, v, _)| *v)
    }

    /// A member that is present and not `null`.
    pub fn present(&self, key: &str) -> Option<Json<'a>> {
        self.get(key).filter(|v| !v.is_null())
    }

    /// Each distinct key once, in document order of its last copy (the
    /// copy [`Object::get`] reads): a duplicated key is one member.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.members().map(|(key, _, _)| key)
    }

    /// Each distinct member once (its last copy): key, value, and whether
    /// the key reads exactly. One pass, so a record of many members is not
    /// searched again per member.
    pub fn members(&self) -> impl Iterator<Item = (&str, Json<'a>, bool)> {
        let members = &self.0;
        // Duplicates are rare: look for them only when there are any, and
        // with a set once an object is large (a hostile body can hold
        // thousands of members).
        let mut seen = std::collections::HashSet::new();
        let distinct: Vec<bool> = if members.len() <= 16 {
            let later = |i: usize| members.get(i + 1..).unwrap_or_default();
            members
                .iter()
                .enumerate()
                .map(|(i, (key, _, _))| !later(i).iter().any(|(k, _, _)| k == key))
                .collect()
        } else {
            let mut last: Vec<bool> = members
                .iter()
                .rev()
                .map(|(k, _, _)| seen.insert(k.as_ref()))
                .collect();
            last.reverse();
            last
        };
        members
            .iter()
            .zip(distinct)
            .filter(|(_, keep)| *keep)
            .map(|((k, v, exact), _)| (k.as_ref(), *v, *exact))
    }
}

/// `%XX` escapes decoded (a query parameter's name, for comparison; a
/// Bedrock model id in a path).
pub fn percent_decoded(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while let Some(&byte) = bytes.get(at) {
        let hex = bytes
            .get(at + 1..at + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (byte, hex) {
            (b'%', Some(decoded)) => {
                out.push(decoded);
                at += 3;
            }
            _ => {
                out.push(byte);
                at += 1;
            }
        }
    }
    out
}

// ---------------------------------------------------------------- splicing

/// Replaces each range of `body` with `null`; the rest is copied as is.
#[cfg(test)]
pub(crate) fn splice(body: &[u8], nulls: &[Range<usize>]) -> Bytes {
    let mut replacements: Vec<(Range<usize>, &[u8])> =
        nulls.iter().map(|r| (r.clone(), &b"null"[..])).collect();
    replace(body, &mut replacements)
}

/// Replaces each range of `body` with its bytes. Inspection hands it
/// disjoint ranges; should two ever overlap, the one starting first is
/// applied and the other dropped, and a range outside the body is ignored:
/// a splice never fails a response.
pub(crate) fn replace(body: &[u8], replacements: &mut [(Range<usize>, &[u8])]) -> Bytes {
    replacements.sort_by_key(|(r, _)| (r.start, std::cmp::Reverse(r.end)));
    let mut out = BytesMut::with_capacity(body.len() + 16 * replacements.len());
    let mut at = 0;
    for (range, bytes) in replacements.iter() {
        let (Some(before), true) = (body.get(at..range.start), range.end <= body.len()) else {
            continue;
        };
        out.extend_from_slice(before);
        out.extend_from_slice(bytes);
        at = range.end;
    }
    out.extend_from_slice(body.get(at..).unwrap_or_default());
    out.freeze()
}

/// What [`scan_numbers`] found wrong, at which element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NumberFault {
    /// The value is not an array at all.
    NotArray,
    /// The element at this position is not a number (a string, null, ...).
    NotNumber(usize),
    /// The element at this position overflows a float (`1e999`).
    NotFinite(usize),
    /// The element at this position is outside the allowed integer range.
    OutOfRange(usize),
}

/// What the elements of a vector must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Elements {
    /// Finite numbers.
    Float,
    /// Integers within the range (Cohere's int8, uint8, binary, ubinary).
    Integer { min: i64, max: i64 },
}

/// Counts the elements of an array of numbers and checks each, from the
/// summary the scan left for the array: a vector's check is a lookup.
/// Only a vector that fails is walked again, to name the first bad element.
pub(crate) fn scan_numbers(value: Json<'_>, elements: Elements) -> Result<usize, NumberFault> {
    if value.kind() != Kind::Array {
        return Err(NumberFault::NotArray);
    }
    let nodes = &value.doc.tape.nodes;
    let summary = nodes
        .get(value.node as usize)
        .and_then(|n| value.doc.tape.summaries.get(n.aux as usize));
    let Some(summary) = summary else {
        // No number at all: empty, or its first element is something else.
        return match value.children().is_empty() {
            true => Ok(0),
            false => Err(NumberFault::NotNumber(0)),
        };
    };
    let sound = summary.others == 0
        && match elements {
            Elements::Float => summary.finite,
            Elements::Integer { min, max } => {
                summary.integer && summary.min >= min && summary.max <= max
            }
        };
    if sound {
        return Ok(summary.numbers as usize);
    }
    first_fault(value.text().as_bytes(), elements)
}

/// Walks a vector that failed its summary, to find its first bad element.
fn first_fault(bytes: &[u8], elements: Elements) -> Result<usize, NumberFault> {
    let mut at = scan::skip_space(bytes, 1);
    let mut count = 0;
    if bytes.get(at) == Some(&b']') {
        return Ok(0);
    }
    loop {
        at = scan::skip_space(bytes, at);
        let start = at;
        // The text is valid JSON: what starts like a number is one.
        match scan::number(bytes, at) {
            Ok((end, _)) => at = end,
            Err(_) => return Err(NumberFault::NotNumber(count)),
        }
        let token = bytes.get(start..at).unwrap_or_default();
        match elements {
            Elements::Float => {
                if !finite(token) {
                    return Err(NumberFault::NotFinite(count));
                }
            }
            Elements::Integer { min, max } => {
                let parsed = std::str::from_utf8(token)
                    .ok()
                    .filter(|t| !t.contains(['.', 'e', 'E']))
                    .and_then(|t| t.parse::<i64>().ok());
                match parsed {
                    Some(n) if (min..=max).contains(&n) => {}
                    _ => return Err(NumberFault::OutOfRange(count)),
                }
            }
        }
        count += 1;
        at = scan::skip_space(bytes, at);
        match bytes.get(at) {
            Some(b',') => at += 1,
            _ => return Ok(count),
        }
    }
}

/// Whether a JSON number token is a finite f64, decided exactly from its
/// decimal magnitude, without converting it: a value below 10^308 is
/// finite, one of 10^309 or more is not, and in between its significant
/// digits are compared with the smallest decimal that rounds to infinity.
/// Underflow is finite (it rounds to zero).
fn finite(token: &[u8]) -> bool {
    /// 2^1024 - 2^970: f64::MAX plus half an ulp. Round-to-nearest-even
    /// sends it and everything above it to infinity (f64::MAX is odd).
    const OVERFLOW: &[u8] = b"179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497792";
    let token = token.strip_prefix(b"-").unwrap_or(token);
    // `split` leaves the separator out: mantissa `e` exponent, integer `.` fraction.
    let mut parts = token.splitn(2, |b| matches!(b, b'e' | b'E'));
    let (mantissa, exponent) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let mut parts = mantissa.splitn(2, |b| *b == b'.');
    let (integer, fraction) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    // Nearly every vector element: a plain decimal well inside the range.
    if exponent.is_empty() && integer.len() <= 308 {
        return true;
    }
    // The magnitude m, with the value in [10^(m-1), 10^m), and where its
    // significant digits start.
    let int_zeros = integer.iter().take_while(|b| **b == b'0').count();
    let (base, skip) = if int_zeros < integer.len() {
        ((integer.len() - int_zeros) as i64, int_zeros)
    } else {
        let frac_zeros = fraction.iter().take_while(|b| **b == b'0').count();
        if frac_zeros == fraction.len() {
            return true; // zero
        }
        (-(frac_zeros as i64), integer.len() + frac_zeros)
    };
    match base.saturating_add(exponent_value(exponent)) {
        ..=308 => true,
        309 => {
            // Same magnitude: compare digit by digit, zero-padded.
            let significant: Vec<u8> = integer.iter().chain(fraction).skip(skip).copied().collect();
            let len = significant.len().max(OVERFLOW.len());
            let digit = |digits: &[u8], i: usize| digits.get(i).copied().unwrap_or(b'0');
            (0..len)
                .map(|i| digit(&significant, i).cmp(&digit(OVERFLOW, i)))
                .find(|o| o.is_ne())
                .is_some_and(|o| o.is_lt())
        }
        _ => false,
    }
}

/// A JSON exponent's value (`+12`, `-3`, `400`), saturating far beyond
/// any magnitude that matters.
fn exponent_value(exponent: &[u8]) -> i64 {
    let (negative, digits) = match exponent.split_first() {
        Some((b'-', digits)) => (true, digits),
        Some((b'+', digits)) => (false, digits),
        _ => (false, exponent),
    };
    let value = digits.iter().fold(0i64, |n, d| {
        n.saturating_mul(10)
            .saturating_add(i64::from(d.wrapping_sub(b'0')))
    });
    if negative {
        -value
    } else {
        value
    }
}

/// The decoded length of standard padded base64, or `None` if it is not that.
pub(crate) fn base64_len(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    if bytes.is_empty() || bytes.len() % 4 != 0 {
        return None;
    }
    let padding = bytes.iter().rev().take_while(|b| **b == b'=').count();
    if padding > 2 {
        return None;
    }
    let body = bytes.get(..bytes.len() - padding)?;
    // A vector is kilobytes of base64: each block is classified without a
    // branch per byte, so it compiles to wide compares.
    let alphabet = |b: u8| {
        (b.wrapping_sub(b'A') < 26)
            | (b.wrapping_sub(b'a') < 26)
            | (b.wrapping_sub(b'0') < 10)
            | (b == b'+')
            | (b == b'/')
    };
    if !body
        .chunks(64)
        .all(|block| block.iter().fold(true, |ok, &b| ok & alphabet(b)))
    {
        return None;
    }
    Some(bytes.len() / 4 * 3 - padding)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_keep_document_order_and_spans() {
        let doc = br#"{"a": 1, "b\u0041": {"c": [1, 2]}, "s": "x\"y"}"#;
        let json = Json::leak(doc);
        let object = json.object().unwrap();
        assert_eq!(object.keys().collect::<Vec<_>>(), ["a", "bA", "s"]);
        let inner = object.get("bA").unwrap();
        assert_eq!(&doc[inner.span(doc)], br#"{"c": [1, 2]}"#);
        assert_eq!(object.get("s").unwrap().string().unwrap(), "x\"y");
        assert!(object.get("zz").is_none());
        let twice = Json::leak(br#"{"k": 1, "k": 2}"#);
        assert_eq!(twice.object().unwrap().get("k").unwrap().text(), "2");
        assert!(json.array().is_none());
    }

    #[test]
    fn duplicate_keys_are_one_member_and_the_last_copy_wins() {
        let doc = br#"{"a": 1, "b": 2, "a": "x"}"#;
        let object = Json::leak(doc).object().unwrap();
        assert_eq!(object.keys().collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(object.get("a").unwrap().text(), "\"x\"");
        let many: String = (0..40).map(|i| format!("\"k{}\":{i},", i % 20)).collect();
        let doc = format!("{{{}\"z\":0}}", many);
        let parsed = Document::parse(doc.as_bytes()).unwrap();
        assert_eq!(parsed.object().unwrap().keys().count(), 21);
    }

    #[test]
    fn lone_surrogates_and_a_byte_order_mark_are_valid_json() {
        let doc = br#"{"x\ud800": "a\udc00", "y": {"\ud800": 1}}"#;
        let object = Json::leak(doc).object().unwrap();
        let keys: Vec<&str> = object.keys().collect();
        assert!(keys[0].starts_with('x') && keys[0].contains('\u{fffd}'));
        assert_eq!(keys[1], "y");
        let value = object.get(keys[0]).unwrap().string().unwrap();
        assert!(value.starts_with('a') && value.contains('\u{fffd}'));
        assert!(object.get("y").unwrap().object().is_some());
        let bom = b"\xEF\xBB\xBF{\"a\": 1}";
        let parsed = Document::parse(bom).unwrap();
        assert_eq!(parsed.root().span(bom), 3..bom.len());
        assert_eq!(parsed.object().unwrap().get("a").unwrap().text(), "1");
    }

    #[test]
    fn counts_are_plain_non_negative_integers() {
        let value = |t: &'static str| Json::leak(t.as_bytes());
        assert_eq!(value("8").count(), Some(8));
        assert_eq!(value("0").count(), Some(0));
        for bad in [
            "\"8\"", "-1", "8.0", "8.5", "1e3", "true", "{}", "[]", "null", "-0",
        ] {
            assert_eq!(value(bad).count(), None, "{bad}");
        }
        assert_eq!(value("99999999999999999999999").count(), None, "beyond u64");
        assert_eq!(value("1e3").number(), Some(1000.0));
    }

    #[test]
    fn number_vectors_are_counted_and_checked() {
        let scan = |t: &'static str| scan_numbers(Json::leak(t.as_bytes()), Elements::Float);
        assert_eq!(scan("[]"), Ok(0));
        assert_eq!(scan("[ 0.1, -2E-3 ,3e+2,\n4 ]"), Ok(4));
        assert_eq!(scan("[0.1, \"0.2\"]"), Err(NumberFault::NotNumber(1)));
        assert_eq!(scan("[null]"), Err(NumberFault::NotNumber(0)));
        assert_eq!(scan("[1, [2]]"), Err(NumberFault::NotNumber(1)));
        assert_eq!(scan("[1, 1e999]"), Err(NumberFault::NotFinite(1)));
        assert_eq!(scan("[1.7e308]"), Ok(1));
        // Overflow is decided by magnitude, however many digits carry it.
        let zeros = "0".repeat(250);
        let nines = "9".repeat(289);
        for (token, ok) in [
            (format!("1{zeros}e60"), false),
            (format!("{nines}e20"), false),
            (format!("0.{zeros}1e558"), true),
            (format!("0.{zeros}1e560"), false),
            ("1.7976931348623157e308".into(), true),
            ("1.7976931348623158e308".into(), true),
            ("1.7976931348623159e308".into(), false),
            ("-1.7976931348623159e308".into(), false),
            ("17976931348623158e292".into(), true),
            ("1e309".into(), false),
            ("1e-400".into(), true),
            ("0.00001e312".into(), true),
            ("0e999999999999999999999".into(), true),
            ("1e99999999999999999999999".into(), false),
            ("1E+308".into(), true),
        ] {
            assert_eq!(finite(token.as_bytes()), ok, "{token}");
            assert_eq!(
                token.parse::<f64>().unwrap().is_finite(),
                ok,
                "the rule agrees with a correctly rounded parse: {token}"
            );
        }
        assert_eq!(scan("{}"), Err(NumberFault::NotArray));
        let ints = |t: &'static str| {
            scan_numbers(
                Json::leak(t.as_bytes()),
                Elements::Integer {
                    min: -128,
                    max: 127,
                },
            )
        };
        assert_eq!(ints("[-128, 0, 127]"), Ok(3));
        assert_eq!(ints("[128]"), Err(NumberFault::OutOfRange(0)));
        assert_eq!(ints("[1.5]"), Err(NumberFault::OutOfRange(0)));
    }

    #[test]
    fn overlapping_or_stray_ranges_never_break_a_splice() {
        let out = splice(b"0123456789", &[2..6, 4..8, 20..30, 9..10]);
        assert_eq!(&out[..], b"01null678null");
    }

    #[test]
    fn base64_lengths() {
        assert_eq!(base64_len("AAAAAA=="), Some(4));
        assert_eq!(base64_len("AACAPwAAAEA="), Some(8));
        assert_eq!(base64_len("AAAA"), Some(3));
        for bad in ["", "AAA", "AA=A", "A===", "AA!A", "AAAA\n"] {
            assert_eq!(base64_len(bad), None, "{bad}");
        }
    }

    // ------------------------------------------------ against serde_json

    use proptest::prelude::*;

    /// JSON texts with the shapes that matter here (vectors, records,
    /// escapes, every number form, odd spacing); some are then broken by a
    /// few edits, so both sides of the grammar are tried.
    fn document() -> impl Strategy<Value = String> {
        let space = prop::sample::select(vec!["", " ", "\n  ", "\t", "\r\n"]);
        let number = prop::sample::select(vec![
            "0",
            "-0",
            "7",
            "-12",
            "0.5",
            "-0.0069292834",
            "1e3",
            "1E+2",
            "2e-5",
            "1e999",
            "-1e400",
            "1.7976931348623159e308",
            "127",
            "128",
            "-128",
            "255",
            "256",
            "9223372036854775808",
            "00",
            "01",
            "1.",
            ".5",
            "-",
            "1e",
            "+1",
            "0x1",
        ]);
        // Long strings of escapes, so random cuts land between `\` and
        // `u`, inside the hex digits and between the halves of a pair.
        let long: &'static str =
            Box::leak(format!("\"{}\"", r"\u0078".repeat(40)).into_boxed_str());
        let pairs: &'static str =
            Box::leak(format!("\"{}\"", r"a\ud83d\ude00\n\\".repeat(12)).into_boxed_str());
        let string = prop::sample::select(vec![
            long,
            pairs,
            r#""\u00""#,
            r#""\u00zz""#,
            r#""""#,
            r#""abc""#,
            r#""a\"b""#,
            r#""\u00e9\n""#,
            r#""\ud800""#,
            r#""\ud83d\ude00""#,
            r#""\x""#,
            r#""\u12""#,
            "\"tab\there\"",
            r#""AAAAAA==""#,
        ]);
        let leaf = prop_oneof![
            number.prop_map(str::to_string),
            string.prop_map(str::to_string),
            prop::sample::select(vec!["true", "false", "null", "nul", "tru"])
                .prop_map(str::to_string),
        ];
        let value = leaf.prop_recursive(4, 64, 8, move |inner| {
            let space = space.clone();
            prop_oneof![
                (prop::collection::vec((inner.clone(), space.clone()), 0..8)).prop_map(|items| {
                    let body: Vec<String> = items
                        .into_iter()
                        .map(|(v, s)| format!("{s}{v}{s}"))
                        .collect();
                    format!("[{}]", body.join(","))
                }),
                (prop::collection::vec((0..4u8, inner, space), 0..6)).prop_map(|members| {
                    let body: Vec<String> = members
                        .into_iter()
                        .map(|(k, v, s)| format!("{s}\"k{k}\"{s}:{s}{v}"))
                        .collect();
                    format!("{{{}}}", body.join(","))
                }),
            ]
        });
        let edit = (
            any::<prop::sample::Index>(),
            prop::sample::select(vec![
                "", ",", "]", "[", "{", "}", "\"", ":", "1", "-", ".", "e", " ", "\\", "\u{1}",
            ]),
        );
        (value, prop::collection::vec(edit, 0..3), any::<bool>()).prop_map(|(text, edits, keep)| {
            if keep {
                return text;
            }
            let mut text = text.into_bytes();
            for (at, insert) in edits {
                let i = at.index(text.len() + 1);
                if insert.is_empty() && i < text.len() {
                    text.remove(i);
                } else {
                    text.splice(i..i, insert.bytes());
                }
            }
            String::from_utf8(text).unwrap_or_default()
        })
    }

    /// Our view of a value, as a serde_json value (keys: the last copy
    /// wins; numbers compared by the float they denote).
    fn to_value(json: Json<'_>) -> serde_json::Value {
        use serde_json::Value;
        match json.kind() {
            Kind::Object => Value::Object(
                json.object()
                    .unwrap()
                    .members()
                    .map(|(k, v, _)| (k.to_string(), to_value(v)))
                    .collect(),
            ),
            Kind::Array => Value::Array(json.array().unwrap().into_iter().map(to_value).collect()),
            Kind::String => Value::String(json.string().unwrap().into_owned()),
            Kind::Number => serde_json::json!(json.text().parse::<f64>().unwrap()),
            Kind::Bool => Value::Bool(json.boolean().unwrap()),
            Kind::Null => Value::Null,
        }
    }

    fn normalize(value: &serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        match value {
            Value::Object(map) => {
                let sorted: std::collections::BTreeMap<_, _> =
                    map.iter().map(|(k, v)| (k.clone(), normalize(v))).collect();
                serde_json::json!(sorted)
            }
            Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
            Value::Number(n) => serde_json::json!(n.as_f64().unwrap()),
            other => other.clone(),
        }
    }

    /// Every array in a document, depth first.
    fn arrays<'a>(json: Json<'a>, out: &mut Vec<Json<'a>>) {
        match json.kind() {
            Kind::Array => {
                out.push(json);
                json.array()
                    .unwrap()
                    .into_iter()
                    .for_each(|item| arrays(item, out));
            }
            Kind::Object => json
                .object()
                .unwrap()
                .members()
                .for_each(|(_, v, _)| arrays(v, out)),
            _ => {}
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        /// The scanner accepts exactly what serde_json accepts, reads the
        /// same values, and a vector's summary agrees with a walk.
        #[test]
        fn the_scanner_agrees_with_serde_json(
            text in document(),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
            read in 1..9usize,
        ) {
            // Fed in pieces as a body arrives (at random cuts, and in reads
            // of a few bytes), the scan ends the same.
            let whole = Document::parse(text.as_bytes());
            let mut ends: Vec<usize> = cuts.iter().map(|c| c.index(text.len() + 1)).collect();
            ends.sort_unstable();
            let reads: Vec<usize> = (1..=text.len().div_ceil(read)).map(|n| (n * read).min(text.len())).collect();
            for ends in [ends, reads] {
                let mut scanner = Scanner::default();
                for end in ends {
                    scanner.feed(&text.as_bytes()[..end]);
                }
                let fed = Document::scanned(text.as_bytes(), scanner);
                match (&fed, &whole) {
                    (Ok(fed), Ok(whole)) => prop_assert_eq!(format!("{:?}", fed.tape), format!("{:?}", whole.tape)),
                    (fed, whole) => prop_assert_eq!(fed.as_ref().err(), whole.as_ref().err()),
                }
            }

            let ours = Document::parse(text.as_bytes());
            let theirs = serde_json::from_str::<&serde_json::value::RawValue>(&text);
            prop_assert_eq!(ours.is_ok(), theirs.is_ok(), "{:?}: {:?}", text, ours.as_ref().err());
            let Ok(doc) = ours else { return Ok(()) };
            if let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) {
                // (serde_json reads no lone surrogate into a Value.)
                prop_assert_eq!(normalize(&to_value(doc.root())), normalize(&value));
            }
            let mut found = Vec::new();
            arrays(doc.root(), &mut found);
            for array in found {
                for elements in [
                    Elements::Float,
                    Elements::Integer { min: -128, max: 127 },
                    Elements::Integer { min: 0, max: 255 },
                ] {
                    let walked = first_fault(array.text().as_bytes(), elements);
                    prop_assert_eq!(scan_numbers(array, elements), walked, "{}", array.text());
                }
            }
        }
    }
}

//! Borrowed views of a JSON document: what inspection reads, without building
//! a tree or converting numbers it does not need.
//!
//! A [`Json`] is a slice of the original bytes (a serde_json `RawValue`), so
//! it knows its own byte span: that is what lets `figures` replace exactly one
//! value's bytes and leave every other byte of the body as it came. Vectors
//! are checked by [`scan_numbers`], one pass over their text that counts
//! elements and checks each is a number, without materializing floats.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::Deserializer;
use serde_json::value::RawValue;

/// One JSON value, borrowed from the document it came from.
/// Its text is always valid JSON: a `Json` is only made by a parse.
#[derive(Clone, Copy)]
pub(crate) struct Json<'a> {
    text: &'a str,
}

impl fmt::Debug for Json<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text)
    }
}

impl<'a> From<&'a RawValue> for Json<'a> {
    fn from(raw: &'a RawValue) -> Self {
        Self { text: raw.get() }
    }
}

/// The kind of a value, read from its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Object,
    Array,
    String,
    Number,
    Bool,
    Null,
}

impl<'a> Json<'a> {
    /// Parses a whole document (validating its syntax once).
    pub(crate) fn parse(bytes: &'a [u8]) -> Result<Self, serde_json::Error> {
        Self::parse_document(bytes).map(|(json, _)| json)
    }

    /// Parses a whole document and, when its root is an object, its members,
    /// in one pass: bodies can be megabytes of vectors.
    pub(crate) fn parse_document(
        bytes: &'a [u8],
    ) -> Result<(Self, Option<Object<'a>>), serde_json::Error> {
        let text = std::str::from_utf8(bytes)
            .map_err(|_| <serde_json::Error as de::Error>::custom("the body is not UTF-8"))?;
        // RFC 8259 §8.1: a parser may ignore a byte-order mark, and the
        // apps' JSON readers do (Python's `json.loads` on bytes, `fetch`'s
        // `.json()`), so it is not a reason to reject. Spans stay relative
        // to the whole body, so the mark is kept on a rewrite.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let trimmed = text.trim_matches(|c| matches!(c, ' ' | '\n' | '\r' | '\t'));
        if trimmed.starts_with('{') {
            let mut de = serde_json::Deserializer::from_str(trimmed);
            let members = de.deserialize_map(MembersVisitor)?;
            de.end()?;
            return Ok((Self { text: trimmed }, Some(Object(members))));
        }
        let raw: &'a RawValue = serde_json::from_str(trimmed)?;
        Ok((raw.into(), None))
    }

    /// The value's exact text.
    pub(crate) fn text(&self) -> &'a str {
        self.text
    }

    /// Where this value sits in `document` (which it must borrow from).
    pub(crate) fn span(&self, document: &[u8]) -> Range<usize> {
        let start = self.text.as_ptr() as usize - document.as_ptr() as usize;
        start..start + self.text.len()
    }

    pub(crate) fn kind(&self) -> Kind {
        match self.text().as_bytes().first() {
            Some(b'{') => Kind::Object,
            Some(b'[') => Kind::Array,
            Some(b'"') => Kind::String,
            Some(b't' | b'f') => Kind::Bool,
            Some(b'n') => Kind::Null,
            _ => Kind::Number,
        }
    }

    pub(crate) fn is_null(&self) -> bool {
        self.kind() == Kind::Null
    }

    /// The members of an object, in document order; `None` for a non-object.
    pub(crate) fn object(&self) -> Option<Object<'a>> {
        if self.kind() != Kind::Object {
            return None;
        }
        let mut de = serde_json::Deserializer::from_str(self.text);
        de.deserialize_map(MembersVisitor).ok().map(Object)
    }

    /// The elements of an array; `None` for a non-array.
    pub(crate) fn array(&self) -> Option<Vec<Json<'a>>> {
        if self.kind() != Kind::Array {
            return None;
        }
        let raws: Vec<&'a RawValue> = serde_json::from_str(self.text).ok()?;
        Some(raws.into_iter().map(Json::from).collect())
    }

    /// The elements of an array with the members of each element that is an
    /// object, in one pass; `None` for a non-array.
    pub(crate) fn objects(&self) -> Option<Vec<Option<Object<'a>>>> {
        if self.kind() != Kind::Array {
            return None;
        }
        let mut de = serde_json::Deserializer::from_str(self.text);
        de.deserialize_seq(ObjectsVisitor).ok()
    }

    /// A string's value (unescaped only when it has escapes). A lone UTF-16
    /// surrogate escape (`"\ud800"`, what JavaScript emits for a string cut
    /// inside an emoji) is valid JSON: it reads as U+FFFD, never as "not a
    /// string".
    pub(crate) fn string(&self) -> Option<Cow<'a, str>> {
        if self.kind() != Kind::String {
            return None;
        }
        let text = self.text;
        let inner = text.get(1..text.len().saturating_sub(1))?;
        if inner.contains('\\') {
            let mut de = serde_json::Deserializer::from_str(text);
            de.deserialize_bytes(KeySeed).ok().map(|(text, _)| text)
        } else {
            Some(Cow::Borrowed(inner))
        }
    }

    /// A non-negative integer written as one (`8`, never `8.0`, `"8"` or `-0`).
    pub(crate) fn count(&self) -> Option<u64> {
        let text = self.text();
        if text.bytes().all(|b| b.is_ascii_digit()) {
            text.parse().ok()
        } else {
            None
        }
    }

    /// A finite number, in any JSON number form.
    pub(crate) fn number(&self) -> Option<f64> {
        if self.kind() != Kind::Number {
            return None;
        }
        self.text().parse::<f64>().ok().filter(|n| n.is_finite())
    }

    /// `true` or `false`.
    pub(crate) fn boolean(&self) -> Option<bool> {
        match self.text() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        }
    }
}

/// An object's members, in document order.
/// Each member: its key (lossy where the key holds a lone surrogate
/// escape), its value, and whether the key reads exactly.
pub(crate) struct Object<'a>(Vec<(Cow<'a, str>, Json<'a>, bool)>);

impl<'a> Object<'a> {
    /// The member with this key. JSON leaves duplicate keys undefined; the
    /// last one wins here, as in serde_json, Python and JavaScript, which is
    /// what the provider and the app both read.
    pub(crate) fn get(&self, key: &str) -> Option<Json<'a>> {
        self.0
            .iter()
            .rev()
            .find(|(k, _, _)| k == key)
            .map(|(_, v, _)| *v)
    }

    /// A member that is present and not `null`.
    pub(crate) fn present(&self, key: &str) -> Option<Json<'a>> {
        self.get(key).filter(|v| !v.is_null())
    }

    /// Each distinct key once, in document order of its last copy (the
    /// copy [`Object::get`] reads): a duplicated key is one member.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        self.members().map(|(key, _, _)| key)
    }

    /// Each distinct member once (its last copy): key, value, and whether
    /// the key reads exactly. One pass, so a record of many members is not
    /// searched again per member.
    pub(crate) fn members(&self) -> impl Iterator<Item = (&str, Json<'a>, bool)> {
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

struct MembersVisitor;

impl<'de> Visitor<'de> for MembersVisitor {
    type Value = Vec<(Cow<'de, str>, Json<'de>, bool)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::new();
        while let Some((key, exact)) = map.next_key_seed(KeySeed)? {
            let raw: &'de RawValue = map.next_value()?;
            members.push((key, Json::from(raw), exact));
        }
        Ok(members)
    }
}

struct ObjectsVisitor;

impl<'de> Visitor<'de> for ObjectsVisitor {
    type Value = Vec<Option<Object<'de>>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(ItemSeed)? {
            items.push(item);
        }
        Ok(items)
    }
}

/// An array element: its members if it is an object, else skipped.
struct ItemSeed;

impl<'de> DeserializeSeed<'de> for ItemSeed {
    type Value = Option<Object<'de>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(ItemSeed)
    }
}

impl<'de> Visitor<'de> for ItemSeed {
    type Value = Option<Object<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        MembersVisitor.visit_map(map).map(|m| Some(Object(m)))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// Keys are borrowed unless they hold escapes. They are read as bytes, so
/// that a lone surrogate escape (valid JSON, which serde_json refuses as a
/// Rust `str`) reads as U+FFFD instead of failing the whole document.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    /// The text, and whether it read exactly (not lossily).
    type Value = (Cow<'de, str>, bool);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_bytes(KeySeed)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = (Cow<'de, str>, bool);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok((Cow::Borrowed(v), true))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok((Cow::Owned(v.to_string()), true))
    }

    fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<Self::Value, E> {
        let exact = std::str::from_utf8(v).is_ok();
        Ok((String::from_utf8_lossy(v), exact))
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
        let exact = std::str::from_utf8(v).is_ok();
        Ok((Cow::Owned(String::from_utf8_lossy(v).into_owned()), exact))
    }
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

/// Counts the elements of an array of numbers in one pass over its text,
/// checking each as it goes. The text must already be valid JSON (it comes
/// from a parsed [`Json`]), so only the element kinds need checking: any
/// element that does not start like a number is not one.
pub(crate) fn scan_numbers(value: Json<'_>, elements: Elements) -> Result<usize, NumberFault> {
    let bytes = value.text().as_bytes();
    if bytes.first() != Some(&b'[') {
        return Err(NumberFault::NotArray);
    }
    let mut at = 1;
    let mut count = 0;
    let skip_space = |at: &mut usize| {
        while matches!(bytes.get(*at), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            *at += 1;
        }
    };
    skip_space(&mut at);
    if bytes.get(at) == Some(&b']') {
        return Ok(0);
    }
    loop {
        skip_space(&mut at);
        let start = at;
        if !matches!(bytes.get(at), Some(b'-' | b'0'..=b'9')) {
            return Err(NumberFault::NotNumber(count));
        }
        while matches!(
            bytes.get(at),
            Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
        ) {
            at += 1;
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
        skip_space(&mut at);
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
    if !body
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/')
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
        let json = Json::parse(doc).unwrap();
        let object = json.object().unwrap();
        assert_eq!(object.keys().collect::<Vec<_>>(), ["a", "bA", "s"]);
        let inner = object.get("bA").unwrap();
        assert_eq!(&doc[inner.span(doc)], br#"{"c": [1, 2]}"#);
        assert_eq!(object.get("s").unwrap().string().unwrap(), "x\"y");
        assert!(object.get("zz").is_none());
        let twice = Json::parse(br#"{"k": 1, "k": 2}"#).unwrap();
        assert_eq!(twice.object().unwrap().get("k").unwrap().text(), "2");
        assert!(json.array().is_none());
    }

    #[test]
    fn duplicate_keys_are_one_member_and_the_last_copy_wins() {
        let doc = br#"{"a": 1, "b": 2, "a": "x"}"#;
        let object = Json::parse(doc).unwrap().object().unwrap();
        assert_eq!(object.keys().collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(object.get("a").unwrap().text(), "\"x\"");
        let many: String = (0..40).map(|i| format!("\"k{}\":{i},", i % 20)).collect();
        let doc = format!("{{{}\"z\":0}}", many);
        let object = Json::parse(doc.as_bytes()).unwrap().object().unwrap();
        assert_eq!(object.keys().count(), 21);
    }

    #[test]
    fn lone_surrogates_and_a_byte_order_mark_are_valid_json() {
        let doc = br#"{"x\ud800": "a\udc00", "y": {"\ud800": 1}}"#;
        let object = Json::parse(doc).unwrap().object().unwrap();
        let keys: Vec<&str> = object.keys().collect();
        assert!(keys[0].starts_with('x') && keys[0].contains('\u{fffd}'));
        assert_eq!(keys[1], "y");
        let value = object.get(keys[0]).unwrap().string().unwrap();
        assert!(value.starts_with('a') && value.contains('\u{fffd}'));
        assert!(object.get("y").unwrap().object().is_some());
        let bom = b"\xEF\xBB\xBF{\"a\": 1}";
        let (root, object) = Json::parse_document(bom).unwrap();
        assert_eq!(root.span(bom), 3..bom.len());
        assert_eq!(object.unwrap().get("a").unwrap().text(), "1");
    }

    #[test]
    fn counts_are_plain_non_negative_integers() {
        let value = |t: &'static str| Json::parse(t.as_bytes()).unwrap();
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
        let scan =
            |t: &'static str| scan_numbers(Json::parse(t.as_bytes()).unwrap(), Elements::Float);
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
                Json::parse(t.as_bytes()).unwrap(),
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
}

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

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::Deserializer;
use serde_json::value::RawValue;

/// One JSON value, borrowed from the document it came from.
/// Its text is always valid JSON: a `Json` is only made by a parse.
#[derive(Clone, Copy)]
pub struct Json<'a> {
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
pub enum Kind {
    Object,
    Array,
    String,
    Number,
    Bool,
    Null,
}

impl<'a> Json<'a> {
    /// Parses a whole document (validating its syntax once).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, serde_json::Error> {
        Self::parse_document(bytes).map(|(json, _)| json)
    }

    /// Parses a whole document and, when its root is an object, its members,
    /// in one pass: bodies can be megabytes of vectors.
    pub fn parse_document(
        bytes: &'a [u8],
    ) -> Result<(Self, Option<Object<'a>>), serde_json::Error> {
        let text = std::str::from_utf8(bytes)
            .map_err(|_| <serde_json::Error as de::Error>::custom("the body is not UTF-8"))?;
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
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// Where this value sits in `document` (which it must borrow from).
    pub fn span(&self, document: &[u8]) -> Range<usize> {
        let start = self.text.as_ptr() as usize - document.as_ptr() as usize;
        start..start + self.text.len()
    }

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

    pub fn is_null(&self) -> bool {
        self.kind() == Kind::Null
    }

    /// The members of an object, in document order; `None` for a non-object.
    pub fn object(&self) -> Option<Object<'a>> {
        if self.kind() != Kind::Object {
            return None;
        }
        let mut de = serde_json::Deserializer::from_str(self.text);
        de.deserialize_map(MembersVisitor).ok().map(Object)
    }

    /// The elements of an array; `None` for a non-array.
    pub fn array(&self) -> Option<Vec<Json<'a>>> {
        if self.kind() != Kind::Array {
            return None;
        }
        let raws: Vec<&'a RawValue> = serde_json::from_str(self.text).ok()?;
        Some(raws.into_iter().map(Json::from).collect())
    }

    /// The elements of an array with the members of each element that is an
    /// object, in one pass; `None` for a non-array.
    pub fn objects(&self) -> Option<Vec<Option<Object<'a>>>> {
        if self.kind() != Kind::Array {
            return None;
        }
        let mut de = serde_json::Deserializer::from_str(self.text);
        de.deserialize_seq(ObjectsVisitor).ok()
    }

    /// A string's value (unescaped only when it has escapes).
    pub fn string(&self) -> Option<Cow<'a, str>> {
        if self.kind() != Kind::String {
            return None;
        }
        let text = self.text;
        let inner = &text[1..text.len() - 1];
        if inner.contains('\\') {
            serde_json::from_str::<String>(text).ok().map(Cow::Owned)
        } else {
            Some(Cow::Borrowed(inner))
        }
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

    /// Any integer written as one (`-3`, never `-3.0`).
    pub fn integer(&self) -> Option<i64> {
        let digits = self.text().strip_prefix('-').unwrap_or(self.text());
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            self.text().parse().ok()
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

/// An object's members, in document order.
pub struct Object<'a>(Vec<(Cow<'a, str>, Json<'a>)>);

impl<'a> Object<'a> {
    /// The member with this key. JSON leaves duplicate keys undefined; the
    /// last one wins here, as in serde_json, Python and JavaScript, which is
    /// what the provider and the app both read.
    pub fn get(&self, key: &str) -> Option<Json<'a>> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// A member that is present and not `null`.
    pub fn present(&self, key: &str) -> Option<Json<'a>> {
        self.get(key).filter(|v| !v.is_null())
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_ref())
    }
}

struct MembersVisitor;

impl<'de> Visitor<'de> for MembersVisitor {
    type Value = Vec<(Cow<'de, str>, Json<'de>)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::new();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let raw: &'de RawValue = map.next_value()?;
            members.push((key, Json::from(raw)));
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

/// Keys are borrowed unless they hold escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(KeySeed)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_string()))
    }
}

/// What [`scan_numbers`] found wrong, at which element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumberFault {
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
pub enum Elements {
    /// Finite numbers.
    Float,
    /// Integers within the range (Cohere's int8, uint8, binary, ubinary).
    Integer { min: i64, max: i64 },
}

/// Counts the elements of an array of numbers in one pass over its text,
/// checking each as it goes. The text must already be valid JSON (it comes
/// from a parsed [`Json`]), so only the element kinds need checking: any
/// element that does not start like a number is not one.
pub fn scan_numbers(value: Json<'_>, elements: Elements) -> Result<usize, NumberFault> {
    let bytes = value.text().as_bytes();
    if bytes.first() != Some(&b'[') {
        return Err(NumberFault::NotArray);
    }
    let mut at = 1;
    let mut count = 0;
    let skip_space = |at: &mut usize| {
        while *at < bytes.len() && matches!(bytes[*at], b' ' | b'\n' | b'\r' | b'\t') {
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
        while at < bytes.len()
            && matches!(bytes[at], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
        {
            at += 1;
        }
        let token = &bytes[start..at];
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

/// Whether a JSON number token is a finite f64. Only a decimal exponent near
/// f64's limit (about 1e308) can overflow, so most tokens are settled by
/// counting digits; the few near the edge are parsed.
fn finite(token: &[u8]) -> bool {
    let (mantissa, exponent) = match token.iter().position(|b| matches!(b, b'e' | b'E')) {
        Some(e) => (&token[..e], &token[e + 1..]),
        None => (token, &[][..]),
    };
    let integer_digits = mantissa
        .iter()
        .take_while(|b| **b != b'.')
        .filter(|b| b.is_ascii_digit())
        .count() as i64;
    if exponent.len() <= 2 && integer_digits < 290 {
        return true;
    }
    std::str::from_utf8(token)
        .ok()
        .and_then(|t| t.parse::<f64>().ok())
        .is_some_and(f64::is_finite)
}

/// The decoded length of standard padded base64, or `None` if it is not that.
pub fn base64_len(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    if bytes.is_empty() || bytes.len() % 4 != 0 {
        return None;
    }
    let padding = bytes.iter().rev().take_while(|b| **b == b'=').count();
    if padding > 2 {
        return None;
    }
    let body = &bytes[..bytes.len() - padding];
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
        assert_eq!(value("-3").integer(), Some(-3));
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
    fn base64_lengths() {
        assert_eq!(base64_len("AAAAAA=="), Some(4));
        assert_eq!(base64_len("AACAPwAAAEA="), Some(8));
        assert_eq!(base64_len("AAAA"), Some(3));
        for bad in ["", "AAA", "AA=A", "A===", "AA!A", "AAAA\n"] {
            assert_eq!(base64_len(bad), None, "{bad}");
        }
    }
}

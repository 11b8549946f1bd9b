//! The one pass over a document. It checks the grammar of RFC 8259 (the
//! text is already known to be UTF-8) and writes a small tape of where each
//! value sits, so that later lookups are index walks, not second parses.
//!
//! The cost that matters is the bulk of an embeddings body: millions of
//! numbers inside arrays. Those get no tape entry of their own. Each is
//! checked where it stands (grammar, and whether it is a finite float or
//! an integer) and folded into its array's [`Summary`], so a vector's check
//! later is one lookup. Runs of digits are skipped eight bytes at a time.

use std::fmt;

use super::finite;

/// One value with a tape entry: every value except a number directly
/// inside an array. Offsets are into the scanned text.
#[derive(Debug, Clone, Copy)]
pub(super) struct Node {
    pub(super) start: u32,
    pub(super) end: u32,
    /// The index after this value's subtree (its next sibling, if any).
    pub(super) next: u32,
    /// For an array holding numbers, its entry in [`Tape::summaries`];
    /// for a string, [`ESCAPED`] when it holds an escape; else [`NONE`].
    pub(super) aux: u32,
}

/// No summary, no escape.
pub(super) const NONE: u32 = u32::MAX;
/// A string with at least one escape (so reading it must unescape).
pub(super) const ESCAPED: u32 = 1;

/// What the numbers directly inside one array are.
#[derive(Debug, Clone, Copy)]
pub(super) struct Summary {
    /// Elements that are numbers.
    pub(super) numbers: u32,
    /// Elements that are anything else.
    pub(super) others: u32,
    /// Every number is a finite float.
    pub(super) finite: bool,
    /// Every number is written as an integer that fits `i64`.
    pub(super) integer: bool,
    pub(super) min: i64,
    pub(super) max: i64,
}

/// The structure of a document: its values in document order (a
/// container before its members), and the summaries of number arrays.
#[derive(Debug, Clone, Default)]
pub(super) struct Tape {
    pub(super) nodes: Vec<Node>,
    pub(super) summaries: Vec<Summary>,
}

/// Why a text is not JSON, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    what: &'static str,
    at: usize,
}

impl ParseError {
    pub(super) fn new(what: &'static str, at: usize) -> Self {
        Self { what, at }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.what, self.at)
    }
}

impl std::error::Error for ParseError {}

/// An open container while its members are read.
#[derive(Debug, Clone)]
struct Frame {
    node: u32,
    array: bool,
    summary: Summary,
}

impl Frame {
    fn new(node: u32, array: bool) -> Self {
        let summary = Summary {
            numbers: 0,
            others: 0,
            finite: true,
            integer: true,
            min: i64::MAX,
            max: i64::MIN,
        };
        Self {
            node,
            array,
            summary,
        }
    }
}

/// Where the grammar stands between two bytes of the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A value comes next.
    Value,
    /// Just after `[`: a value or `]`.
    ArrayStart,
    /// Just after `{`: a key or `}`.
    ObjectStart,
    /// A key and its colon come next.
    Key,
    /// A value ended: `,`, its container's end, or the document's end.
    After,
}

/// What one step of the grammar did.
enum Step {
    Next,
    /// The bytes so far end before the step could finish: feed more.
    Suspend,
    /// The document ended (the last bytes were fed).
    Finished,
}

/// A scan in progress. It can be fed a document as its bytes arrive
/// ([`Scanner::feed`], with everything received so far each time): the
/// scan stops before any token the bytes so far might cut (a number that
/// reaches their end may go on), and takes up from there. Only the tail is
/// left to scan when the last byte comes.
#[derive(Debug, Clone)]
pub(crate) struct Scanner {
    i: usize,
    phase: Phase,
    tape: Tape,
    stack: Vec<Frame>,
    finished: bool,
}

impl Default for Scanner {
    fn default() -> Self {
        Self {
            i: 0,
            phase: Phase::Value,
            tape: Tape::default(),
            // Deep enough for every provider's answer without growing.
            stack: Vec::with_capacity(16),
            finished: false,
        }
    }
}

impl Scanner {
    /// Scans what has arrived of a document: `received` is every byte so
    /// far (the same bytes as before, and more). Stops quietly at the first
    /// fault: only the last feed reports it.
    pub(crate) fn feed(&mut self, received: &[u8]) {
        if !self.finished && u32::try_from(received.len()).is_ok_and(|n| n < u32::MAX) {
            let _ = self.run(received, false);
        }
    }

    /// A scan already finished, with its tape.
    pub(super) fn finished(tape: Tape) -> Self {
        Self {
            tape,
            finished: true,
            ..Self::default()
        }
    }

    /// Scans the rest of the whole document and returns its tape.
    pub(super) fn finish(mut self, document: &[u8]) -> Result<Tape, ParseError> {
        if u32::try_from(document.len()).map_or(true, |n| n == u32::MAX) {
            return Err(ParseError::new("the document is larger than 4 GiB", 0));
        }
        if !self.finished {
            self.run(document, true)?;
        }
        Ok(self.tape)
    }

    fn run(&mut self, b: &[u8], last: bool) -> Result<(), ParseError> {
        if self.i == 0 && b.starts_with("\u{feff}".as_bytes()) {
            // RFC 8259 §8.1: a parser may ignore a byte-order mark, and the
            // apps' JSON readers do (Python's `json.loads` on bytes,
            // `fetch`'s `.json()`); spans stay relative to the whole body.
            self.i = 3;
        }
        if self.tape.nodes.capacity() == 0 {
            // About one value per 16 bytes in a chat answer; a vector's
            // numbers take no entries, so a large body reserves little.
            let expected = (b.len() / 16).clamp(16, 1024);
            self.tape.nodes.reserve(expected);
        }
        let mut cursor = Cursor {
            b,
            last,
            i: self.i,
            phase: self.phase,
            tape: std::mem::take(&mut self.tape),
            stack: std::mem::take(&mut self.stack),
        };
        let result = cursor.run();
        self.i = cursor.i;
        self.phase = cursor.phase;
        self.tape = cursor.tape;
        self.stack = cursor.stack;
        self.finished = matches!(result, Ok(true));
        result.map(|_| ())
    }
}

/// A scanner's state over the bytes of one feed.
struct Cursor<'b> {
    b: &'b [u8],
    /// These are all the document's bytes.
    last: bool,
    i: usize,
    phase: Phase,
    tape: Tape,
    stack: Vec<Frame>,
}

impl Cursor<'_> {
    /// Steps until the document ends (`true`) or the bytes do (`false`). A
    /// step that fails is undone, so a later feed retries it with more
    /// bytes; on the last feed its fault is the answer.
    fn run(&mut self) -> Result<bool, ParseError> {
        loop {
            let (start, phase) = (self.i, self.phase);
            match self.step() {
                Ok(Step::Next) => {}
                Ok(Step::Suspend) => return Ok(false),
                Ok(Step::Finished) => return Ok(true),
                Err(fault) if self.last => return Err(fault),
                Err(_) => {
                    (self.i, self.phase) = (start, phase);
                    return Ok(false);
                }
            }
        }
    }

    fn step(&mut self) -> Result<Step, ParseError> {
        self.skip_space();
        let Some(byte) = self.peek() else {
            return match (self.last, self.phase, self.stack.is_empty()) {
                (false, _, _) => Ok(Step::Suspend),
                (true, Phase::After, true) => Ok(Step::Finished),
                (true, Phase::After, false) => Err(self.error("the document ends inside a value")),
                _ => Err(self.error("the document ends where a value was expected")),
            };
        };
        match self.phase {
            Phase::Value => return self.value(byte),
            Phase::ArrayStart if byte == b']' => self.close(),
            Phase::ArrayStart => self.phase = Phase::Value,
            Phase::ObjectStart if byte == b'}' => self.close(),
            Phase::ObjectStart => self.phase = Phase::Key,
            Phase::Key => self.key()?,
            Phase::After => self.after(byte)?,
        }
        Ok(Step::Next)
    }

    /// A value starting with `byte`.
    fn value(&mut self, byte: u8) -> Result<Step, ParseError> {
        let start = self.i;
        let aux = match byte {
            b'{' => {
                self.open(false);
                return Ok(Step::Next);
            }
            b'[' => {
                self.open(true);
                return Ok(Step::Next);
            }
            b'-' | b'0'..=b'9' if self.in_array() => return self.numbers(),
            b'-' | b'0'..=b'9' => {
                let (end, _) = number(self.b, self.i).map_err(fault)?;
                if !self.last && end == self.b.len() {
                    return Ok(Step::Suspend); // more digits may come
                }
                self.i = end;
                NONE
            }
            b'"' => self.string()?,
            b't' => self.literal(b"true").map(|()| NONE)?,
            b'f' => self.literal(b"false").map(|()| NONE)?,
            b'n' => self.literal(b"null").map(|()| NONE)?,
            _ => return Err(self.error("expected a value")),
        };
        self.leaf(start, aux);
        self.count_other();
        self.phase = Phase::After;
        Ok(Step::Next)
    }

    /// What may follow a value: `,`, its container's end, or nothing.
    fn after(&mut self, byte: u8) -> Result<(), ParseError> {
        let Some(top) = self.stack.last() else {
            return Err(self.error("trailing characters"));
        };
        match (byte, top.array) {
            (b',', true) => {
                self.i += 1;
                self.phase = Phase::Value;
            }
            (b',', false) => {
                self.i += 1;
                self.phase = Phase::Key;
            }
            (b']', true) | (b'}', false) => self.close(),
            (_, true) => return Err(self.error("expected `,` or `]`")),
            (_, false) => return Err(self.error("expected `,` or `}`")),
        }
        Ok(())
    }

    /// Counts a value that just ended as a non-number of its array.
    fn count_other(&mut self) {
        if let Some(top) = self.stack.last_mut() {
            if top.array {
                top.summary.others += 1;
            }
        }
    }

    fn in_array(&self) -> bool {
        self.stack.last().is_some_and(|top| top.array)
    }

    /// An object member's key and its colon; the key's entry is written
    /// only once both are there.
    fn key(&mut self) -> Result<(), ParseError> {
        if self.peek() != Some(b'"') {
            return Err(self.error("expected a key"));
        }
        let start = self.i;
        let aux = self.string()?;
        let end = self.i;
        self.skip_space();
        if self.peek() != Some(b':') {
            return Err(self.error("expected `:`"));
        }
        let colon = self.i;
        self.i = end;
        self.leaf(start, aux);
        self.i = colon + 1;
        self.phase = Phase::Value;
        Ok(())
    }

    fn leaf(&mut self, start: usize, aux: u32) {
        let index = self.tape.nodes.len() as u32;
        self.tape.nodes.push(Node {
            start: start as u32,
            end: self.i as u32,
            next: index + 1,
            aux,
        });
    }

    /// Opens the container at the cursor, and steps past its bracket.
    fn open(&mut self, array: bool) {
        let index = self.tape.nodes.len() as u32;
        self.tape.nodes.push(Node {
            start: self.i as u32,
            end: 0,
            next: 0,
            aux: NONE,
        });
        self.stack.push(Frame::new(index, array));
        self.i += 1;
        self.phase = if array {
            Phase::ArrayStart
        } else {
            Phase::ObjectStart
        };
    }

    /// Closes the innermost container at its closing bracket.
    fn close(&mut self) {
        self.i += 1;
        self.phase = Phase::After;
        let Some(frame) = self.stack.pop() else {
            return;
        };
        let next = self.tape.nodes.len() as u32;
        let summary = if frame.summary.numbers > 0 {
            self.tape.summaries.push(frame.summary);
            (self.tape.summaries.len() - 1) as u32
        } else {
            NONE
        };
        if let Some(node) = self.tape.nodes.get_mut(frame.node as usize) {
            node.end = self.i as u32;
            node.next = next;
            node.aux = summary;
        }
        self.count_other();
    }

    /// A run of numbers inside an array (`1, 2.5, -3e2`), folded into the
    /// array's summary. This is the loop a vector's bytes go through: it
    /// keeps its cursor and summary in locals, and commits each number, so
    /// a feed that cuts the run resumes at the number it cut.
    fn numbers(&mut self) -> Result<Step, ParseError> {
        let (b, last) = (self.b, self.last);
        let mut i = self.i;
        let Some(top) = self.stack.last_mut() else {
            return Ok(Step::Next);
        };
        let mut summary = top.summary;
        let step = loop {
            let (end, shape) = match number(b, i) {
                Ok(found) if last || end_before(found.0, b) => found,
                Ok(_) => break Ok(Step::Suspend),
                Err(_) if !last => break Ok(Step::Suspend),
                Err(found) => break Err(fault(found)),
            };
            summary.fold(b.get(i..end).unwrap_or_default(), shape);
            let next = skip_space(b, end);
            if b.get(next) == Some(&b',') {
                i = skip_space(b, next + 1);
                self.phase = Phase::Value;
                if matches!(b.get(i), Some(b'-' | b'0'..=b'9')) {
                    continue;
                }
                break Ok(Step::Next);
            }
            i = end;
            self.phase = Phase::After;
            break Ok(Step::Next);
        };
        top.summary = summary;
        self.i = i;
        step
    }

    /// A string from its opening quote; the cursor ends past the closing
    /// one. Returns [`ESCAPED`] when it holds an escape, else [`NONE`].
    fn string(&mut self) -> Result<u32, ParseError> {
        self.i += 1;
        let mut aux = NONE;
        loop {
            let rest = self.b.get(self.i..).unwrap_or_default();
            let Some(at) = memchr::memchr2(b'"', b'\\', rest) else {
                return Err(self.error("the document ends inside a string"));
            };
            let run = rest.get(..at).unwrap_or_default();
            // Branch-free over the run, so it vectorizes on long strings
            // (a base64 embedding is megabytes of one string).
            if run.iter().fold(false, |any, &c| any | (c < 0x20)) {
                let offset = run.iter().position(|&c| c < 0x20).unwrap_or(0);
                return Err(ParseError::new(
                    "a control character inside a string",
                    self.i + offset,
                ));
            }
            self.i += at;
            if self.peek() == Some(b'"') {
                self.i += 1;
                return Ok(aux);
            }
            aux = ESCAPED;
            // An escape: RFC 8259 §7. Any `\uXXXX` is accepted, a lone
            // surrogate included (JavaScript writes them).
            match self.b.get(self.i + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 2,
                Some(b'u') => {
                    let hex = self.b.get(self.i + 2..self.i + 6);
                    if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                        return Err(self.error("a `\\u` escape needs four hex digits"));
                    }
                    self.i += 6;
                }
                _ => return Err(self.error("an invalid escape")),
            }
        }
    }

    fn literal(&mut self, word: &'static [u8]) -> Result<(), ParseError> {
        if self.b.get(self.i..self.i + word.len()) != Some(word) {
            return Err(self.error("expected a value"));
        }
        self.i += word.len();
        Ok(())
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn skip_space(&mut self) {
        self.i = skip_space(self.b, self.i);
    }

    fn error(&self, what: &'static str) -> ParseError {
        ParseError::new(what, self.i)
    }
}

/// How a number was written.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shape {
    integer_digits: usize,
    fraction: bool,
    exponent: bool,
}

impl Summary {
    fn fold(&mut self, token: &[u8], shape: Shape) {
        self.numbers += 1;
        // A plain decimal of up to 308 integer digits is always finite;
        // anything else is decided exactly (rarely taken).
        if self.finite && (shape.exponent || shape.integer_digits > 308) {
            self.finite = finite(token);
        }
        if self.integer {
            match (shape.fraction || shape.exponent, integer(token)) {
                (false, Some(n)) => {
                    self.min = self.min.min(n);
                    self.max = self.max.max(n);
                }
                _ => self.integer = false,
            }
        }
    }
}

/// One number's grammar at `at`: `-? (0 | [1-9][0-9]*) (. [0-9]+)?
/// ([eE] [+-]? [0-9]+)?`. Returns where it ends and how it was written.
#[inline(always)]
pub(super) fn number(b: &[u8], at: usize) -> Result<(usize, Shape), (&'static str, usize)> {
    // Branch-free: a vector's signs are as good as random.
    let mut i = at + usize::from(b.get(at) == Some(&b'-'));
    let int_start = i;
    i = match b.get(i) {
        Some(b'0') => i + 1,
        Some(b'1'..=b'9') => digits(b, i + 1),
        _ => return Err(("a number needs a digit", i)),
    };
    let mut shape = Shape {
        integer_digits: i - int_start,
        fraction: false,
        exponent: false,
    };
    if b.get(i) == Some(&b'.') {
        let end = digits(b, i + 1);
        if end == i + 1 {
            return Err(("a number needs a digit after `.`", end));
        }
        i = end;
        shape.fraction = true;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let end = digits(b, i);
        if end == i {
            return Err(("a number needs a digit in its exponent", end));
        }
        i = end;
        shape.exponent = true;
    }
    Ok((i, shape))
}

/// The index of the first byte at or after `at` that is not JSON
/// whitespace. Indentation comes eight spaces at a time.
#[inline(always)]
pub(super) fn skip_space(b: &[u8], mut at: usize) -> usize {
    loop {
        match b.get(at) {
            Some(b' ') if b.get(at..at + 8) == Some(b"        ") => at += 8,
            Some(b' ' | b'\n' | b'\r' | b'\t') => at += 1,
            _ => return at,
        }
    }
}

/// Whether a number ending at `end` ends before the bytes so far do
/// (else more digits may follow in the next feed).
fn end_before(end: usize, b: &[u8]) -> bool {
    end < b.len()
}

fn fault((what, at): (&'static str, usize)) -> ParseError {
    ParseError::new(what, at)
}

/// An integer token's value, `None` beyond `i64`.
fn integer(token: &[u8]) -> Option<i64> {
    let (negative, digits) = match token.split_first() {
        Some((b'-', digits)) => (true, digits),
        _ => (false, token),
    };
    let mut n: i64 = 0;
    for d in digits {
        let d = i64::from(d.wrapping_sub(b'0'));
        n = n.checked_mul(10)?;
        n = if negative {
            n.checked_sub(d)?
        } else {
            n.checked_add(d)?
        };
    }
    Some(n)
}

/// The index after the run of ASCII digits starting at `at`, eight bytes
/// at a time: a vector's numbers are mostly digits.
#[inline(always)]
fn digits(b: &[u8], mut at: usize) -> usize {
    while let Some(chunk) = b.get(at..at + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word);
        // A byte's high bit ends up set iff it is not '0'..='9': below
        // '0' the subtraction wraps, above '9' the addition reaches 0x80.
        // Carries and borrows only start at such a byte and only move to
        // later bytes, so the first flagged byte is the first non-digit.
        let flags = (x.wrapping_add(0x4646_4646_4646_4646) | x.wrapping_sub(0x3030_3030_3030_3030))
            & 0x8080_8080_8080_8080;
        if flags != 0 {
            return at + (flags.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while b.get(at).is_some_and(u8::is_ascii_digit) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digit_runs_end_at_the_first_non_digit() {
        for text in [
            "",
            "1",
            "12345678",
            "123456789",
            "1234567.",
            "0123456789012345,",
            "9x",
            "12345678 ",
        ] {
            let expected = text.bytes().take_while(u8::is_ascii_digit).count();
            assert_eq!(digits(text.as_bytes(), 0), expected, "{text:?}");
        }
        for byte in 0..=255u8 {
            let mut text = *b"12345678";
            text[3] = byte;
            let expected = if byte.is_ascii_digit() { 8 } else { 3 };
            assert_eq!(digits(&text, 0), expected, "byte {byte}");
        }
    }

    #[test]
    fn space_runs_end_at_the_first_other_byte() {
        let space = |b: u8| matches!(b, b' ' | b'\n' | b'\r' | b'\t');
        for byte in 0..=255u8 {
            for at in 0..12 {
                let mut text = *b"  \n\t\r        \n";
                if at < text.len() {
                    text[at] = byte;
                }
                let expected = text.iter().take_while(|b| space(**b)).count();
                assert_eq!(skip_space(&text, 0), expected, "byte {byte} at {at}");
            }
        }
    }

    #[test]
    fn integers_fit_i64_or_are_none() {
        assert_eq!(integer(b"-128"), Some(-128));
        assert_eq!(integer(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(integer(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(integer(b"9223372036854775808"), None);
    }
}

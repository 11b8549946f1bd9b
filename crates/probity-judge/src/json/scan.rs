//! The one pass over a document. It checks the grammar of RFC 8259 (the
//! text is already known to be UTF-8) and writes a small tape of where each
//! value sits, so that later lookups are index walks, not second parses.
//!
//! The cost that matters is the bulk of an embeddings body: millions of
//! numbers inside arrays. Those get no tape entry of their own. Each is
//! checked where it stands (grammar, and whether it is a finite float or
//! an integer) and folded into its array's [`NumberSummary`], so a vector's check
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
pub(super) struct NumberSummary {
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
    pub(super) summaries: Vec<NumberSummary>,
}

/// Why a text is not JSON, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
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
struct OpenContainer {
    node: u32,
    array: bool,
    summary: NumberSummary,
}

impl OpenContainer {
    fn new(node: u32, array: bool) -> Self {
        let summary = NumberSummary {
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
    /// A key comes next.
    Key,
    /// A key ended: its colon comes next.
    Colon,
    /// A value ended: `,`, its container's end, or the document's end.
    After,
}

/// What one step of the grammar did.
enum GrammarStep {
    Next,
    /// A token the bytes so far may cut begins: [`Cursor::resume`] reads it.
    Cut,
    /// The bytes so far end before the step could finish: feed more.
    Suspend,
    /// The document ended (the last bytes were fed).
    Finished,
}

/// A token the bytes so far end inside. It keeps where its grammar
/// stands, so the next feed goes on at the byte this one stopped at: a
/// string of megabytes that arrives in thousands of reads is still read
/// once (a hostile upstream picks the length).
#[derive(Debug, Clone, Copy)]
enum Cut {
    None,
    String(OpenString),
    Number(OpenNumber),
}

/// A string whose closing quote has not come yet. The cursor stays past
/// its last escape (where a fault is reported); the search goes on from
/// `searched`.
#[derive(Debug, Clone, Copy)]
struct OpenString {
    start: usize,
    /// An object's key: its colon comes next.
    key: bool,
    aux: u32,
    /// Everything from the cursor to here is neither a quote nor a
    /// backslash.
    searched: usize,
    /// The first control character among those bytes: a fault once the
    /// run ends (should the string never end, that is the fault).
    control: Option<usize>,
}

impl OpenString {
    /// Where the search for its end goes on, the cursor being at `i`
    /// (the one place that says so: the scan and its test's count).
    fn resume_at(&self, i: usize) -> usize {
        self.searched.max(i)
    }
}

/// A number whose end has not come yet; the cursor stays at its start.
#[derive(Debug, Clone, Copy)]
struct OpenNumber {
    /// Directly inside an array: folded into its summary.
    in_array: bool,
    /// Where its grammar goes on, and what comes there.
    at: usize,
    part: NumberPart,
    int_start: usize,
    shape: NumberShape,
}

/// What a number's grammar expects at [`OpenNumber::at`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NumberPart {
    Sign,
    FirstDigit,
    /// More integer digits, after a first one that is not `0`.
    Digits,
    /// The integer part ended: a fraction, an exponent or the end.
    Fraction,
    FractionFirst,
    FractionDigits,
    Exponent,
    ExponentSign,
    ExponentFirst,
    ExponentDigits,
}

/// A scan in progress. It can be fed a document as its bytes arrive
/// ([`Scanner::feed`], with everything received so far each time): the
/// scan goes as far as the bytes so far allow, keeps its place inside a
/// token they cut ([`Cut`]), and takes up from that byte. A feed never
/// reads a byte an earlier one passed, but for the first few bytes of an
/// escape or a literal it cut (at most five); only the tail is left to
/// scan when the last byte comes.
#[derive(Debug, Clone)]
pub struct Scanner {
    i: usize,
    phase: Phase,
    cut: Cut,
    tape: Tape,
    stack: Vec<OpenContainer>,
    finished: bool,
    /// A fault the bytes so far settle (no later byte can undo it).
    fault: Option<ParseError>,
    /// The bytes the feeds read, each from where it took up (the bound a
    /// test holds against the body's length).
    #[cfg(test)]
    examined: u64,
}

impl Default for Scanner {
    fn default() -> Self {
        Self {
            i: 0,
            phase: Phase::Value,
            cut: Cut::None,
            tape: Tape::default(),
            // Deep enough for every provider's answer without growing.
            stack: Vec::with_capacity(16),
            finished: false,
            fault: None,
            #[cfg(test)]
            examined: 0,
        }
    }
}

impl Scanner {
    /// Scans what has arrived of a document: `received` is every byte so
    /// far (the same bytes as before, and more). Stops at the first fault,
    /// which [`Scanner::finish`] reports.
    pub fn feed(&mut self, received: &[u8]) {
        if !self.finished && u32::try_from(received.len()).is_ok_and(|n| n < u32::MAX) {
            if let Err(fault) = self.run(received, false) {
                self.fault = Some(fault);
                self.finished = true;
            }
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
        if let Some(fault) = self.fault {
            return Err(fault);
        }
        if !self.finished {
            self.run(document, true)?;
        }
        Ok(self.tape)
    }

    /// The bytes read so far, each feed counted from where it took up.
    #[cfg(test)]
    pub(super) fn examined(&self) -> u64 {
        self.examined
    }

    /// Where the next feed takes up.
    #[cfg(test)]
    fn resume_at(&self) -> usize {
        match self.cut {
            Cut::None => self.i,
            Cut::String(open) => open.resume_at(self.i),
            Cut::Number(open) => open.at,
        }
    }

    fn run(&mut self, b: &[u8], last: bool) -> Result<(), ParseError> {
        const BOM: &[u8] = "\u{feff}".as_bytes();
        if self.i == 0 && !last && BOM.starts_with(b) {
            return Ok(()); // the first bytes may yet be a byte-order mark
        }
        if self.i == 0 && b.starts_with(BOM) {
            // RFC 8259 §8.1: a parser may ignore a byte-order mark, and the
            // apps' JSON readers do (Python's `json.loads` on bytes,
            // `fetch`'s `.json()`); spans stay relative to the whole body.
            self.i = 3;
        }
        // An upper bound: a feed reads from where it takes up to the end
        // of the bytes at most.
        #[cfg(test)]
        {
            self.examined += b.len().saturating_sub(self.resume_at()) as u64;
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
            cut: self.cut,
            tape: std::mem::take(&mut self.tape),
            stack: std::mem::take(&mut self.stack),
        };
        let result = cursor.run();
        self.i = cursor.i;
        self.phase = cursor.phase;
        self.cut = cursor.cut;
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
    cut: Cut,
    tape: Tape,
    stack: Vec<OpenContainer>,
}

impl Cursor<'_> {
    /// Steps until the document ends (`true`) or the bytes do (`false`).
    /// A fault is one the bytes so far settle: a step that more bytes
    /// might finish suspends instead.
    fn run(&mut self) -> Result<bool, ParseError> {
        // A token is left cut only by a feed that stopped inside it (or a
        // step that says so): the steps never look for one.
        let mut step = GrammarStep::Cut;
        loop {
            if let GrammarStep::Cut = step {
                step = self.resume()?;
            }
            match step {
                GrammarStep::Next | GrammarStep::Cut => {}
                GrammarStep::Suspend => return Ok(false),
                GrammarStep::Finished => return Ok(true),
            }
            step = self.step()?;
        }
    }

    /// Goes on with the token the bytes cut, if any.
    fn resume(&mut self) -> Result<GrammarStep, ParseError> {
        match self.cut {
            Cut::None => Ok(GrammarStep::Next),
            Cut::String(open) => self.string(open),
            Cut::Number(open) => self.number(open),
        }
    }

    fn step(&mut self) -> Result<GrammarStep, ParseError> {
        self.skip_space();
        let Some(byte) = self.peek() else {
            return match (self.last, self.phase, self.stack.is_empty()) {
                (false, _, _) => Ok(GrammarStep::Suspend),
                (true, Phase::After, true) => Ok(GrammarStep::Finished),
                (true, Phase::After, false) => Err(self.error("the document ends inside a value")),
                (true, Phase::Colon, _) => Err(self.error("expected `:`")),
                _ => Err(self.error("the document ends where a value was expected")),
            };
        };
        match self.phase {
            Phase::Value => return self.value(byte),
            Phase::ArrayStart if byte == b']' => self.close(),
            Phase::ArrayStart => self.phase = Phase::Value,
            Phase::ObjectStart if byte == b'}' => self.close(),
            Phase::ObjectStart => self.phase = Phase::Key,
            Phase::Key if byte == b'"' => return self.open_string(true),
            Phase::Key => return Err(self.error("expected a key")),
            Phase::Colon if byte == b':' => {
                self.i += 1;
                self.phase = Phase::Value;
            }
            Phase::Colon => return Err(self.error("expected `:`")),
            Phase::After => self.after(byte)?,
        }
        Ok(GrammarStep::Next)
    }

    /// A value starting with `byte`.
    fn value(&mut self, byte: u8) -> Result<GrammarStep, ParseError> {
        let word: &'static [u8] = match byte {
            b'{' => {
                self.open(false);
                return Ok(GrammarStep::Next);
            }
            b'[' => {
                self.open(true);
                return Ok(GrammarStep::Next);
            }
            b'-' | b'0'..=b'9' if self.in_array() => return self.numbers(None),
            b'-' | b'0'..=b'9' => {
                self.cut = Cut::Number(OpenNumber::at(self.i, false));
                return Ok(GrammarStep::Cut);
            }
            b'"' => return self.open_string(false),
            b't' => b"true",
            b'f' => b"false",
            b'n' => b"null",
            _ => return Err(self.error("expected a value")),
        };
        let start = self.i;
        match self.b.get(start..start + word.len()) {
            Some(found) if found == word => {}
            // A literal the bytes so far cut is read again whole (five
            // bytes at most).
            None if !self.last && word.starts_with(self.b.get(start..).unwrap_or_default()) => {
                return Ok(GrammarStep::Suspend);
            }
            _ => return Err(self.error("expected a value")),
        }
        self.i += word.len();
        self.ended(start, NONE);
        Ok(GrammarStep::Next)
    }

    /// A value other than a container ended at the cursor.
    fn ended(&mut self, start: usize, aux: u32) {
        self.leaf(start, aux);
        self.count_other();
        self.phase = Phase::After;
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
        self.stack.push(OpenContainer::new(index, array));
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
    /// keeps its cursor and summary in locals, and commits each number. A
    /// number the bytes so far cut goes on in [`Cursor::number`], which
    /// hands it back here once it ends (`resumed`: where, and its shape).
    fn numbers(
        &mut self,
        resumed: Option<(usize, NumberShape)>,
    ) -> Result<GrammarStep, ParseError> {
        let (b, last) = (self.b, self.last);
        let mut i = self.i;
        let Some(top) = self.stack.last_mut() else {
            return Ok(GrammarStep::Next);
        };
        let mut summary = top.summary;
        let mut cut = false;
        let mut read = match resumed {
            Some(found) => Ok(found),
            None => number(b, i),
        };
        let step = loop {
            let (end, shape) = match read {
                Ok(found) if last || end_before(found.0, b) => found,
                // A fault before the end of the bytes is settled: a digit
                // was due at a byte that is there.
                Err(found) if last || found.1 < b.len() => break Err(fault(found)),
                _ => {
                    cut = true;
                    break Ok(GrammarStep::Next);
                }
            };
            summary.fold(b.get(i..end).unwrap_or_default(), shape);
            let next = skip_space(b, end);
            if b.get(next) == Some(&b',') {
                i = skip_space(b, next + 1);
                self.phase = Phase::Value;
                if matches!(b.get(i), Some(b'-' | b'0'..=b'9')) {
                    read = number(b, i);
                    continue;
                }
                break Ok(GrammarStep::Next);
            }
            i = end;
            self.phase = Phase::After;
            break Ok(GrammarStep::Next);
        };
        top.summary = summary;
        self.i = i;
        if cut {
            // Once per feed at most: the cut number's grammar is read again
            // from its start, up to the end of the bytes, where it stops.
            self.phase = Phase::Value;
            self.cut = Cut::Number(OpenNumber::at(i, true));
            return Ok(GrammarStep::Cut);
        }
        step
    }

    /// Goes on with the number at the cursor, from where its grammar
    /// stopped; the cursor moves past it once it ends.
    fn number(&mut self, mut open: OpenNumber) -> Result<GrammarStep, ParseError> {
        match open.resume(self.b, self.last) {
            Err(found) => Err(fault(found)),
            Ok(None) => {
                self.cut = Cut::Number(open);
                Ok(GrammarStep::Suspend)
            }
            Ok(Some(end)) => {
                self.cut = Cut::None;
                if open.in_array {
                    return self.numbers(Some((end, open.shape)));
                }
                let start = self.i;
                self.i = end;
                self.ended(start, NONE);
                Ok(GrammarStep::Next)
            }
        }
    }

    /// Reads the string (an object's key when `key`) at the cursor.
    fn open_string(&mut self, key: bool) -> Result<GrammarStep, ParseError> {
        let start = self.i;
        self.i += 1;
        self.string(OpenString {
            start,
            key,
            aux: NONE,
            searched: self.i,
            control: None,
        })
    }

    /// Goes on with a string, from where the search for its end stopped.
    /// Once it ends, the cursor is past its closing quote and its entry is
    /// written (a key's before its colon: `:` comes next).
    fn string(&mut self, mut open: OpenString) -> Result<GrammarStep, ParseError> {
        loop {
            let from = open.resume_at(self.i);
            let rest = self.b.get(from..).unwrap_or_default();
            let found = memchr::memchr2(b'"', b'\\', rest);
            let run = rest.get(..found.unwrap_or(rest.len())).unwrap_or_default();
            // Branch-free over the run, so it vectorizes on long strings
            // (a base64 embedding is megabytes of one string).
            if open.control.is_none() && run.iter().fold(false, |any, &c| any | (c < 0x20)) {
                let offset = run.iter().position(|&c| c < 0x20).unwrap_or(0);
                open.control = Some(from + offset);
            }
            let Some(at) = found else {
                if self.last {
                    return Err(self.error("the document ends inside a string"));
                }
                open.searched = self.b.len();
                self.cut = Cut::String(open);
                return Ok(GrammarStep::Suspend);
            };
            if let Some(control) = open.control {
                return Err(ParseError::new(
                    "a control character inside a string",
                    control,
                ));
            }
            self.i = from + at;
            if self.peek() == Some(b'"') {
                self.i += 1;
                self.cut = Cut::None;
                if open.key {
                    self.leaf(open.start, open.aux);
                    // Its colon, most often right here (else a step finds
                    // it, or says why not).
                    self.skip_space();
                    self.phase = if self.peek() == Some(b':') {
                        self.i += 1;
                        Phase::Value
                    } else {
                        Phase::Colon
                    };
                } else {
                    self.ended(open.start, open.aux);
                }
                return Ok(GrammarStep::Next);
            }
            open.aux = ESCAPED;
            // An escape: RFC 8259 §7. Any `\uXXXX` is accepted, a lone
            // surrogate included (JavaScript writes them). One the bytes
            // so far cut is read again from its backslash (six bytes at
            // most).
            let cut = !self.last;
            match self.b.get(self.i + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 2,
                Some(b'u') => {
                    let hex = self.b.get(self.i + 2..).unwrap_or_default();
                    let hex = hex.get(..4).unwrap_or(hex);
                    if !hex.iter().all(u8::is_ascii_hexdigit) || (hex.len() < 4 && !cut) {
                        return Err(self.error("a `\\u` escape needs four hex digits"));
                    }
                    if hex.len() < 4 {
                        open.searched = self.i;
                        self.cut = Cut::String(open);
                        return Ok(GrammarStep::Suspend);
                    }
                    self.i += 6;
                }
                None if cut => {
                    open.searched = self.i;
                    self.cut = Cut::String(open);
                    return Ok(GrammarStep::Suspend);
                }
                _ => return Err(self.error("an invalid escape")),
            }
            open.searched = self.i;
        }
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
pub(super) struct NumberShape {
    integer_digits: usize,
    fraction: bool,
    exponent: bool,
}

impl NumberSummary {
    fn fold(&mut self, token: &[u8], shape: NumberShape) {
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

impl OpenNumber {
    /// The number starting at `at`, not read yet.
    fn at(at: usize, in_array: bool) -> Self {
        Self {
            in_array,
            at,
            part: NumberPart::Sign,
            int_start: at,
            shape: NumberShape {
                integer_digits: 0,
                fraction: false,
                exponent: false,
            },
        }
    }

    /// Reads on from where the grammar stopped: the same grammar as
    /// [`number`], one part at a time, so it can stop at any byte. `None`:
    /// the bytes ran out before the number could be known to end (only
    /// when they are not the last); else where it ends.
    fn resume(&mut self, b: &[u8], last: bool) -> Result<Option<usize>, (&'static str, usize)> {
        loop {
            let at = self.at;
            if at >= b.len() && !last {
                return Ok(None);
            }
            let byte = b.get(at).copied();
            (self.at, self.part) = match (self.part, byte) {
                (NumberPart::Sign, Some(b'-')) => {
                    self.int_start = at + 1;
                    (at + 1, NumberPart::FirstDigit)
                }
                (NumberPart::Sign, _) => {
                    self.int_start = at;
                    (at, NumberPart::FirstDigit)
                }
                (NumberPart::FirstDigit, Some(b'0')) => (at + 1, NumberPart::Fraction),
                (NumberPart::FirstDigit, Some(b'1'..=b'9')) => (at + 1, NumberPart::Digits),
                (NumberPart::FirstDigit, _) => return Err(("a number needs a digit", at)),
                (NumberPart::Digits, _) => match digits(b, at) {
                    end if end == b.len() && !last => (end, NumberPart::Digits),
                    end => (end, NumberPart::Fraction),
                },
                (NumberPart::Fraction, next) => {
                    self.shape.integer_digits = at - self.int_start;
                    match next {
                        Some(b'.') => (at + 1, NumberPart::FractionFirst),
                        _ => (at, NumberPart::Exponent),
                    }
                }
                (NumberPart::FractionFirst, Some(b'0'..=b'9')) => {
                    self.shape.fraction = true;
                    (at + 1, NumberPart::FractionDigits)
                }
                (NumberPart::FractionFirst, _) => {
                    return Err(("a number needs a digit after `.`", at));
                }
                (NumberPart::FractionDigits, _) => match digits(b, at) {
                    end if end == b.len() && !last => (end, NumberPart::FractionDigits),
                    end => (end, NumberPart::Exponent),
                },
                (NumberPart::Exponent, Some(b'e' | b'E')) => (at + 1, NumberPart::ExponentSign),
                (NumberPart::Exponent, _) => return Ok(Some(at)),
                (NumberPart::ExponentSign, Some(b'+' | b'-')) => {
                    (at + 1, NumberPart::ExponentFirst)
                }
                (NumberPart::ExponentSign, _) => (at, NumberPart::ExponentFirst),
                (NumberPart::ExponentFirst, Some(b'0'..=b'9')) => {
                    self.shape.exponent = true;
                    (at + 1, NumberPart::ExponentDigits)
                }
                (NumberPart::ExponentFirst, _) => {
                    return Err(("a number needs a digit in its exponent", at));
                }
                (NumberPart::ExponentDigits, _) => match digits(b, at) {
                    end if end == b.len() && !last => (end, NumberPart::ExponentDigits),
                    end => return Ok(Some(end)),
                },
            };
        }
    }
}

/// One number's grammar at `at`: `-? (0 | [1-9][0-9]*) (. [0-9]+)?
/// ([eE] [+-]? [0-9]+)?`. Returns where it ends and how it was written.
#[inline(always)]
pub(super) fn number(b: &[u8], at: usize) -> Result<(usize, NumberShape), (&'static str, usize)> {
    // Branch-free: a vector's signs are as good as random.
    let mut i = at + usize::from(b.get(at) == Some(&b'-'));
    let int_start = i;
    i = match b.get(i) {
        Some(b'0') => i + 1,
        Some(b'1'..=b'9') => digits(b, i + 1),
        _ => return Err(("a number needs a digit", i)),
    };
    let mut shape = NumberShape {
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

    /// The scan of `text` fed in `read`-byte reads, then finished.
    fn fed(text: &[u8], read: usize) -> (Result<String, ParseError>, u64) {
        let mut scanner = Scanner::default();
        let mut end = 0;
        while end < text.len() {
            end = (end + read).min(text.len());
            scanner.feed(&text[..end]);
        }
        let examined = scanner.examined();
        let tape = scanner.finish(text).map(|tape| format!("{tape:?}"));
        (tape, examined)
    }

    fn whole(text: &[u8]) -> Result<String, ParseError> {
        Scanner::default()
            .finish(text)
            .map(|tape| format!("{tape:?}"))
    }

    /// Tokens that span reads, valid and not: long strings, every escape
    /// (a surrogate pair too), numbers of every form, literals, a key
    /// spaced from its colon, a byte-order mark, and faults at their
    /// edges.
    const SPANNING: &[&str] = &[
        r#"{"a": "\u0078\u0078\u0078x\ud83d\ude00\n\"\\\/\b\f\r\t"}"#,
        r#"["\u0078", "abcdefghijklmnopqrstuvwxyz", "", "\ud800"]"#,
        r#"{"key\u00e9"   :   "v", "k2"
            : [true, false, null]}"#,
        "[-0.5e+10, 12345678901234567890, 0, -0, 1E-7, 3.25, 7]",
        "-123456789.000123e-45",
        "12",
        "0",
        "\u{feff}[1, 2]",
        "  \u{feff}[]",
        "\u{feff}",
        "[1, 2",
        "\"abc",
        "\"abc\\",
        "\"abc\\u00",
        "\"\\u00g0\"",
        "\"\\x\"",
        "\"a\u{1}b\"",
        "\"a\u{1}b",
        "\"a\\n\u{1}b",
        "[1.]",
        "[1.x]",
        "[1e]",
        "[1e+]",
        "[-]",
        "[01]",
        "[1 2]",
        "[1,]",
        "{\"a\" 1}",
        "{\"a\"",
        "{\"a\"   ",
        "{1: 2}",
        "[tru]",
        "[trux]",
        "nul",
        "[true, fals",
        "{} x",
        "[[[[{\"a\": [[1, [2.5, \"x\"]]]}]]]]",
    ];

    #[test]
    fn a_body_fed_in_any_reads_scans_as_it_does_whole() {
        for text in SPANNING {
            let text = text.as_bytes();
            let expected = whole(text);
            for read in 1..=text.len().max(1) {
                assert_eq!(
                    fed(text, read).0,
                    expected,
                    "{:?} in {read}-byte reads",
                    std::str::from_utf8(text)
                );
            }
            // One cut at every byte, and two around it.
            for cut in 0..=text.len() {
                for second in cut..=text.len() {
                    let mut scanner = Scanner::default();
                    scanner.feed(&text[..cut]);
                    scanner.feed(&text[..second]);
                    let tape = scanner.finish(text).map(|tape| format!("{tape:?}"));
                    assert_eq!(
                        tape,
                        expected,
                        "{:?} cut at {cut} and {second}",
                        std::str::from_utf8(text)
                    );
                }
            }
        }
    }

    /// The bodies a hostile upstream can make long: one string of escapes,
    /// one of plain bytes, many strings, deep nesting, long numbers and
    /// runs of space.
    fn long_bodies(n: usize) -> Vec<(&'static str, String)> {
        vec![
            (
                "one string of escapes",
                format!("{{\"s\": \"{}\"}}", "\\u0078".repeat(n)),
            ),
            ("one plain string", format!("[\"{}\"]", "A".repeat(6 * n))),
            ("a key", format!("{{\"{}\" : 1}}", "k".repeat(6 * n))),
            (
                "many strings",
                format!("[{}\"x\"]", "\"ab\\ncd\", ".repeat(n / 2)),
            ),
            (
                "deep nesting",
                format!("{}1{}", "[{\"a\":".repeat(n / 4), "}]".repeat(n / 4)),
            ),
            (
                "one long number",
                format!(
                    "[{}.{}e{}]",
                    "1".repeat(2 * n),
                    "2".repeat(2 * n),
                    "3".repeat(2 * n)
                ),
            ),
            (
                "one long number outside an array",
                format!("{{\"n\": -{}.5}}", "9".repeat(6 * n)),
            ),
            ("many numbers", format!("[{}0]", "-1.5e3, ".repeat(n))),
            (
                "runs of space",
                format!("[1{}, 2{}]", " ".repeat(3 * n), "\n".repeat(3 * n)),
            ),
        ]
    }

    #[test]
    fn a_resumed_scan_never_reads_again_what_it_passed() {
        // 1-byte reads: a scan that went back to a token's start would
        // read about len²/2 bytes (a billion here), not about len.
        for (name, body) in long_bodies(8_000) {
            let body = body.as_bytes();
            for read in [1, 7, 4096] {
                let (tape, examined) = fed(body, read);
                assert!(tape.is_ok(), "{name}: {tape:?}");
                assert_eq!(tape, whole(body), "{name} in {read}-byte reads");
                let len = body.len() as u64;
                assert!(
                    examined <= 6 * len,
                    "{name} in {read}-byte reads: {examined} bytes read for {len}"
                );
            }
        }
    }

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

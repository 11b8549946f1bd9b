//! The oracle of `tests/it/property.rs`: what a client may receive for an
//! upstream answer, read from the manual (docs/src/) alone.
//!
//! - a strict RFC 8259 reader ([`Doc`]) that keeps every value's byte span,
//!   resolves pointers the way probity reads duplicate keys (the last one
//!   wins) and accepts what the grammar accepts (lone surrogate escapes,
//!   numbers of any size);
//! - the figure tables of the manual's dialect pages, and a reading of each figure that is
//!   only ever sure of the clear cases ([`Reading`]);
//! - the relations between figures (the manual, docs/src/concepts/relations.md)
//!   as data beside the tables, judged over those readings ([`relate`]),
//!   and a stream's running totals against earlier events ([`Running`]):
//!   each figure sound alone is kept, contradicted, or (when a figure a
//!   relation needs is unclear) either ([`Fate`]);
//! - the checks of a rewrite: the listed pointers name figures, and the
//!   client's bytes are the upstream's with exactly the listed values
//!   replaced by `null`, none of them a sound figure no relation
//!   contradicts ([`check_rewrite`]); a clearly malformed or contradicted
//!   figure is listed and a record left with nothing sound and consistent
//!   collapses ([`check_required`]);
//! - SSE and NDJSON framing, and the walk that matches a client's stream to
//!   the upstream's event by event ([`walk_stream`]).

use std::ops::Range;

use crate::support::fixtures::splice;

/// One thing the oracle found wrong: `kind` groups findings of one cause,
/// `detail` says where.
#[derive(Debug, Clone)]
pub struct Problem {
    pub kind: String,
    pub detail: String,
}

pub fn problem(kind: impl Into<String>, detail: impl Into<String>) -> Problem {
    Problem {
        kind: kind.into(),
        detail: detail.into(),
    }
}

// ---------------------------------------------------------------- JSON

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Object,
    Array,
    String,
    Number,
    Literal,
}

/// One value of a document.
#[derive(Debug, Clone)]
pub struct Node {
    pub parent: Option<usize>,
    /// The member's key (unescaped; a lone surrogate reads as U+FFFD) or the
    /// element's index.
    pub token: String,
    /// The value's bytes.
    pub value: Range<usize>,
    /// An object member: from its key to the end of its value.
    pub member: Option<Range<usize>>,
    /// An object member: its key, quotes included.
    pub key: Option<Range<usize>>,
    pub kind: Kind,
}

/// A parsed document: its values in document order, the root first.
#[derive(Debug, Clone)]
pub struct Doc {
    pub nodes: Vec<Node>,
    children: Vec<Vec<usize>>,
}

pub const BOM: &[u8] = b"\xEF\xBB\xBF";

impl Doc {
    /// Reads a JSON text (UTF-8, one value, whitespace around it); `None`
    /// when the grammar says it is not one.
    pub fn parse(text: &[u8]) -> Option<Doc> {
        std::str::from_utf8(text).ok()?;
        let mut parser = Parser {
            t: text,
            at: 0,
            nodes: Vec::new(),
            children: Vec::new(),
            depth: 0,
        };
        parser.ws();
        parser.value(None, String::new(), None, None)?;
        parser.ws();
        (parser.at == text.len()).then_some(Doc {
            nodes: parser.nodes,
            children: parser.children,
        })
    }

    /// As [`Doc::parse`], one leading UTF-8 BOM allowed (spans count it).
    pub fn parse_body(text: &[u8]) -> Option<Doc> {
        match text.strip_prefix(BOM) {
            None => Doc::parse(text),
            Some(rest) => {
                let mut doc = Doc::parse(rest)?;
                let shift = |r: &Range<usize>| r.start + 3..r.end + 3;
                for node in &mut doc.nodes {
                    node.value = shift(&node.value);
                    node.member = node.member.as_ref().map(shift);
                    node.key = node.key.as_ref().map(shift);
                }
                Some(doc)
            }
        }
    }

    pub fn children(&self, node: usize) -> &[usize] {
        &self.children[node]
    }

    /// The member or element `token` of `node` (the last of equal keys).
    pub fn child(&self, node: usize, token: &str) -> Option<usize> {
        self.children[node]
            .iter()
            .rev()
            .copied()
            .find(|&c| self.nodes[c].token == token)
    }

    /// The value at an RFC 6901 pointer, the last of duplicate keys winning.
    pub fn resolve(&self, pointer: &str) -> Option<usize> {
        if pointer.is_empty() {
            return Some(0);
        }
        let rest = pointer.strip_prefix('/')?;
        let mut at = 0;
        for raw in rest.split('/') {
            let token = raw.replace("~1", "/").replace("~0", "~");
            if self.nodes[at].kind != Kind::Object && self.nodes[at].kind != Kind::Array {
                return None;
            }
            at = self.child(at, &token)?;
        }
        Some(at)
    }

    /// An object's members, one per key (the last of equal keys), in the
    /// order the keys first appear.
    pub fn members(&self, node: usize) -> Vec<(String, usize)> {
        let mut out: Vec<(String, usize)> = Vec::new();
        for &c in &self.children[node] {
            let token = self.nodes[c].token.clone();
            match out.iter_mut().find(|(k, _)| *k == token) {
                Some(slot) => slot.1 = c,
                None => out.push((token, c)),
            }
        }
        out
    }

    /// The pointer of a node (escaped).
    pub fn pointer(&self, mut node: usize) -> String {
        let mut tokens = Vec::new();
        while let Some(parent) = self.nodes[node].parent {
            tokens.push(self.nodes[node].token.replace('~', "~0").replace('/', "~1"));
            node = parent;
        }
        tokens.reverse();
        tokens.iter().map(|t| format!("/{t}")).collect()
    }

    /// The tokens from the root to a node.
    pub fn tokens(&self, mut node: usize) -> Vec<String> {
        let mut tokens = Vec::new();
        while let Some(parent) = self.nodes[node].parent {
            tokens.push(self.nodes[node].token.clone());
            node = parent;
        }
        tokens.reverse();
        tokens
    }

    /// Whether `inner` lies inside `outer` (or is it).
    pub fn within(&self, mut inner: usize, outer: usize) -> bool {
        loop {
            if inner == outer {
                return true;
            }
            match self.nodes[inner].parent {
                Some(p) => inner = p,
                None => return false,
            }
        }
    }
}

struct Parser<'a> {
    t: &'a [u8],
    at: usize,
    nodes: Vec<Node>,
    children: Vec<Vec<usize>>,
    depth: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while matches!(self.t.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn value(
        &mut self,
        parent: Option<usize>,
        token: String,
        key: Option<Range<usize>>,
        member_start: Option<usize>,
    ) -> Option<usize> {
        let start = self.at;
        let kind = match *self.t.get(self.at)? {
            b'{' => Kind::Object,
            b'[' => Kind::Array,
            b'"' => Kind::String,
            b'-' | b'0'..=b'9' => Kind::Number,
            _ => Kind::Literal,
        };
        let id = self.nodes.len();
        self.nodes.push(Node {
            parent,
            token,
            value: start..start,
            member: None,
            key,
            kind,
        });
        self.children.push(Vec::new());
        if let Some(p) = parent {
            self.children[p].push(id);
        }
        match kind {
            Kind::Object | Kind::Array => {
                self.depth += 1;
                if self.depth > 200 {
                    return None;
                }
                self.at += 1;
                self.ws();
                let close = if kind == Kind::Object { b'}' } else { b']' };
                if self.t.get(self.at) == Some(&close) {
                    self.at += 1;
                } else {
                    let mut index = 0usize;
                    loop {
                        if kind == Kind::Object {
                            let key_start = self.at;
                            let key = self.string()?;
                            let name = decode_string(&self.t[key.clone()]);
                            self.ws();
                            if self.t.get(self.at) != Some(&b':') {
                                return None;
                            }
                            self.at += 1;
                            self.ws();
                            self.value(Some(id), name, Some(key), Some(key_start))?;
                        } else {
                            self.value(Some(id), index.to_string(), None, None)?;
                        }
                        index += 1;
                        self.ws();
                        match self.t.get(self.at)? {
                            b',' => {
                                self.at += 1;
                                self.ws();
                            }
                            c if *c == close => {
                                self.at += 1;
                                break;
                            }
                            _ => return None,
                        }
                    }
                }
                self.depth -= 1;
            }
            Kind::String => {
                self.string()?;
            }
            Kind::Number => self.number()?,
            Kind::Literal => {
                let rest = &self.t[self.at..];
                let len = [&b"true"[..], b"false", b"null"]
                    .iter()
                    .find(|w| rest.starts_with(w))?
                    .len();
                self.at += len;
            }
        }
        self.nodes[id].value = start..self.at;
        self.nodes[id].member = member_start.map(|s| s..self.at);
        Some(id)
    }

    /// A string at `at`: its span, quotes included.
    fn string(&mut self) -> Option<Range<usize>> {
        let start = self.at;
        if self.t.get(self.at) != Some(&b'"') {
            return None;
        }
        self.at += 1;
        loop {
            match *self.t.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    return Some(start..self.at);
                }
                b'\\' => {
                    match *self.t.get(self.at + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 2,
                        b'u' => {
                            let hex = self.t.get(self.at + 2..self.at + 6)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.at += 6;
                        }
                        _ => return None,
                    };
                }
                c if c < 0x20 => return None,
                _ => self.at += 1,
            }
        }
    }

    fn number(&mut self) -> Option<()> {
        let digits = |p: &mut Self| {
            let from = p.at;
            while matches!(p.t.get(p.at), Some(b'0'..=b'9')) {
                p.at += 1;
            }
            (p.at > from).then_some(())
        };
        if self.t.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        match self.t.get(self.at)? {
            b'0' => self.at += 1,
            b'1'..=b'9' => digits(self)?,
            _ => return None,
        }
        if self.t.get(self.at) == Some(&b'.') {
            self.at += 1;
            digits(self)?;
        }
        if matches!(self.t.get(self.at), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.t.get(self.at), Some(b'+' | b'-')) {
                self.at += 1;
            }
            digits(self)?;
        }
        Some(())
    }
}

/// A JSON string's text (quotes included) unescaped; a lone surrogate
/// becomes U+FFFD.
pub fn decode_string(raw: &[u8]) -> String {
    let inner = &raw[1..raw.len() - 1];
    let text = String::from_utf8_lossy(inner);
    if !text.contains('\\') {
        return text.into_owned();
    }
    let mut units: Vec<u16> = Vec::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0u16; 2];
            units.extend_from_slice(c.encode_utf16(&mut buf));
            continue;
        }
        let unit = match chars.next() {
            Some('b') => 8,
            Some('f') => 12,
            Some('n') => 10,
            Some('r') => 13,
            Some('t') => 9,
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                u16::from_str_radix(&hex, 16).unwrap_or(0xFFFD)
            }
            Some(other) => other as u16,
            None => break,
        };
        units.push(unit);
    }
    String::from_utf16_lossy(&units)
}

/// Whether a JSON text is a JSON object (whitespace around it allowed).
pub fn is_json_object(text: &[u8]) -> bool {
    Doc::parse(text).is_some_and(|d| d.nodes[0].kind == Kind::Object)
}

// ---------------------------------------------------------------- figure tables

/// What a figure must be to be well-formed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Domain {
    /// A non-negative integer written as one.
    Count,
    /// A non-negative number (Cohere's `meta`).
    Number,
    /// A non-empty string.
    Id,
    /// Not a figure: a record the provider's schema requires, which keeps
    /// its object (its malformed figures are nulled one by one).
    Required,
}

use Domain::{Count, Id, Number, Required};

/// A table: pointers (a last segment `*` stands for every member of that
/// record) and their domains.
pub type Figures = &'static [(&'static str, Domain)];

pub const OPENAI_EMBED: Figures = &[
    ("/usage", Required),
    ("/id", Id),
    ("/usage/prompt_tokens", Count),
    ("/usage/total_tokens", Count),
];
pub const OPENAI_CHAT: Figures = &[
    ("/id", Id),
    ("/usage/prompt_tokens", Count),
    ("/usage/completion_tokens", Count),
    ("/usage/total_tokens", Count),
    ("/usage/prompt_tokens_details/*", Count),
    ("/usage/completion_tokens_details/*", Count),
];
/// The Responses API's response object (whole, and under `/response` in
/// the stream's events that carry one): `usage` may collapse; its two
/// details records keep their object (the openai SDKs' types need them).
pub const OPENAI_RESPONSES: Figures = &[
    ("/usage/input_tokens_details", Required),
    ("/usage/output_tokens_details", Required),
    ("/id", Id),
    ("/usage/input_tokens", Count),
    ("/usage/output_tokens", Count),
    ("/usage/total_tokens", Count),
    ("/usage/input_tokens_details/*", Count),
    ("/usage/output_tokens_details/*", Count),
];
pub const OLLAMA_EMBED: Figures = &[
    ("/prompt_eval_count", Count),
    ("/total_duration", Count),
    ("/load_duration", Count),
];
pub const OLLAMA_GEN: Figures = &[
    ("/prompt_eval_count", Count),
    ("/eval_count", Count),
    ("/total_duration", Count),
    ("/load_duration", Count),
    ("/prompt_eval_duration", Count),
    ("/eval_duration", Count),
];
pub const COHERE_EMBED: Figures = &[
    ("/id", Id),
    ("/meta/billed_units/input_tokens", Number),
    ("/meta/billed_units/images", Number),
    ("/meta/billed_units/image_tokens", Number),
    ("/meta/tokens/input_tokens", Number),
    ("/meta/tokens/output_tokens", Number),
];
pub const COHERE_RERANK: Figures = &[
    ("/id", Id),
    ("/meta/billed_units/search_units", Number),
    ("/meta/tokens/input_tokens", Number),
    ("/meta/tokens/output_tokens", Number),
];
/// Cohere's chat answer (cohere-python `types/usage*.py`: numbers).
pub const COHERE_CHAT: Figures = &[
    ("/id", Id),
    ("/usage/billed_units/input_tokens", Number),
    ("/usage/billed_units/output_tokens", Number),
    ("/usage/billed_units/search_units", Number),
    ("/usage/billed_units/classifications", Number),
    ("/usage/tokens/input_tokens", Number),
    ("/usage/tokens/output_tokens", Number),
    ("/usage/cached_tokens", Number),
];
/// Its stream's `message-start` (the id) and `message-end` (the usage,
/// under `/delta`).
pub const COHERE_CHAT_START: Figures = &[("/id", Id)];
pub const COHERE_CHAT_END: Figures = &[
    ("/delta/usage/billed_units/input_tokens", Number),
    ("/delta/usage/billed_units/output_tokens", Number),
    ("/delta/usage/billed_units/search_units", Number),
    ("/delta/usage/billed_units/classifications", Number),
    ("/delta/usage/tokens/input_tokens", Number),
    ("/delta/usage/tokens/output_tokens", Number),
    ("/delta/usage/cached_tokens", Number),
];
pub const JINA: Figures = &[
    ("/usage", Required),
    ("/usage/total_tokens", Count),
    ("/usage/prompt_tokens", Count),
];
pub const VOYAGE: Figures = &[("/usage", Required), ("/usage/total_tokens", Count)];
pub const ANTHROPIC: Figures = &[
    ("/usage", Required),
    ("/id", Id),
    ("/usage/input_tokens", Count),
    ("/usage/output_tokens", Count),
    ("/usage/cache_creation_input_tokens", Count),
    ("/usage/cache_read_input_tokens", Count),
    ("/usage/cache_creation/*", Count),
    ("/usage/output_tokens_details/*", Count),
    ("/usage/server_tool_use/*", Count),
];
/// `message_delta`: the message table without `/id`.
pub const ANTHROPIC_DELTA: Figures = &[
    ("/usage", Required),
    ("/usage/input_tokens", Count),
    ("/usage/output_tokens", Count),
    ("/usage/cache_creation_input_tokens", Count),
    ("/usage/cache_read_input_tokens", Count),
    ("/usage/cache_creation/*", Count),
    ("/usage/output_tokens_details/*", Count),
    ("/usage/server_tool_use/*", Count),
];
/// `message_delta`'s counts are cumulative: a later one never falls below
/// an earlier `message_delta`'s (`message_start`'s are no floor).
pub const ANTHROPIC_RUNNING: &[&str] = &[
    "/usage/input_tokens",
    "/usage/output_tokens",
    "/usage/cache_creation_input_tokens",
    "/usage/cache_read_input_tokens",
];

// ---------------------------------------------------------------- relations

/// What a provider defines a figure to be against others (the manual,
/// docs/src/concepts/relations.md), over the pointers of a table (a
/// wildcard's member by its own pointer). Under the `provider` convention,
/// the one every route of the property test has.
#[derive(Debug, Clone, Copy)]
pub enum Relation {
    /// A part is at most its whole: judged when both are there.
    AtMost {
        name: &'static str,
        part: &'static str,
        whole: &'static str,
    },
    /// Parts together are at most their whole: judged when the whole and
    /// one part are there, an absent part none of it.
    PartsAtMost {
        name: &'static str,
        parts: &'static [&'static str],
        whole: &'static str,
    },
    /// A total is exactly its terms (each there) and its optional terms
    /// (an absent one none).
    Sum {
        name: &'static str,
        total: &'static str,
        terms: &'static [&'static str],
        optional: &'static [&'static str],
    },
}

use Relation::{AtMost, PartsAtMost, Sum};

pub type Relations = &'static [Relation];

/// `part <= whole`, for the tables below.
const fn at_most(name: &'static str, part: &'static str, whole: &'static str) -> Relation {
    AtMost { name, part, whole }
}

/// Chat and completions, whole and each streamed chunk: openai-python
/// `types/completion_usage.py`.
pub const OPENAI_CHAT_RELATIONS: Relations = &[
    Sum {
        name: "total_tokens=prompt_tokens+completion_tokens",
        total: "/usage/total_tokens",
        terms: &["/usage/prompt_tokens", "/usage/completion_tokens"],
        optional: &[],
    },
    at_most(
        "cached_tokens<=prompt_tokens",
        "/usage/prompt_tokens_details/cached_tokens",
        "/usage/prompt_tokens",
    ),
    at_most(
        "prompt_tokens_details.audio_tokens<=prompt_tokens",
        "/usage/prompt_tokens_details/audio_tokens",
        "/usage/prompt_tokens",
    ),
    at_most(
        "prompt_tokens_details.text_tokens<=prompt_tokens",
        "/usage/prompt_tokens_details/text_tokens",
        "/usage/prompt_tokens",
    ),
    at_most(
        "prompt_tokens_details.image_tokens<=prompt_tokens",
        "/usage/prompt_tokens_details/image_tokens",
        "/usage/prompt_tokens",
    ),
    at_most(
        "cache_write_tokens<=prompt_tokens",
        "/usage/prompt_tokens_details/cache_write_tokens",
        "/usage/prompt_tokens",
    ),
    at_most(
        "reasoning_tokens<=completion_tokens",
        "/usage/completion_tokens_details/reasoning_tokens",
        "/usage/completion_tokens",
    ),
    PartsAtMost {
        name: "prediction_tokens<=completion_tokens",
        parts: &[
            "/usage/completion_tokens_details/accepted_prediction_tokens",
            "/usage/completion_tokens_details/rejected_prediction_tokens",
        ],
        whole: "/usage/completion_tokens",
    },
    at_most(
        "completion_tokens_details.audio_tokens<=completion_tokens",
        "/usage/completion_tokens_details/audio_tokens",
        "/usage/completion_tokens",
    ),
    at_most(
        "completion_tokens_details.text_tokens<=completion_tokens",
        "/usage/completion_tokens_details/text_tokens",
        "/usage/completion_tokens",
    ),
];
/// OpenAI's `/embeddings` (on the `openai` dialect and Ollama's `/v1`;
/// not TEI's nor a `/rerank`): `types/create_embedding_response.py`.
pub const OPENAI_EMBED_RELATIONS: Relations = &[at_most(
    "prompt_tokens<=total_tokens",
    "/usage/prompt_tokens",
    "/usage/total_tokens",
)];
/// The Responses API's response object: `types/responses/response_usage.py`.
pub const OPENAI_RESPONSES_RELATIONS: Relations = &[
    Sum {
        name: "total_tokens=input_tokens+output_tokens",
        total: "/usage/total_tokens",
        terms: &["/usage/input_tokens", "/usage/output_tokens"],
        optional: &[],
    },
    at_most(
        "cached_tokens<=input_tokens",
        "/usage/input_tokens_details/cached_tokens",
        "/usage/input_tokens",
    ),
    at_most(
        "cache_write_tokens<=input_tokens",
        "/usage/input_tokens_details/cache_write_tokens",
        "/usage/input_tokens",
    ),
    at_most(
        "reasoning_tokens<=output_tokens",
        "/usage/output_tokens_details/reasoning_tokens",
        "/usage/output_tokens",
    ),
];
/// A message's `usage` and a `message_delta`'s: anthropic-sdk-python
/// `types/usage.py`, `output_tokens_details.py`. No cache figure is bounded
/// by `input_tokens` (it counts only the uncached input).
pub const ANTHROPIC_RELATIONS: Relations = &[
    PartsAtMost {
        name: "cache_creation<=cache_creation_input_tokens",
        parts: &[
            "/usage/cache_creation/ephemeral_5m_input_tokens",
            "/usage/cache_creation/ephemeral_1h_input_tokens",
        ],
        whole: "/usage/cache_creation_input_tokens",
    },
    at_most(
        "thinking_tokens<=output_tokens",
        "/usage/output_tokens_details/thinking_tokens",
        "/usage/output_tokens",
    ),
];

/// Where a JSON text's figures are, which they are, and what they are
/// defined to be against each other.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    /// The pointer the table's pointers are below (`/message` for
    /// `message_start`'s figures).
    pub prefix: &'static str,
    pub figures: Figures,
    pub relations: Relations,
    /// Streams: the figures that are running totals.
    pub running: &'static [&'static str],
}

impl Table {
    /// No figure at all.
    pub const NONE: Table = Table::of(&[], &[]);

    /// Figures at the root and their relations.
    pub const fn of(figures: Figures, relations: Relations) -> Table {
        Table {
            prefix: "",
            figures,
            relations,
            running: &[],
        }
    }

    const fn under(mut self, prefix: &'static str) -> Table {
        self.prefix = prefix;
        self
    }

    const fn running(mut self, running: &'static [&'static str]) -> Table {
        self.running = running;
        self
    }
}

impl Relation {
    pub fn name(&self) -> &'static str {
        match *self {
            AtMost { name, .. } | PartsAtMost { name, .. } | Sum { name, .. } => name,
        }
    }

    /// Every pointer it names, the whole or total first.
    pub fn pointers(&self) -> Vec<&'static str> {
        match *self {
            AtMost { part, whole, .. } => vec![whole, part],
            PartsAtMost { parts, whole, .. } => [&[whole][..], parts].concat(),
            Sum {
                total,
                terms,
                optional,
                ..
            } => [&[total][..], terms, optional].concat(),
        }
    }

    /// Whether figures of these readings keep it, break it, or leave it
    /// unjudged; `Unsure` when a figure it needs is one the oracle cannot
    /// read for sure.
    pub fn judge(&self, term: impl Fn(&str) -> Term) -> Judged {
        // `need` must each be a count; `may` a count or absent (none),
        // `one` of which must be there when asked.
        let (need, may, one): (Vec<&str>, Vec<&str>, bool) = match *self {
            AtMost { part, whole, .. } => (vec![part, whole], vec![], false),
            PartsAtMost { parts, whole, .. } => (vec![whole], parts.to_vec(), true),
            Sum {
                total,
                terms,
                optional,
                ..
            } => ([&[total][..], terms].concat(), optional.to_vec(), false),
        };
        let need: Vec<Term> = need.into_iter().map(&term).collect();
        let may: Vec<Term> = may.into_iter().map(&term).collect();
        // `null` or malformed decides nothing, nor an absent needed figure,
        // whatever an unclear one would be.
        if need
            .iter()
            .any(|t| matches!(t, Term::Absent | Term::Unreadable))
            || may.contains(&Term::Unreadable)
            || (one && may.iter().all(|t| *t == Term::Absent))
        {
            return Judged::Unjudged;
        }
        if need.iter().chain(&may).any(|t| *t == Term::Unclear) {
            return Judged::Unsure;
        }
        let count = |t: &Term| match t {
            Term::Count(n) => u128::from(*n),
            _ => 0,
        };
        let sum = |ts: &[Term]| ts.iter().map(count).sum::<u128>();
        let breached = match *self {
            AtMost { .. } => count(&need[0]) > count(&need[1]),
            PartsAtMost { .. } => sum(&may) > count(&need[0]),
            Sum { .. } => count(&need[0]) != sum(&need[1..]) + sum(&may),
        };
        if breached {
            Judged::Breached
        } else {
            Judged::Holds
        }
    }
}

impl Relation {
    /// The value of `target` at which the relation holds exactly, given
    /// the others' (`value`: `Some(None)` absent, `None` present but no
    /// sound count); `None` when the others leave it unjudged.
    pub fn boundary(
        &self,
        target: &str,
        value: impl Fn(&str) -> Option<Option<u64>>,
    ) -> Option<i128> {
        let count = |p: &str| value(p).flatten().map(i128::from);
        let optional = |p: &str| value(p).map(|v| v.map_or(0, i128::from));
        let others = |ps: &[&str], need: bool| -> Option<i128> {
            ps.iter()
                .filter(|p| **p != target)
                .map(|p| if need { count(p) } else { optional(p) })
                .sum()
        };
        match *self {
            AtMost { part, whole, .. } if target == part => count(whole),
            AtMost { part, .. } => count(part),
            PartsAtMost { parts, whole, .. } if target == whole => {
                // Judged only with one part there.
                let there = parts.iter().any(|p| count(p).is_some());
                others(parts, false).filter(|_| there)
            }
            PartsAtMost { parts, whole, .. } => Some(count(whole)? - others(parts, false)?),
            Sum {
                total,
                terms,
                optional: more,
                ..
            } => {
                let sum = others(terms, true)? + others(more, false)?;
                if target == total {
                    Some(sum)
                } else {
                    Some(count(total)? - sum)
                }
            }
        }
    }
}

/// A figure as a relation reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Term {
    Absent,
    /// A well-formed count.
    Count(u64),
    /// `null` or malformed: not reported, so it cannot be read as none.
    Unreadable,
    /// A value the oracle cannot read for sure.
    Unclear,
}

/// What a relation's judgement was.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Judged {
    /// A figure it needs is not there (or not reported).
    Unjudged,
    Holds,
    Breached,
    Unsure,
}

/// What a figure sound alone becomes against the figures it is defined
/// against.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fate {
    /// Every relation it is in holds or is not judged: it is reported.
    Kept,
    /// A relation it is in is breached: it is not reported.
    Contradicted,
    /// The oracle cannot tell.
    Either,
}

/// The relations of a table over a document's figures, judged from their
/// readings alone (a figure one relation contradicts still decides the
/// others it is in).
#[derive(Debug, Clone, Default)]
pub struct Relating {
    /// One per entry, in the order of [`entries`].
    pub fates: Vec<Fate>,
    /// The relations sure to hold, sure to be breached (their names).
    pub held: Vec<&'static str>,
    pub breached: Vec<&'static str>,
}

pub fn relate(doc: &Doc, text: &[u8], found: &[Entry], table: &Table) -> Relating {
    let index = |pointer: &str| {
        let pointer = format!("{}{pointer}", table.prefix);
        found.iter().position(|e| e.pointer == pointer)
    };
    let term = |pointer: &str| match index(pointer).map(|i| &found[i]) {
        None => Term::Absent,
        Some(e) => match e.reading {
            Reading::Sound => {
                let raw = &text[doc.nodes[e.node].value.clone()];
                Term::Count(String::from_utf8_lossy(raw).parse().unwrap())
            }
            Reading::Null | Reading::Malformed => Term::Unreadable,
            Reading::Unclear => Term::Unclear,
        },
    };
    let mut relating = Relating {
        fates: vec![Fate::Kept; found.len()],
        ..Relating::default()
    };
    let mut unsure: Vec<usize> = Vec::new();
    for relation in table.relations {
        let judged = relation.judge(term);
        let involved = relation.pointers().into_iter().filter_map(index);
        match judged {
            Judged::Breached => {
                relating.breached.push(relation.name());
                for i in involved {
                    relating.fates[i] = Fate::Contradicted;
                }
            }
            Judged::Unsure => unsure.extend(involved),
            Judged::Holds => relating.held.push(relation.name()),
            Judged::Unjudged => {}
        }
    }
    for i in unsure {
        if relating.fates[i] == Fate::Kept {
            relating.fates[i] = Fate::Either;
        }
    }
    relating
}

/// Streams: the last value of each running total that an event reported
/// (well-formed, and not contradicted in its event), to judge later
/// events' by.
#[derive(Debug, Clone, Default)]
pub struct Running {
    kept: Vec<(&'static str, Kept)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kept {
    Value(u64),
    /// The oracle cannot tell what was kept (an unclear value, an unsure
    /// relation): later events' are judged either way.
    Unknown,
}

impl Running {
    /// What earlier events decide of this event's running totals, by the
    /// pointer they are listed by (only those not kept for sure); then this
    /// event's values are kept for the next.
    pub fn judge(&mut self, text: &[u8], table: &Table) -> Vec<(String, Fate)> {
        let mut out = Vec::new();
        if table.running.is_empty() {
            return out;
        }
        let Some(doc) = Doc::parse(text) else {
            return out;
        };
        let found = entries(&doc, text, table.prefix, table.figures);
        let relating = relate(&doc, text, &found, table);
        for &figure in table.running {
            let pointer = format!("{}{figure}", table.prefix);
            let Some(i) = found.iter().position(|e| e.pointer == pointer) else {
                continue;
            };
            let kept = self.kept.iter().position(|(f, _)| *f == figure);
            let now = match (found[i].reading, relating.fates[i]) {
                (Reading::Null | Reading::Malformed, _) | (_, Fate::Contradicted) => continue,
                (Reading::Sound, Fate::Kept) => {
                    let raw = &text[doc.nodes[found[i].node].value.clone()];
                    Kept::Value(String::from_utf8_lossy(raw).parse().unwrap())
                }
                _ => Kept::Unknown,
            };
            match (kept.map(|k| self.kept[k].1), now) {
                (None, _) => self.kept.push((figure, now)),
                (Some(Kept::Value(last)), Kept::Value(value)) if value < last => {
                    out.push((pointer, Fate::Contradicted));
                }
                (Some(Kept::Value(_)), _) => self.kept[kept.unwrap()].1 = now,
                (Some(Kept::Unknown), _) => out.push((pointer, Fate::Either)),
            }
        }
        out
    }
}

pub const TEI_HEADERS: &[&str] = &[
    "x-compute-tokens",
    "x-compute-characters",
    "x-compute-time",
    "x-total-time",
    "x-tokenization-time",
    "x-queue-time",
    "x-inference-time",
];

/// How a streamed answer of an endpoint is judged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StreamKind {
    /// `data: {chunk}` … `data: [DONE]` (chat and completions).
    OpenAi,
    Anthropic,
    /// NDJSON lines, `done: true` last; `message` an object (chat) or
    /// `response` a string (generate).
    Ollama {
        chat: bool,
    },
    /// The Responses API: named events by `type`, no `[DONE]`; a terminal
    /// event (`response.completed`, `.incomplete`, `.failed`) ends it.
    Responses,
    /// Cohere's chat: events named by `event:` (else their data's
    /// `type`), every data JSON; `message-end` its last.
    Cohere,
}

/// A checked endpoint: its body figures and their relations, header
/// figures and stream judge.
#[derive(Debug, Clone, Copy)]
pub struct Endpoint {
    pub table: Table,
    pub headers: &'static [&'static str],
    pub stream: Option<StreamKind>,
}

/// The endpoint probity checks at `path` (after the route prefix), as the
/// manual's dialect pages say; `None` for one it passes unchecked.
pub fn endpoint(dialect: &str, path: &str) -> Option<Endpoint> {
    let body = |figures, relations| {
        Some(Endpoint {
            table: Table::of(figures, relations),
            headers: &[],
            stream: None,
        })
    };
    let streamed = |figures, relations, kind| {
        Some(Endpoint {
            table: Table::of(figures, relations),
            headers: &[],
            stream: Some(kind),
        })
    };
    let ends = |suffix: &str| path.ends_with(suffix);
    match dialect {
        "openai"
            if ends("/responses")
                || (path.contains("/responses/") && ends("/cancel"))
                || path
                    .rsplit_once("/responses/")
                    .is_some_and(|(_, id)| !id.contains('/')) =>
        {
            streamed(
                OPENAI_RESPONSES,
                OPENAI_RESPONSES_RELATIONS,
                StreamKind::Responses,
            )
        }
        "openai" if ends("/chat/completions") || ends("/completions") => {
            streamed(OPENAI_CHAT, OPENAI_CHAT_RELATIONS, StreamKind::OpenAi)
        }
        "openai" if ends("/embeddings") => body(OPENAI_EMBED, OPENAI_EMBED_RELATIONS),
        "openai" if ends("/rerank") => body(OPENAI_EMBED, &[]),
        "ollama" if ends("/api/chat") => {
            streamed(OLLAMA_GEN, &[], StreamKind::Ollama { chat: true })
        }
        "ollama" if ends("/api/generate") => {
            streamed(OLLAMA_GEN, &[], StreamKind::Ollama { chat: false })
        }
        "ollama" if ends("/v1/chat/completions") => {
            streamed(OPENAI_CHAT, OPENAI_CHAT_RELATIONS, StreamKind::OpenAi)
        }
        "ollama" if ends("/api/embed") => body(OLLAMA_EMBED, &[]),
        "ollama" if ends("/api/embeddings") => body(&[], &[]),
        "ollama" if ends("/v1/embeddings") => body(OPENAI_EMBED, OPENAI_EMBED_RELATIONS),
        "cohere" if ends("/v2/chat") => streamed(COHERE_CHAT, &[], StreamKind::Cohere),
        "cohere" if ends("/embed") => body(COHERE_EMBED, &[]),
        "cohere" if ends("/rerank") => body(COHERE_RERANK, &[]),
        "jina" if ends("/embeddings") || ends("/rerank") => body(JINA, &[]),
        // TEI's OpenAI-compatible `/embeddings`: TEI defines no relation.
        "tei" if ends("/embeddings") => body(OPENAI_EMBED, &[]),
        "tei" if ends("/embed") || ends("/rerank") => Some(Endpoint {
            table: Table::NONE,
            headers: TEI_HEADERS,
            stream: None,
        }),
        "voyage" if ends("/embeddings") || ends("/rerank") => body(VOYAGE, &[]),
        "anthropic" if ends("/v1/messages") => {
            streamed(ANTHROPIC, ANTHROPIC_RELATIONS, StreamKind::Anthropic)
        }
        _ => None,
    }
}

/// The record holding a pointer (`""`: the root).
pub fn record_of(pointer: &str) -> &str {
    &pointer[..pointer.rfind('/').unwrap_or(0)]
}

/// Whether `pointer` lies strictly inside `record`.
pub fn under(pointer: &str, record: &str) -> bool {
    pointer.len() > record.len()
        && pointer.starts_with(record)
        && pointer.as_bytes()[record.len()] == b'/'
}

/// What the oracle can tell of a figure's value: only the clear cases.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reading {
    /// `null`: not reported.
    Null,
    Sound,
    Malformed,
    /// Neither clearly sound nor clearly malformed (an integer past u64, a
    /// string with escapes, `-0`, a number that overflows).
    Unclear,
}

pub fn read(domain: Domain, raw: &[u8]) -> Reading {
    let text = String::from_utf8_lossy(raw);
    let text = text.as_ref();
    let first = text.as_bytes().first().copied().unwrap_or(b' ');
    if text == "null" {
        return Reading::Null;
    }
    let number = first == b'-' || first.is_ascii_digit();
    let negative = first == b'-' && text.parse::<f64>().is_ok_and(|n| n < 0.0);
    match domain {
        Count => {
            // A string ("12" too), a boolean, an object, an array; a
            // negative or fractional count, or one not written as an integer.
            if !number || negative || text.contains(['.', 'e', 'E']) {
                Reading::Malformed
            } else if text.bytes().all(|b| b.is_ascii_digit()) && text.parse::<u64>().is_ok() {
                Reading::Sound
            } else {
                Reading::Unclear
            }
        }
        Number => {
            if !number || negative {
                Reading::Malformed
            } else if first != b'-'
                && text.len() <= 30
                && text.parse::<f64>().is_ok_and(f64::is_finite)
            {
                Reading::Sound
            } else {
                Reading::Unclear
            }
        }
        Id => {
            if first != b'"' || text == "\"\"" {
                Reading::Malformed
            } else if text.contains('\\') {
                Reading::Unclear
            } else {
                Reading::Sound
            }
        }
        // A record marker is never read as a figure.
        Required => Reading::Unclear,
    }
}

/// A header figure's reading (TEI: ASCII digits).
pub fn read_header(value: &[u8]) -> Reading {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        Reading::Malformed
    } else if value.len() <= 19 {
        Reading::Sound
    } else {
        Reading::Unclear
    }
}

/// Whether a key (its JSON text, quotes included) reads exactly, with no
/// lone surrogate escape: probity names a wildcard member by such a key
/// (`~` and `/` escaped), and one that does not by the wildcard pointer.
pub fn exact_key(raw: &[u8]) -> bool {
    let unit = |at: usize| {
        let hex = raw.get(at + 2..at + 6)?;
        (raw.get(at..at + 2) == Some(&b"\\u"[..]))
            .then(|| u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok())
            .flatten()
    };
    let mut at = 0;
    while at < raw.len() {
        if raw[at] != b'\\' {
            at += 1;
            continue;
        }
        match unit(at) {
            Some(0xD800..=0xDBFF) if matches!(unit(at + 6), Some(0xDC00..=0xDFFF)) => at += 12,
            Some(0xD800..=0xDFFF) => return false,
            Some(_) => at += 6,
            None => at += 2,
        }
    }
    true
}

/// A member's pointer under `record`, as probity lists it.
fn member_pointer(record: &str, key: &str) -> String {
    format!("{record}/{}", key.replace('~', "~0").replace('/', "~1"))
}

/// One concrete figure found in a document.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The pointer probity lists it by.
    pub pointer: String,
    pub node: usize,
    pub reading: Reading,
}

/// The figures of a table present in a document (below `prefix`), in
/// table order; a wildcard stands for every member of its record.
pub fn entries(doc: &Doc, text: &[u8], prefix: &str, figures: Figures) -> Vec<Entry> {
    let mut out = Vec::new();
    for &(figure, domain) in figures.iter().filter(|(_, d)| *d != Required) {
        let pointer = format!("{prefix}{figure}");
        match pointer.strip_suffix("/*") {
            Some(record) => {
                let Some(at) = doc.resolve(record) else {
                    continue;
                };
                if doc.nodes[at].kind != Kind::Object {
                    continue;
                }
                for (key, node) in doc.members(at) {
                    let raw = doc.nodes[node].key.clone().map(|k| &text[k]);
                    let listed = if raw.is_some_and(exact_key) {
                        member_pointer(record, &key)
                    } else {
                        pointer.clone()
                    };
                    out.push(Entry {
                        pointer: listed,
                        node,
                        reading: read(domain, &text[doc.nodes[node].value.clone()]),
                    });
                }
            }
            None => {
                // A parent that is not an object hides the figure.
                let Some(node) = doc.resolve(&pointer) else {
                    continue;
                };
                let parent = doc.nodes[node].parent.unwrap_or(0);
                if doc.nodes[parent].kind != Kind::Object {
                    continue;
                }
                out.push(Entry {
                    pointer,
                    node,
                    reading: read(domain, &text[doc.nodes[node].value.clone()]),
                });
            }
        }
    }
    out
}

/// The records of a table: the objects holding its figures (never the
/// root, nor the prefix itself).
pub fn records(prefix: &str, figures: Figures) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for &(figure, _) in figures {
        let record = record_of(&format!("{prefix}{figure}")).to_string();
        if record.len() > prefix.len() && !out.contains(&record) {
            out.push(record);
        }
    }
    out
}

/// Whether a pointer is one probity may list for this table: a figure, a
/// wildcard's member (or the wildcard), or a record.
pub fn names_figure(pointer: &str, prefix: &str, figures: Figures) -> bool {
    figures.iter().any(|(figure, _)| {
        let figure = format!("{prefix}{figure}");
        match figure.strip_suffix("/*") {
            Some(record) => pointer == figure || record_of(pointer) == record,
            None => pointer == figure,
        }
    }) || records(prefix, figures).iter().any(|r| r == pointer)
}

/// The `probity-normalized` list: pointers, and how many more were left off
/// (`;+N more`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Listing {
    pub pointers: Vec<String>,
    pub more: usize,
}

pub fn parse_listing(text: &str) -> Listing {
    let (list, rest) = match text.split_once(';') {
        Some((list, rest)) => (list, Some(rest)),
        None => (text, None),
    };
    let more = rest
        .and_then(|r| r.trim().strip_prefix('+'))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Listing {
        pointers: list
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(unfragment)
            .collect(),
        more,
    }
}

/// A pointer from its URI-fragment form (RFC 6901 §6: `%XX` a byte).
fn unfragment(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes
            .get(at + 1..at + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[at], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                at += 3;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `text` with each span replaced by `null`; spans inside another are
/// subsumed by it.
pub fn null_spans(text: &[u8], spans: &[Range<usize>]) -> Vec<u8> {
    let mut spans: Vec<Range<usize>> = spans.to_vec();
    spans.sort_by_key(|r| (r.start, std::cmp::Reverse(r.end)));
    let mut kept: Vec<Range<usize>> = Vec::new();
    for span in spans {
        if kept.last().is_some_and(|k| span.start < k.end) {
            continue; // inside (or equal to) the one before
        }
        kept.push(span);
    }
    let edits: Vec<(Range<usize>, &[u8])> = kept.into_iter().map(|r| (r, &b"null"[..])).collect();
    splice(text, &edits)
}

/// A document's figures: read alone ([`entries`]), what their relations
/// decide of each in the document (`alone`), and with what earlier events
/// decide of a stream's running totals (`settled`).
struct Figured {
    found: Vec<Entry>,
    alone: Vec<Fate>,
    settled: Vec<Fate>,
}

fn figured(doc: &Doc, text: &[u8], table: &Table, earlier: &[(String, Fate)]) -> Figured {
    let found = entries(doc, text, table.prefix, table.figures);
    let alone = relate(doc, text, &found, table).fates;
    let settled = found
        .iter()
        .zip(&alone)
        .map(|(entry, fate)| {
            let before = earlier
                .iter()
                .find(|(p, _)| *p == entry.pointer)
                .map_or(Fate::Kept, |(_, f)| *f);
            match (*fate, before) {
                (Fate::Contradicted, _) | (_, Fate::Contradicted) => Fate::Contradicted,
                (Fate::Either, _) | (_, Fate::Either) => Fate::Either,
                _ => Fate::Kept,
            }
        })
        .collect();
    Figured {
        found,
        alone,
        settled,
    }
}

/// The names of the breached relations entry `i` is in, for a message.
fn contradicting(doc: &Doc, text: &[u8], found: &[Entry], table: &Table, i: usize) -> String {
    let breached = relate(doc, text, found, table).breached;
    let mine: Vec<&str> = table
        .relations
        .iter()
        .filter(|r| breached.contains(&r.name()))
        .filter(|r| {
            r.pointers()
                .iter()
                .any(|p| format!("{}{p}", table.prefix) == found[i].pointer)
        })
        .map(Relation::name)
        .collect();
    if mine.is_empty() {
        "below an earlier event's".to_string()
    } else {
        mine.join(", ")
    }
}

/// Checks a rewrite: every listed pointer names a figure or a record of the
/// table, none nulls a clearly sound figure or collapses a record that keeps
/// one, and `got` is `text` with exactly the listed values nulled.
pub fn check_rewrite(
    text: &[u8],
    got: &[u8],
    listing: &Listing,
    table: &Table,
    earlier: &[(String, Fate)],
) -> Vec<Problem> {
    let (prefix, figures) = (table.prefix, table.figures);
    let mut problems = Vec::new();
    let Some(doc) = Doc::parse_body(text) else {
        problems.push(problem(
            "a body that is not JSON was rewritten",
            "probity-normalized on a body the oracle cannot read as JSON",
        ));
        return problems;
    };
    let Figured {
        found,
        alone,
        settled,
    } = figured(&doc, text, table, earlier);
    let record_list = records(prefix, figures);
    let mut spans: Vec<Range<usize>> = Vec::new();
    let mut wildcards: Vec<String> = Vec::new();
    for pointer in &listing.pointers {
        if !names_figure(pointer, prefix, figures) {
            problems.push(problem(
                "a listed pointer names no figure",
                format!("{pointer} is not in the table of this endpoint"),
            ));
            continue;
        }
        let node = doc.resolve(pointer);
        if let (None, Some(record)) = (node, pointer.strip_suffix("/*")) {
            wildcards.push(record.to_string());
            continue;
        }
        let Some(node) = node else {
            problems.push(problem(
                "a listed pointer is not in the upstream body",
                format!("{pointer} does not resolve in the upstream body"),
            ));
            continue;
        };
        let raw = &text[doc.nodes[node].value.clone()];
        if record_list.contains(pointer) {
            if doc.nodes[node].kind == Kind::Object {
                // A running total that fell is judged after the records
                // are: it keeps its record.
                if let Some(sound) = found.iter().zip(&alone).find(|(e, fate)| {
                    doc.within(e.node, node) && e.reading == Reading::Sound && **fate == Fate::Kept
                }) {
                    problems.push(problem(
                        "a record keeping a sound figure collapsed",
                        format!(
                            "{pointer} was listed though {} is sound and consistent",
                            sound.0.pointer
                        ),
                    ));
                }
            }
        } else if let Some(i) = found.iter().position(|e| e.node == node) {
            if found[i].reading == Reading::Sound && settled[i] == Fate::Kept {
                let kind = if table.relations.is_empty() {
                    "a sound figure was nulled"
                } else {
                    "a sound figure no relation contradicts was nulled"
                };
                problems.push(problem(
                    kind,
                    format!("{pointer} = {}", String::from_utf8_lossy(raw)),
                ));
            }
        }
        spans.push(doc.nodes[node].value.clone());
    }
    if !problems.is_empty() {
        return problems;
    }
    // What `*` and `;+N more` stand for is searched: each wildcard one
    // member of its record whose key does not read exactly, `more` any
    // figures.
    let mut slots: Vec<Vec<Range<usize>>> = Vec::new();
    for record in &wildcards {
        let members = doc
            .resolve(record)
            .map(|r| {
                doc.members(r)
                    .into_iter()
                    .filter(|(_, n)| {
                        let raw = doc.nodes[*n].key.clone().map(|k| &text[k]);
                        !raw.is_some_and(exact_key)
                    })
                    .map(|(_, n)| doc.nodes[n].value.clone())
                    .collect()
            })
            .unwrap_or_default();
        slots.push(members);
    }
    let mut extra: Vec<Range<usize>> = found
        .iter()
        .map(|e| doc.nodes[e.node].value.clone())
        .chain(
            record_list
                .iter()
                .filter_map(|r| doc.resolve(r))
                .map(|n| doc.nodes[n].value.clone()),
        )
        .filter(|s| !spans.contains(s))
        .collect();
    extra.dedup();
    for _ in 0..listing.more {
        slots.push(extra.clone());
    }
    let mut tries = 0;
    if search(text, got, &mut spans, &slots, &mut tries) {
        return problems;
    }
    let want = null_spans(text, &spans);
    problems.push(problem(
        "the rewritten body is not the upstream's with the listed values nulled",
        differ_text(got, &want),
    ));
    problems
}

fn search(
    text: &[u8],
    got: &[u8],
    spans: &mut Vec<Range<usize>>,
    slots: &[Vec<Range<usize>>],
    tries: &mut usize,
) -> bool {
    *tries += 1;
    if *tries > 20_000 {
        return false;
    }
    let Some((slot, rest)) = slots.split_first() else {
        return null_spans(text, spans) == got;
    };
    // A span may be listed twice (a key given twice names one value).
    for span in slot {
        spans.push(span.clone());
        let hit = search(text, got, spans, rest, tries);
        spans.pop();
        if hit {
            return true;
        }
    }
    false
}

/// Where two byte strings part, for a message.
pub fn differ_text(got: &[u8], want: &[u8]) -> String {
    let at = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    let show = |b: &[u8]| escape(&b[at.saturating_sub(30)..(at + 50).min(b.len())]);
    format!(
        "differs at byte {at} ({} bytes, want {}): got {} want {}",
        got.len(),
        want.len(),
        show(got),
        show(want)
    )
}

/// Checks what the manual requires whatever else happens: every clearly
/// malformed or contradicted figure is listed, and a record whose figures
/// are all clearly malformed, contradicted or `null` (one malformed or
/// contradicted at least) collapses.
pub fn check_required(
    text: &[u8],
    listed: &[String],
    table: &Table,
    earlier: &[(String, Fate)],
) -> Vec<Problem> {
    let (prefix, figures) = (table.prefix, table.figures);
    let mut problems = Vec::new();
    let Some(doc) = Doc::parse_body(text) else {
        return problems;
    };
    let Figured {
        found,
        alone,
        settled,
    } = figured(&doc, text, table, earlier);
    for (i, entry) in found.iter().enumerate() {
        let value = || short_bytes(&text[doc.nodes[entry.node].value.clone()]);
        if entry.reading == Reading::Malformed && !listed.contains(&entry.pointer) {
            problems.push(problem(
                "a malformed figure was not listed",
                format!("{} = {} is not in {listed:?}", entry.pointer, value()),
            ));
        }
        let contradicted = entry.reading == Reading::Sound && settled[i] == Fate::Contradicted;
        if contradicted && !listed.contains(&entry.pointer) {
            let relations = contradicting(&doc, text, &found, table, i);
            let kind = if alone[i] == Fate::Contradicted {
                "a contradicted figure was not listed"
            } else {
                "a running total that fell was not listed"
            };
            problems.push(problem(
                kind,
                format!(
                    "{} = {} ({relations}) is not in {listed:?}",
                    entry.pointer,
                    value()
                ),
            ));
        }
    }
    for record in records(prefix, figures) {
        // A record the provider's schema requires keeps its object.
        if figures
            .iter()
            .any(|(f, d)| *d == Required && format!("{prefix}{f}") == record)
        {
            continue;
        }
        let Some(node) = doc.resolve(&record) else {
            continue;
        };
        if doc.nodes[node].kind != Kind::Object {
            continue;
        }
        // Nested records that are not objects make the rule unclear.
        let nested_broken = records(prefix, figures).iter().any(|r| {
            under(r, &record)
                && doc.resolve(r).is_some_and(|n| {
                    !matches!(doc.nodes[n].kind, Kind::Object)
                        && &text[doc.nodes[n].value.clone()] != b"null"
                })
        });
        // What its figures are alone and against each other in the event
        // (a running total that fell is judged after the records are).
        let inside: Vec<(Reading, Fate)> = found
            .iter()
            .zip(&alone)
            .filter(|(e, _)| doc.within(e.node, node))
            .map(|(e, fate)| (e.reading, *fate))
            .collect();
        let gone = |(reading, fate): &(Reading, Fate)| {
            *reading == Reading::Malformed
                || (*reading == Reading::Sound && *fate == Fate::Contradicted)
        };
        let lost = inside.iter().any(gone);
        let rest_gone = inside.iter().all(|e| gone(e) || e.0 == Reading::Null);
        if lost && rest_gone && !nested_broken && !listed.contains(&record) {
            problems.push(problem(
                "a record left with no sound figure did not collapse",
                format!("{record} is not in {listed:?}"),
            ));
        }
    }
    problems
}

// ---------------------------------------------------------------- streams

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Framing {
    Sse,
    Ndjson,
}

/// A stream's events: SSE events end at a blank line (lines end in `\r\n`,
/// `\n` or `\r`), NDJSON lines at `\n`. The flag says whether the event is
/// complete; a tail without its end is a last, incomplete one (an NDJSON
/// tail is still a line).
pub fn split_events(framing: Framing, body: &[u8]) -> Vec<(Range<usize>, bool)> {
    let mut events = Vec::new();
    let mut start = 0;
    let mut at = 0;
    let mut line_start = 0;
    while at < body.len() {
        let end = match body[at] {
            b'\n' => at + 1,
            b'\r' if framing == Framing::Sse => {
                if body.get(at + 1) == Some(&b'\n') {
                    at + 2
                } else {
                    at + 1
                }
            }
            _ => {
                at += 1;
                continue;
            }
        };
        if framing == Framing::Ndjson || at == line_start {
            events.push((start..end, true));
            start = end;
        }
        at = end;
        line_start = end;
    }
    if start < body.len() {
        events.push((start..body.len(), framing == Framing::Ndjson));
    }
    events
}

/// One line of an SSE event: its text and its terminator.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub text: Vec<u8>,
    pub end: Vec<u8>,
}

pub fn lines(raw: &[u8]) -> Vec<Line> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < raw.len() {
        let stop = raw[at..]
            .iter()
            .position(|b| matches!(b, b'\r' | b'\n'))
            .map_or(raw.len(), |n| at + n);
        let end = match raw.get(stop) {
            Some(b'\r') if raw.get(stop + 1) == Some(&b'\n') => stop + 2,
            Some(_) => stop + 1,
            None => stop,
        };
        out.push(Line {
            text: raw[at..stop].to_vec(),
            end: raw[stop..end].to_vec(),
        });
        at = end;
    }
    out
}

/// An SSE event read as a client reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SseEvent {
    pub name: Option<String>,
    /// The `data:` lines joined by `\n`.
    pub data: Option<Vec<u8>>,
    /// Where the data is in the event when it is one `data:` line.
    pub data_range: Option<Range<usize>>,
    /// Every field but `data`, in order (`event`, `id`, `retry`, others).
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// Comment lines, without their `:`.
    pub comments: Vec<Vec<u8>>,
    /// The terminator of every non-comment line (the blank one too), when
    /// they are all the same.
    pub terminator: Option<Vec<u8>>,
}

pub fn parse_sse(raw: &[u8]) -> SseEvent {
    let mut event = SseEvent::default();
    let mut ends: Vec<Vec<u8>> = Vec::new();
    let mut data_lines = 0;
    let mut at = 0;
    for line in lines(raw) {
        let start = at;
        at += line.text.len() + line.end.len();
        if line.text.first() == Some(&b':') {
            event.comments.push(line.text[1..].to_vec());
            continue;
        }
        ends.push(line.end.clone());
        if line.text.is_empty() {
            continue;
        }
        let (field, value, value_at) = match line.text.iter().position(|b| *b == b':') {
            Some(i) => {
                let skip = usize::from(line.text.get(i + 1) == Some(&b' '));
                (
                    line.text[..i].to_vec(),
                    line.text[i + 1 + skip..].to_vec(),
                    start + i + 1 + skip,
                )
            }
            None => (line.text.clone(), Vec::new(), start + line.text.len()),
        };
        match field.as_slice() {
            b"data" => {
                data_lines += 1;
                event.data_range = Some(value_at..value_at + value.len());
                match &mut event.data {
                    None => event.data = Some(value),
                    Some(data) => {
                        data.push(b'\n');
                        data.extend_from_slice(&value);
                    }
                }
            }
            _ => {
                if field == b"event" {
                    event.name = Some(String::from_utf8_lossy(&value).into_owned());
                }
                event.fields.push((field, value));
            }
        }
    }
    if data_lines != 1 {
        event.data_range = None;
    }
    if let Some(first) = ends.first() {
        if ends.iter().all(|e| e == first) {
            event.terminator = Some(first.clone());
        }
    }
    event
}

/// An NDJSON line without its terminator.
pub fn ndjson_data(raw: &[u8]) -> &[u8] {
    let line = raw.strip_suffix(b"\n").unwrap_or(raw);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// What the manual says of one upstream event, in its stream.
#[derive(Debug, Clone)]
pub enum Rule {
    /// Passes as it came (a comment, `[DONE]`, an error, an event type
    /// that is not judged, a blank line), or may (an incomplete SSE tail
    /// that is not an event).
    Untouched,
    /// Judged on invariants the oracle does not model (Anthropic block
    /// indices, Ollama's shape): may break the stream, never rewritten
    /// but for its figures.
    Unmodeled { figures: Option<Table> },
    /// Its figures are judged, against each other and (running totals)
    /// against earlier events'.
    Figures { data: Vec<u8>, table: Table },
    /// It must break the stream: `invalid_json`, `stream_after_done`.
    Breaks(&'static str),
}

/// The rule of each upstream event, in order.
pub fn rules(kind: StreamKind, framing: Framing, body: &[u8]) -> Vec<Rule> {
    let mut done = false;
    let mut out = Vec::new();
    for (range, complete) in split_events(framing, body) {
        let raw = &body[range];
        let rule = match kind {
            StreamKind::OpenAi => {
                let event = parse_sse(raw);
                match event.data {
                    None => Rule::Untouched,
                    Some(_) if done => Rule::Breaks("stream_after_done"),
                    Some(data) if data.trim_ascii() == b"[DONE]" => {
                        done = true;
                        Rule::Untouched
                    }
                    Some(data) => match Doc::parse(&data) {
                        Some(doc) if doc.nodes[0].kind == Kind::Object => {
                            if doc.child(0, "error").is_some() {
                                Rule::Untouched
                            } else {
                                Rule::Figures {
                                    data,
                                    table: Table::of(OPENAI_CHAT, OPENAI_CHAT_RELATIONS),
                                }
                            }
                        }
                        _ => Rule::Breaks("invalid_json"),
                    },
                }
            }
            StreamKind::Anthropic => {
                let event = parse_sse(raw);
                let name = event.name.clone().unwrap_or_default();
                let known = [
                    "message_start",
                    "message_delta",
                    "content_block_start",
                    "content_block_delta",
                    "content_block_stop",
                ];
                match event.data {
                    None => Rule::Untouched,
                    Some(_) if !known.contains(&name.as_str()) => Rule::Untouched,
                    Some(data) if !is_json_object(&data) => Rule::Breaks("invalid_json"),
                    Some(data) => match name.as_str() {
                        "message_start" => {
                            let doc = Doc::parse(&data).unwrap();
                            match doc.child(0, "message") {
                                Some(m) if doc.nodes[m].kind == Kind::Object => Rule::Figures {
                                    data,
                                    table: Table::of(ANTHROPIC, ANTHROPIC_RELATIONS)
                                        .under("/message"),
                                },
                                _ => Rule::Unmodeled { figures: None },
                            }
                        }
                        "message_delta" => Rule::Figures {
                            data,
                            table: Table::of(ANTHROPIC_DELTA, ANTHROPIC_RELATIONS)
                                .running(ANTHROPIC_RUNNING),
                        },
                        _ => Rule::Unmodeled { figures: None },
                    },
                }
            }
            StreamKind::Responses => {
                const CARRY: [&str; 6] = [
                    "response.created",
                    "response.in_progress",
                    "response.queued",
                    "response.completed",
                    "response.incomplete",
                    "response.failed",
                ];
                const TERMINAL: [&str; 3] = [
                    "response.completed",
                    "response.incomplete",
                    "response.failed",
                ];
                match parse_sse(raw).data {
                    None => Rule::Untouched,
                    Some(_) if done => Rule::Breaks("stream_after_done"),
                    Some(data) => match Doc::parse(&data) {
                        Some(doc) if doc.nodes[0].kind == Kind::Object => {
                            let kind = doc
                                .child(0, "type")
                                .filter(|n| doc.nodes[*n].kind == Kind::String)
                                .map(|n| data[doc.nodes[n].value.clone()].to_vec());
                            let kind = kind
                                .map(|k| String::from_utf8_lossy(&k).trim_matches('"').to_string());
                            match kind {
                                None => Rule::Breaks("response_event_invalid"),
                                Some(kind) if CARRY.contains(&kind.as_str()) => {
                                    match doc.child(0, "response") {
                                        Some(r) if doc.nodes[r].kind == Kind::Object => {
                                            done = TERMINAL.contains(&kind.as_str());
                                            Rule::Figures {
                                                data,
                                                table: Table::of(
                                                    OPENAI_RESPONSES,
                                                    OPENAI_RESPONSES_RELATIONS,
                                                )
                                                .under("/response"),
                                            }
                                        }
                                        _ => Rule::Breaks("response_event_invalid"),
                                    }
                                }
                                // Sequence numbers and items are judged,
                                // beyond what the oracle models.
                                Some(_) => Rule::Unmodeled { figures: None },
                            }
                        }
                        _ => Rule::Breaks("invalid_json"),
                    },
                }
            }
            StreamKind::Cohere => cohere_rule(raw),
            StreamKind::Ollama { chat } => {
                let data = ndjson_data(raw);
                if data.iter().all(u8::is_ascii_whitespace) {
                    Rule::Untouched
                } else if done {
                    Rule::Breaks("stream_after_done")
                } else {
                    match Doc::parse(data) {
                        Some(doc) if doc.nodes[0].kind == Kind::Object => {
                            let member = |key: &str| doc.child(0, key).map(|n| doc.nodes[n].kind);
                            let text = if chat {
                                member("message") == Some(Kind::Object)
                            } else {
                                member("response") == Some(Kind::String)
                            };
                            let flag = doc
                                .child(0, "done")
                                .map(|n| &data[doc.nodes[n].value.clone()]);
                            if doc.child(0, "error").is_some() {
                                Rule::Untouched
                            } else if text && matches!(flag, Some(b"true" | b"false")) {
                                done = flag == Some(b"true");
                                Rule::Figures {
                                    data: data.to_vec(),
                                    table: Table::of(OLLAMA_GEN, &[]),
                                }
                            } else {
                                Rule::Unmodeled {
                                    figures: Some(Table::of(OLLAMA_GEN, &[])),
                                }
                            }
                        }
                        _ => Rule::Breaks("invalid_json"),
                    }
                }
            }
        };
        // A tail cut before its blank line is judged as a final event when
        // the upstream ends (a client drops it): its figures are judged,
        // and it may break the stream, or not.
        let rule = match rule {
            Rule::Breaks(_) if !complete => Rule::Untouched,
            rule => rule,
        };
        out.push(rule);
    }
    out
}

/// A Cohere chat event: its figures in `message-start` and `message-end`;
/// content blocks and tool calls judged beyond what the oracle models.
fn cohere_rule(raw: &[u8]) -> Rule {
    let event = parse_sse(raw);
    let Some(data) = event.data else {
        return Rule::Untouched;
    };
    if data.trim_ascii() == b"[DONE]" {
        return Rule::Untouched;
    }
    if !is_json_object(&data) {
        return Rule::Breaks("invalid_json");
    }
    let name = event.name.clone().or_else(|| {
        let value: serde_json::Value = serde_json::from_slice(&data).ok()?;
        value["type"].as_str().map(str::to_owned)
    });
    match name.as_deref().unwrap_or_default() {
        "message-start" => Rule::Figures {
            data,
            table: Table::of(COHERE_CHAT_START, &[]),
        },
        "message-end" => Rule::Figures {
            data,
            table: Table::of(COHERE_CHAT_END, &[]),
        },
        "content-start" | "content-delta" | "content-end" | "tool-call-start"
        | "tool-call-delta" => Rule::Unmodeled { figures: None },
        _ => Rule::Untouched,
    }
}

/// The `code` of probity's error event for this stream, when `raw` is one.
pub fn error_event_code(kind: StreamKind, raw: &[u8]) -> Option<String> {
    let code = |e: &serde_json::Value| {
        (e["type"] == "provider_invalid_response")
            .then(|| e["code"].as_str().map(str::to_owned))
            .flatten()
    };
    let json = |data: Option<Vec<u8>>| {
        data.and_then(|d| serde_json::from_slice::<serde_json::Value>(&d).ok())
    };
    match kind {
        StreamKind::OpenAi => json(parse_sse(raw).data).and_then(|v| code(&v["error"])),
        StreamKind::Anthropic | StreamKind::Responses => {
            let event = parse_sse(raw);
            if event.name.as_deref() != Some("error") {
                return None;
            }
            json(event.data)
                .filter(|v| v["type"] == "error")
                .and_then(|v| code(&v["error"]))
        }
        // Cohere's failed generation, probity's error beside it.
        StreamKind::Cohere => {
            let event = parse_sse(raw);
            if event.name.as_deref() != Some("message-end") {
                return None;
            }
            json(event.data)
                .filter(|v| v["delta"]["finish_reason"] == "ERROR")
                .and_then(|v| code(&v["error"]))
        }
        StreamKind::Ollama { .. } => json(Some(ndjson_data(raw).to_vec()))
            .filter(|v| v["error"].is_string() && raw.ends_with(b"\n"))
            .and_then(|v| code(&v)),
    }
}

/// How a client's stream relates to the upstream's.
#[derive(Debug, Default)]
pub struct StreamReading {
    /// Upstream events passed unchanged.
    pub identical: usize,
    /// Upstream events rewritten.
    pub rewritten: usize,
    /// The upstream event the stream was cut at with an error event.
    pub error_at: Option<usize>,
    /// That error event's `code`.
    pub error_code: Option<String>,
    pub problems: Vec<Problem>,
}

/// Matches the client's stream to the upstream's: each upstream event in
/// turn is passed unchanged, rewritten (figures nulled, announced), or
/// replaced by probity's error event, which ends the stream.
pub fn walk_stream(
    kind: StreamKind,
    framing: Framing,
    upstream: &[u8],
    got: &[u8],
) -> StreamReading {
    let mut reading = StreamReading::default();
    let theirs = split_events(framing, upstream);
    let ours = split_events(framing, got);
    let rules = rules(kind, framing, upstream);
    let mut running = Running::default();
    let mut j = 0;
    for (i, ((range, _), rule)) in theirs.iter().zip(&rules).enumerate() {
        let want = &upstream[range.clone()];
        // What earlier events decide of this one's running totals (probity
        // judges every event up to where it cuts the stream).
        let earlier = match rule {
            Rule::Figures { data, table } => running.judge(data, table),
            _ => Vec::new(),
        };
        // The output contract's verdict (a request that declares tools or
        // a format) is a comment of its own before the terminal event: the
        // tool-call and contract suites judge it, not this oracle.
        while ours
            .get(j)
            .is_some_and(|(r, _)| got[r.clone()].starts_with(b": probity-output "))
        {
            j += 1;
        }
        let Some((client_range, _)) = ours.get(j) else {
            reading.problems.push(problem(
                "the stream ended early without an error event",
                format!(
                    "upstream event {i} of {} ({}) never reached the client",
                    theirs.len(),
                    escape(want)
                ),
            ));
            return reading;
        };
        let have = &got[client_range.clone()];
        if have == want {
            reading.identical += 1;
            j += 1;
            if let Rule::Figures { data, table } = rule {
                for mut p in check_required(data, &[], table, &earlier) {
                    p.kind = format!("stream: {} (event passed unchanged)", p.kind);
                    p.detail = format!("event {i}: {}", p.detail);
                    reading.problems.push(p);
                }
            }
            continue;
        }
        if let Some(code) = error_event_code(kind, have) {
            reading.error_at = Some(i);
            reading.error_code = Some(code);
            if j + 1 != ours.len() {
                reading.problems.push(problem(
                    "the stream went on after probity's error event",
                    escape(&got[client_range.end..]),
                ));
            }
            return reading;
        }
        let rewritten = match framing {
            Framing::Sse => rewritten_sse(i, want, have, rule, &earlier),
            Framing::Ndjson => rewritten_ndjson(i, want, have, rule, &earlier),
        };
        match rewritten {
            Some(problems) => {
                reading.rewritten += 1;
                reading.problems.extend(problems);
                j += 1;
            }
            None => {
                reading.problems.push(problem(
                    "a client event is neither the upstream's, nor a rewrite of it, nor an error",
                    format!("event {i}: got {} want {}", escape(have), escape(want)),
                ));
                return reading;
            }
        }
    }
    // The verdict of an answer that never reached its terminal event comes
    // at the stream's end.
    while ours
        .get(j)
        .is_some_and(|(r, _)| got[r.clone()].starts_with(b": probity-output "))
    {
        j += 1;
    }
    if j < ours.len() {
        let rest = &got[ours[j].0.start..];
        let code = error_event_code(kind, rest);
        if j + 1 == ours.len() && code.is_some() {
            reading.error_at = Some(theirs.len());
            reading.error_code = code;
        } else {
            reading.problems.push(problem(
                "the client got events the upstream never sent",
                escape(rest),
            ));
        }
    }
    reading
}

/// `None` when `have` is no rewrite at all (no `probity-normalized`
/// comment); otherwise what is wrong with the rewrite.
fn rewritten_sse(
    i: usize,
    want: &[u8],
    have: &[u8],
    rule: &Rule,
    earlier: &[(String, Fate)],
) -> Option<Vec<Problem>> {
    let first = lines(have).into_iter().next()?;
    let list = first.text.strip_prefix(b": probity-normalized ")?;
    let listing = parse_listing(&String::from_utf8_lossy(list));
    let mut problems = Vec::new();
    let (data, table) = match rule {
        Rule::Figures { data, table } => (data.clone(), table),
        _ => {
            problems.push(problem(
                "stream: an event that carries no judged figures was rewritten",
                format!("event {i}: {}", escape(want)),
            ));
            return Some(problems);
        }
    };
    let before = parse_sse(want);
    let after = parse_sse(&have[first.text.len() + first.end.len()..]);
    let new_data = after.data.clone().unwrap_or_default();
    for mut p in check_rewrite(&data, &new_data, &listing, table, earlier) {
        p.kind = format!("stream: {}", p.kind);
        p.detail = format!("event {i}: {}", p.detail);
        problems.push(p);
    }
    for mut p in check_required(&data, &listing.pointers, table, earlier) {
        p.kind = format!("stream: {}", p.kind);
        p.detail = format!("event {i}: {}", p.detail);
        problems.push(p);
    }
    if after.fields != before.fields {
        problems.push(problem(
            "stream: a rewritten event lost or changed its other fields (event/id/retry)",
            format!(
                "event {i}: fields {} became {}",
                show_fields(&before.fields),
                show_fields(&after.fields)
            ),
        ));
    }
    if let (Some(t), Some(u)) = (&before.terminator, &after.terminator) {
        if t != u {
            problems.push(problem(
                "stream: a rewritten event changed its line endings",
                format!("event {i}: {} became {}", escape(t), escape(u)),
            ));
        }
    } else if before.terminator.is_some() {
        problems.push(problem(
            "stream: a rewritten event changed its line endings",
            format!("event {i}: mixed line ends in {}", escape(have)),
        ));
    }
    Some(problems)
}

/// NDJSON has no comment: the rewrite is found by trying which figures
/// were nulled.
fn rewritten_ndjson(
    i: usize,
    want: &[u8],
    have: &[u8],
    rule: &Rule,
    earlier: &[(String, Fate)],
) -> Option<Vec<Problem>> {
    let (data, table) = match rule {
        Rule::Figures { data, table } => (data.as_slice(), table),
        _ => return None,
    };
    let (prefix, figures) = (table.prefix, table.figures);
    let doc = Doc::parse(data)?;
    let found = entries(&doc, data, prefix, figures);
    let mut candidates: Vec<(String, Range<usize>)> = found
        .iter()
        .filter(|e| e.reading != Reading::Null)
        .map(|e| (e.pointer.clone(), doc.nodes[e.node].value.clone()))
        .collect();
    for record in records(prefix, figures) {
        if let Some(n) = doc.resolve(&record) {
            candidates.push((record, doc.nodes[n].value.clone()));
        }
    }
    let candidates = &candidates[..candidates.len().min(12)];
    let new_data = ndjson_data(have);
    let terminator = &want[ndjson_data(want).len()..];
    let ending = &have[new_data.len()..];
    for mask in 1u32..(1 << candidates.len()) {
        let chosen: Vec<&(String, Range<usize>)> = candidates
            .iter()
            .enumerate()
            .filter(|(b, _)| mask & (1 << b) != 0)
            .map(|(_, c)| c)
            .collect();
        let spans: Vec<Range<usize>> = chosen.iter().map(|(_, r)| r.clone()).collect();
        if null_spans(data, &spans) != new_data {
            continue;
        }
        let listing = Listing {
            pointers: chosen.iter().map(|(p, _)| p.clone()).collect(),
            more: 0,
        };
        let mut problems = Vec::new();
        for mut p in check_rewrite(data, new_data, &listing, table, earlier)
            .into_iter()
            .chain(check_required(data, &listing.pointers, table, earlier))
        {
            p.kind = format!("stream: {}", p.kind);
            p.detail = format!("line {i}: {}", p.detail);
            problems.push(p);
        }
        if ending != terminator && !(terminator.is_empty() && ending == b"\n") {
            problems.push(problem(
                "stream: a rewritten event changed its line endings",
                format!("line {i}: {} became {}", escape(terminator), escape(ending)),
            ));
        }
        return Some(problems);
    }
    None
}

fn show_fields(fields: &[(Vec<u8>, Vec<u8>)]) -> String {
    let shown: Vec<String> = fields
        .iter()
        .map(|(f, v)| format!("{}: {}", String::from_utf8_lossy(f), escape(v)))
        .collect();
    format!("[{}]", shown.join(", "))
}

// ---------------------------------------------------------------- printing

/// Bytes as a Rust byte-string literal body: printable ASCII as is, the
/// rest escaped.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for &b in bytes {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push('"');
    out
}

/// A value's text, cut for a message.
pub fn short_bytes(bytes: &[u8]) -> String {
    if bytes.len() > 60 {
        format!("{}...", escape(&bytes[..60]))
    } else {
        escape(bytes)
    }
}

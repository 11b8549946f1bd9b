//! The judge of one stream, as a state machine fed bytes: no runtime, no
//! network, no clock. The server's judged stream (`server::judged_stream`)
//! feeds it what the upstream sends and sends on what it gives back;
//! `probity inspect` feeds it a saved body.
//!
//! It splits the bytes into events (`stream::next_event`) and has the
//! dialect's [`EventCheck`] judge each complete one as soon as it is
//! complete; only an incomplete event is held, until its end arrives, and
//! at the end whatever is held is judged too.
//!
//! - A sound event goes on as the same bytes (sliced, not copied).
//! - An event with a malformed figure is rewritten alone: only the figure's
//!   bytes change, announced by an SSE comment line `: probity-normalized
//!   <pointers>` (NDJSON has no comments: the capture store says it).
//! - The output contract's verdict goes right before the terminal event (or
//!   at the end of a stream that has none), as `: probity-output …`.
//! - A broken stream stops here: the caller words the error, and the
//!   judge writes it as the stream's own error event ([`StreamJudge::end_with`]).
//!
//! What was found accumulates in [`Findings`].

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use serde_json::Value;

use super::stream::{self, EventCheck, Framing, Seen};
use super::{Findings, Identity};
use crate::contract::Contract;
use crate::figures::{self, Convention};
use crate::violation::Violation;

/// The judge of one stream: its framing, the dialect's check of its
/// events, the output contract whose verdict ends it, and what it found.
pub struct StreamJudge {
    framing: Framing,
    /// Whether SSE comment lines may be added (see `StreamSpec`).
    comments: bool,
    check: Box<dyn EventCheck>,
    /// The output contract whose verdict ends the stream, and whether it
    /// was given.
    contract: Option<Contract>,
    verdict_given: bool,
    /// Why the events cannot be checked against the request (it could not
    /// be read): their syntax and figures still are.
    uninspected: Option<&'static str>,
    /// Whether to read the answer's model and id (for a request's span).
    read_identity: bool,
    /// An incomplete event, waiting for the rest of its bytes.
    pending: BytesMut,
    /// No more bytes will be judged: the stream ended, or broke.
    ended: bool,
    /// What the checks found so far. Token counts hold the last
    /// well-formed value of each kind (usage is cumulative in streams:
    /// taken last, never summed).
    findings: Findings,
    /// Whose relations between figures hold (the route's `relations`).
    convention: Convention,
    /// The last well-formed value of each running total, by its table
    /// pointer: a later report below it contradicts it.
    running: Vec<(&'static str, u64)>,
}

/// The relation a running total that falls breaks.
const RUNNING_TOTAL: &str = "running_total_never_falls";

impl StreamJudge {
    pub(crate) fn new(
        framing: Framing,
        comments: bool,
        check: Box<dyn EventCheck>,
        contract: Option<Contract>,
        uninspected: Option<&'static str>,
    ) -> Self {
        Self {
            framing,
            comments,
            check,
            contract,
            verdict_given: false,
            uninspected,
            read_identity: false,
            pending: BytesMut::new(),
            ended: false,
            findings: Findings::default(),
            convention: Convention::Provider,
            running: Vec::new(),
        }
    }

    /// Judges the relations between figures by `convention`.
    pub(crate) fn judging_by(mut self, convention: Convention) -> Self {
        self.convention = convention;
        self
    }

    /// Also reads which model answered and the response's id, as
    /// delivered (for a request's span; off by default, as it costs a
    /// parse of each event until both are found).
    pub fn identifying(mut self, identify: bool) -> Self {
        self.read_identity = identify;
        self
    }

    /// Why the events cannot be checked against the request, if they
    /// cannot.
    pub fn uninspected(&self) -> Option<&'static str> {
        self.uninspected
    }

    /// The output contract the answer is judged by, if any.
    pub fn contract(&self) -> Option<&Contract> {
        self.contract.as_ref()
    }

    /// What the checks found so far.
    pub fn findings(&self) -> &Findings {
        &self.findings
    }

    /// Judges the next bytes of the stream: every event they complete.
    /// What goes on to the client is appended to `out`, in order (the
    /// caller's queue: nothing is allocated per feed); `Err` is the
    /// invariant the stream broke, after those bytes: nothing more is
    /// judged, and the caller ends the stream with
    /// [`StreamJudge::end_with`].
    pub fn feed(&mut self, bytes: &Bytes, out: &mut VecDeque<Bytes>) -> Result<(), Violation> {
        if self.ended {
            return Ok(());
        }
        let buffer = if self.pending.is_empty() {
            bytes.clone()
        } else {
            self.pending.extend_from_slice(bytes);
            self.pending.split().freeze()
        };
        let rest = self.judge_events(&buffer, false, out)?;
        self.pending
            .extend_from_slice(buffer.get(rest..).unwrap_or_default());
        Ok(())
    }

    /// The stream ended: whatever is still held is judged (the events a
    /// last `\r` completes, for CR-only line endings, then any
    /// unterminated rest as a final event; nothing leaves unjudged), and a
    /// stream that ended without its terminal event still gets a verdict.
    /// As [`StreamJudge::feed`].
    pub fn end(&mut self, out: &mut VecDeque<Bytes>) -> Result<(), Violation> {
        if std::mem::replace(&mut self.ended, true) {
            return Ok(());
        }
        let tail = self.pending.split().freeze();
        self.judge_events(&tail, true, out)?;
        if self.contract.is_some() && !self.verdict_given {
            self.give_verdict(out);
        }
        Ok(())
    }

    /// Ends the stream with an error event in its own format, from the
    /// error's JSON object (a broken stream's, an upstream fault's, or
    /// probity's own); nothing more is judged.
    pub fn end_with(&mut self, error: &Value) -> Bytes {
        self.ended = true;
        self.pending.clear();
        Bytes::from(self.check.error_event(error))
    }

    /// An upstream fault (its `kind`) cut the stream: it ends with its
    /// error event, as [`StreamJudge::end_with`].
    pub fn cut(&mut self, kind: &'static str, error: &Value) -> Bytes {
        self.findings.cut = Some(kind);
        self.end_with(error)
    }

    /// Judges each complete event of `buffer` (at the end of the stream,
    /// whatever it holds: a last `\r` ends its line, an unterminated rest
    /// is a final event); sound events go out as one slice. Where the
    /// incomplete rest starts, or the invariant the stream broke.
    fn judge_events(
        &mut self,
        buffer: &Bytes,
        at_end: bool,
        out: &mut VecDeque<Bytes>,
    ) -> Result<usize, Violation> {
        let (mut at, mut passed) = (0, 0);
        while let Some(len) = buffer
            .get(at..)
            .and_then(|rest| stream::next_event(self.framing, rest, at_end))
        {
            self.judge(buffer, at..at + len, &mut passed, out)?;
            at += len;
        }
        if at_end && at < buffer.len() {
            self.judge(buffer, at..buffer.len(), &mut passed, out)?;
            at = buffer.len();
        }
        if at > passed {
            out.push_back(buffer.slice(passed..at));
        }
        Ok(at)
    }

    /// Judges the event `buffer[event]`; sound events accumulate in
    /// `buffer[passed..]` to go out as one slice. `Err` when the stream
    /// broke.
    fn judge(
        &mut self,
        buffer: &Bytes,
        event: std::ops::Range<usize>,
        passed: &mut usize,
        out: &mut VecDeque<Bytes>,
    ) -> Result<(), Violation> {
        let (start, end) = (event.start, event.end);
        let event = stream::parse_event(self.framing, buffer.get(event).unwrap_or_default());
        if self.check.ends(&event) && self.contract.is_some() && !self.verdict_given {
            // The answer is complete: the verdict goes before the last event.
            if start > *passed {
                out.push_back(buffer.slice(*passed..start));
            }
            *passed = start;
            self.check.closing(&event);
            self.give_verdict(out);
        }
        let seen = match self.check.event(&event, self.convention) {
            Ok(Seen::Figures(mut figures_found)) => {
                self.against_earlier(&mut figures_found);
                Ok(Seen::Figures(figures_found))
            }
            seen => seen,
        };
        match seen {
            Ok(Seen::Nothing) => {
                self.identify(&event);
                Ok(())
            }
            Ok(Seen::UpstreamError) => {
                self.findings.upstream_errors += 1;
                Ok(())
            }
            Ok(Seen::Figures(figures_found)) if figures_found.is_clean() => {
                self.identify(&event);
                self.note_tokens(&figures_found.tokens);
                Ok(())
            }
            Ok(Seen::Figures(figures_found)) => {
                if start > *passed {
                    out.push_back(buffer.slice(*passed..start));
                }
                let note = format!(
                    "probity-normalized {}",
                    figures::normalized_list(&figures_found.pointers)
                );
                let note = self.comments.then_some(note.as_str());
                let rewritten =
                    self.check
                        .rewrite(self.framing, event.raw, &figures_found.nulls, note);
                // The span reads the event as delivered: a nulled id stays
                // out of it, a sound model beside it does not.
                if self.read_identity {
                    self.identify(&stream::parse_event(self.framing, &rewritten));
                }
                out.push_back(Bytes::from(rewritten));
                self.note_tokens(&figures_found.tokens);
                self.findings.malformed.extend(figures_found.malformed);
                self.findings
                    .contradicted
                    .extend(figures_found.contradicted);
                self.findings.pointers.extend(figures_found.pointers);
                *passed = end;
                Ok(())
            }
            Err(violation) => {
                if start > *passed {
                    out.push_back(buffer.slice(*passed..start));
                }
                *passed = end;
                self.findings.rejected = Some(violation.invariant);
                self.ended = true;
                self.pending.clear();
                Err(violation)
            }
        }
    }

    /// The model and response id of the first event that carries them,
    /// read from the event as it was delivered (a nulled id is `null`
    /// there and never reaches the span).
    fn identify(&mut self, event: &stream::Event<'_>) {
        let found = &self.findings.identity;
        if !self.read_identity || (found.model.is_some() && found.id.is_some()) {
            return;
        }
        if let Some(data) = self.check.document(event) {
            let seen = Identity::of_event(&data);
            let identity = &mut self.findings.identity;
            identity.model = identity.model.take().or(seen.model);
            identity.id = identity.id.take().or(seen.id);
        }
    }

    /// Judges an event's running totals against the events before it: one
    /// below its earlier report is not reported in this event (the earlier
    /// bytes are gone), and not counted.
    fn against_earlier(&mut self, figures_found: &mut figures::FigureFindings) {
        if self.convention == Convention::Off {
            return;
        }
        let mut fell = false;
        for run in std::mem::take(&mut figures_found.running) {
            match self
                .running
                .iter_mut()
                .find(|(figure, _)| *figure == run.figure)
            {
                Some((_, last)) if run.value < *last => {
                    fell = true;
                    figures_found.nulls.push(run.span);
                    figures_found.pointers.push(run.pointer);
                    if let Some(kind) = run.tokens {
                        let counted = figures_found
                            .tokens
                            .iter()
                            .position(|(k, n)| *k == kind && *n == run.value);
                        if let Some(i) = counted {
                            figures_found.tokens.remove(i);
                        }
                    }
                }
                Some((_, last)) => *last = run.value,
                None => self.running.push((run.figure, run.value)),
            }
        }
        if fell {
            figures_found.nulls.sort_by_key(|range| range.start);
            figures_found.contradicted.push(RUNNING_TOTAL);
        }
    }

    fn note_tokens(&mut self, tokens: &[(&'static str, u64)]) {
        let kept = &mut self.findings.tokens;
        for (kind, count) in tokens {
            match kept.iter_mut().find(|(k, _)| k == kind) {
                Some(slot) => slot.1 = *count,
                None => kept.push((kind, *count)),
            }
        }
    }

    /// The output contract's verdict on the answer gathered so far; for SSE
    /// announced in a comment line (NDJSON has none).
    fn give_verdict(&mut self, out: &mut VecDeque<Bytes>) {
        self.verdict_given = true;
        let Some(contract) = &self.contract else {
            return;
        };
        let calls = self.check.calls().map(|c| c.calls()).unwrap_or_default();
        let cited = self.check.cited();
        let Some(verdict) = contract.judge_streamed(self.check.answer(), &calls, cited) else {
            return;
        };
        let line = if verdict.valid() {
            ": probity-output valid\n\n".to_string()
        } else {
            format!(
                ": probity-output invalid reason={}\n\n",
                crate::contract::joined(&verdict.reasons)
            )
        };
        self.findings.output = Some((contract.task.clone(), verdict));
        // After a stream cut inside a line, a comment would join that line
        // (and end an event the client would drop as incomplete): the
        // verdict is then in the findings only.
        let cut_mid_line = out
            .back()
            .and_then(|last| last.last())
            .is_some_and(|b| !matches!(b, b'\n' | b'\r'));
        if self.comments && !cut_mid_line {
            out.push_back(Bytes::from(line));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::contract::SchemaCache;
    use crate::inspect::{self, Contracts};
    use crate::violation::Invariant;

    /// A saved stream: its request, its body, and the endpoint that judges it.
    struct Saved {
        name: String,
        request: Vec<u8>,
        body: Bytes,
        endpoint: &'static super::super::Endpoint,
    }

    /// Every fixture under `tests/fixtures/*/*/` with a `response.sse` or
    /// `response.ndjson`: its dialect is named by its folder, or by the
    /// first segment of its `endpoint` (`tools/…`: `/openai/v1/…`).
    fn saved_streams() -> Vec<Saved> {
        // The workspace's fixtures, shared with tests/it.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let mut found = Vec::new();
        for folder in std::fs::read_dir(&root).unwrap().flatten() {
            let Ok(cases) = std::fs::read_dir(folder.path()) else {
                continue;
            };
            for case in cases.flatten() {
                if let Some(saved) = saved(&folder.file_name().to_string_lossy(), &case.path()) {
                    found.push(saved);
                }
            }
        }
        found.sort_by(|a, b| a.name.cmp(&b.name));
        found
    }

    fn saved(folder: &str, case: &Path) -> Option<Saved> {
        let body: PathBuf = ["response.sse", "response.ndjson"]
            .iter()
            .map(|name| case.join(name))
            .find(|path| path.exists())?;
        let path = std::fs::read_to_string(case.join("endpoint")).ok()?;
        let path = path.trim();
        // A dialect's folder names it, whatever its paths start with
        // (Azure's `/openai/deployments/…`).
        let (dialect, path) = match path[1..].split_once('/') {
            _ if inspect::dialect(folder).is_some() => (folder.to_string(), path.to_string()),
            Some((first, rest)) if inspect::dialect(first).is_some() => {
                (first.to_string(), format!("/{rest}"))
            }
            _ => (folder.to_string(), path.to_string()),
        };
        let endpoint = inspect::dialect(&dialect)?.endpoint(&path)?;
        Some(Saved {
            name: case.display().to_string(),
            request: std::fs::read(case.join("request.json")).unwrap_or_default(),
            body: Bytes::from(std::fs::read(body).ok()?),
            endpoint,
        })
    }

    /// What a judge sends on and finds for `saved` fed in `pieces` (the
    /// lengths of the feeds; the rest goes in one last feed), ended.
    fn judged(saved: &Saved, pieces: &[usize]) -> Option<(Vec<u8>, Option<Invariant>, String)> {
        let cache = SchemaCache::new(4);
        let contracts = Contracts {
            config: None,
            cache: &cache,
            convention: Default::default(),
        };
        let judge = inspect::stream_judge(saved.endpoint, &saved.request, &contracts).ok()?;
        let mut judge = judge.identifying(true);
        let mut out = VecDeque::new();
        let mut broken = None;
        let mut rest = saved.body.clone();
        for &len in pieces {
            let piece = rest.split_to(len.min(rest.len()));
            broken = broken.or(judge.feed(&piece, &mut out).err().map(|v| v.invariant));
        }
        broken = broken.or(judge.feed(&rest, &mut out).err().map(|v| v.invariant));
        broken = broken.or(judge.end(&mut out).err().map(|v| v.invariant));
        let out: Vec<u8> = out.iter().flat_map(|b| b.iter().copied()).collect();
        Some((out, broken, format!("{:?}", judge.findings())))
    }

    /// A small deterministic generator (xorshift), for random splits.
    fn splits(seed: u64, len: usize) -> Vec<usize> {
        let mut state = seed.max(1);
        let mut pieces = Vec::new();
        let mut at = 0;
        while at < len {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let piece = usize::try_from(state % 24).unwrap();
            pieces.push(piece);
            at += piece;
        }
        pieces
    }

    #[test]
    fn any_split_of_a_stream_is_judged_as_the_whole() {
        let streams = saved_streams();
        assert!(streams.len() > 50, "only {} saved streams", streams.len());
        let mut judged_any = 0;
        for saved in &streams {
            let Some(whole) = judged(saved, &[]) else {
                continue;
            };
            judged_any += 1;
            let bytes = vec![1; saved.body.len()];
            assert_eq!(
                judged(saved, &bytes).as_ref(),
                Some(&whole),
                "{} byte by byte",
                saved.name
            );
            for seed in 1..8 {
                let pieces = splits(seed, saved.body.len());
                assert_eq!(
                    judged(saved, &pieces).as_ref(),
                    Some(&whole),
                    "{} in pieces {pieces:?}",
                    saved.name
                );
            }
        }
        assert!(judged_any > 50, "only {judged_any} streams were judged");
    }

    #[test]
    fn a_sound_stream_passes_as_the_same_bytes() {
        let streams = saved_streams();
        let sound: Vec<&Saved> = streams
            .iter()
            .filter(|s| s.name.ends_with("_pass"))
            .collect();
        assert!(sound.len() > 5);
        for saved in sound {
            let (out, broken, findings) = judged(saved, &[]).unwrap();
            assert_eq!(broken, None, "{}", saved.name);
            assert!(
                findings.contains("pointers: []"),
                "{}: {findings}",
                saved.name
            );
            // A verdict comment may be added before the terminal event;
            // without it the bytes are the same.
            let out = String::from_utf8(out).unwrap();
            let without = out.replace(": probity-output valid\n\n", "");
            assert_eq!(without.as_bytes(), &saved.body[..], "{}", saved.name);
        }
    }

    #[test]
    fn a_broken_stream_ends_with_its_error_event_and_judges_nothing_more() {
        let streams = saved_streams();
        let saved = streams
            .iter()
            .find(|s| s.name.ends_with("openai/gen_chat_stream_invalid_json"))
            .or_else(|| {
                streams
                    .iter()
                    .find(|s| judged(s, &[]).is_some_and(|j| j.1.is_some()))
            })
            .unwrap();
        let cache = SchemaCache::new(4);
        let contracts = Contracts {
            config: None,
            cache: &cache,
            convention: Default::default(),
        };
        let mut judge = inspect::stream_judge(saved.endpoint, &saved.request, &contracts).unwrap();
        let mut out = VecDeque::new();
        let violation = judge
            .feed(&saved.body, &mut out)
            .expect_err("the stream is broken");
        assert_eq!(judge.findings().rejected, Some(violation.invariant));
        let event = judge.end_with(&serde_json::json!({"code": violation.invariant.as_str()}));
        assert!(
            String::from_utf8_lossy(&event).contains(violation.invariant.as_str()),
            "{event:?}"
        );
        let mut after = VecDeque::new();
        assert!(judge.feed(&saved.body, &mut after).is_ok());
        assert!(judge.end(&mut after).is_ok());
        assert!(after.is_empty(), "{after:?}");
    }
}

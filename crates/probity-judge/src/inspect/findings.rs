//! What inspecting one response found, whichever path it took (read whole,
//! judged event by event, or sent as chunks and stitched), and the one
//! ranking of it ([`Outcome`]). The server counts, logs and captures it
//! (`server::finish`); `probity inspect` prints it.

use std::borrow::Cow;

use super::Identity;
use crate::contract::OutputFindings;
use crate::figures::FigureFindings;
use crate::outcome::Outcome;
use crate::violation::Invariant;

/// What inspecting one response found.
#[derive(Debug, Default)]
pub struct Findings {
    /// Well-formed token figures, by kind: the only figures metrics see.
    pub tokens: Vec<(&'static str, u64)>,
    /// The `figure` label of each malformed figure or record.
    pub malformed: Vec<&'static str>,
    /// The name of each relation whose figures contradicted each other
    /// (the `relation` label of `probity_figure_contradictions_total`);
    /// their pointers are in `pointers`.
    pub contradicted: Vec<&'static str>,
    /// What became `null` (or `header:<name>`, removed), for
    /// `probity-normalized` and the capture.
    pub pointers: Vec<String>,
    /// Why the payload could not be checked against its request.
    pub uninspected: Option<&'static str>,
    /// The payload invariant the response broke.
    pub rejected: Option<Invariant>,
    /// The upstream fault that cut a stream (its `kind`); counted where it
    /// happened, captured at the end.
    pub cut: Option<&'static str>,
    /// The upstream's own error events inside a stream, relayed as they
    /// came.
    pub upstream_errors: u32,
    /// The output contract's task, and what it found.
    pub output: Option<(Cow<'static, str>, OutputFindings)>,
    /// The response was stitched from chunks.
    pub stitched: bool,
    /// Which model answered, and the response's well-formed id.
    pub identity: Identity,
}

impl Findings {
    /// What a figures pass found, as findings (its well-formed tokens, the
    /// malformed figures and their pointers), and the rest of it, which is
    /// how the body is rewritten: the nulled ranges, the headers removed.
    pub(crate) fn of_figures(
        found: FigureFindings,
    ) -> (Self, Vec<std::ops::Range<usize>>, Vec<&'static str>) {
        let findings = Findings {
            tokens: found.tokens,
            malformed: found.malformed,
            contradicted: found.contradicted,
            pointers: found.pointers,
            ..Findings::default()
        };
        (findings, found.nulls, found.removed_headers)
    }

    /// What the exchange came to: the one ranking ([`Outcome`]) its
    /// capture, its span and the admin page all read.
    pub fn outcome(&self) -> Outcome {
        let invalid = self.output.as_ref().is_some_and(|(_, v)| !v.valid());
        if self.rejected.is_some() {
            Outcome::Rejected
        } else if self.cut.is_some() {
            Outcome::Cut
        } else if invalid {
            Outcome::OutputInvalid
        } else if self.stitched {
            Outcome::Stitched
        } else if !self.pointers.is_empty() {
            Outcome::Normalized
        } else {
            Outcome::Passed
        }
    }

    /// The reasons of an invalid answer (none when it was valid).
    pub fn reasons(&self) -> &[crate::contract::Reason] {
        match &self.output {
            Some((_, verdict)) if !verdict.valid() => &verdict.reasons,
            _ => &[],
        }
    }
}

//! What one exchange came to: the one ranking of what inspecting it found,
//! read by its capture, its span and the admin page alike, so that one
//! answer has one outcome wherever an operator looks.

use std::fmt;

/// What one exchange came to, worst first: when an answer is both (a
/// figure nulled and an unusable answer), the first that applies names it.
/// A rejection or a cut stream failed the request; an unusable answer is
/// worse for the app than a nulled figure, which it reads as "not
/// reported"; a stitched batch is normalized across chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// A payload invariant was broken: the client got a 502 (or the stream
    /// an error event).
    Rejected,
    /// A stream was ended by an upstream fault.
    Cut,
    /// The model's answer broke its output contract, or a tool call its
    /// tool.
    OutputInvalid,
    /// A chunked batch, stitched from its chunks' answers.
    Stitched,
    /// Malformed figures were nulled.
    Normalized,
    /// Nothing was found.
    Passed,
}

impl Outcome {
    /// Every outcome, worst first.
    #[cfg(test)]
    pub(crate) const ALL: [Outcome; 6] = [
        Outcome::Rejected,
        Outcome::Cut,
        Outcome::OutputInvalid,
        Outcome::Stitched,
        Outcome::Normalized,
        Outcome::Passed,
    ];

    /// Its name in captures (`outcome`), spans (`probity.outcome`) and the
    /// admin page's filter.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Rejected => "rejected",
            Outcome::Cut => "cut",
            Outcome::OutputInvalid => "output_invalid",
            Outcome::Stitched => "stitched",
            Outcome::Normalized => "normalized",
            Outcome::Passed => "passed",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ranking_is_the_order_of_the_list_and_names_are_distinct() {
        let mut sorted = Outcome::ALL;
        sorted.sort();
        assert_eq!(sorted, Outcome::ALL);
        let names: std::collections::BTreeSet<&str> =
            Outcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(names.len(), Outcome::ALL.len());
    }
}

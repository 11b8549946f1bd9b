//! A provider's own citations (Cohere chat's `message.citations`), judged
//! against the documents the request supplied: a citation naming a
//! document the app never gave is an answer the app cannot trust, counted
//! as `citation_unknown` like a route contract's unknown citation. Part of
//! `contract`; each dialect says where its documents and citations are (an
//! [`OutputSpec`](super::OutputSpec)'s [`CitationSpec`], and a stream
//! judge's `cited`).

use super::{OutputFindings, Reason};
use crate::json::Object;

/// How many unknown ids the verdict's sentence names: the counters get the
/// reason, a sentence need not list a hundred ids.
const NAMED_IDS: usize = 4;

/// Where an endpoint's documents and citations are.
pub(crate) struct CitationSpec {
    /// The documents the request supplied; `None` when it supplied none.
    pub(crate) supplied: fn(&Object<'_>) -> Option<Documents>,
    /// The document ids the citations of a whole response name.
    pub(crate) cited: fn(&Object<'_>) -> Vec<String>,
}

/// The documents a request supplied, as its answer's citations may name
/// them.
#[derive(Debug, Clone)]
pub(crate) struct Documents {
    /// The ids the request gave its documents.
    pub(crate) named: Vec<String>,
    /// The positions of the documents given without an id, which the
    /// provider names itself.
    pub(crate) unnamed: Vec<usize>,
    /// The position an id the provider made names, if it is one (Cohere's
    /// `doc:0:2`).
    pub(crate) generated: fn(&str) -> Option<usize>,
}

impl Documents {
    /// Whether `id` names a supplied document.
    fn knows(&self, id: &str) -> bool {
        self.named.iter().any(|named| named == id)
            || (self.generated)(id).is_some_and(|at| self.unnamed.contains(&at))
    }

    /// Each cited id that names no supplied document, into the findings.
    pub(crate) fn judge(&self, cited: &[String], found: &mut OutputFindings) {
        let mut unknown: Vec<&str> = Vec::new();
        for id in cited {
            if !self.knows(id) && !unknown.contains(&id.as_str()) {
                unknown.push(id);
            }
        }
        if unknown.is_empty() {
            return;
        }
        let named: Vec<String> = unknown
            .iter()
            .take(NAMED_IDS)
            .map(|id| format!("\"{id}\""))
            .collect();
        let more = unknown.len().saturating_sub(NAMED_IDS);
        let tail = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        found.add(
            Reason::CitationUnknown,
            format!(
                "a citation names {}{tail}, not a document of the request",
                named.join(", ")
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generated(id: &str) -> Option<usize> {
        id.strip_prefix("doc:")?.parse().ok()
    }

    #[test]
    fn only_supplied_documents_may_be_cited() {
        let documents = Documents {
            named: vec!["policy".into()],
            unnamed: vec![1],
            generated,
        };
        let reasons = |cited: &[&str]| {
            let cited: Vec<String> = cited.iter().map(|c| c.to_string()).collect();
            let mut found = OutputFindings::default();
            documents.judge(&cited, &mut found);
            (found.reasons, found.sentences)
        };
        assert!(reasons(&["policy", "doc:1"]).0.is_empty());
        let (found, sentences) = reasons(&["doc:0", "doc:7", "doc:7"]);
        assert_eq!(found, ["citation_unknown"]);
        assert_eq!(
            sentences,
            ["a citation names \"doc:0\", \"doc:7\", not a document of the request"],
            "a named document's position is not a generated id"
        );
    }
}

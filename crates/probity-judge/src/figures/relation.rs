//! Relations between figures: what a provider defines one figure to be
//! against others (a detail is a part of its whole, a total the sum of its
//! terms), as data beside each dialect's figure table.
//!
//! A figure's domain includes the figures it is defined against: two
//! well-formed counts that contradict each other (reasoning tokens above
//! the completion tokens they are a part of) cannot both be true, and
//! probity cannot know which is false, so neither is reported. A relation
//! is judged only when every figure it needs is well-formed; one that is
//! absent or malformed already is not reported, and decides nothing.

/// Whose definitions a route's figures are judged by: a route's
/// `relations` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Convention {
    /// The provider's own, as its documentation and SDK types define them:
    /// the dialect's.
    #[default]
    Provider,
    /// xAI's, on the OpenAI wire: reasoning tokens are counted outside
    /// `completion_tokens` and inside `total_tokens`.
    Xai,
    /// None: each figure is judged alone.
    Off,
}

impl Convention {
    /// The convention a route's `relations` names.
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "provider" => Some(Convention::Provider),
            "xai" => Some(Convention::Xai),
            "off" => Some(Convention::Off),
            _ => None,
        }
    }

    /// Every name [`Convention::named`] takes.
    pub const NAMES: &'static [&'static str] = &["provider", "xai", "off"];

    /// The name of this convention.
    pub fn name(self) -> &'static str {
        match self {
            Convention::Provider => "provider",
            Convention::Xai => "xai",
            Convention::Off => "off",
        }
    }
}

/// Under which conventions a relation holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Under {
    /// The provider's and xAI's alike.
    Both,
    /// The provider's only.
    Provider,
    /// xAI's only.
    Xai,
}

impl Under {
    fn holds(self, convention: Convention) -> bool {
        matches!(
            (self, convention),
            (Under::Both, Convention::Provider | Convention::Xai)
                | (Under::Provider, Convention::Provider)
                | (Under::Xai, Convention::Xai)
        )
    }
}

/// What a relation says, over figures named by their JSON pointers (as
/// the dialect's table names them; a member under a wildcard record by its
/// own pointer, `/usage/completion_tokens_details/reasoning_tokens`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Rule {
    /// A part is at most its whole.
    AtMost {
        part: &'static str,
        whole: &'static str,
    },
    /// Parts together are at most their whole (an absent part is none of
    /// it; judged when the whole and one part are there).
    PartsAtMost {
        parts: &'static [&'static str],
        whole: &'static str,
    },
    /// A total is exactly its terms: each of `terms` must be there, an
    /// absent one of `optional` counts none.
    Sum {
        total: &'static str,
        terms: &'static [&'static str],
        optional: &'static [&'static str],
    },
    /// A total is at least its terms, each of which must be there (it may
    /// hold more that the provider does not break down).
    AtLeast {
        total: &'static str,
        terms: &'static [&'static str],
    },
}

/// One relation a provider defines between figures.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Relation {
    /// Its name: the `relation` label of
    /// `probity_figure_contradictions_total`, and what `probity inspect`,
    /// the capture and the admin page show. Bounded: from the tables only.
    pub(crate) name: &'static str,
    pub(crate) rule: Rule,
    pub(crate) under: Under,
}

impl Relation {
    /// `part ≤ whole`, under the provider's convention and xAI's.
    pub(crate) const fn at_most(
        name: &'static str,
        part: &'static str,
        whole: &'static str,
    ) -> Self {
        Self {
            name,
            rule: Rule::AtMost { part, whole },
            under: Under::Both,
        }
    }

    /// `Σ parts ≤ whole`, under both conventions.
    pub(crate) const fn parts_at_most(
        name: &'static str,
        parts: &'static [&'static str],
        whole: &'static str,
    ) -> Self {
        Self {
            name,
            rule: Rule::PartsAtMost { parts, whole },
            under: Under::Both,
        }
    }

    /// `total = Σ terms (+ Σ optional, an absent one none)`, under both
    /// conventions.
    pub(crate) const fn sum(
        name: &'static str,
        total: &'static str,
        terms: &'static [&'static str],
        optional: &'static [&'static str],
    ) -> Self {
        Self {
            name,
            rule: Rule::Sum {
                total,
                terms,
                optional,
            },
            under: Under::Both,
        }
    }

    /// `total ≥ Σ terms`, under both conventions.
    pub(crate) const fn at_least(
        name: &'static str,
        total: &'static str,
        terms: &'static [&'static str],
    ) -> Self {
        Self {
            name,
            rule: Rule::AtLeast { total, terms },
            under: Under::Both,
        }
    }

    /// The relation, under one convention only.
    pub(crate) const fn under(mut self, under: Under) -> Self {
        self.under = under;
        self
    }

    /// Whether it is judged under `convention`.
    pub(crate) fn holds(&self, convention: Convention) -> bool {
        self.under.holds(convention)
    }

    /// Every pointer it names: the whole or total first.
    pub(crate) fn pointers(&self) -> Vec<&'static str> {
        let (first, rest, more): (_, _, &[&'static str]) = match self.rule {
            Rule::AtMost { part, whole } => return vec![whole, part],
            Rule::PartsAtMost { parts, whole } => (whole, parts, &[]),
            Rule::Sum {
                total,
                terms,
                optional,
            } => (total, terms, optional),
            Rule::AtLeast { total, terms } => (total, terms, &[]),
        };
        std::iter::once(first)
            .chain(rest.iter().copied())
            .chain(more.iter().copied())
            .collect()
    }

    /// Whether figures of these values break it: `value` gives a figure's
    /// reading by pointer. `None`: it cannot be judged (a figure it needs
    /// is not there, or not well-formed).
    pub(crate) fn breached(&self, value: impl Fn(&str) -> Term) -> Option<bool> {
        match self.rule {
            Rule::AtMost { part, whole } => {
                let (Term::Count(part), Term::Count(whole)) = (value(part), value(whole)) else {
                    return None;
                };
                Some(part > whole)
            }
            Rule::PartsAtMost { parts, whole } => {
                let Term::Count(whole) = value(whole) else {
                    return None;
                };
                let sum = present_sum(parts, &value)?;
                Some(u128::from(whole) < sum)
            }
            Rule::Sum {
                total,
                terms,
                optional,
            } => {
                let Term::Count(total) = value(total) else {
                    return None;
                };
                let sum = full_sum(terms, &value)? + optional_sum(optional, &value)?;
                Some(u128::from(total) != sum)
            }
            Rule::AtLeast { total, terms } => {
                let Term::Count(total) = value(total) else {
                    return None;
                };
                let sum = full_sum(terms, &value)?;
                Some(u128::from(total) < sum)
            }
        }
    }
}

/// A figure, as a relation reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Term {
    /// Absent or `null`: not reported.
    Absent,
    /// A well-formed count.
    Count(u64),
    /// Malformed, or not a count a relation can read.
    Unknown,
}

/// The sum of terms that must all be counts.
fn full_sum(terms: &[&str], value: &impl Fn(&str) -> Term) -> Option<u128> {
    terms.iter().try_fold(0u128, |sum, term| match value(term) {
        Term::Count(n) => Some(sum + u128::from(n)),
        Term::Absent | Term::Unknown => None,
    })
}

/// The sum of terms an absent one of which counts none.
fn optional_sum(terms: &[&str], value: &impl Fn(&str) -> Term) -> Option<u128> {
    terms.iter().try_fold(0u128, |sum, term| match value(term) {
        Term::Count(n) => Some(sum + u128::from(n)),
        Term::Absent => Some(sum),
        Term::Unknown => None,
    })
}

/// The sum of the parts that are there (at least one), an absent one none.
fn present_sum(terms: &[&str], value: &impl Fn(&str) -> Term) -> Option<u128> {
    let present = terms.iter().any(|t| matches!(value(t), Term::Count(_)));
    optional_sum(terms, value).filter(|_| present)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of<'a>(values: &'a [(&'a str, Term)]) -> impl Fn(&str) -> Term + 'a {
        move |p| {
            values
                .iter()
                .find(|(q, _)| *q == p)
                .map_or(Term::Absent, |(_, t)| *t)
        }
    }

    #[test]
    fn at_most_is_breached_above_and_holds_at_equal() {
        let r = Relation::at_most("r", "/p", "/w");
        let c = Term::Count;
        assert_eq!(
            r.breached(of(&[("/p", c(6001)), ("/w", c(6000))])),
            Some(true)
        );
        assert_eq!(
            r.breached(of(&[("/p", c(6000)), ("/w", c(6000))])),
            Some(false)
        );
        assert_eq!(r.breached(of(&[("/p", c(6000))])), None);
        assert_eq!(r.breached(of(&[("/p", c(1)), ("/w", Term::Unknown)])), None);
    }

    #[test]
    fn sums_count_what_they_say() {
        let c = Term::Count;
        let sum = Relation::sum("s", "/t", &["/a", "/b"], &[]);
        assert_eq!(
            sum.breached(of(&[("/t", c(3)), ("/a", c(1)), ("/b", c(2))])),
            Some(false)
        );
        assert_eq!(
            sum.breached(of(&[("/t", c(4)), ("/a", c(1)), ("/b", c(2))])),
            Some(true)
        );
        assert_eq!(sum.breached(of(&[("/t", c(1)), ("/a", c(1))])), None);
        let optional = Relation::sum("s", "/t", &["/a"], &["/b"]);
        assert_eq!(
            optional.breached(of(&[("/t", c(1)), ("/a", c(1))])),
            Some(false)
        );
        assert_eq!(
            optional.breached(of(&[("/t", c(2)), ("/a", c(1))])),
            Some(true)
        );
        assert_eq!(
            optional.breached(of(&[("/t", c(2)), ("/a", c(1)), ("/b", Term::Unknown)])),
            None
        );
        assert_eq!(optional.breached(of(&[("/t", c(2))])), None);
        let parts = Relation::parts_at_most("p", &["/a", "/b"], "/t");
        assert_eq!(
            parts.breached(of(&[("/t", c(3)), ("/a", c(1)), ("/b", c(2))])),
            Some(false)
        );
        assert_eq!(
            parts.breached(of(&[("/t", c(2)), ("/b", c(3))])),
            Some(true)
        );
        assert_eq!(parts.breached(of(&[("/t", c(2))])), None);
        let at_least = Relation::at_least("l", "/t", &["/a", "/b"]);
        assert_eq!(
            at_least.breached(of(&[("/t", c(9)), ("/a", c(1)), ("/b", c(2))])),
            Some(false)
        );
        assert_eq!(
            at_least.breached(of(&[("/t", c(2)), ("/a", c(1)), ("/b", c(2))])),
            Some(true)
        );
        let max = u64::MAX;
        assert_eq!(
            sum.breached(of(&[("/t", c(max)), ("/a", c(max)), ("/b", c(1))])),
            Some(true)
        );
    }

    #[test]
    fn conventions_pick_their_relations() {
        let r = Relation::at_most("r", "/p", "/w");
        assert!(
            r.holds(Convention::Provider) && r.holds(Convention::Xai) && !r.holds(Convention::Off)
        );
        let only = r.under(Under::Provider);
        assert!(only.holds(Convention::Provider) && !only.holds(Convention::Xai));
        for name in Convention::NAMES {
            assert_eq!(Convention::named(name).map(Convention::name), Some(*name));
        }
    }
}

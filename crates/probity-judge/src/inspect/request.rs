//! What an endpoint's request is, as data beside its figure table: whether
//! it carries a body, and the top-level fields that judging reads (its
//! check, its stream judge, its output contract, its batch split) or that
//! say what was asked, each with the JSON kinds the provider takes.
//!
//! [`RequestShape::read`] is the one gate before any judgement that depends
//! on the request (`inspect::judge`, `stream_judge`, `Endpoint::asked`,
//! `batch::split`): a request that does not pass it is judged as one that
//! is not JSON, its figures and its syntax only.

use crate::invariants::{REQUEST_NOT_JSON, REQUEST_SHAPE};
use crate::json::{Document, Kind, Object};

/// An endpoint's request: whether it takes a body, and its fields.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct RequestShape {
    /// Whether the call carries a body. Where it does not (a GET of a
    /// stored response, its cancel), an empty body asks for nothing: `{}`.
    /// Everywhere else an empty body is not JSON.
    pub(crate) body: bool,
    /// The top-level fields judging reads; any other member is the
    /// provider's business.
    pub(crate) fields: &'static [Field],
}

/// One top-level request field and the kinds the provider's API reference
/// and SDK types allow it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Field {
    pub(crate) name: &'static str,
    pub(crate) kinds: &'static [Kind],
    /// Whether `null` stands for absent (`Object::present` reads it so).
    pub(crate) null: bool,
}

impl Field {
    /// A field the provider requires, of one of `kinds`.
    pub(crate) const fn required(name: &'static str, kinds: &'static [Kind]) -> Self {
        Self {
            name,
            kinds,
            null: false,
        }
    }

    /// An optional field, of one of `kinds` or `null`.
    pub(crate) const fn optional(name: &'static str, kinds: &'static [Kind]) -> Self {
        Self {
            name,
            kinds,
            null: true,
        }
    }

    /// Whether a value of `kind` is one the field takes.
    pub(crate) fn takes(&self, kind: Kind) -> bool {
        self.kinds.contains(&kind) || (self.null && kind == Kind::Null)
    }
}

/// A request the gate let through: a JSON object whose declared fields
/// each have a declared kind.
pub(crate) struct Readable<'t>(Document<'t>);

impl Readable<'_> {
    /// The request's members.
    pub(crate) fn object(&self) -> Object<'_> {
        self.0.object().unwrap_or_default()
    }
}

impl RequestShape {
    /// The request, when probity can read it; else why not (a
    /// `probity_uninspected_total` reason): `request_not_json` for a body
    /// that is not a JSON object (an empty one included, where the
    /// endpoint takes a body), `request_shape` for a field of a kind the
    /// provider does not take.
    pub(crate) fn read<'t>(&self, body: &'t [u8]) -> Result<Readable<'t>, &'static str> {
        let body: &'t [u8] = match (body.is_empty(), self.body) {
            (true, false) => b"{}",
            _ => body,
        };
        let doc = Document::parse(body).map_err(|_| REQUEST_NOT_JSON)?;
        let fits = {
            let object = doc.object().ok_or(REQUEST_NOT_JSON)?;
            self.fields.iter().all(|field| {
                object
                    .get(field.name)
                    .is_none_or(|value| field.takes(value.kind()))
            })
        };
        match fits {
            true => Ok(Readable(doc)),
            false => Err(REQUEST_SHAPE),
        }
    }
}

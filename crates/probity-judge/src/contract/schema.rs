//! JSON Schemas, compiled once and cached: a request's schema is the same
//! text call after call, and compiling it costs far more than validating.

use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use jsonschema::error::ValidationErrorKind;
use jsonschema::Validator;
use serde_json::Value;

use super::OutputFindings;

/// A compiled schema and what the free-text checks need from it.
pub(crate) struct Compiled {
    validator: Validator,
    schema: Value,
    property_names: Vec<String>,
}

impl Compiled {
    pub(crate) fn schema(&self) -> &Value {
        &self.schema
    }

    /// Every property name the schema declares, at any depth.
    pub(crate) fn property_names(&self) -> &[String] {
        &self.property_names
    }

    /// Schema violations, with `enum` and `const` misses told apart.
    pub(super) fn check(&self, value: &Value, found: &mut OutputFindings) {
        for error in self.validator.iter_errors(value) {
            let at = error.instance_path().to_string();
            let at = if at.is_empty() {
                "the answer".to_string()
            } else {
                at
            };
            match error.kind() {
                ValidationErrorKind::Enum { .. } | ValidationErrorKind::Constant { .. } => found
                    .add(
                        super::Reason::EnumViolation,
                        format!("{at} is not one of the allowed values"),
                    ),
                _ => found.add(
                    super::Reason::SchemaViolation,
                    format!("{at} does not satisfy the schema: {error}"),
                ),
            }
        }
    }
}

impl Compiled {
    /// The first place `value` fails the schema, as a sentence (a tool
    /// call's arguments: every failure is `tool_arguments_schema`).
    pub(super) fn first_failure(&self, value: &Value) -> Option<String> {
        let error = self.validator.iter_errors(value).next()?;
        let at = error.instance_path().to_string();
        let at = if at.is_empty() {
            "the arguments".to_string()
        } else {
            at
        };
        Some(format!("{at} does not satisfy the tool's schema: {error}"))
    }
}

/// Compiled schemas by content, at most `capacity`, oldest evicted first.
pub struct SchemaCache {
    capacity: usize,
    entries: Mutex<Entries>,
}

/// By schema hash (`None`: a schema that does not compile), and in
/// insertion order for eviction.
#[derive(Default)]
struct Entries {
    map: HashMap<u64, Option<Arc<Compiled>>>,
    order: VecDeque<u64>,
}

impl SchemaCache {
    /// A cache of at most `capacity` compiled schemas.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Mutex::new(Entries::default()),
        }
    }

    /// The compiled schema; `None` for a schema that does not compile (the
    /// provider will refuse the request; it is not the model's fault).
    pub(crate) fn get(&self, schema: &Value) -> Option<Arc<Compiled>> {
        let mut hasher = DefaultHasher::new();
        // serde_json's maps are sorted: equal schemas print equally.
        schema.to_string().hash(&mut hasher);
        let key = hasher.finish();
        if let Ok(entries) = self.entries.lock() {
            if let Some(found) = entries.map.get(&key) {
                return found.clone();
            }
        }
        let compiled = jsonschema::validator_for(schema).ok().map(|validator| {
            let mut property_names = Vec::new();
            collect_names(schema, &mut property_names);
            Arc::new(Compiled {
                validator,
                schema: schema.clone(),
                property_names,
            })
        });
        if let Ok(mut entries) = self.entries.lock() {
            let Entries { map, order } = &mut *entries;
            while map.len() >= self.capacity {
                match order.pop_front() {
                    Some(old) => map.remove(&old),
                    None => break,
                };
            }
            if map.insert(key, compiled.clone()).is_none() {
                order.push_back(key);
            }
        }
        compiled
    }
}

fn collect_names(schema: &Value, names: &mut Vec<String>) {
    match schema {
        Value::Object(members) => {
            if let Some(Value::Object(properties)) = members.get("properties") {
                names.extend(properties.keys().cloned());
            }
            for member in members.values() {
                collect_names(member, names);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect_names(item, names)),
        _ => {}
    }
}

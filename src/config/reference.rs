//! The configuration's reference, written from its own definitions: the
//! JSON Schema that schemars derives from the structs of this module (serde's
//! attributes, doc comments, each `Default`), completed with the keys
//! [`Config::validate`] requires, and the Markdown page printed from it
//! (`probity config schema`, `probity config reference`). Nothing here names
//! a key, so a new key cannot go undocumented.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::{load, Config};

/// Why the reference could not be written: a shape of schema it does not
/// know how to describe (a new kind of key must be taught here, not left out).
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    /// A key's schema is of a shape the Markdown cannot name.
    #[error("`{key}`: no type the reference can name in {schema}")]
    UnknownShape {
        /// The dotted key.
        key: String,
        /// Its schema.
        schema: String,
    },
    /// A `$ref` that points nowhere in `$defs`.
    #[error("`{key}`: dangling reference {reference}")]
    DanglingReference {
        /// The dotted key.
        key: String,
        /// The reference.
        reference: String,
    },
    /// A key that is neither required nor has a default.
    #[error("`{key}`: neither required nor defaulted")]
    NoDefault {
        /// The dotted key.
        key: String,
    },
}

/// The JSON Schema of a configuration file, as editors read it (Taplo, Even
/// Better TOML): every table and key, its type, default and description.
pub fn schema() -> Value {
    let mut schema = schemars::schema_for!(Config).to_value();
    if let Some(root) = schema.as_object_mut() {
        root.insert("title".into(), "probity configuration".into());
        require_what_validation_requires(root);
    }
    schema
}

/// The keys that serde defaults but validation refuses to leave out (a
/// route's `name`, `prefix`...), found by validating one empty table of each
/// array at the top level, as `check-config` would: required in the schema,
/// their placeholder default dropped.
fn require_what_validation_requires(root: &mut Map<String, Value>) {
    let arrays: Vec<String> = root
        .get("properties")
        .and_then(Value::as_object)
        .map(|tables| {
            tables
                .iter()
                .filter(|(_, table)| table.get("type") == Some(&Value::from("array")))
                .map(|(name, _)| name.clone())
                .collect()
        })
        .unwrap_or_default();
    let probe: String = arrays.iter().map(|name| format!("[[{name}]]\n")).collect();
    let Err(problems) = load(&probe, &probity_judge::inspect::names()) else {
        return;
    };
    for problem in problems.0 {
        if !problem.message.starts_with("missing (required)") {
            continue;
        }
        // `routes[0].name`: the table `routes`, the key `name`.
        let Some((table, key)) = problem.path.split_once("[0].") else {
            continue;
        };
        let reference = root
            .get("properties")
            .and_then(|tables| tables.get(table))
            .and_then(|table| table.pointer("/items/$ref"))
            .and_then(Value::as_str)
            .and_then(|reference| reference.strip_prefix("#/$defs/"))
            .map(str::to_owned);
        let definition = reference.and_then(|name| {
            root.get_mut("$defs")
                .and_then(|defs| defs.get_mut(&name))
                .and_then(Value::as_object_mut)
        });
        let Some(definition) = definition else {
            continue;
        };
        if let Some(property) = definition
            .get_mut("properties")
            .and_then(|properties| properties.get_mut(key))
            .and_then(Value::as_object_mut)
        {
            property.remove("default");
        }
        let required = definition
            .entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(required) = required.as_array_mut() {
            if !required.contains(&Value::from(key)) {
                required.push(key.into());
            }
        }
    }
}

/// The reference page: one section per table, in the file's order, each key
/// with its type, default (as TOML writes it) or "required", and what it does.
pub fn markdown() -> Result<String, ReferenceError> {
    let schema = schema();
    let empty = Map::new();
    let defs = schema
        .get("$defs")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut page = String::from(
        "# Configuration reference\n\n\
         <!-- Written by `probity config reference` from the configuration's own \
         definitions (src/config/mod.rs); regenerate with \
         `UPDATE_REFERENCE=1 cargo test --test it reference`. -->\n\n\
         Every table and key of a probity configuration file, with its type, its \
         default (what a key left out is taken to be) and what it does. \
         `probity config default` prints a complete file to start from; \
         `probity check-config FILE` checks one. The same keys as a JSON Schema, \
         for an editor to validate and complete a TOML file with, are \
         `probity config schema` ([probity.schema.json](probity.schema.json)); \
         Taplo and Even Better TOML use it for a file whose first line is \
         `#:schema ./probity.schema.json`.\n\n",
    );
    let sections = Section {
        header: String::new(),
        path: String::new(),
        field_description: None,
        schema: &schema,
    };
    sections.write(&mut page, defs)?;
    while page.ends_with("\n\n") {
        page.pop();
    }
    Ok(page)
}

/// One table of the file: its header (`[server]`, `[[routes]]`), its dotted
/// path and its definition.
struct Section<'a> {
    header: String,
    path: String,
    field_description: Option<&'a str>,
    schema: &'a Value,
}

/// What a key's schema is, once `$ref`s and `Option`'s `null` are seen through.
enum Shape<'a> {
    /// A table of its own (a struct): a section.
    Table { array: bool, schema: &'a Value },
    /// A value: its type's name and, for an enum, its variants.
    Value {
        type_name: String,
        variants: Vec<(String, String)>,
    },
}

impl Section<'_> {
    /// This table's heading and keys, then its own tables, depth first: the
    /// order of the file (`[[routes]]`, then `[routes.contract]`).
    fn write(&self, page: &mut String, defs: &Map<String, Value>) -> Result<(), ReferenceError> {
        if !self.header.is_empty() {
            let _ = write!(page, "## `{}`\n\n", self.header);
            for text in [description(self.schema), self.field_description]
                .into_iter()
                .flatten()
                .filter_map(|text| without_header(text, &self.header))
            {
                let _ = write!(page, "{}\n\n", paragraphs(&text));
            }
        }
        let empty = Map::new();
        let properties = self
            .schema
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let mut tables = Vec::new();
        for (key, property) in properties {
            let path = dotted(&self.path, key);
            match shape(&path, property, defs)? {
                Shape::Table { array, schema } => tables.push(Section {
                    header: if array {
                        format!("[[{path}]]")
                    } else {
                        format!("[{path}]")
                    },
                    field_description: description(property),
                    path,
                    schema,
                }),
                Shape::Value {
                    type_name,
                    variants,
                } => {
                    let fact = self.requirement(key, property, &path)?;
                    let _ = write!(page, "### `{path}`\n\n{type_name}; {fact}.\n\n");
                    if let Some(text) = description(property) {
                        let _ = write!(page, "{}\n\n", paragraphs(text));
                    }
                    for (value, text) in &variants {
                        let _ = writeln!(page, "- `{value}`: {}", paragraphs(text));
                    }
                    if !variants.is_empty() {
                        page.push('\n');
                    }
                }
            }
        }
        for table in tables {
            table.write(page, defs)?;
        }
        Ok(())
    }

    /// "required", or the key's default: its own, or the one in its table's.
    fn requirement(
        &self,
        key: &str,
        property: &Value,
        path: &str,
    ) -> Result<String, ReferenceError> {
        let required = self
            .schema
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|keys| keys.contains(&Value::from(key)));
        if required {
            return Ok("required".to_owned());
        }
        property
            .get("default")
            .or_else(|| self.schema.get("default").and_then(|table| table.get(key)))
            .map(|default| format!("default {}", toml_default(default)))
            .ok_or_else(|| ReferenceError::NoDefault {
                key: path.to_owned(),
            })
    }
}

fn dotted(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// A table's description without the header it starts with (the heading
/// says it): "`[server]`: the listeners..." is "The listeners...".
fn without_header(text: &str, header: &str) -> Option<String> {
    let rest = text
        .strip_prefix(&format!("`{header}`"))
        .map_or(text, |rest| rest.trim_start_matches([':', ',', '.', ' ']));
    let mut chars = rest.chars();
    let first = chars.next()?;
    Some(first.to_uppercase().chain(chars).collect())
}

fn description(schema: &Value) -> Option<&str> {
    schema.get("description").and_then(Value::as_str)
}

/// A doc comment's lines joined into paragraphs (its blank lines kept).
fn paragraphs(text: &str) -> String {
    text.split("\n\n")
        .map(|paragraph| {
            paragraph
                .lines()
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// A key's schema seen through `$ref` and `Option` (`anyOf [X, null]`,
/// `type: [T, "null"]`).
fn shape<'a>(
    key: &str,
    schema: &'a Value,
    defs: &'a Map<String, Value>,
) -> Result<Shape<'a>, ReferenceError> {
    let schema = resolve(key, schema, defs)?;
    if let Some(options) = schema.get("anyOf").and_then(Value::as_array) {
        let not_null: Vec<&Value> = options
            .iter()
            .filter(|option| option.get("type") != Some(&Value::from("null")))
            .collect();
        if let [only] = not_null.as_slice() {
            return shape(key, only, defs);
        }
    }
    if schema.get("properties").is_some() {
        return Ok(Shape::Table {
            array: false,
            schema,
        });
    }
    if let Some(choices) = choices(schema) {
        return Ok(choices);
    }
    let unknown = || ReferenceError::UnknownShape {
        key: key.to_owned(),
        schema: schema.to_string(),
    };
    let type_name = match schema.get("type") {
        Some(Value::Array(types)) => {
            let not_null: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
            match not_null.as_slice() {
                [only] => only.as_str().map(str::to_owned),
                _ => None,
            }
        }
        Some(Value::String(name)) => Some(name.clone()),
        _ => None,
    }
    .ok_or_else(unknown)?;
    let type_name = match type_name.as_str() {
        "array" => {
            let items = schema.get("items").ok_or_else(unknown)?;
            if let Shape::Table { schema, .. } = shape(key, items, defs)? {
                return Ok(Shape::Table {
                    array: true,
                    schema,
                });
            }
            format!("array of {}s", scalar(key, items, defs)?)
        }
        "object" => {
            let values = schema.get("additionalProperties").ok_or_else(unknown)?;
            format!("table of {}s", scalar(key, values, defs)?)
        }
        "string" | "integer" | "number" | "boolean" => type_name,
        _ => return Err(unknown()),
    };
    Ok(Shape::Value {
        type_name,
        variants: Vec::new(),
    })
}

/// A string of a closed set: an enum's variants (`oneOf` consts, each
/// with its doc comment) or a list of names (`enum`).
fn choices(schema: &Value) -> Option<Shape<'_>> {
    if let Some(variants) = schema.get("oneOf").and_then(Value::as_array) {
        let variants: Option<Vec<(String, String)>> = variants
            .iter()
            .map(|variant| {
                let value = variant.get("const")?;
                Some((
                    toml_value(value),
                    description(variant).unwrap_or_default().to_owned(),
                ))
            })
            .collect();
        if let Some(variants) = variants {
            let names: Vec<&str> = variants.iter().map(|(value, _)| value.as_str()).collect();
            return Some(Shape::Value {
                type_name: format!("string, one of `{}`", names.join("`, `")),
                variants,
            });
        }
    }
    if let Some(names) = schema.get("enum").and_then(Value::as_array) {
        let names: Vec<String> = names.iter().map(toml_value).collect();
        return Some(Shape::Value {
            type_name: format!("string, one of `{}`", names.join("`, `")),
            variants: Vec::new(),
        });
    }
    None
}

/// The type name of an array's items or a table's values.
fn scalar(key: &str, schema: &Value, defs: &Map<String, Value>) -> Result<String, ReferenceError> {
    match shape(key, schema, defs)? {
        Shape::Value {
            type_name,
            variants,
        } if variants.is_empty() && !type_name.contains(' ') => Ok(type_name),
        _ => Err(ReferenceError::UnknownShape {
            key: key.to_owned(),
            schema: schema.to_string(),
        }),
    }
}

fn resolve<'a>(
    key: &str,
    schema: &'a Value,
    defs: &'a Map<String, Value>,
) -> Result<&'a Value, ReferenceError> {
    let Some(reference) = schema.get("$ref").and_then(Value::as_str) else {
        return Ok(schema);
    };
    reference
        .strip_prefix("#/$defs/")
        .and_then(|name| defs.get(name))
        .ok_or_else(|| ReferenceError::DanglingReference {
            key: key.to_owned(),
            reference: reference.to_owned(),
        })
}

/// A default as TOML writes it, in code; an absent `Option` is "none".
fn toml_default(value: &Value) -> String {
    if value.is_null() {
        "none".to_owned()
    } else {
        format!("`{}`", toml_value(value))
    }
}

fn toml_value(value: &Value) -> String {
    match value {
        Value::String(text) => toml_string(text),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(toml_value).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(table) => {
            let entries: Vec<String> = table
                .iter()
                .map(|(key, value)| format!("{} = {}", toml_string(key), toml_value(value)))
                .collect();
            if entries.is_empty() {
                "{}".to_owned()
            } else {
                format!("{{ {} }}", entries.join(", "))
            }
        }
        // TOML has no null: only inside a value, which no default holds.
        Value::Null => "none".to_owned(),
        Value::Bool(_) | Value::Number(_) => value.to_string(),
    }
}

/// A literal string ('...') when the text allows one (no `'`, no control
/// character) and needs no escapes otherwise, else a basic string with
/// JSON's escapes, which TOML shares.
fn toml_string(text: &str) -> String {
    let plain = !text.contains('\'') && !text.chars().any(char::is_control);
    if plain && (text.contains('"') || text.contains('\\')) {
        format!("'{text}'")
    } else {
        Value::from(text).to_string()
    }
}

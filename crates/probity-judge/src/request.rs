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

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::path::Path;

    use bytes::Bytes;
    use http::HeaderMap;
    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;
    use crate::contract::SchemaCache;
    use crate::inspect::{self, Contracts, Endpoint, Exchange, Verdict, DIALECTS};

    /// Every endpoint the dialect table reaches, once: each dialect's
    /// table, its families and its unlisted endpoints.
    fn endpoints() -> Vec<(&'static str, &'static Endpoint)> {
        let mut all: Vec<(&'static str, &'static Endpoint)> = Vec::new();
        for dialect in DIALECTS {
            let table = dialect.endpoints().iter().map(|(_, e)| *e);
            let families = dialect.families().iter().flat_map(|f| {
                [dialect.family(f), dialect.family_stream(f)]
                    .into_iter()
                    .flatten()
            });
            let unlisted = dialect.unlisted().iter().copied();
            for endpoint in table.chain(families).chain(unlisted) {
                if !all.iter().any(|(_, e)| std::ptr::eq(*e, endpoint)) {
                    all.push((dialect.name(), endpoint));
                }
            }
        }
        all
    }

    fn judged(endpoint: &Endpoint, request: &[u8], response: &Bytes) -> Verdict {
        let cache = SchemaCache::new(4);
        let contracts = Contracts {
            config: None,
            cache: &cache,
            convention: Default::default(),
        };
        let request = Bytes::copy_from_slice(request);
        let headers = HeaderMap::new();
        let exchange = Exchange::answered(&request, &headers, response);
        inspect::inspect(endpoint, &exchange, &contracts)
    }

    /// A verdict as text, without why the request was not read, and that
    /// reason.
    fn summary(verdict: Verdict) -> (String, Option<&'static str>) {
        match verdict {
            Verdict::Unchecked => ("unchecked".into(), None),
            Verdict::Reject(v) => (
                format!("reject {} {}", v.invariant.as_str(), v.message),
                None,
            ),
            Verdict::Sound(sound) => {
                let mut findings = sound.findings;
                let reason = findings.uninspected.take();
                let text = format!(
                    "sound {findings:?} {:?} {:?} {:?}",
                    sound.body, sound.nulls, sound.removed_headers
                );
                (text, reason)
            }
        }
    }

    /// What a stream judge made from `request` sends on and finds for
    /// `body`, without why the request was not read, and that reason.
    fn streamed(
        endpoint: &Endpoint,
        request: &[u8],
        body: &Bytes,
    ) -> Option<(String, Option<&'static str>)> {
        let cache = SchemaCache::new(4);
        let contracts = Contracts {
            config: None,
            cache: &cache,
            convention: Default::default(),
        };
        let mut judge = inspect::stream_judge(endpoint, request, &contracts).ok()?;
        let reason = judge.uninspected();
        let mut out = VecDeque::new();
        let broken = judge
            .feed(body, &mut out)
            .and_then(|()| judge.end(&mut out))
            .err()
            .map(|v| v.invariant);
        let mut findings = format!("{:?}", judge.findings());
        if let Some(reason) = reason {
            findings = findings.replace(&format!("Some({reason:?})"), "None");
        }
        Some((format!("{out:?} {broken:?} {findings}"), reason))
    }

    /// A saved exchange of `tests/fixtures`: its endpoint, its request and
    /// its answer, whole or streamed.
    struct Saved {
        endpoint: &'static Endpoint,
        request: Vec<u8>,
        whole: Option<Bytes>,
        stream: Option<Bytes>,
    }

    fn fixtures() -> Vec<Saved> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let mut found = Vec::new();
        for folder in std::fs::read_dir(&root).unwrap().flatten() {
            let Ok(cases) = std::fs::read_dir(folder.path()) else {
                continue;
            };
            for case in cases.flatten().map(|c| c.path()) {
                let Ok(path) = std::fs::read_to_string(case.join("endpoint")) else {
                    continue;
                };
                let path = path.trim();
                let folder = folder.file_name().to_string_lossy().into_owned();
                let (dialect, path) = match path[1..].split_once('/') {
                    Some((first, rest)) if inspect::dialect(first).is_some() => {
                        (first.to_string(), format!("/{rest}"))
                    }
                    _ => (folder, path.to_string()),
                };
                let Some(endpoint) = inspect::dialect(&dialect).and_then(|d| d.endpoint(&path))
                else {
                    continue;
                };
                let read = |name: &str| std::fs::read(case.join(name)).ok().map(Bytes::from);
                found.push(Saved {
                    endpoint,
                    request: std::fs::read(case.join("request.json")).unwrap_or_default(),
                    whole: read("response.json"),
                    stream: read("response.sse").or_else(|| read("response.ndjson")),
                });
            }
        }
        found
    }

    /// Answers any endpoint may get, which a readable request would reject
    /// (three choices for one, a vector short, an index past the documents,
    /// three candidates for one), beside the fixtures.
    const ANSWERS: &[&str] = &[
        r#"{"id": "c", "choices": [{"index": 0, "message": {"role": "assistant", "content": "a"}},
            {"index": 1, "message": {"role": "assistant", "content": "b"}},
            {"index": 2, "message": {"role": "assistant", "content": "c"}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": "x", "total_tokens": 2}}"#,
        r#"{"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.1]}],
            "usage": {"prompt_tokens": 2, "total_tokens": 2}}"#,
        r#"{"embeddings": [[0.1, 0.2]], "texts": ["a"], "meta": {"billed_units": {"input_tokens": 1}}}"#,
        r#"{"results": [{"index": 7, "relevance_score": 0.5}], "data": [{"index": 7, "relevance_score": 0.5}]}"#,
        r#"[{"index": 3, "score": 0.5}]"#,
        r#"{"candidates": [{"index": 0, "content": {"parts": [{"text": "a"}]}},
            {"index": 1, "content": {"parts": [{"text": "b"}]}},
            {"index": 2, "content": {"parts": [{"text": "c"}]}}],
            "usageMetadata": {"promptTokenCount": -1}}"#,
        r#"{"embedding": [0.1, 0.2], "inputTextTokenCount": 1}"#,
    ];

    /// Streams any streamed endpoint may get: a chunk of a third choice.
    const STREAMS: &[&str] = &[
        "data: {\"choices\": [{\"index\": 2, \"delta\": {\"content\": \"c\"}}]}\n\ndata: [DONE]\n\n",
        "{\"message\": {\"role\": \"assistant\", \"content\": \"a\"}, \"done\": true, \"eval_count\": \"x\"}\n",
    ];

    /// One value of each kind, as JSON text.
    #[derive(Debug, Clone)]
    struct Values([String; 6]);

    const KINDS: [Kind; 6] = [
        Kind::Object,
        Kind::Array,
        Kind::String,
        Kind::Number,
        Kind::Bool,
        Kind::Null,
    ];

    impl Values {
        fn of(&self, kind: Kind) -> &str {
            let at = KINDS.iter().position(|k| *k == kind).unwrap();
            &self.0[at]
        }
    }

    fn values() -> impl Strategy<Value = Values> {
        let object = prop_oneof![
            Just("{}".to_string()),
            "[a-z]{1,6}".prop_map(|k| format!(r#"{{"{k}": [1, "a"]}}"#)),
        ];
        let array = prop_oneof![
            Just("[]".to_string()),
            Just("[1, 2, 3]".to_string()),
            Just(r#"["a", "b", "c"]"#.to_string()),
            Just(r#"[{"role": "user", "content": "hi"}, {"type": "function"}]"#.to_string()),
        ];
        let string = "[a-z0-9 ]{0,8}".prop_map(|s| format!("\"{s}\""));
        let number = prop_oneof![
            (0u32..6).prop_map(|n| n.to_string()),
            Just("-3".to_string()),
            Just("2.5".to_string()),
            Just("1e3".to_string()),
        ];
        let boolean = any::<bool>().prop_map(|b| b.to_string());
        (object, array, string, number, boolean)
            .prop_map(|(o, a, s, n, b)| Values([o, a, s, n, b, "null".to_string()]))
    }

    /// `base` (an object, or nothing) with `name` set to `value`.
    fn merged(base: &[u8], name: &str, value: &str) -> Vec<u8> {
        let mut object = match serde_json::from_slice::<Value>(base) {
            Ok(Value::Object(object)) => object,
            _ => serde_json::Map::new(),
        };
        object.insert(name.into(), serde_json::from_str(value).unwrap());
        serde_json::to_vec(&object).unwrap()
    }

    const NOT_JSON: &[u8] = b"not json";

    /// The fixtures, read once for every case.
    fn saved() -> &'static [Saved] {
        static SAVED: std::sync::OnceLock<Vec<Saved>> = std::sync::OnceLock::new();
        SAVED.get_or_init(fixtures)
    }

    /// An endpoint's exchanges, whole and streamed: the fixtures' from
    /// `from` (at most `count`, wrapping), and the shared answers to `{}`.
    #[expect(clippy::type_complexity, reason = "a test's pairs")]
    fn exchanges(
        endpoint: &Endpoint,
        from: usize,
        count: usize,
    ) -> (Vec<(&'static [u8], Bytes)>, Vec<(&'static [u8], Bytes)>) {
        let mine: Vec<&Saved> = saved()
            .iter()
            .filter(|s| std::ptr::eq(s.endpoint, endpoint))
            .collect();
        let window = |pick: fn(&Saved) -> Option<Bytes>| -> Vec<(&'static [u8], Bytes)> {
            let all: Vec<(&'static [u8], Bytes)> = mine
                .iter()
                .filter_map(|s| Some((&s.request[..], pick(s)?)))
                .collect();
            let start = from % all.len().max(1);
            all.iter()
                .cycle()
                .skip(start)
                .take(count.min(all.len()))
                .cloned()
                .collect()
        };
        let shared = |list: &[&'static str]| {
            list.iter()
                .map(|a| (&b"{}"[..], Bytes::from_static(a.as_bytes())))
                .collect::<Vec<_>>()
        };
        let mut whole = window(|s| s.whole.clone());
        whole.extend(shared(ANSWERS));
        let mut streams = window(|s| s.stream.clone());
        streams.extend(shared(STREAMS));
        (whole, streams)
    }

    #[test]
    fn every_endpoint_is_reached_and_declares_its_fields_once() {
        let all = endpoints();
        assert!(all.len() >= 28, "{} endpoints", all.len());
        for (dialect, endpoint) in all {
            let fields = endpoint.request.fields;
            for (i, field) in fields.iter().enumerate() {
                assert!(
                    !fields[i + 1..].iter().any(|f| f.name == field.name),
                    "{dialect} {}: {} twice",
                    endpoint.operation,
                    field.name
                );
                assert!(!field.kinds.is_empty(), "{}", field.name);
            }
            // The split reads its inputs as arrays, through the same gate.
            if let Some(spec) = endpoint.batch() {
                assert_eq!(spec.request, endpoint.request, "{dialect}");
                for input in spec.inputs {
                    let field = fields.iter().find(|f| f.name == *input);
                    assert!(
                        field.is_some_and(|f| f.takes(Kind::Array)),
                        "{dialect} {input}"
                    );
                }
            }
            // Only a call without a body (no stream) reads an empty one as `{}`.
            assert!(
                endpoint.request.body || endpoint.stream.is_none(),
                "{dialect}"
            );
        }
    }

    #[test]
    fn the_answers_are_rejected_when_their_request_is_read() {
        let mut rejected = 0;
        for (_, endpoint) in endpoints() {
            let (whole, _) = exchanges(endpoint, 0, usize::MAX);
            for (request, answer) in &whole {
                let (found, _) = summary(judged(endpoint, request, answer));
                rejected +=
                    usize::from(found.starts_with("reject") && !found.contains("invalid_json"));
            }
        }
        assert!(
            rejected > 200,
            "only {rejected} answers are rejected when read"
        );
    }

    fn openai(path: &str) -> &'static Endpoint {
        inspect::dialect("openai")
            .and_then(|d| d.endpoint(path))
            .unwrap()
    }

    #[test]
    fn a_request_is_read_when_it_is_an_object_whose_declared_fields_have_their_kinds() {
        const SHAPE: RequestShape = RequestShape {
            body: true,
            fields: &[
                Field::required("messages", &[Kind::Array]),
                Field::optional("n", &[Kind::Number]),
            ],
        };
        let shape = SHAPE;
        let reason = |body: &str| shape.read(body.as_bytes()).err();
        for body in [
            "",
            " ",
            "not json",
            "null",
            "[1, 2]",
            "\"x\"",
            r#"{"messages": ["#,
        ] {
            assert_eq!(reason(body), Some(REQUEST_NOT_JSON), "{body:?}");
        }
        for body in [
            r#"{"messages": 5}"#,
            r#"{"messages": null}"#,
            r#"{"n": "2"}"#,
        ] {
            assert_eq!(reason(body), Some(REQUEST_SHAPE), "{body}");
        }
        // Absent, `null` where optional, undeclared members of any kind;
        // a duplicated key is read by its last copy, as `Object::get` reads it.
        for body in [
            "{}",
            r#"{"n": null, "x": 5}"#,
            r#"{"n": "x", "n": 2, "messages": []}"#,
        ] {
            assert_eq!(reason(body), None, "{body}");
        }
    }

    #[test]
    fn a_three_choice_answer_to_an_empty_or_wrong_typed_chat_request_passes_uninspected() {
        let chat = openai("/v1/chat/completions");
        let answer = Bytes::from_static(ANSWERS[0].as_bytes());
        let Verdict::Reject(read) = judged(chat, br#"{"model": "m", "messages": []}"#, &answer)
        else {
            panic!("three choices for one, read, are rejected");
        };
        assert_eq!(read.invariant.as_str(), "choice_count_mismatch");
        let requests: [(&[u8], &str); 3] = [
            (b"", REQUEST_NOT_JSON),
            (br#"{"model":"m","messages":5}"#, REQUEST_SHAPE),
            (b"not json", REQUEST_NOT_JSON),
        ];
        for (request, reason) in requests {
            let Verdict::Sound(sound) = judged(chat, request, &answer) else {
                panic!("{request:?}");
            };
            assert_eq!(sound.findings.uninspected, Some(reason), "{request:?}");
            // The figures are still judged.
            assert_eq!(sound.findings.pointers, ["/usage/completion_tokens"]);
        }
    }

    #[test]
    fn a_streamed_chat_request_with_wrong_typed_messages_is_judged_unread() {
        let chat = openai("/v1/chat/completions");
        let request = br#"{"model": "m", "messages": 5, "stream": true}"#;
        assert_eq!(chat.asked(request), inspect::Asked::Unknown);
        let body = Bytes::from_static(STREAMS[0].as_bytes());
        let (found, reason) = streamed(chat, request, &body).unwrap();
        assert_eq!(reason, Some(REQUEST_SHAPE));
        assert!(found.contains("rejected: None"), "{found}");
        let read = br#"{"model": "m", "messages": [], "stream": true}"#;
        let (found, _) = streamed(chat, read, &body).unwrap();
        assert!(
            found.contains("choice_index_invalid") || found.contains("ChoiceIndexInvalid"),
            "{found}"
        );
    }

    #[test]
    fn an_empty_body_is_not_json_where_the_endpoint_takes_a_body() {
        for (dialect, endpoint) in endpoints().into_iter().filter(|(_, e)| e.request.body) {
            let (whole, streams) = exchanges(endpoint, 0, usize::MAX);
            for (_, answer) in &whole {
                let empty = summary(judged(endpoint, b"", answer));
                assert_eq!(
                    empty,
                    summary(judged(endpoint, NOT_JSON, answer)),
                    "{dialect}"
                );
            }
            for (_, body) in &streams {
                let empty = streamed(endpoint, b"", body);
                assert_eq!(empty, streamed(endpoint, NOT_JSON, body), "{dialect}");
            }
            assert_eq!(endpoint.asked(b""), endpoint.asked(NOT_JSON), "{dialect}");
        }
    }

    #[test]
    fn a_call_without_a_body_reads_an_empty_one_as_asking_for_nothing() {
        let openai = inspect::dialect("openai").unwrap();
        let cancel = openai.endpoint("/v1/responses/resp_1/cancel").unwrap();
        let stored = openai.read("/v1/responses/resp_1", None).unwrap();
        assert!(std::ptr::eq(cancel, stored) && !stored.request.body);
        let sound = Bytes::from_static(
            br#"{"id": "resp_1", "object": "response", "status": "cancelled", "output": []}"#,
        );
        let Verdict::Sound(found) = judged(stored, b"", &sound) else {
            panic!("a stored response is judged");
        };
        assert_eq!(found.findings.uninspected, None);
        // Checked, as `{}`: a response without `output` is rejected.
        let broken = Bytes::from_static(br#"{"id": "resp_1", "object": "response"}"#);
        let Verdict::Reject(violation) = judged(stored, b"", &broken) else {
            panic!("checked against {{}}");
        };
        assert_eq!(violation.invariant.as_str(), "payload_missing");
        // The same empty body to `POST …/responses` asks for nothing readable.
        let create = openai.endpoint("/v1/responses").unwrap();
        let Verdict::Sound(found) = judged(create, b"", &broken) else {
            panic!("unread, the payload is not checked");
        };
        assert_eq!(found.findings.uninspected, Some(REQUEST_NOT_JSON));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

        /// For every endpoint and every declared field, with a value of a
        /// kind it does not take in a request otherwise a fixture's (or
        /// `{}`): the answer is judged as one to a request that is not JSON,
        /// whole and streamed, the request is not split and what it asked
        /// is not known. Only the reason differs.
        #[test]
        fn a_field_of_a_kind_not_taken_is_judged_as_a_request_that_is_not_json(
            values in values(),
            from in any::<usize>(),
            pick in any::<usize>(),
        ) {
            for (dialect, endpoint) in endpoints() {
                let (whole, streams) = exchanges(endpoint, from, 3);
                let unread: Vec<(String, Option<&str>)> =
                    whole.iter().map(|(_, a)| summary(judged(endpoint, NOT_JSON, a))).collect();
                let unread_streams: Vec<Option<(String, Option<&str>)>> =
                    streams.iter().map(|(_, s)| streamed(endpoint, NOT_JSON, s)).collect();
                for (i, field) in endpoint.request.fields.iter().enumerate() {
                    let wrong: Vec<Kind> = KINDS.into_iter().filter(|k| !field.takes(*k)).collect();
                    let value = values.of(wrong[(pick + i) % wrong.len()]);
                    let at = format!("{dialect} {} {}: {value}", endpoint.operation, field.name);
                    for ((base, answer), (expected, _)) in whole.iter().zip(&unread) {
                        let request = merged(base, field.name, value);
                        let (found, reason) = summary(judged(endpoint, &request, answer));
                        prop_assert_eq!(&found, expected, "{}", at);
                        if found.starts_with("sound") {
                            prop_assert_eq!(reason, Some(REQUEST_SHAPE), "{}", at);
                        }
                        prop_assert_eq!(endpoint.asked(&request), endpoint.asked(NOT_JSON), "{}", at);
                        if let Some(spec) = endpoint.batch() {
                            prop_assert!(crate::batch::split(&request, spec, 1).is_none(), "{}", at);
                        }
                    }
                    for ((base, body), expected) in streams.iter().zip(&unread_streams) {
                        let request = merged(base, field.name, value);
                        let found = streamed(endpoint, &request, body);
                        prop_assert_eq!(
                            found.as_ref().map(|f| &f.0),
                            expected.as_ref().map(|e| &e.0),
                            "{} streamed",
                            at
                        );
                        if let Some((_, reason)) = found {
                            prop_assert_eq!(reason, Some(REQUEST_SHAPE), "{} streamed", at);
                        }
                    }
                }
            }
        }
    }
}

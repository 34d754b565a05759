//! Renders the card parity fixtures (cards.md §20) from the registry: single-rule probes derived
//! from `records.*.checks` and `contexts`, cross-rule probes coded here, the SKILL.md examples,
//! and the registry's curated and divergence cases. Expectations are predicted here from the
//! templates and the probed paths, independently of `canon-cards` (xtask never links it), so the
//! parity test compares two separate implementations; `python` members record where cards.py
//! 0.14.1 deviates (cards.md §15).
//!
//! After rendering, the coverage requirements of cards.md §20.5 are checked; a gap is an error.

// Probe tables are tuples of plain data; a named type for each shape would add nothing.
#![allow(clippy::type_complexity)]

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context;
use serde_json::{json, Map, Value};

use super::vocab::{string_caps, template_pieces, Cap, Piece};
use super::{Artifact, Registry};

/// One expected error: the template id (for tags) and the rendered text.
#[derive(Clone)]
struct Error {
    id: &'static str,
    text: String,
}

/// One fixture case before serialization.
struct Case {
    name: String,
    card: CardInput,
    expected: Vec<Error>,
    python: Option<Value>,
    tags: Vec<String>,
    reason: Option<String>,
}

enum CardInput {
    Value(Value),
    Text(String),
}

/// Collects cases and renders messages from the registry templates.
struct Gen<'r> {
    registry: &'r Registry,
    cases: Vec<Case>,
    templates: BTreeMap<String, String>,
}

impl<'r> Gen<'r> {
    fn new(registry: &'r Registry) -> anyhow::Result<Gen<'r>> {
        let mut templates = BTreeMap::new();
        for (id, template) in registry.object_at("/messages")? {
            let text = template.as_str().context("message must be a string")?;
            let rendered: String = template_pieces(registry, text)?
                .into_iter()
                .map(|p| match p {
                    Piece::Text(t) => t,
                    Piece::Param(n) => format!("{{{n}}}"),
                })
                .collect();
            templates.insert(id.clone(), rendered);
        }
        Ok(Gen {
            registry,
            cases: Vec::new(),
            templates,
        })
    }

    /// Renders message `id` with `params` (placeholder name → value).
    fn msg(&self, id: &'static str, params: &[(&str, &str)]) -> Error {
        let mut text = self
            .templates
            .get(id)
            .cloned()
            .unwrap_or_else(|| format!("<unknown template {id}>"));
        for (name, value) in params {
            text = text.replace(&format!("{{{name}}}"), value);
        }
        Error { id, text }
    }

    fn path_msg(&self, id: &'static str, path: &str) -> Error {
        self.msg(id, &[("path", path)])
    }

    fn add(&mut self, name: impl Into<String>, card: Value, expected: Vec<Error>, tags: &[String]) {
        self.cases.push(Case {
            name: name.into(),
            card: CardInput::Value(card),
            expected,
            python: None,
            tags: tags.to_vec(),
            reason: None,
        });
    }

    fn limit(&self, name: &str) -> usize {
        usize::try_from(self.registry.limit(name).unwrap_or(0)).unwrap_or(0)
    }

    fn minimal(&self, record: &str) -> Value {
        self.registry
            .root
            .pointer(&format!("/records/{record}/minimal"))
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// Places `record` into the context `context` and returns the whole card and the record's
    /// path (cards.md §18.4).
    fn place(&self, context: &str, record: Value) -> (Value, String) {
        let contexts = &self.registry.root["contexts"];
        let path = contexts[context]["path"]
            .as_str()
            .unwrap_or("card")
            .to_owned();
        let mut value = record;
        let mut current = context.to_owned();
        while current != "card" {
            let ctx = &contexts[current.as_str()];
            value = substitute(&ctx["wrap"], &value);
            current = ctx["in"].as_str().unwrap_or("card").to_owned();
        }
        (value, path)
    }
}

/// Replaces the string `"$RECORD"` inside `wrap` with `record`.
fn substitute(wrap: &Value, record: &Value) -> Value {
    match wrap {
        Value::String(s) if s == "$RECORD" => record.clone(),
        Value::Array(items) => Value::Array(items.iter().map(|v| substitute(v, record)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), substitute(v, record)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn set(record: &Value, key: &str, value: Value) -> Value {
    let mut out = record.clone();
    if let Value::Object(map) = &mut out {
        map.insert(key.to_owned(), value);
    }
    out
}

fn remove(record: &Value, key: &str) -> Value {
    let mut out = record.clone();
    if let Value::Object(map) = &mut out {
        map.shift_remove(key);
    }
    out
}

fn probe_card(blocks: Vec<Value>) -> Value {
    json!({"schema": "canon.card.v1", "title": "Probe", "fallbackText": "Probe card", "blocks": blocks})
}

fn tag(kind: &str, value: impl std::fmt::Display) -> String {
    format!("{kind}:{value}")
}

/// Records whose entries are checked with the object rule, and their contexts.
const ARRAY_RECORDS: [&str; 9] = [
    "metric",
    "series",
    "point",
    "listItem",
    "detailsRow",
    "action",
    "field",
    "choice",
    "lineItemColumn",
];

/// Records that have a context and a minimal instance (everything but `block`).
const PROBED_RECORDS: [&str; 20] = [
    "card",
    "summary",
    "callout",
    "metricGrid",
    "metric",
    "chart",
    "series",
    "point",
    "table",
    "list",
    "listItem",
    "mediaPreview",
    "media",
    "details",
    "detailsRow",
    "actions",
    "action",
    "field",
    "choice",
    "lineItemColumn",
];

/// Extra keys a record needs for a probe on `key` to isolate one rule.
fn companions(record: &str, key: &str, base: &Value) -> Value {
    match (record, key) {
        ("field", "currencyCode") => set(base, "type", json!("currency")),
        _ => base.clone(),
    }
}

pub(crate) fn generate(registry: &Registry, skill_examples: &[Value]) -> anyhow::Result<Artifact> {
    let mut g = Gen::new(registry)?;
    top_not_object(&mut g);
    records(&mut g)?;
    strings(&mut g)?;
    enums(&mut g)?;
    arrays(&mut g)?;
    numbers(&mut g);
    booleans(&mut g);
    kind_rendering(&mut g);
    ids(&mut g);
    actions_cardinality(&mut g);
    choices(&mut g);
    field_type_matrix(&mut g)?;
    bounds(&mut g);
    line_items(&mut g);
    table_cells(&mut g);
    size_boundary(&mut g)?;
    keys_order(&mut g);
    for (i, example) in skill_examples.iter().enumerate() {
        g.add(
            format!("skill.example.{}", i + 1),
            example.clone(),
            vec![],
            &[tag("family", "skill.examples")],
        );
    }
    registry_cases(&mut g, "/fixtures/curated", "ordering.kitchenSink")?;
    registry_cases(&mut g, "/fixtures/divergences", "divergences")?;

    g.cases.sort_by(|a, b| a.name.cmp(&b.name));
    for pair in g.cases.windows(2) {
        if pair[0].name == pair[1].name {
            anyhow::bail!("duplicate fixture name {}", pair[0].name);
        }
    }
    check_coverage(&g, skill_examples.len())?;

    let mut text = String::new();
    for case in &g.cases {
        text.push_str(&serde_json::to_string(&render(case))?);
        text.push('\n');
    }
    Ok(Artifact {
        path: registry.str_at("/fixtures/output")?.into(),
        text,
    })
}

fn render(case: &Case) -> Value {
    let mut out = Map::new();
    out.insert("name".into(), json!(case.name));
    match &case.card {
        CardInput::Value(v) => out.insert("card".into(), v.clone()),
        CardInput::Text(t) => out.insert("cardText".into(), json!(t)),
    };
    let errors: Vec<&str> = case.expected.iter().map(|e| e.text.as_str()).collect();
    out.insert(
        "expected".into(),
        json!({"ok": errors.is_empty(), "errors": errors}),
    );
    if let Some(python) = &case.python {
        out.insert("python".into(), python.clone());
    }
    let mut tags: Vec<String> = case.tags.clone();
    let templates: BTreeSet<&str> = case.expected.iter().map(|e| e.id).collect();
    for id in templates {
        tags.push(tag("template", id));
    }
    out.insert("tags".into(), json!(tags));
    if let Some(reason) = &case.reason {
        out.insert("reason".into(), json!(reason));
    }
    Value::Object(out)
}

// ---- families ---------------------------------------------------------------------------------

fn top_not_object(g: &mut Gen<'_>) {
    for (name, value) in [
        ("array", json!([])),
        ("string", json!("card")),
        ("number", json!(7)),
        ("boolean", json!(true)),
        ("null", Value::Null),
        ("array_of_card", json!([g.minimal("card")])),
    ] {
        let e = g.msg("M01", &[]);
        g.add(
            format!("top.not_object.{name}"),
            value,
            vec![e],
            &[tag("family", "top.notObject")],
        );
    }
}

fn records(g: &mut Gen<'_>) -> anyhow::Result<()> {
    for record in PROBED_RECORDS {
        let context = g
            .registry
            .str_at(&format!("/records/{record}/context"))?
            .to_owned();
        let minimal = g.minimal(record);
        let rtag = tag("record", record);

        let (card, _) = g.place(&context, minimal.clone());
        g.add(
            format!("{record}.minimal"),
            card,
            vec![],
            &[tag("family", "record.minimal"), rtag.clone()],
        );

        let (card, path) = g.place(&context, set(&minimal, "zzExtra", json!(1)));
        let e = g.msg("M05", &[("path", &path), ("key", "zzExtra")]);
        g.add(
            format!("{record}.unsupported_key"),
            card,
            vec![e],
            &[tag("family", "record.unsupportedKey"), rtag.clone()],
        );

        let three = set(
            &set(&set(&minimal, "zz3", json!(3)), "aa1", json!(1)),
            "mm2",
            json!(2),
        );
        let (card, path) = g.place(&context, three);
        let errors = ["zz3", "aa1", "mm2"]
            .iter()
            .map(|k| g.msg("M05", &[("path", &path), ("key", k)]))
            .collect();
        g.add(
            format!("{record}.unsupported_keys_document_order"),
            card,
            errors,
            &[tag("family", "record.unsupportedKey"), rtag.clone()],
        );
    }
    // Non-object entries wherever entries are records, plus blocks and media.
    let not_object = |g: &mut Gen<'_>, record: &str, context: &str| {
        for (probe, value) in [
            ("number", json!(42)),
            ("string", json!("x")),
            ("null", Value::Null),
            ("array", json!([])),
        ] {
            let (card, path) = g.place(context, value);
            let e = g.path_msg("M12", &path);
            g.add(
                format!("{record}.not_object.{probe}"),
                card,
                vec![e],
                &[tag("family", "record.notObject"), tag("record", record)],
            );
        }
    };
    for record in ARRAY_RECORDS {
        not_object(g, record, record);
    }
    not_object(g, "block", "block");
    not_object(g, "media", "media");
    let (card, path) = g.place("block", json!({"kind": "mediaPreview"}));
    let e = g.path_msg("M12", &format!("{path}.media"));
    g.add(
        "media.absent",
        card,
        vec![e],
        &[tag("family", "record.notObject"), tag("record", "media")],
    );
    Ok(())
}

/// Probe strings for a cap `n` (every cap is even, cards.md §20.5 C3).
fn probe_strings(n: usize) -> Vec<(String, String, bool)> {
    let astral = "\u{1f600}";
    vec![
        (format!("len_{n}"), "a".repeat(n), true),
        (format!("len_{}", n + 1), "a".repeat(n + 1), false),
        (format!("astral_{}", n / 2), astral.repeat(n / 2), true),
        (
            format!("astral_{}_plus_ascii", n / 2),
            format!("{}a", astral.repeat(n / 2)),
            false,
        ),
        (format!("bmp_multibyte_{n}"), "\u{20ac}".repeat(n), true),
    ]
}

fn cap_tags(cap: &Cap, probe: &str) -> Vec<String> {
    vec![
        tag("family", "string.boundaries"),
        tag("record", &cap.record),
        format!("cap:{}.{}@{probe}", cap.record, cap.key),
    ]
}

fn strings(g: &mut Gen<'_>) -> anyhow::Result<()> {
    let caps = string_caps(g.registry)?;
    for cap in &caps {
        if cap.key.contains("[]") {
            continue; // table headers and cells: `table.cells`.
        }
        // Block titles are probed on a summary block.
        let record = if cap.record == "block" {
            "summary"
        } else {
            cap.record.as_str()
        };
        let context = g
            .registry
            .str_at(&format!("/records/{record}/context"))?
            .to_owned();
        let base = companions(record, &cap.key, &g.minimal(record));
        let n = usize::try_from(cap.max)?;
        for (probe, text, ok) in probe_strings(n) {
            let (card, path) = g.place(&context, set(&base, &cap.key, json!(text)));
            let p = format!("{path}.{}", cap.key);
            let expected = if ok {
                vec![]
            } else {
                vec![g.msg("M07", &[("path", &p), ("max", &n.to_string())])]
            };
            let kind = if probe.starts_with("len_") {
                if ok {
                    "N"
                } else {
                    "N+1"
                }
            } else if probe.starts_with("astral") {
                if ok {
                    "astralN"
                } else {
                    "astralN+1"
                }
            } else {
                "bmpN"
            };
            g.add(
                format!("{}.{}.{probe}", cap.record, cap.key),
                card,
                expected,
                &cap_tags(cap, kind),
            );
        }
        // Blank and wrong-typed values (cards.md §20.5 C4).
        let mut probes: Vec<(&str, Option<Value>)> = vec![
            ("null", Some(Value::Null)),
            ("empty", Some(json!(""))),
            ("blank", Some(json!(" \t\n"))),
            ("number", Some(json!(5))),
        ];
        if cap.required {
            probes.push(("absent", None));
            probes.push(("array", Some(json!(["a"]))));
            probes.push(("object", Some(json!({"a": "b"}))));
        }
        for (probe, value) in probes {
            let record_value = match value {
                Some(v) => set(&base, &cap.key, v),
                None => remove(&base, &cap.key),
            };
            let (card, path) = g.place(&context, record_value);
            let e = g.path_msg("M06", &format!("{path}.{}", cap.key));
            g.add(
                format!("{}.{}.{probe}", cap.record, cap.key),
                card,
                vec![e],
                &[tag("family", "string.blank"), tag("record", &cap.record)],
            );
        }
        if !cap.required {
            let (card, _) = g.place(&context, remove(&base, &cap.key));
            g.add(
                format!("{}.{}.absent", cap.record, cap.key),
                card,
                vec![],
                &[tag("family", "string.blank"), tag("record", &cap.record)],
            );
        }
    }
    Ok(())
}

/// (record, key, vocabulary, message, required) for every vocabulary check.
fn enum_checks(g: &Gen<'_>) -> Vec<(String, String, String, &'static str, bool)> {
    let mut out = Vec::new();
    let Some(records) = g.registry.root["records"].as_object() else {
        return out;
    };
    for (record, body) in records {
        for check in body["checks"].as_array().into_iter().flatten() {
            let rule = check["rule"].as_str().unwrap_or_default();
            if rule != "enum" && rule != "requiredEnum" {
                continue;
            }
            let message: &'static str = match check["message"].as_str().unwrap_or_default() {
                "M08" => "M08",
                "M14" => "M14",
                "M16" => "M16",
                "M17" => "M17",
                "M26" => "M26",
                "M29" => "M29",
                _ => continue,
            };
            out.push((
                record.clone(),
                check["key"].as_str().unwrap_or_default().to_owned(),
                check["enum"].as_str().unwrap_or_default().to_owned(),
                message,
                rule == "requiredEnum",
            ));
        }
    }
    out
}

/// The companions a field or column of `type_name` needs to be valid.
fn typed_record(record: &str, base: &Value, type_name: &str) -> Value {
    let mut out = set(base, "type", json!(type_name));
    match (record, type_name) {
        ("field", "select" | "multiSelect" | "searchSelect") | ("lineItemColumn", "select") => {
            out = set(&out, "choices", json!([{"label": "Option A"}]));
        }
        ("field", "lineItems") => {
            out = set(
                &out,
                "columns",
                json!([{"id": "sku", "label": "SKU", "type": "text"}]),
            );
        }
        _ => {}
    }
    out
}

fn enums(g: &mut Gen<'_>) -> anyhow::Result<()> {
    for (record, key, vocabulary, message, required) in enum_checks(g) {
        let values = g.registry.str_list_at(&format!("/enums/{vocabulary}"))?;
        let context = g
            .registry
            .str_at(&format!("/records/{record}/context"))?
            .to_owned();
        let base = g.minimal(&record);
        for value in &values {
            let probe = if key == "type" {
                typed_record(&record, &base, value)
            } else {
                set(&base, &key, json!(value))
            };
            let (card, _) = g.place(&context, probe);
            g.add(
                format!("{record}.{key}.member_{value}"),
                card,
                vec![],
                &[
                    tag("family", "enum.members"),
                    tag("record", &record),
                    format!("enum:{vocabulary}={value}@{record}"),
                ],
            );
        }
        let first = &values[0];
        let mut wrong_case = first.clone();
        if let Some(c) = wrong_case.get_mut(0..1) {
            c.make_ascii_uppercase();
        }
        let mut invalid: Vec<(&str, Option<Value>)> = vec![
            ("unknown", Some(json!("zzUnknown"))),
            ("wrong_case", Some(json!(wrong_case))),
            ("number", Some(json!(7))),
            ("null", Some(Value::Null)),
        ];
        if required {
            invalid.push(("absent", None));
        }
        for (probe, value) in invalid {
            let probe_record = match value {
                Some(v) => set(&base, &key, v),
                None => remove(&base, &key),
            };
            let (card, path) = g.place(&context, probe_record);
            let e = g.path_msg(message, &format!("{path}.{key}"));
            g.add(
                format!("{record}.{key}.invalid_{probe}"),
                card,
                vec![e],
                &[tag("family", "enum.invalid"), tag("record", &record)],
            );
        }
    }
    Ok(())
}

/// The `i`-th distinct instance of an array entry (ids and labels made unique).
fn nth_entry(record: &str, minimal: &Value, i: usize) -> Value {
    match record {
        "action" => set(minimal, "id", json!(format!("a{i}"))),
        "field" => set(minimal, "id", json!(format!("f{i}"))),
        "lineItemColumn" => set(minimal, "id", json!(format!("c{i}"))),
        "choice" => set(minimal, "label", json!(format!("Option {i}"))),
        _ => minimal.clone(),
    }
}

fn arrays(g: &mut Gen<'_>) -> anyhow::Result<()> {
    // (record, key, limit name, entry record or None for an inline string, context override)
    let specs: [(&str, &str, &str, Option<&str>, Option<Value>); 11] = [
        ("card", "blocks", "blocks", None, None),
        ("metricGrid", "metrics", "metrics", Some("metric"), None),
        ("chart", "series", "series", Some("series"), None),
        ("series", "points", "points", Some("point"), None),
        ("table", "rows", "rows", None, None),
        ("table", "columns", "columns", None, None),
        ("list", "items", "listItems", Some("listItem"), None),
        ("details", "rows", "detailsRows", Some("detailsRow"), None),
        ("actions", "actions", "actions", Some("action"), None),
        ("action", "fields", "fields", Some("field"), None),
        ("lineItemColumn", "choices", "choices", Some("choice"), None),
    ];
    let mut specs: Vec<_> = specs.into_iter().collect();
    specs.push((
        "field",
        "choices",
        "choices",
        Some("choice"),
        Some(json!("select")),
    ));
    specs.push((
        "field",
        "choices",
        "searchSelectChoices",
        Some("choice"),
        Some(json!("searchSelect")),
    ));
    specs.push((
        "field",
        "columns",
        "lineItemColumns",
        Some("lineItemColumn"),
        Some(json!("lineItems")),
    ));

    for (record, key, limit_name, entry, field_type) in specs {
        let n = g.limit(limit_name);
        let context = g
            .registry
            .str_at(&format!("/records/{record}/context"))?
            .to_owned();
        let mut base = g.minimal(record);
        if let Some(t) = &field_type {
            base = typed_record(record, &base, t.as_str().unwrap_or_default());
        }
        if record == "lineItemColumn" {
            base = typed_record(record, &base, "select");
        }
        let make = |count: usize| -> Vec<Value> {
            (0..count)
                .map(|i| match (record, key, entry) {
                    ("card", _, _) => json!({"kind": "summary", "text": format!("Block {i}")}),
                    ("table", "rows", _) => json!(["Widget"]),
                    ("table", "columns", _) => json!(format!("Column {i}")),
                    (_, _, Some(entry)) => nth_entry(entry, &g.minimal(entry), i),
                    _ => Value::Null,
                })
                .collect()
        };
        let subject = match &field_type {
            Some(t) => format!("{record}.{}", t.as_str().unwrap_or_default()),
            None => record.to_owned(),
        };
        let rtag = tag("record", record);
        let lists = [(n, true, make(n)), (n + 1, false, make(n + 1))];
        for (count, ok, entries) in lists {
            let (card, path) = g.place(&context, set(&base, key, json!(entries)));
            let mut expected = Vec::new();
            if !ok {
                expected.push(g.msg(
                    "M11",
                    &[("path", &format!("{path}.{key}")), ("max", &n.to_string())],
                ));
                if key == "actions" {
                    // 13 object actions in one block also exceed the card-wide total.
                    let total = g.limit("totalActions");
                    expected.push(g.msg(
                        "M22",
                        &[("count", &count.to_string()), ("max", &total.to_string())],
                    ));
                }
            }
            let mut tags = vec![
                tag("family", "array.boundaries"),
                rtag.clone(),
                format!("limit:{limit_name}@{}", if ok { "N" } else { "N+1" }),
            ];
            if key == "actions" && !ok {
                tags.push("limit:totalActions@N+1".into());
            }
            if key == "actions" && ok {
                tags.push("limit:totalActions@N".into());
            }
            g.add(
                format!("{subject}.{key}.entries_{count}"),
                card,
                expected,
                &tags,
            );
        }
        let required = !(record == "action" && key == "fields");
        let mut probes = vec![
            ("empty", Some(json!([]))),
            ("string", Some(json!("x"))),
            ("object", Some(json!({}))),
        ];
        if required {
            probes.push(("absent", None));
        } else {
            let (card, _) = g.place(&context, remove(&base, key));
            g.add(
                format!("{subject}.{key}.absent"),
                card,
                vec![],
                &[tag("family", "array.boundaries"), rtag.clone()],
            );
        }
        for (probe, value) in probes {
            let probe_record = match value {
                Some(v) => set(&base, key, v),
                None => remove(&base, key),
            };
            if field_type.as_ref().and_then(Value::as_str) == Some("lineItems")
                || (record == "field" && key == "choices")
                || (record == "lineItemColumn" && key == "choices")
            {
                continue; // choices and lineItems columns have their own families.
            }
            let (card, path) = g.place(&context, probe_record);
            let e = g.path_msg("M10", &format!("{path}.{key}"));
            g.add(
                format!("{subject}.{key}.{probe}"),
                card,
                vec![e],
                &[tag("family", "array.boundaries"), rtag.clone()],
            );
        }
    }
    // The card-wide total: 12 object actions over two blocks is the limit (with M20 for the
    // second block); 13 exceeds it.
    for (count, ok) in [(12usize, true), (13, false)] {
        let first: Vec<Value> = (0..6)
            .map(|i| json!({"id": format!("a{i}"), "label": "Go"}))
            .collect();
        let second: Vec<Value> = (6..count)
            .map(|i| json!({"id": format!("a{i}"), "label": "Go"}))
            .collect();
        let card = probe_card(vec![
            json!({"kind": "actions", "actions": first}),
            json!({"kind": "actions", "actions": second}),
        ]);
        let mut expected = vec![g.path_msg("M20", "card.blocks[1]")];
        if !ok {
            let total = g.limit("totalActions");
            expected.push(g.msg(
                "M22",
                &[("count", &count.to_string()), ("max", &total.to_string())],
            ));
        }
        g.add(
            format!("card.total_actions.two_blocks_{count}"),
            card,
            expected,
            &[
                tag("family", "actions.cardinality"),
                format!("limit:totalActions@{}", if ok { "N" } else { "N+1" }),
            ],
        );
    }
    // lineItemRows: maxRows at the cap and one above.
    let n = g.limit("lineItemRows");
    for (value, ok) in [(n, true), (n + 1, false)] {
        let field = json!({"id": "lines", "label": "Lines", "type": "lineItems", "columns": [{"id": "sku", "label": "SKU", "type": "text"}], "maxRows": value});
        let (card, path) = g.place("field", field);
        let expected = if ok {
            vec![]
        } else {
            vec![g.msg(
                "M35",
                &[
                    ("path", &format!("{path}.maxRows")),
                    ("max", &n.to_string()),
                ],
            )]
        };
        g.add(
            format!("field.lineItems.maxRows_{value}"),
            card,
            expected,
            &[
                tag("family", "lineItems"),
                format!("limit:lineItemRows@{}", if ok { "N" } else { "N+1" }),
            ],
        );
    }
    Ok(())
}

fn numbers(g: &mut Gen<'_>) {
    // Finite numbers: point `y` (required) and field `step` (optional, number type).
    let finite_ok = [
        ("int", json!(3)),
        ("negative_fraction", json!(-1.5)),
        ("zero", json!(0)),
        ("huge", json!(1e308)),
        ("integral_float", json!(2.0)),
    ];
    let finite_bad = [
        ("true", json!(true)),
        ("false", json!(false)),
        ("string", json!("1")),
        ("null", Value::Null),
        ("array", json!([1])),
        ("object", json!({})),
    ];
    let point = g.minimal("point");
    for (probe, v) in &finite_ok {
        let (card, _) = g.place("point", set(&point, "y", v.clone()));
        g.add(
            format!("point.y.{probe}"),
            card,
            vec![],
            &[tag("family", "number.finite")],
        );
    }
    for (probe, v) in &finite_bad {
        let (card, path) = g.place("point", set(&point, "y", v.clone()));
        let e = g.path_msg("M15", &format!("{path}.y"));
        g.add(
            format!("point.y.{probe}"),
            card,
            vec![e],
            &[tag("family", "number.finite")],
        );
    }
    let (card, path) = g.place("point", remove(&point, "y"));
    let e = g.path_msg("M15", &format!("{path}.y"));
    g.add(
        "point.y.absent",
        card,
        vec![e],
        &[tag("family", "number.finite")],
    );
    let number_field = json!({"id": "n", "label": "N", "type": "number"});
    for (probe, v) in [
        ("zero", json!(0)),
        ("negative", json!(-2)),
        ("fraction", json!(0.25)),
    ] {
        let (card, _) = g.place("field", set(&number_field, "step", v));
        g.add(
            format!("field.number.step_{probe}"),
            card,
            vec![],
            &[tag("family", "number.finite")],
        );
    }
    for (probe, v) in [
        ("string", json!("1")),
        ("true", json!(true)),
        ("null", Value::Null),
    ] {
        let (card, path) = g.place("field", set(&number_field, "step", v));
        let e = g.path_msg("M15", &format!("{path}.step"));
        g.add(
            format!("field.number.step_{probe}"),
            card,
            vec![e],
            &[tag("family", "number.finite")],
        );
    }

    // Non-negative integers.
    let nni_ok = [
        ("zero", json!(0)),
        ("int", json!(3)),
        ("integral_float", json!(2.0)),
        ("negative_zero", json!(-0.0)),
        ("1e20", json!(1e20)),
    ];
    let nni_bad = [
        ("fraction", json!(1.5)),
        ("negative", json!(-1)),
        ("true", json!(true)),
        ("string", json!("1")),
        ("null", Value::Null),
    ];
    let media = g.minimal("media");
    let lines = json!({"id": "lines", "label": "Lines", "type": "lineItems", "columns": [{"id": "sku", "label": "SKU", "type": "text"}]});
    let column = g.minimal("lineItemColumn");
    let slots: Vec<(&str, &str, Value, &str)> = vec![
        ("media", "media", media.clone(), "page"),
        ("media", "media", media, "pageCount"),
        ("field", "field", number_field.clone(), "precision"),
        (
            "field",
            "field",
            set(&number_field, "type", json!("currency")),
            "precision",
        ),
        ("lineItemColumn", "lineItemColumn", column, "precision"),
        ("field", "field", lines.clone(), "minRows"),
        ("field", "field", lines, "maxRows"),
    ];
    for (record, context, base, key) in slots {
        let subject = match base.get("type").and_then(Value::as_str) {
            Some(t) if record == "field" => format!("field.{t}"),
            _ => record.to_owned(),
        };
        for (probe, v) in &nni_ok {
            if key == "maxRows" && *probe == "1e20" {
                continue; // Above the 50-row cap: `lineItems` covers M35.
            }
            let (card, _) = g.place(context, set(&base, key, v.clone()));
            g.add(
                format!("{subject}.{key}.{probe}"),
                card,
                vec![],
                &[tag("family", "number.nonNegativeInteger")],
            );
        }
        for (probe, v) in &nni_bad {
            let (card, path) = g.place(context, set(&base, key, v.clone()));
            let e = g.path_msg("M18", &format!("{path}.{key}"));
            g.add(
                format!("{subject}.{key}.{probe}"),
                card,
                vec![e],
                &[tag("family", "number.nonNegativeInteger")],
            );
        }
    }

    // Unit interval.
    let row = g.minimal("detailsRow");
    for (probe, v) in [
        ("zero", json!(0)),
        ("one", json!(1)),
        ("half", json!(0.5)),
        ("negative_zero", json!(-0.0)),
        ("one_float", json!(1.0)),
    ] {
        let (card, _) = g.place("detailsRow", set(&row, "confidence", v));
        g.add(
            format!("detailsRow.confidence.{probe}"),
            card,
            vec![],
            &[tag("family", "number.unitInterval")],
        );
    }
    for (probe, v) in [
        ("above", json!(1.01)),
        ("just_above", json!(1.0000001)),
        ("negative", json!(-0.1)),
        ("true", json!(true)),
        ("string", json!("0.5")),
        ("null", Value::Null),
    ] {
        let (card, path) = g.place("detailsRow", set(&row, "confidence", v));
        let e = g.path_msg("M19", &format!("{path}.confidence"));
        g.add(
            format!("detailsRow.confidence.{probe}"),
            card,
            vec![e],
            &[tag("family", "number.unitInterval")],
        );
    }
}

fn booleans(g: &mut Gen<'_>) {
    let field = g.minimal("field");
    let column = g.minimal("lineItemColumn");
    for (record, base, key) in [
        ("field", &field, "required"),
        ("field", &field, "allowOther"),
        ("field", &field, "sensitive"),
        ("lineItemColumn", &column, "required"),
        ("lineItemColumn", &column, "allowOther"),
    ] {
        for (probe, v) in [("true", json!(true)), ("false", json!(false))] {
            let (card, _) = g.place(record, set(base, key, v));
            g.add(
                format!("{record}.{key}.{probe}"),
                card,
                vec![],
                &[tag("family", "boolean.flags")],
            );
        }
        for (probe, v) in [
            ("one", json!(1)),
            ("zero", json!(0)),
            ("string_true", json!("true")),
            ("null", Value::Null),
        ] {
            let (card, path) = g.place(record, set(base, key, v));
            let e = g.path_msg("M27", &format!("{path}.{key}"));
            g.add(
                format!("{record}.{key}.{probe}"),
                card,
                vec![e],
                &[tag("family", "boolean.flags")],
            );
        }
    }
}

fn kind_rendering(g: &mut Gen<'_>) {
    // Values whose ECMAScript String() and Python str() agree; the others are divergences.
    for (probe, kind, rendered) in [
        ("absent", None, "undefined"),
        ("null", Some(Value::Null), "null"),
        ("true", Some(json!(true)), "true"),
        ("false", Some(json!(false)), "false"),
        ("integer", Some(json!(7)), "7"),
        ("negative_integer", Some(json!(-3)), "-3"),
        ("fraction", Some(json!(1.5)), "1.5"),
        ("unknown_string", Some(json!("Summary")), "Summary"),
        ("empty_string", Some(json!("")), ""),
        ("quote", Some(json!("a\"b")), "a\"b"),
        ("whitespace", Some(json!(" summary")), " summary"),
    ] {
        let block = match kind {
            Some(k) => json!({"kind": k, "text": "Probe", "zzIgnored": true}),
            None => json!({"text": "Probe"}),
        };
        let (card, path) = g.place("block", block);
        let e = g.msg(
            "M13",
            &[("path", &format!("{path}.kind")), ("kind", rendered)],
        );
        g.add(
            format!("block.kind.{probe}"),
            card,
            vec![e],
            &[tag("family", "kind.rendering")],
        );
    }
}

fn ids(g: &mut Gen<'_>) {
    let fam = || vec![tag("family", "ids.pattern")];
    let action = g.minimal("action");
    let field = g.minimal("field");
    let column = g.minimal("lineItemColumn");
    let good = [
        ("len_1", "a".to_owned()),
        ("len_80", "a".repeat(80)),
        ("underscore", "a_b".to_owned()),
        ("dot", "a.b".to_owned()),
        ("colon", "a:b".to_owned()),
        ("dash", "a-b".to_owned()),
        ("alphabet", "AZaz09_.:-".to_owned()),
    ];
    let bad: [(&str, Option<Value>); 8] = [
        ("len_81", Some(json!("a".repeat(81)))),
        ("space", Some(json!("a b"))),
        ("slash", Some(json!("a/b"))),
        ("non_ascii", Some(json!("caf\u{e9}"))),
        ("empty", Some(json!(""))),
        ("number", Some(json!(7))),
        ("null", Some(Value::Null)),
        ("absent", None),
    ];
    for (record, base) in [
        ("action", &action),
        ("field", &field),
        ("lineItemColumn", &column),
    ] {
        for (probe, id) in &good {
            let (card, _) = g.place(record, set(base, "id", json!(id)));
            g.add(format!("{record}.id.{probe}"), card, vec![], &fam());
        }
        for (probe, id) in &bad {
            let probe_record = match id {
                Some(v) => set(base, "id", v.clone()),
                None => remove(base, "id"),
            };
            let (card, path) = g.place(record, probe_record);
            let e = g.path_msg("M09", &format!("{path}.id"));
            g.add(format!("{record}.id.{probe}"), card, vec![e], &fam());
        }
    }
    let card = g.minimal("card");
    for (probe, id) in &good {
        g.add(
            format!("card.cardId.{probe}"),
            set(&card, "cardId", json!(id)),
            vec![],
            &fam(),
        );
    }
    for (probe, id) in &bad {
        let Some(v) = id else { continue };
        let e = g.path_msg("M09", "card.cardId");
        g.add(
            format!("card.cardId.{probe}"),
            set(&card, "cardId", v.clone()),
            vec![e],
            &fam(),
        );
    }
    g.add("card.cardId.absent", card.clone(), vec![], &fam());

    // Duplicates in every scope.
    let dup = || vec![tag("family", "ids.duplicates")];
    let c = probe_card(vec![
        json!({"kind": "actions", "actions": [{"id": "same", "label": "A"}, {"id": "same", "label": "B"}]}),
    ]);
    let e = g.msg(
        "M21",
        &[("path", "card.blocks[0].actions[1].id"), ("id", "same")],
    );
    g.add("ids.duplicate.action_same_block", c, vec![e], &dup());
    let c = probe_card(vec![
        json!({"kind": "actions", "actions": [{"id": "same", "label": "A"}]}),
        json!({"kind": "actions", "actions": [{"id": "same", "label": "B"}]}),
    ]);
    let e1 = g.path_msg("M20", "card.blocks[1]");
    let e2 = g.msg(
        "M21",
        &[("path", "card.blocks[1].actions[0].id"), ("id", "same")],
    );
    g.add(
        "ids.duplicate.action_across_blocks",
        c,
        vec![e1, e2],
        &dup(),
    );
    let c = probe_card(vec![
        json!({"kind": "actions", "actions": [{"id": "submit", "label": "A", "fields": [
        {"id": "f", "label": "F", "type": "text"}, {"id": "f", "label": "G", "type": "text"}]}]}),
    ]);
    let e = g.msg(
        "M21",
        &[
            ("path", "card.blocks[0].actions[0].fields[1].id"),
            ("id", "f"),
        ],
    );
    g.add("ids.duplicate.field_same_action", c, vec![e], &dup());
    let c = probe_card(vec![json!({"kind": "actions", "actions": [
        {"id": "a", "label": "A", "fields": [{"id": "f", "label": "F", "type": "text"}]},
        {"id": "b", "label": "B", "fields": [{"id": "f", "label": "F", "type": "text"}]}]})]);
    g.add("ids.duplicate.field_in_two_actions_ok", c, vec![], &dup());
    let cols = json!([{"id": "c", "label": "C", "type": "text"}, {"id": "c", "label": "D", "type": "text"}]);
    let (c, path) = g.place(
        "field",
        json!({"id": "lines", "label": "Lines", "type": "lineItems", "columns": cols}),
    );
    let e = g.msg(
        "M21",
        &[("path", &format!("{path}.columns[1].id")), ("id", "c")],
    );
    g.add("ids.duplicate.column_same_field", c, vec![e], &dup());
    let c = probe_card(vec![
        json!({"kind": "actions", "actions": [{"id": "submit", "label": "A", "fields": [
        {"id": "l1", "label": "L1", "type": "lineItems", "columns": [{"id": "c", "label": "C", "type": "text"}]},
        {"id": "l2", "label": "L2", "type": "lineItems", "columns": [{"id": "c", "label": "C", "type": "text"}]}]}]}),
    ]);
    g.add("ids.duplicate.column_in_two_fields_ok", c, vec![], &dup());
    let c = set(
        &probe_card(vec![
            json!({"kind": "actions", "actions": [{"id": "same", "label": "A"}]}),
        ]),
        "cardId",
        json!("same"),
    );
    g.add(
        "ids.duplicate.card_id_not_shared_with_actions",
        c,
        vec![],
        &dup(),
    );
    let c = probe_card(vec![
        json!({"kind": "actions", "actions": [{"id": "bad id", "label": "A"}, {"id": "bad id", "label": "B"}]}),
    ]);
    let e1 = g.path_msg("M09", "card.blocks[0].actions[0].id");
    let e2 = g.path_msg("M09", "card.blocks[0].actions[1].id");
    g.add(
        "ids.duplicate.invalid_ids_not_recorded",
        c,
        vec![e1, e2],
        &dup(),
    );
}

fn actions_cardinality(g: &mut Gen<'_>) {
    let fam = |interactive: bool| {
        vec![
            tag("family", "actions.cardinality"),
            tag("interactive", interactive),
        ]
    };
    let c = probe_card(vec![
        json!({"kind": "actions", "actions": [{"id": "a", "label": "A"}]}),
        json!({"kind": "summary", "text": "Between"}),
        json!({"kind": "actions", "actions": [{"id": "b", "label": "B"}]}),
        json!({"kind": "actions", "actions": [{"id": "c", "label": "C"}]}),
    ]);
    let e1 = g.path_msg("M20", "card.blocks[2]");
    let e2 = g.path_msg("M20", "card.blocks[3]");
    g.add(
        "actions.second_and_third_block",
        c,
        vec![e1, e2],
        &fam(true),
    );
    let mut entries: Vec<Value> = (0..12)
        .map(|i| json!({"id": format!("a{i}"), "label": "Go"}))
        .collect();
    entries.insert(5, json!("not an action"));
    let c = probe_card(vec![json!({"kind": "actions", "actions": entries})]);
    let e1 = g.msg(
        "M11",
        &[
            ("path", "card.blocks[0].actions"),
            ("max", &g.limit("actions").to_string()),
        ],
    );
    let e2 = g.path_msg("M12", "card.blocks[0].actions[5]");
    g.add(
        "actions.thirteen_entries_one_not_object",
        c,
        vec![e1, e2],
        &fam(true),
    );
    // Interactive predicate (cards.md §16.3).
    let c = probe_card(vec![json!({"kind": "summary", "text": "No actions"})]);
    g.add("actions.interactive.none", c, vec![], &fam(false));
    let c = probe_card(vec![json!({"kind": "actions", "actions": []})]);
    let e = g.path_msg("M10", "card.blocks[0].actions");
    g.add("actions.interactive.empty_actions", c, vec![e], &fam(false));
    let c = probe_card(vec![
        json!({"kind": "actions", "actions": [{"id": "ok", "label": "OK"}]}),
    ]);
    g.add("actions.interactive.one_action", c, vec![], &fam(true));
    let c = probe_card(vec![json!({"kind": "actions", "actions": ["x"]})]);
    let e = g.path_msg("M12", "card.blocks[0].actions[0]");
    g.add(
        "actions.interactive.non_object_entry",
        c,
        vec![e],
        &fam(true),
    );
}

fn choices(g: &mut Gen<'_>) {
    let dedupe = || vec![tag("family", "choices.dedupe")];
    let field = |choices: Value| json!({"id": "pick", "label": "Pick", "type": "select", "choices": choices});
    let cases: Vec<(
        &str,
        Value,
        Option<(usize, &str)>,
        Vec<(&'static str, usize, &str)>,
    )> = vec![
        (
            "label_label",
            json!([{"label": "A"}, {"label": "A"}]),
            Some((1, "A")),
            vec![],
        ),
        (
            "value_label",
            json!([{"label": "A"}, {"label": "B", "value": "A"}]),
            Some((1, "A")),
            vec![],
        ),
        (
            "trimmed_value",
            json!([{"label": "X", "value": " a "}, {"label": "Y", "value": "a"}]),
            Some((1, "a")),
            vec![],
        ),
        (
            "trimmed_label",
            json!([{"label": "A"}, {"label": "\u{a0}A\t"}]),
            Some((1, "A")),
            vec![],
        ),
        (
            "blank_value_falls_back",
            json!([{"label": "A"}, {"label": "A", "value": " "}]),
            Some((1, "A")),
            vec![("M06", 1, "value")],
        ),
        (
            "non_string_value_falls_back",
            json!([{"label": "A"}, {"label": "A", "value": 5}]),
            Some((1, "A")),
            vec![("M06", 1, "value")],
        ),
        (
            "same_label_distinct_values",
            json!([{"label": "A", "value": "a1"}, {"label": "A", "value": "a2"}]),
            None,
            vec![],
        ),
        (
            "case_sensitive",
            json!([{"label": "a"}, {"label": "A"}]),
            None,
            vec![],
        ),
        (
            "third_duplicate",
            json!([{"label": "A"}, {"label": "B"}, {"label": "A"}, {"label": "A"}]),
            Some((2, "A")),
            vec![],
        ),
    ];
    for (probe, list, dup, extra) in cases {
        let (card, path) = g.place("field", field(list));
        let mut expected = Vec::new();
        for (id, idx, key) in &extra {
            expected.push(g.path_msg(id, &format!("{path}.choices[{idx}].{key}")));
        }
        if let Some((idx, key)) = dup {
            expected.push(g.msg(
                "M23",
                &[("path", &format!("{path}.choices[{idx}]")), ("value", key)],
            ));
            if probe == "third_duplicate" {
                expected.push(g.msg(
                    "M23",
                    &[("path", &format!("{path}.choices[3]")), ("value", key)],
                ));
            }
        }
        g.add(format!("choices.dedupe.{probe}"), card, expected, &dedupe());
    }
    let required = || vec![tag("family", "choices.required")];
    for t in ["select", "multiSelect", "searchSelect"] {
        let base = json!({"id": "pick", "label": "Pick", "type": t});
        let (card, path) = g.place("field", base.clone());
        let e = g.msg(
            "M30",
            &[("path", &format!("{path}.choices")), ("fieldType", t)],
        );
        g.add(
            format!("choices.required.{t}.absent"),
            card,
            vec![e],
            &required(),
        );
        let (card, path) = g.place("field", set(&base, "choices", json!("abc")));
        let e1 = g.msg(
            "M30",
            &[("path", &format!("{path}.choices")), ("fieldType", t)],
        );
        let e2 = g.path_msg("M10", &format!("{path}.choices"));
        g.add(
            format!("choices.required.{t}.string"),
            card,
            vec![e1, e2],
            &required(),
        );
        let (card, path) = g.place("field", set(&base, "choices", json!([])));
        let e = g.path_msg("M10", &format!("{path}.choices"));
        g.add(
            format!("choices.required.{t}.empty"),
            card,
            vec![e],
            &required(),
        );
        let (card, path) = g.place("field", set(&base, "choices", Value::Null));
        let e1 = g.msg(
            "M30",
            &[("path", &format!("{path}.choices")), ("fieldType", t)],
        );
        let e2 = g.path_msg("M10", &format!("{path}.choices"));
        g.add(
            format!("choices.required.{t}.null"),
            card,
            vec![e1, e2],
            &required(),
        );
    }
    let (card, _) = g.place(
        "field",
        json!({"id": "t", "label": "T", "type": "text", "choices": [{"label": "A"}]}),
    );
    g.add("choices.on_text_field_accepted", card, vec![], &required());
    let (card, path) = g.place(
        "field",
        json!({"id": "t", "label": "T", "type": "text", "choices": "abc"}),
    );
    let e = g.path_msg("M10", &format!("{path}.choices"));
    g.add(
        "choices.on_text_field_wrong_type",
        card,
        vec![e],
        &required(),
    );
    let (card, path) = g.place(
        "lineItemColumn",
        json!({"id": "s", "label": "S", "type": "select"}),
    );
    let e = g.path_msg("M28", &format!("{path}.choices"));
    g.add(
        "choices.required.select_column.absent",
        card,
        vec![e],
        &required(),
    );
    let (card, path) = g.place(
        "lineItemColumn",
        json!({"id": "s", "label": "S", "type": "select", "choices": "abc"}),
    );
    let e1 = g.path_msg("M28", &format!("{path}.choices"));
    let e2 = g.path_msg("M10", &format!("{path}.choices"));
    g.add(
        "choices.required.select_column.string",
        card,
        vec![e1, e2],
        &required(),
    );
    let (card, path) = g.place(
        "lineItemColumn",
        json!({"id": "s", "label": "S", "type": "select", "choices": []}),
    );
    let e = g.path_msg("M10", &format!("{path}.choices"));
    g.add(
        "choices.required.select_column.empty",
        card,
        vec![e],
        &required(),
    );
    let (card, _) = g.place(
        "lineItemColumn",
        json!({"id": "s", "label": "S", "type": "text", "choices": [{"label": "A"}]}),
    );
    g.add("choices.on_text_column_accepted", card, vec![], &required());
    let (card, path) = g.place("lineItemColumn", json!({"id": "s", "label": "S", "type": "select", "choices": [{"label": "A"}, {"value": "A", "label": "B"}]}));
    let e = g.msg(
        "M23",
        &[("path", &format!("{path}.choices[1]")), ("value", "A")],
    );
    g.add("choices.dedupe.column", card, vec![e], &dedupe());
}

fn field_type_matrix(g: &mut Gen<'_>) -> anyhow::Result<()> {
    let mut types: Vec<String> = g.registry.str_list_at("/enums/fieldTypes")?;
    types.push("zzUnknownType".into());
    let rows = g.registry.object_at("/fieldTypeRules/rows")?.clone();
    for t in &types {
        let known = rows.contains_key(t.as_str());
        let row = rows
            .get(t.as_str())
            .or_else(|| rows.get("$unrecognized"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let bounds = row.get(2).and_then(Value::as_str).map(str::to_owned);
        let flag = |i: usize| row.get(i).and_then(Value::as_bool).unwrap_or(false);
        let base = typed_record("field", &json!({"id": "f", "label": "F"}), t);
        let probes: [(&str, Value, Option<&'static str>); 8] = [
            (
                "min",
                if bounds.as_deref() == Some("date") {
                    json!("2024-01-01")
                } else {
                    json!(1)
                },
                if bounds.is_some() { None } else { Some("M31") },
            ),
            (
                "max",
                if bounds.as_deref() == Some("date") {
                    json!("2024-12-31")
                } else {
                    json!(10)
                },
                if bounds.is_some() { None } else { Some("M31") },
            ),
            ("step", json!(1), if flag(3) { None } else { Some("M32") }),
            (
                "precision",
                json!(2),
                if flag(4) { None } else { Some("M32") },
            ),
            (
                "currencyCode",
                json!("USD"),
                if flag(5) { None } else { Some("M33") },
            ),
            (
                "columns",
                json!([{"id": "sku", "label": "SKU", "type": "text"}]),
                if flag(6) { None } else { Some("M36") },
            ),
            (
                "minRows",
                json!(1),
                if flag(6) { None } else { Some("M36") },
            ),
            (
                "maxRows",
                json!(10),
                if flag(6) { None } else { Some("M36") },
            ),
        ];
        for (key, value, message) in probes {
            let (card, path) = g.place("field", set(&base, key, value));
            let mut expected = Vec::new();
            if !known {
                expected.push(g.path_msg("M29", &format!("{path}.type")));
            }
            if let Some(m) = message {
                expected.push(g.path_msg(m, &format!("{path}.{key}")));
            }
            g.add(
                format!("field.matrix.{t}.{key}"),
                card,
                expected,
                &[
                    tag("family", "fieldTypeRules.matrix"),
                    format!("matrix:{t}.{key}"),
                ],
            );
        }
    }
    Ok(())
}

fn bounds(g: &mut Gen<'_>) {
    let fam = || vec![tag("family", "bounds")];
    let number = json!({"id": "n", "label": "N", "type": "number"});
    let date = json!({"id": "d", "label": "D", "type": "date"});
    let currency = json!({"id": "c", "label": "C", "type": "currency"});
    let with = |base: &Value, min: Value, max: Value| set(&set(base, "min", min), "max", max);
    let order = |g: &Gen<'_>, path: &str| {
        g.msg(
            "M25",
            &[
                ("lower", &format!("{path}.min")),
                ("upper", &format!("{path}.max")),
            ],
        )
    };

    let (card, path) = g.place("field", with(&number, json!(10), json!(1)));
    let e = order(g, &path);
    g.add("bounds.number.min_above_max", card, vec![e], &fam());
    let (card, _) = g.place("field", with(&number, json!(5), json!(5)));
    g.add("bounds.number.min_equals_max", card, vec![], &fam());
    let (card, _) = g.place("field", with(&currency, json!(-1.5), json!(1e6)));
    g.add("bounds.currency.valid", card, vec![], &fam());
    let (card, path) = g.place("field", with(&number, json!("1"), json!(true)));
    let e1 = g.path_msg("M15", &format!("{path}.min"));
    let e2 = g.path_msg("M15", &format!("{path}.max"));
    g.add("bounds.number.not_numbers", card, vec![e1, e2], &fam());
    let (card, path) = g.place("field", set(&number, "min", Value::Null));
    let e = g.path_msg("M15", &format!("{path}.min"));
    g.add("bounds.number.min_null", card, vec![e], &fam());
    let (card, path) = g.place(
        "field",
        with(&date, json!("2024-12-31"), json!("2024-01-01")),
    );
    let e = order(g, &path);
    g.add("bounds.date.min_above_max", card, vec![e], &fam());
    let (card, _) = g.place(
        "field",
        with(&date, json!("2024-01-01"), json!("2024-01-01")),
    );
    g.add("bounds.date.min_equals_max", card, vec![], &fam());
    let (card, _) = g.place(
        "field",
        with(&date, json!("2024-13-45"), json!("2024-99-99")),
    );
    g.add("bounds.date.non_calendar_accepted", card, vec![], &fam());
    for (probe, v) in [
        ("short_parts", json!("2024-1-1")),
        ("number", json!(20240101)),
        ("slashes", json!("2024/01/01")),
        ("with_time", json!("2024-01-01T00:00")),
        ("empty", json!("")),
        ("null", Value::Null),
    ] {
        let (card, path) = g.place("field", set(&date, "min", v.clone()));
        let e = g.path_msg("M24", &format!("{path}.min"));
        g.add(format!("bounds.date.min_{probe}"), card, vec![e], &fam());
        let (card, path) = g.place("field", set(&date, "max", v));
        let e = g.path_msg("M24", &format!("{path}.max"));
        g.add(format!("bounds.date.max_{probe}"), card, vec![e], &fam());
    }
    let (card, path) = g.place("field", with(&date, json!("bad"), json!("2024-01-01")));
    let e = g.path_msg("M24", &format!("{path}.min"));
    g.add("bounds.date.invalid_min_skips_order", card, vec![e], &fam());
    // Columns.
    let col = |t: &str| {
        let mut c = json!({"id": "c", "label": "C", "type": t});
        if t == "select" {
            c = set(&c, "choices", json!([{"label": "A"}]));
        }
        c
    };
    let (card, path) = g.place(
        "lineItemColumn",
        with(&col("date"), json!("2024-12-31"), json!("2024-01-01")),
    );
    let e = order(g, &path);
    g.add("bounds.column.date_min_above_max", card, vec![e], &fam());
    let (card, path) = g.place("lineItemColumn", set(&col("date"), "min", json!(5)));
    let e = g.path_msg("M24", &format!("{path}.min"));
    g.add("bounds.column.date_number_bound", card, vec![e], &fam());
    let (card, path) = g.place("lineItemColumn", set(&col("text"), "min", json!("a")));
    let e = g.path_msg("M15", &format!("{path}.min"));
    g.add("bounds.column.text_string_bound", card, vec![e], &fam());
    let (card, _) = g.place("lineItemColumn", with(&col("text"), json!(1), json!(2)));
    g.add(
        "bounds.column.text_number_bounds_accepted",
        card,
        vec![],
        &fam(),
    );
    let (card, path) = g.place("lineItemColumn", with(&col("number"), json!(3), json!(2)));
    let e = order(g, &path);
    g.add("bounds.column.number_min_above_max", card, vec![e], &fam());
    let (card, path) = g.place("lineItemColumn", with(&col("select"), json!(3), json!(2)));
    let e = order(g, &path);
    g.add("bounds.column.select_number_order", card, vec![e], &fam());
    let (card, path) = g.place(
        "lineItemColumn",
        with(
            &json!({"id": "c", "label": "C", "type": "zz"}),
            json!("x"),
            json!(1),
        ),
    );
    let e1 = g.path_msg("M26", &format!("{path}.type"));
    let e2 = g.path_msg("M15", &format!("{path}.min"));
    g.add(
        "bounds.column.unknown_type_number_bounds",
        card,
        vec![e1, e2],
        &fam(),
    );
}

fn line_items(g: &mut Gen<'_>) {
    let fam = || vec![tag("family", "lineItems")];
    let base = json!({"id": "lines", "label": "Lines", "type": "lineItems"});
    let sku = json!([{"id": "sku", "label": "SKU", "type": "text"}]);
    let (card, path) = g.place("field", base.clone());
    let e = g.path_msg("M34", &format!("{path}.columns"));
    g.add("field.lineItems.columns_absent", card, vec![e], &fam());
    let (card, path) = g.place("field", set(&base, "columns", json!({})));
    let e = g.path_msg("M34", &format!("{path}.columns"));
    g.add("field.lineItems.columns_object", card, vec![e], &fam());
    let (card, path) = g.place("field", set(&base, "columns", json!([])));
    let e = g.path_msg("M10", &format!("{path}.columns"));
    g.add("field.lineItems.columns_empty", card, vec![e], &fam());
    let with_cols = set(&base, "columns", sku.clone());
    let (card, path) = g.place(
        "field",
        set(&set(&with_cols, "minRows", json!(5)), "maxRows", json!(3)),
    );
    let e = g.msg(
        "M25",
        &[
            ("lower", &format!("{path}.minRows")),
            ("upper", &format!("{path}.maxRows")),
        ],
    );
    g.add(
        "field.lineItems.min_rows_above_max_rows",
        card,
        vec![e],
        &fam(),
    );
    let (card, _) = g.place(
        "field",
        set(&set(&with_cols, "minRows", json!(3)), "maxRows", json!(3)),
    );
    g.add(
        "field.lineItems.min_rows_equals_max_rows",
        card,
        vec![],
        &fam(),
    );
    let (card, path) = g.place(
        "field",
        set(&set(&with_cols, "minRows", json!(60)), "maxRows", json!(55)),
    );
    let e1 = g.msg(
        "M35",
        &[
            ("path", &format!("{path}.maxRows")),
            ("max", &g.limit("lineItemRows").to_string()),
        ],
    );
    let e2 = g.msg(
        "M25",
        &[
            ("lower", &format!("{path}.minRows")),
            ("upper", &format!("{path}.maxRows")),
        ],
    );
    g.add(
        "field.lineItems.max_rows_over_cap_and_below_min",
        card,
        vec![e1, e2],
        &fam(),
    );
    let (card, path) = g.place(
        "field",
        set(
            &set(&with_cols, "minRows", json!(-1)),
            "maxRows",
            json!(1.5),
        ),
    );
    let e1 = g.path_msg("M18", &format!("{path}.minRows"));
    let e2 = g.path_msg("M18", &format!("{path}.maxRows"));
    g.add(
        "field.lineItems.negative_and_fractional_rows",
        card,
        vec![e1, e2],
        &fam(),
    );
    let (card, path) = g.place(
        "field",
        set(&set(&base, "minRows", json!(5)), "maxRows", json!(1)),
    );
    let e1 = g.path_msg("M34", &format!("{path}.columns"));
    let e2 = g.msg(
        "M25",
        &[
            ("lower", &format!("{path}.minRows")),
            ("upper", &format!("{path}.maxRows")),
        ],
    );
    g.add(
        "field.lineItems.no_columns_then_rows",
        card,
        vec![e1, e2],
        &fam(),
    );
    // Columns.
    let cfam = || vec![tag("family", "columns")];
    let column =
        |c: Value| json!({"id": "lines", "label": "Lines", "type": "lineItems", "columns": [c]});
    let checks: Vec<(&str, Value, Vec<(&'static str, &str)>)> = vec![
        (
            "type_absent",
            json!({"id": "c", "label": "C"}),
            vec![("M26", "type")],
        ),
        (
            "type_unknown",
            json!({"id": "c", "label": "C", "type": "textarea"}),
            vec![("M26", "type")],
        ),
        (
            "type_wrong_case",
            json!({"id": "c", "label": "C", "type": "Text"}),
            vec![("M26", "type")],
        ),
        (
            "select_without_choices",
            json!({"id": "c", "label": "C", "type": "select"}),
            vec![("M28", "choices")],
        ),
        (
            "step_string",
            json!({"id": "c", "label": "C", "type": "number", "step": "1"}),
            vec![("M15", "step")],
        ),
        (
            "step_on_text_accepted",
            json!({"id": "c", "label": "C", "type": "text", "step": 2}),
            vec![],
        ),
        (
            "precision_fraction",
            json!({"id": "c", "label": "C", "type": "number", "precision": 1.5}),
            vec![("M18", "precision")],
        ),
        (
            "currency_code_number",
            json!({"id": "c", "label": "C", "type": "currency", "currencyCode": 5}),
            vec![("M06", "currencyCode")],
        ),
        (
            "currency_code_on_text_accepted",
            json!({"id": "c", "label": "C", "type": "text", "currencyCode": "EUR"}),
            vec![],
        ),
        (
            "currency_code_too_long",
            json!({"id": "c", "label": "C", "type": "currency", "currencyCode": "ABCDEFGHI"}),
            vec![("M07", "currencyCode")],
        ),
        (
            "required_string",
            json!({"id": "c", "label": "C", "type": "text", "required": "yes"}),
            vec![("M27", "required")],
        ),
    ];
    for (probe, c, errs) in checks {
        let (card, path) = g.place("field", column(c));
        let cpath = format!("{path}.columns[0]");
        let expected = errs
            .iter()
            .map(|(id, key)| {
                if *id == "M07" {
                    g.msg(id, &[("path", &format!("{cpath}.{key}")), ("max", "8")])
                } else {
                    g.path_msg(id, &format!("{cpath}.{key}"))
                }
            })
            .collect();
        g.add(format!("column.{probe}"), card, expected, &cfam());
    }
    for key in ["placeholder", "sensitive", "columns", "minRows", "maxRows"] {
        let (card, path) = g.place(
            "field",
            column(json!({"id": "c", "label": "C", "type": "text", key: "x"})),
        );
        let e = g.msg(
            "M05",
            &[("path", &format!("{path}.columns[0]")), ("key", key)],
        );
        g.add(format!("column.unsupported_{key}"), card, vec![e], &cfam());
    }
}

fn table_cells(g: &mut Gen<'_>) {
    let fam = || vec![tag("family", "table.cells")];
    let table =
        |columns: Value, rows: Value| json!({"kind": "table", "columns": columns, "rows": rows});
    let caps = [("columns[]", 80usize), ("rows[][]", 160usize)];
    for (key, n) in caps {
        for (probe, text, ok) in probe_strings(n) {
            let (columns, rows, at) = if key == "columns[]" {
                (json!([text]), json!([["Widget"]]), "columns[0]")
            } else {
                (json!(["Item"]), json!([[text]]), "rows[0][0]")
            };
            let (card, path) = g.place("block", table(columns, rows));
            let expected = if ok {
                vec![]
            } else {
                vec![g.msg(
                    "M07",
                    &[("path", &format!("{path}.{at}")), ("max", &n.to_string())],
                )]
            };
            let kind = if probe.starts_with("len_") {
                if ok {
                    "N"
                } else {
                    "N+1"
                }
            } else if probe.starts_with("astral") {
                if ok {
                    "astralN"
                } else {
                    "astralN+1"
                }
            } else {
                "bmpN"
            };
            let short = if key == "columns[]" { "header" } else { "cell" };
            g.add(
                format!("table.{short}.{probe}"),
                card,
                expected,
                &[
                    tag("family", "table.cells"),
                    format!("cap:table.{key}@{kind}"),
                ],
            );
        }
    }
    for (probe, v) in [
        ("empty", json!("")),
        ("blank", json!("  ")),
        ("number", json!(5)),
        ("null", Value::Null),
        ("array", json!(["a"])),
    ] {
        let (card, path) = g.place("block", table(json!([v.clone()]), json!([["Widget"]])));
        let e = g.path_msg("M06", &format!("{path}.columns[0]"));
        g.add(format!("table.header.{probe}"), card, vec![e], &fam());
        let (card, path) = g.place("block", table(json!(["Item"]), json!([["ok", v]])));
        let e = g.path_msg("M06", &format!("{path}.rows[0][1]"));
        g.add(format!("table.cell.{probe}"), card, vec![e], &fam());
    }
    let (card, path) = g.place("block", table(json!(["Item"]), json!(["Widget"])));
    let e = g.path_msg("M10", &format!("{path}.rows[0]"));
    g.add("table.row.not_array", card, vec![e], &fam());
    let (card, path) = g.place("block", table(json!(["Item"]), json!([[]])));
    let e = g.path_msg("M10", &format!("{path}.rows[0]"));
    g.add("table.row.empty", card, vec![e], &fam());
    let n = g.limit("columns");
    for (count, ok) in [(n, true), (n + 1, false)] {
        let cells: Vec<Value> = (0..count).map(|i| json!(format!("c{i}"))).collect();
        let (card, path) = g.place("block", table(json!(["Item"]), json!([cells])));
        let expected = if ok {
            vec![]
        } else {
            vec![g.msg(
                "M11",
                &[
                    ("path", &format!("{path}.rows[0]")),
                    ("max", &n.to_string()),
                ],
            )]
        };
        g.add(
            format!("table.row.cells_{count}"),
            card,
            expected,
            &[
                tag("family", "table.cells"),
                format!("cap:table.cells@{}", if ok { "N" } else { "N+1" }),
            ],
        );
    }
    let (card, _) = g.place(
        "block",
        table(
            json!(["A", "B", "C"]),
            json!([["only one"], ["x", "y", "z", "w"]]),
        ),
    );
    g.add(
        "table.row.length_not_compared_with_columns",
        card,
        vec![],
        &fam(),
    );
}

/// UTF-8 length of ECMAScript `JSON.stringify` for the values the size probes use. serde_json's
/// compact output matches it for strings, literals and structure; integral doubles print without
/// `.0` in JS. Probes only use numbers whose JS spelling this handles.
fn js_size(value: &Value) -> usize {
    match value {
        Value::Number(n) if n.is_f64() => {
            let x = n.as_f64().unwrap_or(0.0);
            if x.fract() == 0.0 && x.abs() < 1e15 {
                format!("{}", x as i64).len()
            } else {
                n.to_string().len()
            }
        }
        Value::Array(items) => {
            2 + items.iter().map(js_size).sum::<usize>() + items.len().saturating_sub(1)
        }
        Value::Object(map) => {
            2 + map
                .iter()
                .map(|(k, v)| serde_json::to_string(k).map_or(0, |s| s.len()) + 1 + js_size(v))
                .sum::<usize>()
                + map.len().saturating_sub(1)
        }
        other => serde_json::to_string(other).map_or(0, |s| s.len()),
    }
}

fn size_boundary(g: &mut Gen<'_>) -> anyhow::Result<()> {
    let probe = g.registry.at("/fixtures/sizeProbe")?.clone();
    let blocks = probe["blocks"].as_u64().context("sizeProbe.blocks")? as usize;
    let text_key = probe["textKey"]
        .as_str()
        .context("sizeProbe.textKey")?
        .to_owned();
    let kind = probe["blockKind"]
        .as_str()
        .context("sizeProbe.blockKind")?
        .to_owned();
    let cap = g.registry.u64_at("/limits/maxCardBytes")? as usize;
    let text_cap = 2000usize;
    let variants: [(&str, &str, usize); 3] = [
        ("ascii", "a", blocks),
        ("bmpMultibyte", "\u{20ac}", 6),
        ("escapes", "a\n\u{1}", 6),
    ];
    for target in [cap, cap + 1] {
        let ok = target == cap;
        for (variant, unit, count) in variants {
            let units_per_block = text_cap / unit.encode_utf16().count();
            let texts: Vec<String> = (0..count).map(|_| unit.repeat(units_per_block)).collect();
            let card = fit_size(&kind, &text_key, texts, None, target)?;
            let expected = if ok { vec![] } else { vec![g.msg("M03", &[])] };
            g.add(
                format!("size.{variant}.bytes_{target}"),
                card,
                expected,
                &[
                    tag("family", "size.boundary"),
                    format!("limit:maxCardBytes@{}", if ok { "N" } else { "N+1" }),
                ],
            );
        }
        // A chart whose `y` values are written `1.0`: JS counts 1 byte each, cards.py 3.
        let points: Vec<Value> = (0..24)
            .map(|i| json!({"x": format!("p{i}"), "y": 1.0}))
            .collect();
        let chart = json!({"kind": "chart", "chart": "line", "series": [{"points": points}]});
        let texts: Vec<String> = (0..blocks - 1).map(|_| "a".repeat(text_cap)).collect();
        let card = fit_size(&kind, &text_key, texts, Some(chart), target)?;
        let m03 = g.msg("M03", &[]);
        let expected = if ok { vec![] } else { vec![m03.clone()] };
        g.cases.push(Case {
            name: format!("size.integralFloats.bytes_{target}"),
            card: CardInput::Value(card),
            expected,
            python: ok.then(|| json!({"ok": false, "errors": [m03.text]})),
            tags: vec![tag("family", "size.boundary"), tag("divergence", "D9")],
            reason: ok.then(|| {
                "cards.py spells 1.0 with three bytes; JSON.stringify writes 1".to_owned()
            }),
        });
    }
    // The size error comes first and does not stop validation.
    let texts: Vec<String> = (0..blocks).map(|_| "a".repeat(text_cap)).collect();
    let card = fit_size(&kind, &text_key, texts, None, cap + 1)?;
    let card = set(&set(&card, "title", json!("")), "tone", json!("loud"));
    let expected = vec![
        g.msg("M03", &[]),
        g.path_msg("M06", "card.title"),
        g.path_msg("M08", "card.tone"),
    ];
    g.add(
        "size.error_listed_first",
        card,
        expected,
        &[tag("family", "size.boundary")],
    );
    Ok(())
}

/// A probe card with one block per text (plus an optional leading block) whose last text is
/// trimmed, then padded with ASCII, until the normative size is exactly `target`.
fn fit_size(
    kind: &str,
    text_key: &str,
    mut texts: Vec<String>,
    lead: Option<Value>,
    target: usize,
) -> anyhow::Result<Value> {
    let build = |texts: &[String]| {
        let mut blocks: Vec<Value> = lead.iter().cloned().collect();
        blocks.extend(texts.iter().map(|t| json!({"kind": kind, text_key: t})));
        probe_card(blocks)
    };
    let mut card = build(&texts);
    let size = js_size(&card);
    if size < target {
        anyhow::bail!("size probe too small: {size} < {target}");
    }
    let last = texts.len() - 1;
    while js_size(&card) > target {
        texts[last].pop();
        card = build(&texts);
    }
    while js_size(&card) < target {
        texts[last].push('a');
        card = build(&texts);
    }
    if js_size(&card) != target {
        anyhow::bail!("size probe could not reach {target}");
    }
    Ok(card)
}

fn keys_order(g: &mut Gen<'_>) {
    let fam = vec![tag("family", "keys.order")];
    g.cases.push(Case {
        name: "keys.duplicate_last_wins".into(),
        card: CardInput::Text(
            r#"{"schema":"canon.card.v1","title":"","fallbackText":"Probe card","blocks":[{"kind":"summary","text":"Probe"}],"title":"Probe"}"#.into(),
        ),
        expected: vec![],
        python: None,
        tags: fam.clone(),
        reason: None,
    });
    g.cases.push(Case {
        name: "keys.duplicate_last_wins_invalid".into(),
        card: CardInput::Text(
            r#"{"schema":"canon.card.v1","title":"Probe","fallbackText":"Probe card","blocks":[{"kind":"summary","text":"Probe"}],"title":7}"#.into(),
        ),
        expected: vec![g.path_msg("M06", "card.title")],
        python: None,
        tags: fam.clone(),
        reason: None,
    });
    let card = json!({"zeta": 1, "schema": "canon.card.v1", "alpha": 2, "title": "Probe", "fallbackText": "Probe card", "blocks": [{"kind": "summary", "text": "Probe"}], "Mid": 3});
    let errors = ["zeta", "alpha", "Mid"]
        .iter()
        .map(|k| g.msg("M05", &[("path", "card"), ("key", k)]))
        .collect();
    g.add("keys.unsupported_not_alphabetical", card, errors, &fam);
    let card = json!({"schema": "canon.card.v1", "title": "Probe", "fallbackText": "Probe card", "blocks": [{"kind": "summary", "text": "Probe", "a\"b": 1, "": 2}]});
    let e1 = g.msg("M05", &[("path", "card.blocks[0]"), ("key", "a\"b")]);
    let e2 = g.msg("M05", &[("path", "card.blocks[0]"), ("key", "")]);
    g.add("keys.unsupported_rendered_raw", card, vec![e1, e2], &fam);
}

/// Cases kept verbatim in the registry (`fixtures.curated`, `fixtures.divergences`).
fn registry_cases(g: &mut Gen<'_>, pointer: &str, family: &str) -> anyhow::Result<()> {
    let list = g
        .registry
        .at(pointer)?
        .as_array()
        .context("registry cases must be an array")?
        .clone();
    for case in list {
        let name = case["name"].as_str().context("case name")?.to_owned();
        let card = if let Some(text) = case.get("cardText").and_then(Value::as_str) {
            CardInput::Text(text.to_owned())
        } else if let Some(card) = case.get("card") {
            CardInput::Value(card.clone())
        } else {
            let context = case["in"]
                .as_str()
                .context("case needs card or in + record")?;
            CardInput::Value(g.place(context, case["record"].clone()).0)
        };
        let errors = case["expected"]["errors"]
            .as_array()
            .context("case expected.errors")?;
        let expected = errors
            .iter()
            .map(|e| {
                let text = e.as_str().unwrap_or_default().to_owned();
                Error {
                    id: template_of(g, &text),
                    text,
                }
            })
            .collect();
        let mut tags = vec![tag("family", family)];
        if let Some(extra) = case.get("tags").and_then(Value::as_array) {
            tags.extend(extra.iter().filter_map(Value::as_str).map(str::to_owned));
        }
        g.cases.push(Case {
            name,
            card,
            expected,
            python: case.get("python").cloned(),
            tags,
            reason: case
                .get("reason")
                .and_then(Value::as_str)
                .map(str::to_owned),
        });
    }
    Ok(())
}

/// The template a curated error text was rendered from (the first whose literal parts match).
fn template_of(g: &Gen<'_>, text: &str) -> &'static str {
    const IDS: [&str; 36] = [
        "M01", "M02", "M03", "M04", "M05", "M06", "M07", "M08", "M09", "M10", "M11", "M12", "M13",
        "M14", "M15", "M16", "M17", "M18", "M19", "M20", "M21", "M22", "M23", "M24", "M25", "M26",
        "M27", "M28", "M29", "M30", "M31", "M32", "M33", "M34", "M35", "M36",
    ];
    // Longest literal suffix wins, so M35 (`must be <= 50`) is not mistaken for M25.
    let mut best: Option<(&'static str, usize)> = None;
    for id in IDS {
        let Some(template) = g.templates.get(id) else {
            continue;
        };
        if matches_template(template, text) {
            let literal = literal_len(template);
            if best.is_none_or(|(_, l)| literal > l) {
                best = Some((id, literal));
            }
        }
    }
    best.map_or("M00", |(id, _)| id)
}

/// Bytes of literal text in a template (placeholders excluded).
fn literal_len(template: &str) -> usize {
    let mut len = 0;
    let mut in_placeholder = false;
    for c in template.chars() {
        match c {
            '{' => in_placeholder = true,
            '}' => in_placeholder = false,
            c if !in_placeholder => len += c.len_utf8(),
            _ => {}
        }
    }
    len
}

/// Whether `text` can be produced by `template` (placeholders match any text).
fn matches_template(template: &str, text: &str) -> bool {
    let parts: Vec<&str> = template
        .split('{')
        .enumerate()
        .map(|(i, p)| {
            if i == 0 {
                p
            } else {
                p.split_once('}').map_or(p, |(_, rest)| rest)
            }
        })
        .collect();
    if parts.len() == 1 {
        return template == text;
    }
    let Some(rest) = text.strip_prefix(parts[0]) else {
        return false;
    };
    let mut rest = rest;
    for (i, part) in parts.iter().enumerate().skip(1) {
        if i == parts.len() - 1 {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(pos) => rest = &rest[pos + part.len()..],
            None => return false,
        }
    }
    true
}

// ---- coverage (cards.md §20.5) -----------------------------------------------------------------

fn check_coverage(g: &Gen<'_>, skill_examples: usize) -> anyhow::Result<()> {
    let mut tags: BTreeSet<String> = BTreeSet::new();
    let mut families: BTreeMap<String, usize> = BTreeMap::new();
    for case in &g.cases {
        for t in &case.tags {
            tags.insert(t.clone());
            if let Some(f) = t.strip_prefix("family:") {
                *families.entry(f.to_owned()).or_default() += 1;
            }
        }
        for e in &case.expected {
            tags.insert(tag("template", e.id));
        }
    }
    let mut gaps = Vec::new();
    // cards.md §20.5 C1: every template but the Python-only ones.
    let python_only = g.registry.str_list_at("/pythonOnlyMessages")?;
    for id in g.templates.keys() {
        if !python_only.contains(id) && !tags.contains(&tag("template", id)) {
            gaps.push(format!("C1 template {id}"));
        }
    }
    // cards.md §20.5 C2: every runtime limit at N and N + 1.
    for (name, _) in g.registry.object_at("/limits/runtime")? {
        for at in ["N", "N+1"] {
            if !tags.contains(&format!("limit:{name}@{at}")) {
                gaps.push(format!("C2 limit {name}@{at}"));
            }
        }
    }
    // cards.md §20.5 C3: every string cap, ASCII and astral at N / N + 1 and a BMP multibyte case.
    for cap in string_caps(g.registry)? {
        for at in ["N", "N+1", "astralN", "astralN+1", "bmpN"] {
            if !tags.contains(&format!("cap:{}.{}@{at}", cap.record, cap.key)) {
                gaps.push(format!("C3 cap {}.{}@{at}", cap.record, cap.key));
            }
        }
    }
    // cards.md §20.5 C5: every vocabulary member at every location using it.
    for (record, _key, vocabulary, _, _) in enum_checks(g) {
        for value in g.registry.str_list_at(&format!("/enums/{vocabulary}"))? {
            if !tags.contains(&format!("enum:{vocabulary}={value}@{record}")) {
                gaps.push(format!("C5 {vocabulary}={value} at {record}"));
            }
        }
    }
    // cards.md §20.5 C6: every record minimal and with an unsupported key.
    for record in PROBED_RECORDS {
        let names = [
            format!("{record}.minimal"),
            format!("{record}.unsupported_key"),
        ];
        for name in names {
            if !g.cases.iter().any(|c| c.name == name) {
                gaps.push(format!("C6 {name}"));
            }
        }
    }
    // cards.md §20.5 C11: the field-type matrix, every type and an unrecognized one.
    let mut types = g.registry.str_list_at("/enums/fieldTypes")?;
    types.push("zzUnknownType".into());
    for t in types {
        for key in [
            "min",
            "max",
            "step",
            "precision",
            "currencyCode",
            "columns",
            "minRows",
            "maxRows",
        ] {
            if !tags.contains(&format!("matrix:{t}.{key}")) {
                gaps.push(format!("C11 {t}.{key}"));
            }
        }
    }
    // cards.md §20.5 C17 / C18: every skill example and every registry divergence.
    if families.get("skill.examples").copied().unwrap_or(0) != skill_examples || skill_examples == 0
    {
        gaps.push("C17 skill examples".into());
    }
    let divergences = g
        .registry
        .at("/fixtures/divergences")?
        .as_array()
        .map_or(0, Vec::len);
    if families.get("divergences").copied().unwrap_or(0) != divergences {
        gaps.push("C18 divergences".into());
    }
    // Every family the registry names has cases.
    for family in g.registry.str_list_at("/fixtures/families")? {
        if families.get(&family).copied().unwrap_or(0) == 0 {
            gaps.push(format!("family {family} has no case"));
        }
    }
    // cards.md §20.5 C16: a kitchen-sink case with at least ten errors.
    if !g
        .cases
        .iter()
        .any(|c| c.tags.contains(&tag("family", "ordering.kitchenSink")) && c.expected.len() >= 10)
    {
        gaps.push("C16 kitchen sink with >= 10 errors".into());
    }
    if gaps.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "parity fixtures miss coverage (cards.md §20.5): {}",
            gaps.join("; ")
        )
    }
}

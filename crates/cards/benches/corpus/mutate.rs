//! Mistakes that turn a valid card into an invalid one, one per message template of the
//! validator (cards.md §14), weighted by how often card authors (mostly language models) make
//! them: a made-up block kind or tone is common, a misplaced `currencyCode` rare.
//!
//! A mutation picks its spot at random among the records of the right type; field and column
//! mistakes add the field they need to the card's actions block when it has none.

use serde_json::{json, Value};

use super::{build_block, field, text, ActionsStyle, Kind, Rng};

/// One kind of mistake, named after the message it provokes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mutation {
    NotObject,
    Oversize,
    Schema,
    UnsupportedKey,
    BlankString,
    TooLong,
    BadTone,
    BadId,
    EmptyArray,
    TooManyEntries,
    EntryNotObject,
    UnknownKind,
    ChartType,
    NotFinite,
    BadStatus,
    MediaKind,
    NotNonNegativeInteger,
    Confidence,
    SecondActions,
    DuplicateId,
    TooManyActions,
    DuplicateChoice,
    BadDate,
    InvertedBounds,
    ColumnType,
    NotBoolean,
    SelectColumnChoices,
    FieldType,
    MissingChoices,
    BoundsOnWrongType,
    StepOnWrongType,
    CurrencyOnWrongType,
    MissingColumns,
    TooManyRows,
    ColumnsOnWrongType,
}

impl Mutation {
    /// The registry id of the message template this mistake provokes.
    pub(crate) fn template(self) -> &'static str {
        match self {
            Mutation::NotObject => "M01",
            Mutation::Oversize => "M03",
            Mutation::Schema => "M04",
            Mutation::UnsupportedKey => "M05",
            Mutation::BlankString => "M06",
            Mutation::TooLong => "M07",
            Mutation::BadTone => "M08",
            Mutation::BadId => "M09",
            Mutation::EmptyArray => "M10",
            Mutation::TooManyEntries => "M11",
            Mutation::EntryNotObject => "M12",
            Mutation::UnknownKind => "M13",
            Mutation::ChartType => "M14",
            Mutation::NotFinite => "M15",
            Mutation::BadStatus => "M16",
            Mutation::MediaKind => "M17",
            Mutation::NotNonNegativeInteger => "M18",
            Mutation::Confidence => "M19",
            Mutation::SecondActions => "M20",
            Mutation::DuplicateId => "M21",
            Mutation::TooManyActions => "M22",
            Mutation::DuplicateChoice => "M23",
            Mutation::BadDate => "M24",
            Mutation::InvertedBounds => "M25",
            Mutation::ColumnType => "M26",
            Mutation::NotBoolean => "M27",
            Mutation::SelectColumnChoices => "M28",
            Mutation::FieldType => "M29",
            Mutation::MissingChoices => "M30",
            Mutation::BoundsOnWrongType => "M31",
            Mutation::StepOnWrongType => "M32",
            Mutation::CurrencyOnWrongType => "M33",
            Mutation::MissingColumns => "M34",
            Mutation::TooManyRows => "M35",
            Mutation::ColumnsOnWrongType => "M36",
        }
    }
}

/// How often each mistake is drawn (relative weights).
const WEIGHTS: [(Mutation, usize); 34] = [
    (Mutation::NotObject, 1),
    (Mutation::Schema, 3),
    (Mutation::UnsupportedKey, 9),
    (Mutation::BlankString, 6),
    (Mutation::TooLong, 5),
    (Mutation::BadTone, 6),
    (Mutation::BadId, 4),
    (Mutation::EmptyArray, 3),
    (Mutation::TooManyEntries, 3),
    (Mutation::EntryNotObject, 4),
    (Mutation::UnknownKind, 6),
    (Mutation::ChartType, 2),
    (Mutation::NotFinite, 3),
    (Mutation::BadStatus, 3),
    (Mutation::MediaKind, 2),
    (Mutation::NotNonNegativeInteger, 2),
    (Mutation::Confidence, 3),
    (Mutation::SecondActions, 2),
    (Mutation::DuplicateId, 3),
    (Mutation::TooManyActions, 1),
    (Mutation::DuplicateChoice, 2),
    (Mutation::BadDate, 2),
    (Mutation::InvertedBounds, 2),
    (Mutation::ColumnType, 1),
    (Mutation::NotBoolean, 2),
    (Mutation::SelectColumnChoices, 1),
    (Mutation::FieldType, 3),
    (Mutation::MissingChoices, 2),
    (Mutation::BoundsOnWrongType, 1),
    (Mutation::StepOnWrongType, 1),
    (Mutation::CurrencyOnWrongType, 1),
    (Mutation::MissingColumns, 1),
    (Mutation::TooManyRows, 1),
    (Mutation::ColumnsOnWrongType, 1),
];

/// Applies one randomly drawn mistake that fits the card; `None` when none fitted.
pub(crate) fn apply_random(rng: &mut Rng, card: &mut Value) -> Option<Mutation> {
    let total: usize = WEIGHTS.iter().map(|&(_, w)| w).sum();
    for _ in 0..32 {
        let mut roll = rng.below(total);
        let mut chosen = WEIGHTS[0].0;
        for &(m, w) in &WEIGHTS {
            if roll < w {
                chosen = m;
                break;
            }
            roll -= w;
        }
        if apply(rng, card, chosen) {
            return Some(chosen);
        }
    }
    None
}

/// Where the records of a card are, as JSON pointers.
#[derive(Default)]
struct Sites {
    /// Block pointer and kind.
    blocks: Vec<(String, String)>,
    metrics: Vec<String>,
    series: Vec<String>,
    points: Vec<String>,
    table_rows: Vec<String>,
    items: Vec<String>,
    media: Vec<String>,
    detail_rows: Vec<String>,
    actions_blocks: Vec<String>,
    actions: Vec<String>,
    /// Field pointer and type.
    fields: Vec<(String, String)>,
    /// Pointers of `choices` arrays (fields and columns).
    choice_arrays: Vec<String>,
    choices: Vec<String>,
    /// Column pointer and type.
    columns: Vec<(String, String)>,
}

fn sites(card: &Value) -> Sites {
    let mut s = Sites::default();
    let each = |v: &Value, key: &str, base: &str| -> Vec<String> {
        v.get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .enumerate()
                    .filter(|(_, e)| e.is_object())
                    .map(|(i, _)| format!("{base}/{key}/{i}"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let kind_of =
        |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
    for b in each(card, "blocks", "") {
        let block = &card.pointer(&b).cloned().unwrap_or(Value::Null);
        let kind = kind_of(block, "kind");
        match kind.as_str() {
            "metricGrid" => s.metrics.extend(each(block, "metrics", &b)),
            "chart" => {
                for sp in each(block, "series", &b) {
                    let series = card.pointer(&sp).cloned().unwrap_or(Value::Null);
                    s.points.extend(each(&series, "points", &sp));
                    s.series.push(sp);
                }
            }
            "table" => {
                if let Some(rows) = block.get("rows").and_then(Value::as_array) {
                    s.table_rows
                        .extend((0..rows.len()).map(|i| format!("{b}/rows/{i}")));
                }
            }
            "list" => s.items.extend(each(block, "items", &b)),
            "mediaPreview" if block.get("media").is_some_and(Value::is_object) => {
                s.media.push(format!("{b}/media"));
            }
            "details" => s.detail_rows.extend(each(block, "rows", &b)),
            "actions" => {
                s.actions_blocks.push(b.clone());
                for ap in each(block, "actions", &b) {
                    let action = card.pointer(&ap).cloned().unwrap_or(Value::Null);
                    for fp in each(&action, "fields", &ap) {
                        let f = card.pointer(&fp).cloned().unwrap_or(Value::Null);
                        if f.get("choices").is_some_and(Value::is_array) {
                            s.choices.extend(each(&f, "choices", &fp));
                            s.choice_arrays.push(format!("{fp}/choices"));
                        }
                        for cp in each(&f, "columns", &fp) {
                            let c = card.pointer(&cp).cloned().unwrap_or(Value::Null);
                            if c.get("choices").is_some_and(Value::is_array) {
                                s.choices.extend(each(&c, "choices", &cp));
                                s.choice_arrays.push(format!("{cp}/choices"));
                            }
                            s.columns.push((cp, kind_of(&c, "type")));
                        }
                        s.fields.push((fp, kind_of(&f, "type")));
                    }
                    s.actions.push(ap);
                }
            }
            _ => {}
        }
        s.blocks.push((b, kind));
    }
    s
}

fn pick(rng: &mut Rng, pointers: &[String]) -> Option<String> {
    choose(rng, pointers)
}

fn choose<T: Clone>(rng: &mut Rng, items: &[T]) -> Option<T> {
    (!items.is_empty()).then(|| items[rng.below(items.len())].clone())
}

fn set(card: &mut Value, pointer: &str, key: &str, value: Value) -> bool {
    match card.pointer_mut(pointer).and_then(Value::as_object_mut) {
        Some(record) => {
            record.insert(key.to_owned(), value);
            true
        }
        None => false,
    }
}

fn remove(card: &mut Value, pointer: &str, key: &str) -> bool {
    card.pointer_mut(pointer)
        .and_then(Value::as_object_mut)
        .is_some_and(|record| record.shift_remove(key).is_some())
}

/// The pointer of a block of `kind`, adding one at the end when the card has none (so a rare
/// mistake still finds its record).
fn block_of_kind(rng: &mut Rng, card: &mut Value, kind: Kind, name: &str) -> Option<String> {
    let existing: Vec<String> = sites(card)
        .blocks
        .into_iter()
        .filter(|(_, k)| k == name)
        .map(|(p, _)| p)
        .collect();
    if let Some(p) = pick(rng, &existing) {
        return Some(p);
    }
    let blocks = card.get_mut("blocks")?.as_array_mut()?;
    if blocks.len() >= 24 {
        return None;
    }
    blocks.push(build_block(rng, kind, 400, false));
    Some(format!("/blocks/{}", blocks.len() - 1))
}

/// A field whose type is one of `types`; when the card has none, one is added to the action
/// with the fewest fields (the card must already have an actions block).
fn field_of_type(rng: &mut Rng, card: &mut Value, types: &[&str]) -> Option<String> {
    let s = sites(card);
    let matching: Vec<String> = s
        .fields
        .iter()
        .filter(|(_, t)| types.contains(&t.as_str()))
        .map(|(p, _)| p.clone())
        .collect();
    if let Some(p) = pick(rng, &matching) {
        return Some(p);
    }
    let mut actions = s.actions;
    if actions.is_empty() {
        let b = block_of_kind(rng, card, Kind::Actions(ActionsStyle::Approval), "actions")?;
        actions = sites(card)
            .actions
            .into_iter()
            .filter(|a| a.starts_with(&format!("{b}/")))
            .collect();
    }
    let action = actions.iter().min_by_key(|ap| {
        card.pointer(&format!("{ap}/fields"))
            .and_then(Value::as_array)
            .map_or(0, Vec::len)
    })?;
    let record = card.pointer_mut(action)?.as_object_mut()?;
    let fields = record.entry("fields").or_insert_with(|| json!([]));
    let fields = fields.as_array_mut()?;
    if fields.len() >= 8 {
        return None;
    }
    let field_type = *rng.pick(types);
    fields.push(field(rng, field_type, fields.len(), 300));
    Some(format!("{action}/fields/{}", fields.len() - 1))
}

fn column_of_type(rng: &mut Rng, card: &mut Value, types: &[&str]) -> Option<String> {
    let matching: Vec<String> = sites(card)
        .columns
        .iter()
        .filter(|(_, t)| types.contains(&t.as_str()))
        .map(|(p, _)| p.clone())
        .collect();
    if let Some(p) = pick(rng, &matching) {
        return Some(p);
    }
    let f = field_of_type(rng, card, &["lineItems"])?;
    let record = card.pointer_mut(&f)?.as_object_mut()?;
    let columns = record.get_mut("columns")?.as_array_mut()?;
    if columns.len() >= 8 {
        return None;
    }
    let index = columns.len();
    let column_type = *rng.pick(types);
    let mut column = json!({"id": format!("col_{index}"), "label": "Column", "type": column_type});
    if column_type == "select" {
        column["choices"] = json!([{"label": "One"}, {"label": "Two"}]);
    }
    columns.push(column);
    Some(format!("{f}/columns/{index}"))
}

fn apply(rng: &mut Rng, card: &mut Value, m: Mutation) -> bool {
    if !card.is_object() {
        return false;
    }
    let s = sites(card);
    match m {
        Mutation::NotObject => {
            // A model that sends the block list, the JSON as a string, or nothing.
            *card = match rng.below(3) {
                0 => card.get("blocks").cloned().unwrap_or(Value::Null),
                1 => Value::String(serde_json::to_string(card).unwrap_or_default()),
                _ => Value::Null,
            };
            true
        }
        Mutation::Oversize => false,
        Mutation::Schema => {
            if rng.chance(0.3) {
                remove(card, "", "schema")
            } else {
                let wrong = *rng.pick(&["canon.card.v2", "canon.card", "card.v1", "Canon.Card.V1"]);
                set(card, "", "schema", json!(wrong))
            }
        }
        Mutation::UnsupportedKey => {
            const STRAY: [&str; 10] = [
                "subtitle", "footer", "icon", "metadata", "color", "unit", "default", "options",
                "selected", "style",
            ];
            let mut spots: Vec<(String, &[&str])> =
                vec![(String::new(), &["actions", "version", "subtitle"])];
            for (b, kind) in &s.blocks {
                let misplaced: &[&str] = match kind.as_str() {
                    "summary" => &["tone", "items"],
                    "details" => &["items", "description"],
                    "table" => &["headers", "data"],
                    _ => &["description"],
                };
                spots.push((b.clone(), misplaced));
            }
            for p in s
                .metrics
                .iter()
                .chain(&s.detail_rows)
                .chain(&s.items)
                .chain(&s.media)
            {
                spots.push((p.clone(), &["icon", "id"]));
            }
            for p in &s.actions {
                spots.push((p.clone(), &["type", "url"]));
            }
            for (p, _) in &s.fields {
                spots.push((p.clone(), &["description", "options", "value"]));
            }
            for p in &s.choices {
                spots.push((p.clone(), &["id", "selected"]));
            }
            let (p, misplaced) = match choose(rng, &spots) {
                Some(spot) => spot,
                None => return false,
            };
            let key = if rng.chance(0.5) {
                *rng.pick(misplaced)
            } else {
                *rng.pick(&STRAY)
            };
            set(card, &p, key, json!(text(rng, 8)))
        }
        Mutation::BlankString => {
            let mut spots: Vec<(String, &str)> =
                vec![(String::new(), "title"), (String::new(), "fallbackText")];
            for (b, kind) in &s.blocks {
                if kind == "summary" || kind == "callout" {
                    spots.push((b.clone(), "text"));
                }
            }
            spots.extend(s.metrics.iter().map(|p| (p.clone(), "label")));
            spots.extend(s.detail_rows.iter().map(|p| (p.clone(), "value")));
            spots.extend(s.items.iter().map(|p| (p.clone(), "label")));
            spots.extend(s.actions.iter().map(|p| (p.clone(), "label")));
            spots.extend(s.fields.iter().map(|(p, _)| (p.clone(), "label")));
            spots.extend(s.points.iter().map(|p| (p.clone(), "x")));
            let (p, key) = match choose(rng, &spots) {
                Some(spot) => spot,
                None => return false,
            };
            match rng.below(5) {
                0 => remove(card, &p, key),
                1 => set(card, &p, key, json!("")),
                2 => set(card, &p, key, json!("   ")),
                3 => set(card, &p, key, json!(" \n\t")),
                _ => set(card, &p, key, Value::Null),
            }
        }
        Mutation::TooLong => {
            let mut spots: Vec<(String, &str, usize)> = vec![
                (String::new(), "title", 120),
                (String::new(), "fallbackText", 500),
            ];
            for (b, kind) in &s.blocks {
                match kind.as_str() {
                    "summary" => spots.push((b.clone(), "text", 2000)),
                    "callout" => spots.push((b.clone(), "text", 1000)),
                    _ => spots.push((b.clone(), "title", 120)),
                }
            }
            spots.extend(s.actions.iter().map(|p| (p.clone(), "label", 120)));
            spots.extend(s.detail_rows.iter().map(|p| (p.clone(), "value", 300)));
            spots.extend(s.items.iter().map(|p| (p.clone(), "label", 160)));
            spots.extend(s.choices.iter().map(|p| (p.clone(), "label", 120)));
            let (p, key, cap) = match choose(rng, &spots) {
                Some(spot) => spot,
                None => return false,
            };
            let units = cap + 1 + rng.below(cap / 4);
            set(card, &p, key, json!(text(rng, units)))
        }
        Mutation::BadTone => {
            let mut spots = vec![String::new()];
            spots.extend(
                s.blocks
                    .iter()
                    .filter(|(_, k)| k == "callout")
                    .map(|(p, _)| p.clone()),
            );
            spots.extend(s.metrics.iter().cloned());
            spots.extend(s.detail_rows.iter().cloned());
            spots.extend(s.actions.iter().cloned());
            let p = pick(rng, &spots).unwrap_or_default();
            let tone = *rng.pick(&[
                "success", "info", "error", "green", "Positive", "warn", "urgent",
            ]);
            set(card, &p, "tone", json!(tone))
        }
        Mutation::BadId => {
            let bad = *rng.pick(&[
                "approve invoice",
                "",
                "approve/1",
                "über",
                "ok!",
                "#42",
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            ]);
            let mut spots: Vec<(String, &str)> = vec![(String::new(), "cardId")];
            spots.extend(s.actions.iter().map(|p| (p.clone(), "id")));
            spots.extend(s.fields.iter().map(|(p, _)| (p.clone(), "id")));
            spots.extend(s.columns.iter().map(|(p, _)| (p.clone(), "id")));
            let (p, key) = match choose(rng, &spots) {
                Some(spot) => spot,
                None => return false,
            };
            set(card, &p, key, json!(bad))
        }
        Mutation::EmptyArray => {
            if let Some(row) = pick(rng, &s.table_rows).filter(|_| rng.chance(0.3)) {
                // A table row written as an object or left empty.
                let value = if rng.chance(0.5) {
                    json!([])
                } else {
                    json!({"cell": "a"})
                };
                return match card.pointer_mut(&row) {
                    Some(slot) => {
                        *slot = value;
                        true
                    }
                    None => false,
                };
            }
            let mut spots: Vec<(String, &str)> = Vec::new();
            if rng.chance(0.1) {
                spots.push((String::new(), "blocks"));
            }
            for (b, kind) in &s.blocks {
                match kind.as_str() {
                    "metricGrid" => spots.push((b.clone(), "metrics")),
                    "chart" => spots.push((b.clone(), "series")),
                    "list" => spots.push((b.clone(), "items")),
                    "details" | "table" => spots.push((b.clone(), "rows")),
                    "actions" => spots.push((b.clone(), "actions")),
                    _ => {}
                }
            }
            spots.extend(s.series.iter().map(|p| (p.clone(), "points")));
            spots.extend(
                s.fields
                    .iter()
                    .filter(|(_, t)| t.contains("elect"))
                    .map(|(p, _)| (p.clone(), "choices")),
            );
            spots.extend(s.actions.iter().map(|p| (p.clone(), "fields")));
            if spots.is_empty() {
                return false;
            }
            let (p, key) = match choose(rng, &spots) {
                Some(spot) => spot,
                None => return false,
            };
            let empty = match rng.below(4) {
                0 => json!({}),
                1 => json!("none"),
                _ => json!([]),
            };
            set(card, &p, key, empty)
        }
        Mutation::TooManyEntries => {
            let mut spots: Vec<(String, &str, usize)> = Vec::new();
            for (b, kind) in &s.blocks {
                match kind.as_str() {
                    "metricGrid" => spots.push((b.clone(), "metrics", 12)),
                    "list" => spots.push((b.clone(), "items", 24)),
                    "details" => spots.push((b.clone(), "rows", 32)),
                    "table" => spots.push((b.clone(), "rows", 24)),
                    _ => {}
                }
            }
            spots.extend(s.series.iter().map(|p| (p.clone(), "points", 24)));
            if rng.chance(0.2) {
                spots.push((String::new(), "blocks", 24));
            }
            if spots.is_empty() {
                return false;
            }
            let (p, key, limit) = match choose(rng, &spots) {
                Some(spot) => spot,
                None => return false,
            };
            let Some(items) = card
                .pointer_mut(&format!("{p}/{key}"))
                .and_then(Value::as_array_mut)
            else {
                return false;
            };
            let Some(last) = items.last().cloned() else {
                return false;
            };
            // Extra blocks are copies of a plain block, so a second actions block cannot sneak in.
            let filler = if key == "blocks" {
                json!({"kind": "summary", "text": "More."})
            } else {
                last
            };
            let want = limit + 1 + rng.below(3);
            while items.len() < want {
                items.push(filler.clone());
            }
            true
        }
        Mutation::EntryNotObject => {
            let mut spots: Vec<(String, Value)> = s
                .blocks
                .iter()
                .map(|(p, _)| (p.clone(), json!("See the attached report.")))
                .collect();
            spots.extend(s.metrics.iter().map(|p| (p.clone(), json!("€1,200"))));
            spots.extend(
                s.items
                    .iter()
                    .map(|p| (p.clone(), json!("Check the invoice"))),
            );
            spots.extend(
                s.detail_rows
                    .iter()
                    .map(|p| (p.clone(), json!(["Supplier", "Acme"]))),
            );
            spots.extend(s.choices.iter().map(|p| (p.clone(), json!("Option A"))));
            spots.extend(s.actions.iter().map(|p| (p.clone(), json!("approve"))));
            spots.extend(s.points.iter().map(|p| (p.clone(), json!(12))));
            spots.extend(s.media.iter().map(|p| (p.clone(), Value::Null)));
            let (p, value) = match choose(rng, &spots) {
                Some(spot) => spot,
                None => return false,
            };
            match card.pointer_mut(&p) {
                Some(slot) => {
                    *slot = value;
                    true
                }
                None => false,
            }
        }
        Mutation::UnknownKind => {
            let Some((p, _)) = choose(rng, &s.blocks) else {
                return false;
            };
            match rng.below(10) {
                0 => remove(card, &p, "kind"),
                1 => set(card, &p, "kind", Value::Null),
                2 => set(card, &p, "kind", json!(7)),
                _ => {
                    let kind = *rng.pick(&[
                        "text", "markdown", "image", "header", "divider", "Summary", "metrics",
                        "button",
                    ]);
                    set(card, &p, "kind", json!(kind))
                }
            }
        }
        Mutation::ChartType => {
            let Some(p) = block_of_kind(rng, card, Kind::Chart, "chart") else {
                return false;
            };
            if rng.chance(0.2) {
                remove(card, &p, "chart")
            } else {
                let chart = *rng.pick(&["pie", "area", "scatter", "Line"]);
                set(card, &p, "chart", json!(chart))
            }
        }
        Mutation::NotFinite => {
            if let Some(p) = pick(rng, &s.points) {
                let y = match rng.below(4) {
                    0 => json!("12"),
                    1 => Value::Null,
                    2 => json!("1,200"),
                    _ => json!(true),
                };
                return set(card, &p, "y", y);
            }
            let Some(f) = field_of_type(rng, card, &["number", "currency"]) else {
                return false;
            };
            set(card, &f, "step", json!("0.5"))
        }
        Mutation::BadStatus => {
            if s.items.is_empty() && block_of_kind(rng, card, Kind::List, "list").is_none() {
                return false;
            }
            let Some(p) = pick(rng, &sites(card).items) else {
                return false;
            };
            let status = *rng.pick(&["finished", "in_progress", "todo", "ok", "Done"]);
            set(card, &p, "status", json!(status))
        }
        Mutation::MediaKind => {
            if s.media.is_empty()
                && block_of_kind(rng, card, Kind::MediaPreview, "mediaPreview").is_none()
            {
                return false;
            }
            let Some(p) = pick(rng, &sites(card).media) else {
                return false;
            };
            if rng.chance(0.2) {
                remove(card, &p, "kind")
            } else {
                let kind = *rng.pick(&["video", "pdf", "document", "Image"]);
                set(card, &p, "kind", json!(kind))
            }
        }
        Mutation::NotNonNegativeInteger => {
            if let Some(p) = pick(rng, &s.media) {
                if rng.chance(0.6) {
                    return if rng.chance(0.5) {
                        set(card, &p, "page", json!(-1))
                    } else {
                        set(card, &p, "pageCount", json!(2.5))
                    };
                }
            }
            let Some(f) = field_of_type(rng, card, &["number", "currency", "lineItems"]) else {
                return false;
            };
            let lines = card.pointer(&format!("{f}/type")) == Some(&json!("lineItems"));
            let key = if lines { "minRows" } else { "precision" };
            let value = rng.pick(&[json!(-1), json!(1.5), json!("2")]).clone();
            set(card, &f, key, value)
        }
        Mutation::Confidence => {
            if s.detail_rows.is_empty()
                && block_of_kind(rng, card, Kind::Details, "details").is_none()
            {
                return false;
            }
            let Some(p) = pick(rng, &sites(card).detail_rows) else {
                return false;
            };
            let value = rng
                .pick(&[
                    json!(97),
                    json!(1.2),
                    json!(-0.1),
                    json!("high"),
                    json!("0.9"),
                ])
                .clone();
            set(card, &p, "confidence", value)
        }
        Mutation::SecondActions => {
            let Some(p) =
                block_of_kind(rng, card, Kind::Actions(ActionsStyle::Approval), "actions")
            else {
                return false;
            };
            let Some(mut copy) = card.pointer(&p).cloned() else {
                return false;
            };
            // Fresh ids, so the only new complaint is the second block (and perhaps the total).
            if let Some(actions) = copy.get_mut("actions").and_then(Value::as_array_mut) {
                for a in actions.iter_mut().filter(|a| a.is_object()) {
                    let id = a
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or("x")
                        .to_owned();
                    a["id"] = json!(format!("{id}-again"));
                }
            }
            let Some(blocks) = card.get_mut("blocks").and_then(Value::as_array_mut) else {
                return false;
            };
            blocks.push(copy);
            true
        }
        Mutation::DuplicateId => {
            let actions_with_ids =
                |c: &Value, container: &str, key: &str| -> Option<(String, String)> {
                    let items = c.pointer(&format!("{container}/{key}"))?.as_array()?;
                    let first = items.first()?.get("id")?.as_str()?.to_owned();
                    (items.len() >= 2 && items[1].is_object())
                        .then(|| (format!("{container}/{key}/1"), first))
                };
            let mut spots = Vec::new();
            spots.extend(
                s.actions_blocks
                    .iter()
                    .filter_map(|b| actions_with_ids(card, b, "actions")),
            );
            spots.extend(
                s.actions
                    .iter()
                    .filter_map(|a| actions_with_ids(card, a, "fields")),
            );
            spots.extend(
                s.fields
                    .iter()
                    .filter_map(|(f, _)| actions_with_ids(card, f, "columns")),
            );
            if spots.is_empty() {
                return false;
            }
            let (p, id) = match choose(rng, &spots) {
                Some(spot) => spot,
                None => return false,
            };
            set(card, &p, "id", json!(id))
        }
        Mutation::TooManyActions => {
            let Some(b) =
                block_of_kind(rng, card, Kind::Actions(ActionsStyle::Approval), "actions")
            else {
                return false;
            };
            let Some(actions) = card
                .pointer_mut(&format!("{b}/actions"))
                .and_then(Value::as_array_mut)
            else {
                return false;
            };
            let want = 13 + rng.below(4);
            let mut n = actions.len();
            while actions.len() < want {
                n += 1;
                actions.push(json!({"id": format!("option-{n}"), "label": format!("Option {n}")}));
            }
            true
        }
        Mutation::DuplicateChoice => {
            let arrays: Vec<String> = s
                .choice_arrays
                .iter()
                .filter(|a| {
                    card.pointer(a)
                        .and_then(Value::as_array)
                        .is_some_and(|c| c.len() >= 2)
                })
                .cloned()
                .collect();
            let Some(a) = pick(rng, &arrays) else {
                return false;
            };
            let first = card
                .pointer(&format!("{a}/0"))
                .cloned()
                .unwrap_or(Value::Null);
            let key = first
                .get("value")
                .and_then(Value::as_str)
                .or_else(|| first.get("label").and_then(Value::as_str))
                .unwrap_or("x")
                .trim()
                .to_owned();
            // The copy differs only by surrounding spaces, which the key trims away.
            let copy = if rng.chance(0.5) {
                format!(" {key} ")
            } else {
                key
            };
            set(card, &format!("{a}/1"), "value", json!(copy))
        }
        Mutation::BadDate => {
            let bad = *rng.pick(&[
                "2024/01/31",
                "31-01-2024",
                "today",
                "2024-1-5",
                "2024-01-31T00:00",
            ]);
            let target = if rng.chance(0.7) {
                field_of_type(rng, card, &["date"])
            } else {
                column_of_type(rng, card, &["date"])
            };
            let Some(p) = target else { return false };
            set(
                card,
                &p,
                if rng.chance(0.5) { "min" } else { "max" },
                json!(bad),
            )
        }
        Mutation::InvertedBounds => {
            let Some(f) = field_of_type(rng, card, &["number", "currency", "date", "lineItems"])
            else {
                return false;
            };
            match card.pointer(&format!("{f}/type")).and_then(Value::as_str) {
                Some("date") => {
                    set(card, &f, "min", json!("2026-12-31"))
                        && set(card, &f, "max", json!("2026-01-01"))
                }
                Some("lineItems") => {
                    set(card, &f, "minRows", json!(10)) && set(card, &f, "maxRows", json!(5))
                }
                _ => set(card, &f, "min", json!(500)) && set(card, &f, "max", json!(100)),
            }
        }
        Mutation::ColumnType => {
            let Some(c) = column_of_type(rng, card, &["text", "number", "currency", "date"]) else {
                return false;
            };
            let t = *rng.pick(&["boolean", "checkbox", "email", "Text"]);
            set(card, &c, "type", json!(t))
        }
        Mutation::NotBoolean => {
            let value = rng
                .pick(&[json!("true"), json!(1), json!("yes"), json!(0), Value::Null])
                .clone();
            if !s.columns.is_empty() && rng.chance(0.3) {
                let (c, _) = choose(rng, &s.columns).unwrap_or_default();
                return set(card, &c, "required", value);
            }
            let Some(f) = field_of_type(rng, card, &["text", "select", "textarea"]) else {
                return false;
            };
            let key = *rng.pick(&["required", "allowOther", "sensitive"]);
            set(card, &f, key, value)
        }
        Mutation::SelectColumnChoices => {
            let Some(c) = column_of_type(rng, card, &["select", "text"]) else {
                return false;
            };
            set(card, &c, "type", json!("select")) && {
                remove(card, &c, "choices");
                true
            }
        }
        Mutation::FieldType => {
            let Some(f) = field_of_type(rng, card, &["text", "textarea", "select", "boolean"])
            else {
                return false;
            };
            let t = *rng.pick(&[
                "dropdown", "email", "checkbox", "radio", "string", "integer", "Text",
            ]);
            set(card, &f, "type", json!(t))
        }
        Mutation::MissingChoices => {
            let Some(f) = field_of_type(rng, card, &["select", "multiSelect", "searchSelect"])
            else {
                return false;
            };
            if rng.chance(0.7) {
                remove(card, &f, "choices")
            } else {
                set(card, &f, "choices", json!("Yes, No"))
            }
        }
        Mutation::BoundsOnWrongType => {
            let Some(f) = field_of_type(rng, card, &["text", "textarea", "select", "boolean"])
            else {
                return false;
            };
            set(
                card,
                &f,
                if rng.chance(0.5) { "min" } else { "max" },
                json!(10),
            )
        }
        Mutation::StepOnWrongType => {
            let Some(f) = field_of_type(rng, card, &["text", "date", "select"]) else {
                return false;
            };
            if rng.chance(0.5) {
                set(card, &f, "step", json!(1))
            } else {
                set(card, &f, "precision", json!(0))
            }
        }
        Mutation::CurrencyOnWrongType => {
            let Some(f) = field_of_type(rng, card, &["number", "text"]) else {
                return false;
            };
            set(card, &f, "currencyCode", json!("EUR"))
        }
        Mutation::MissingColumns => {
            let Some(f) = field_of_type(rng, card, &["lineItems"]) else {
                return false;
            };
            remove(card, &f, "columns")
        }
        Mutation::TooManyRows => {
            let Some(f) = field_of_type(rng, card, &["lineItems"]) else {
                return false;
            };
            let rows = *rng.pick(&[51, 100, 500]);
            set(card, &f, "maxRows", json!(rows))
        }
        Mutation::ColumnsOnWrongType => {
            let Some(f) = field_of_type(rng, card, &["text", "number", "select"]) else {
                return false;
            };
            if rng.chance(0.5) {
                set(card, &f, "minRows", json!(1))
            } else {
                set(
                    card,
                    &f,
                    "columns",
                    json!([{"id": "sku", "label": "SKU", "type": "text"}]),
                )
            }
        }
    }
}

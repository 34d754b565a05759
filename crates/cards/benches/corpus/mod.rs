//! A deterministic corpus of canon.card.v1 cards as a server meets them: valid cards built from
//! a dozen card templates over every block kind and field type, and about a quarter of them
//! mutated into invalid cards, with mistakes covering every message template of the validator.
//! Sizes follow a long-tailed mix from a 150-byte notice to the 32 KiB cap, with a few cards
//! beyond it (cards.md §11).
//!
//! The corpus is a function of the seed alone: the generator draws from its own SplitMix64
//! stream (no `rand`, no floating-point library calls), so every run and every machine build the
//! same cards. It is shared by the `card_corpus` bench and the `card_corpus` example, which
//! writes it as JSON lines for the reference measurement (`scripts/bench-cards-reference.sh`).
//!
//! The corpus avoids the inputs where cards.py 0.14.1 and the normative validator disagree
//! (cards.md §15: U+FEFF and U+001C–U+001F or U+0085 in strings, ids ending in a newline,
//! non-ASCII digits, array-index keys, non-string block kinds beyond null and small integers,
//! integral or exponent-form floats), so both validators give identical verdicts on every card.

mod mutate;

use serde_json::{json, Map, Value};

pub(crate) use mutate::Mutation;

/// The seed of the committed corpus.
pub(crate) const SEED: u64 = 0x0018_ca7d_c0a9_5eed;
/// Number of cards in the committed corpus.
pub(crate) const COUNT: usize = 5_000;
/// Cards of at least this many bytes form the "large" subset (5 KB up to the biggest card).
pub(crate) const LARGE_BYTES: usize = 5_000;
/// The size cap (cards.md §11).
const CAP: usize = canon_cards::MAX_CARD_BYTES;

/// One generated card.
pub(crate) struct CorpusCard {
    /// The card as compact JSON: the bytes a server parses. Every number is an integer or a
    /// short decimal, so this is also the `JSON.stringify` length of cards.md §11.
    pub(crate) text: String,
    /// The mutations applied to a valid card, in order; empty for a card meant to be valid
    /// (a card beyond the size cap also counts as mutated, by [`Mutation::Oversize`]).
    pub(crate) mutations: Vec<Mutation>,
}

impl CorpusCard {
    /// Whether the generator meant this card to be valid.
    pub(crate) fn intended_valid(&self) -> bool {
        self.mutations.is_empty()
    }
}

/// Builds `count` cards from `seed`.
pub(crate) fn generate(seed: u64, count: usize) -> Vec<CorpusCard> {
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|_| {
            let (card, mutations) = one_card(&mut rng);
            let text = serde_json::to_string(&card).expect("a JSON value always serializes");
            CorpusCard { text, mutations }
        })
        .collect()
}

fn one_card(rng: &mut Rng) -> (Value, Vec<Mutation>) {
    let class = size_class(rng);
    let target = rng.range(class.lo, class.hi);
    let beyond = class.lo > CAP;
    let template = pick_template(rng, target);
    let mut card = build_card(rng, template, target, beyond);
    let mut mutations = Vec::new();
    if beyond {
        mutations.push(Mutation::Oversize);
    }
    // About a quarter of the cards carry mistakes: most one, some two or three.
    if rng.chance(0.25) {
        let wanted = match rng.below(10) {
            0..=6 => 1,
            7..=8 => 2,
            _ => 3,
        };
        for _ in 0..wanted {
            if let Some(m) = mutate::apply_random(rng, &mut card) {
                mutations.push(m);
            }
        }
    }
    (card, mutations)
}

// ---- sizes ---------------------------------------------------------------------------------

/// A range of target sizes in bytes (`lo..=hi`) and its weight in tenths of a percent.
struct SizeClass {
    lo: usize,
    hi: usize,
    weight: usize,
}

const fn class(lo: usize, hi: usize, weight: usize) -> SizeClass {
    SizeClass { lo, hi, weight }
}

/// Target serialized sizes: a long tail with the median near 1.2 KB, about an eighth of the
/// cards at 5 KB or more and about 1% beyond the 32 KiB cap. The builders aim at a target and
/// may overshoot it a little; [`stats`] reports what came out.
const SIZE_CLASSES: [SizeClass; 10] = [
    class(150, 400, 160),
    class(400, 800, 230),
    class(800, 1_200, 190),
    class(1_200, 2_000, 130),
    class(2_000, 3_500, 90),
    class(3_500, 5_000, 70),
    class(5_000, 10_000, 60),
    class(10_000, 20_000, 30),
    class(20_000, CAP, 30),
    class(CAP + 500, 66_000, 10),
];

fn size_class(rng: &mut Rng) -> &'static SizeClass {
    let total: usize = SIZE_CLASSES.iter().map(|c| c.weight).sum();
    let mut roll = rng.below(total);
    for class in &SIZE_CLASSES {
        if roll < class.weight {
            return class;
        }
        roll -= class.weight;
    }
    &SIZE_CLASSES[0]
}

// ---- templates -----------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Summary,
    Callout,
    MetricGrid,
    Chart,
    Table,
    List,
    MediaPreview,
    Details,
    Actions(ActionsStyle),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ActionsStyle {
    /// A few decisions, the first sometimes with a handful of fields.
    Approval,
    /// One submit action with up to eight fields of every type.
    Form,
    /// An expense-style action with a `lineItems` field.
    LineItems,
    /// A `searchSelect` picker with many choices.
    Picker,
}

/// A card template: the blocks it always has (with their share of the byte budget) and the
/// kinds it adds when the budget is larger than those blocks can hold.
struct Template {
    name: &'static str,
    min_target: usize,
    core: &'static [(Kind, usize)],
    filler: &'static [Kind],
}

const TEMPLATES: [Template; 12] = [
    Template {
        name: "notice.info",
        min_target: 0,
        core: &[(Kind::Summary, 1)],
        filler: &[Kind::Summary, Kind::Callout],
    },
    Template {
        name: "alert.callout",
        min_target: 0,
        core: &[(Kind::Callout, 1)],
        filler: &[Kind::Callout, Kind::Summary, Kind::List],
    },
    Template {
        name: "supplier.check",
        min_target: 300,
        core: &[(Kind::Summary, 1), (Kind::Details, 2)],
        filler: &[Kind::Details, Kind::Callout],
    },
    Template {
        name: "status.digest",
        min_target: 400,
        core: &[(Kind::List, 3), (Kind::Summary, 1), (Kind::Callout, 1)],
        filler: &[Kind::List, Kind::Summary, Kind::MetricGrid],
    },
    Template {
        name: "data.table",
        min_target: 600,
        core: &[(Kind::Summary, 1), (Kind::Table, 5), (Kind::Chart, 2)],
        filler: &[Kind::Table, Kind::Summary],
    },
    Template {
        name: "invoice.approval",
        min_target: 700,
        core: &[
            (Kind::Summary, 1),
            (Kind::Details, 3),
            (Kind::MetricGrid, 2),
            (Kind::Actions(ActionsStyle::Approval), 3),
        ],
        filler: &[Kind::Details, Kind::Summary],
    },
    Template {
        name: "document.review",
        min_target: 700,
        core: &[
            (Kind::MediaPreview, 1),
            (Kind::Details, 2),
            (Kind::Actions(ActionsStyle::Approval), 2),
        ],
        filler: &[Kind::MediaPreview, Kind::Summary, Kind::Details],
    },
    Template {
        name: "incident.update",
        min_target: 800,
        core: &[
            (Kind::Callout, 1),
            (Kind::List, 2),
            (Kind::Details, 2),
            (Kind::Actions(ActionsStyle::Approval), 2),
        ],
        filler: &[Kind::List, Kind::Summary, Kind::Callout],
    },
    Template {
        name: "deploy.report",
        min_target: 900,
        core: &[
            (Kind::Summary, 1),
            (Kind::Chart, 3),
            (Kind::MetricGrid, 2),
            (Kind::List, 2),
        ],
        filler: &[Kind::Chart, Kind::List, Kind::Summary],
    },
    Template {
        name: "expense.report",
        min_target: 900,
        core: &[
            (Kind::Summary, 1),
            (Kind::Actions(ActionsStyle::LineItems), 4),
        ],
        filler: &[Kind::Details, Kind::Table, Kind::Summary],
    },
    Template {
        name: "form.request",
        min_target: 900,
        core: &[(Kind::Summary, 1), (Kind::Actions(ActionsStyle::Form), 5)],
        filler: &[Kind::Summary, Kind::Details, Kind::Callout],
    },
    Template {
        name: "picker.search",
        min_target: 900,
        core: &[(Kind::Summary, 1), (Kind::Actions(ActionsStyle::Picker), 4)],
        filler: &[Kind::Summary, Kind::List],
    },
];

fn pick_template(rng: &mut Rng, target: usize) -> &'static Template {
    let fitting: Vec<&Template> = TEMPLATES
        .iter()
        .filter(|t| t.min_target <= target)
        .collect();
    fitting[rng.below(fitting.len())]
}

// ---- cards ---------------------------------------------------------------------------------

fn len_of(value: &Value) -> usize {
    serde_json::to_string(value).map_or(0, |s| s.len())
}

fn build_card(rng: &mut Rng, template: &Template, target: usize, beyond: bool) -> Value {
    let mut card = Map::new();
    card.insert("schema".into(), json!("canon.card.v1"));
    if rng.chance(0.6) {
        card.insert("cardId".into(), json!(card_id(rng, template.name)));
    }
    if rng.chance(0.85) {
        card.insert("template".into(), json!(template.name));
    }
    if rng.chance(0.35) {
        card.insert("tone".into(), json!(rng.pick(&TONES)));
    }
    let title_units = rng.range(12, if target > 2_000 { 110 } else { 70 });
    card.insert("title".into(), json!(text(rng, title_units)));
    let fallback_units = (target / 12).clamp(30, 480);
    let fallback_units = rng.range(fallback_units / 2, fallback_units);
    card.insert("fallbackText".into(), json!(text(rng, fallback_units)));
    // `"blocks":[]` plus its comma.
    let header = len_of(&Value::Object(card.clone())) + 12;

    let mut blocks: Vec<Value> = Vec::new();
    let mut size = header;
    let mut budget_left = target.saturating_sub(header).max(80);
    let weights: usize = template.core.iter().map(|&(_, w)| w).sum();
    let core_budget = budget_left;
    for &(kind, weight) in template.core {
        let budget = (core_budget * weight / weights).max(60);
        let block = build_block(rng, kind, budget, beyond);
        size += len_of(&block) + 1;
        blocks.push(block);
    }
    budget_left = target.saturating_sub(size);
    let max_blocks = canon_cards::RUNTIME_CARD_LIMITS.blocks;
    while size + 60 < target && blocks.len() < max_blocks {
        // Past the cap, big tables make up what the template's own kinds cannot hold.
        let kind = if beyond && rng.chance(0.5) {
            Kind::Table
        } else {
            *rng.pick(template.filler)
        };
        let budget = budget_left.min(if beyond { 30_000 } else { 8_000 });
        let block = build_block(rng, kind, budget, beyond);
        size += len_of(&block) + 1;
        budget_left = target.saturating_sub(size);
        blocks.push(block);
    }
    if beyond && size <= CAP + 500 {
        blocks.pop();
        blocks.push(build_block(rng, Kind::Table, 30_000, true));
    }
    // Past the cap, no bigger than the top of the largest size class (about 66 KB).
    while beyond && blocks.len() > 1 && size > 66_000 {
        let last = blocks.pop().map_or(0, |b| len_of(&b) + 1);
        size -= last;
        if size <= CAP + 500 {
            blocks.push(build_block(rng, Kind::Summary, 2_000, true));
            break;
        }
    }
    card.insert("blocks".into(), Value::Array(blocks));
    let mut card = Value::Object(card);
    if !beyond {
        // A card meant to be valid stays within the cap: drop trailing blocks that overshoot.
        while len_of(&card) > CAP {
            let Some(blocks) = card["blocks"].as_array_mut() else {
                break;
            };
            if blocks.len() <= 1 {
                break;
            }
            blocks.pop();
        }
    }
    card
}

fn card_id(rng: &mut Rng, template: &str) -> String {
    format!(
        "{template}:{}-{}",
        rng.pick(&ID_PREFIXES),
        rng.range(1_000, 99_999)
    )
}

fn build_block(rng: &mut Rng, kind: Kind, budget: usize, beyond: bool) -> Value {
    let mut block = Map::new();
    let name = match kind {
        Kind::Summary => "summary",
        Kind::Callout => "callout",
        Kind::MetricGrid => "metricGrid",
        Kind::Chart => "chart",
        Kind::Table => "table",
        Kind::List => "list",
        Kind::MediaPreview => "mediaPreview",
        Kind::Details => "details",
        Kind::Actions(_) => "actions",
    };
    block.insert("kind".into(), json!(name));
    let titled = match kind {
        Kind::Summary | Kind::Callout => rng.chance(0.4),
        _ => rng.chance(0.7),
    };
    if titled {
        let units = rng.range(6, 40);
        block.insert("title".into(), json!(text(rng, units)));
    }
    match kind {
        Kind::Summary => {
            let units = budget.saturating_sub(40).clamp(12, 2_000);
            let units = rng.range(units * 3 / 4, units);
            block.insert("text".into(), json!(text(rng, units)));
        }
        Kind::Callout => {
            let units = budget.saturating_sub(50).clamp(12, 1_000);
            let units = rng.range(units * 3 / 4, units);
            block.insert("text".into(), json!(text(rng, units)));
            if rng.chance(0.7) {
                block.insert("tone".into(), json!(rng.pick(&TONES)));
            }
        }
        Kind::MetricGrid => {
            let n = (budget / 80).clamp(1, 12);
            let metrics = (0..n).map(|_| metric(rng)).collect();
            block.insert("metrics".into(), Value::Array(metrics));
        }
        Kind::Chart => {
            block.insert(
                "chart".into(),
                json!(if rng.chance(0.6) { "line" } else { "bar" }),
            );
            if rng.chance(0.5) {
                let units = rng.range(4, 30);
                block.insert("yLabel".into(), json!(text(rng, units)));
            }
            let points = (budget / 24).clamp(2, 144);
            let series_count = rng
                .range(1, 6)
                .min(points.div_ceil(2))
                .max(points.div_ceil(24));
            let per = (points / series_count).clamp(1, 24);
            let series = (0..series_count).map(|s| series(rng, s, per)).collect();
            block.insert("series".into(), Value::Array(series));
        }
        Kind::Table => {
            // The largest budgets get a full 24 x 8 table.
            let full = budget >= 30_000;
            let columns = if full { 8 } else { rng.range(2, 8) };
            let cap = if beyond { 160 } else { 120 };
            let rows_wanted = if full { 24 } else { rng.range(3, 24) };
            // Spread the budget over the cells; long cells when the budget is large.
            let cell_units = (budget / (rows_wanted * columns).max(1))
                .saturating_sub(3)
                .clamp(3, cap);
            let headers = (0..columns)
                .map(|_| {
                    let units = rng.range(3, 24);
                    json!(text(rng, units))
                })
                .collect();
            let rows = (0..rows_wanted)
                .map(|_| {
                    let cells = (0..columns).map(|_| cell(rng, cell_units)).collect();
                    Value::Array(cells)
                })
                .collect();
            block.insert("columns".into(), Value::Array(headers));
            block.insert("rows".into(), Value::Array(rows));
        }
        Kind::List => {
            let n = (budget / 90).clamp(1, 24);
            let detail_units = (budget / n).saturating_sub(60).clamp(10, 300);
            let items = (0..n).map(|_| list_item(rng, detail_units)).collect();
            block.insert("items".into(), Value::Array(items));
        }
        Kind::MediaPreview => {
            if rng.chance(0.8) {
                let units = rng.range(20, 200);
                block.insert("fallbackText".into(), json!(text(rng, units)));
            }
            block.insert("media".into(), media(rng));
        }
        Kind::Details => {
            let n = (budget / 90).clamp(1, 32);
            let value_units = (budget / n).saturating_sub(60).clamp(4, 300);
            let rows = (0..n).map(|_| details_row(rng, value_units)).collect();
            block.insert("rows".into(), Value::Array(rows));
        }
        Kind::Actions(style) => {
            block.insert("actions".into(), Value::Array(actions(rng, style, budget)));
        }
    }
    Value::Object(block)
}

fn metric(rng: &mut Rng) -> Value {
    let mut m = Map::new();
    let units = rng.range(3, 30);
    m.insert("label".into(), json!(text(rng, units)));
    m.insert("value".into(), json!(figure(rng)));
    if rng.chance(0.5) {
        m.insert(
            "delta".into(),
            json!(format!(
                "{:+}.{} %",
                rng.range(0, 40) as i64 - 20,
                rng.below(10)
            )),
        );
    }
    if rng.chance(0.4) {
        m.insert("tone".into(), json!(rng.pick(&TONES)));
    }
    Value::Object(m)
}

fn series(rng: &mut Rng, index: usize, points: usize) -> Value {
    let mut s = Map::new();
    if rng.chance(0.8) {
        s.insert(
            "name".into(),
            json!(format!("{} {}", rng.pick(&WORDS), index + 1)),
        );
    }
    let mut level = rng.range(10, 500) as f64;
    let pts = (0..points)
        .map(|i| {
            level += (rng.range(0, 200) as f64 - 100.0) / 10.0;
            json!({"x": point_label(i), "y": decimal(level, rng.below(3))})
        })
        .collect();
    s.insert("points".into(), Value::Array(pts));
    Value::Object(s)
}

fn point_label(i: usize) -> String {
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    if i < 7 {
        DAYS[i].to_owned()
    } else {
        format!("W{}", i + 1)
    }
}

fn cell(rng: &mut Rng, units: usize) -> Value {
    if units <= 12 && rng.chance(0.5) {
        return json!(figure(rng));
    }
    let units = rng.range((units / 2).max(1), units);
    json!(text(rng, units))
}

fn list_item(rng: &mut Rng, detail_units: usize) -> Value {
    let mut item = Map::new();
    let units = rng.range(6, 60);
    item.insert("label".into(), json!(text(rng, units)));
    if rng.chance(0.7) {
        let units = rng.range(detail_units / 2, detail_units);
        item.insert("detail".into(), json!(text(rng, units.max(4))));
    }
    if rng.chance(0.7) {
        item.insert("status".into(), json!(rng.pick(&STATUSES)));
    }
    Value::Object(item)
}

fn media(rng: &mut Rng) -> Value {
    let image = rng.chance(0.5);
    let stem = format!("{}-{}", rng.pick(&WORDS), rng.range(100, 99_999));
    let (ext, mime) = if image {
        ("png", "image/png")
    } else {
        ("pdf", "application/pdf")
    };
    let mut m = Map::new();
    m.insert("kind".into(), json!(if image { "image" } else { "file" }));
    let base = format!(
        "https://files.canon.example/conversations/c{}/uploads/{}",
        rng.range(10_000, 99_999),
        rng.range(1_000_000, 9_999_999)
    );
    m.insert("url".into(), json!(format!("{base}/{stem}.{ext}")));
    m.insert("mimeType".into(), json!(mime));
    if rng.chance(0.8) {
        m.insert("fileName".into(), json!(format!("{stem}.{ext}")));
    }
    if rng.chance(0.5) {
        m.insert("thumbnailUrl".into(), json!(format!("{base}/thumb.png")));
    }
    if !image && rng.chance(0.6) {
        let count = rng.range(1, 40);
        m.insert("page".into(), json!(rng.range(1, count)));
        m.insert("pageCount".into(), json!(count));
    }
    Value::Object(m)
}

fn details_row(rng: &mut Rng, value_units: usize) -> Value {
    let mut row = Map::new();
    let units = rng.range(4, 40);
    row.insert("label".into(), json!(text(rng, units)));
    let value = if rng.chance(0.4) {
        figure(rng)
    } else {
        let units = rng.range((value_units / 2).max(2), value_units);
        text(rng, units)
    };
    row.insert("value".into(), json!(value));
    if rng.chance(0.3) {
        row.insert("tone".into(), json!(rng.pick(&TONES)));
    }
    if rng.chance(0.5) {
        row.insert("confidence".into(), confidence(rng));
    }
    if rng.chance(0.2) {
        let units = rng.range(10, 150);
        row.insert("hint".into(), json!(text(rng, units)));
    }
    Value::Object(row)
}

/// A confidence in [0, 1] written as JSON.parse and Python print it alike.
fn confidence(rng: &mut Rng) -> Value {
    match rng.below(20) {
        0 => json!(1),
        1 => json!(0),
        _ => decimal(rng.range(50, 99) as f64 / 100.0, 2),
    }
}

// ---- actions and fields ------------------------------------------------------------------

fn actions(rng: &mut Rng, style: ActionsStyle, budget: usize) -> Vec<Value> {
    let mut ids = shuffled(rng, &ACTION_IDS);
    let mut out = Vec::new();
    let mut action = |rng: &mut Rng, fields: Vec<Value>| {
        let id = ids.pop().unwrap_or("extra");
        let mut a = Map::new();
        a.insert("id".into(), json!(id));
        let units = rng.range(4, 40);
        a.insert("label".into(), json!(text(rng, units)));
        if rng.chance(0.7) {
            a.insert("tone".into(), json!(rng.pick(&TONES)));
        }
        if !fields.is_empty() {
            a.insert("fields".into(), Value::Array(fields));
        }
        Value::Object(a)
    };
    match style {
        ActionsStyle::Approval => {
            let n = rng.range(2, 4);
            let fields = if rng.chance(0.5) {
                let k = rng.range(1, 3);
                let types = shuffled(
                    rng,
                    &["currency", "select", "text", "textarea", "date", "boolean"],
                );
                types
                    .iter()
                    .take(k)
                    .enumerate()
                    .map(|(i, t)| field(rng, t, i, budget / 4))
                    .collect()
            } else {
                Vec::new()
            };
            out.push(action(rng, fields));
            for _ in 1..n {
                out.push(action(rng, Vec::new()));
            }
        }
        ActionsStyle::Form => {
            let k = (budget / 150).clamp(3, 8);
            let mut types = shuffled(rng, &FIELD_TYPES);
            types.truncate(k);
            let choice_budget = budget / k;
            let fields = types
                .iter()
                .enumerate()
                .map(|(i, t)| field(rng, t, i, choice_budget))
                .collect();
            out.push(action(rng, fields));
            if rng.chance(0.6) {
                out.push(action(rng, Vec::new()));
            }
        }
        ActionsStyle::LineItems => {
            let mut fields = vec![field(rng, "lineItems", 0, budget / 2)];
            for (i, t) in ["date", "text", "boolean"].iter().enumerate() {
                if rng.chance(0.5) {
                    fields.push(field(rng, t, i + 1, budget / 8));
                }
            }
            out.push(action(rng, fields));
            for _ in 0..rng.range(0, 2) {
                out.push(action(rng, Vec::new()));
            }
        }
        ActionsStyle::Picker => {
            let mut fields = vec![field(rng, "searchSelect", 0, budget.saturating_sub(200))];
            if rng.chance(0.5) {
                fields.push(field(rng, "textarea", 1, 0));
            }
            out.push(action(rng, fields));
            out.push(action(rng, Vec::new()));
        }
    }
    out
}

fn field(rng: &mut Rng, field_type: &str, index: usize, budget: usize) -> Value {
    let mut f = Map::new();
    f.insert(
        "id".into(),
        json!(format!("{}_{index}", rng.pick(&FIELD_NAMES))),
    );
    let units = rng.range(3, 40);
    f.insert("label".into(), json!(text(rng, units)));
    f.insert("type".into(), json!(field_type));
    if rng.chance(0.5) {
        f.insert("required".into(), json!(rng.chance(0.7)));
    }
    match field_type {
        "text" | "textarea" => {
            if rng.chance(0.6) {
                let units = rng.range(6, 60);
                f.insert("placeholder".into(), json!(text(rng, units)));
            }
            if rng.chance(0.1) {
                f.insert("sensitive".into(), json!(true));
            }
        }
        "select" | "multiSelect" | "searchSelect" => {
            let limit = if field_type == "searchSelect" {
                100
            } else {
                12
            };
            let n = (budget / 45).clamp(2, limit);
            f.insert("choices".into(), Value::Array(choices(rng, n)));
            if rng.chance(0.3) {
                f.insert("allowOther".into(), json!(rng.chance(0.5)));
            }
        }
        "date" if rng.chance(0.6) => {
            let (lo, hi) = date_bounds(rng);
            f.insert("min".into(), json!(lo));
            f.insert("max".into(), json!(hi));
        }
        "number" | "currency" => {
            if rng.chance(0.7) {
                f.insert("min".into(), json!(0));
            }
            if rng.chance(0.6) {
                f.insert(
                    "max".into(),
                    decimal(rng.range(10, 100_000) as f64 + 0.5, 1),
                );
            }
            if rng.chance(0.5) {
                f.insert("step".into(), json!(0.01));
                f.insert("precision".into(), json!(2));
            }
            if field_type == "currency" {
                f.insert("currencyCode".into(), json!(rng.pick(&CURRENCIES)));
            }
        }
        "lineItems" => {
            let n = (budget / 70).clamp(2, 8);
            let columns = (0..n).map(|c| line_item_column(rng, c)).collect();
            f.insert("columns".into(), Value::Array(columns));
            if rng.chance(0.7) {
                let max = rng.range(5, 50);
                f.insert("minRows".into(), json!(rng.range(0, 2).min(max)));
                f.insert("maxRows".into(), json!(max));
            }
        }
        _ => {}
    }
    Value::Object(f)
}

fn line_item_column(rng: &mut Rng, index: usize) -> Value {
    const COLUMN_TYPES: [&str; 5] = ["text", "number", "currency", "date", "select"];
    let column_type = if index == 0 {
        "text"
    } else {
        *rng.pick(&COLUMN_TYPES)
    };
    let mut c = Map::new();
    c.insert(
        "id".into(),
        json!(format!("{}_{index}", rng.pick(&FIELD_NAMES))),
    );
    let units = rng.range(3, 30);
    c.insert("label".into(), json!(text(rng, units)));
    c.insert("type".into(), json!(column_type));
    if rng.chance(0.5) {
        c.insert("required".into(), json!(rng.chance(0.5)));
    }
    match column_type {
        "select" => {
            let n = rng.range(2, 12);
            c.insert("choices".into(), Value::Array(choices(rng, n)));
        }
        "number" | "currency" => {
            if rng.chance(0.6) {
                c.insert("min".into(), json!(0));
                c.insert("step".into(), json!(0.01));
                c.insert("precision".into(), json!(2));
            }
            if column_type == "currency" {
                c.insert("currencyCode".into(), json!(rng.pick(&CURRENCIES)));
            }
        }
        "date" if rng.chance(0.5) => {
            let (lo, hi) = date_bounds(rng);
            c.insert("min".into(), json!(lo));
            c.insert("max".into(), json!(hi));
        }
        _ => {}
    }
    Value::Object(c)
}

fn choices(rng: &mut Rng, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let mut c = Map::new();
            // Labels and values carry the index, so choices never collide by accident.
            let units = rng.range(3, 40);
            c.insert(
                "label".into(),
                json!(format!("{} {}", text(rng, units), i + 1)),
            );
            if rng.chance(0.7) {
                c.insert(
                    "value".into(),
                    json!(format!("{}-{}", rng.pick(&WORDS), i + 1)),
                );
            }
            if rng.chance(0.25) {
                let units = rng.range(10, 120);
                c.insert("description".into(), json!(text(rng, units)));
            }
            if rng.chance(0.03) {
                let units = rng.range(40, 400);
                c.insert("preview".into(), json!(text(rng, units)));
            }
            Value::Object(c)
        })
        .collect()
}

fn date_bounds(rng: &mut Rng) -> (String, String) {
    let year = rng.range(2024, 2027);
    let lo = format!("{year}-{:02}-{:02}", rng.range(1, 6), rng.range(1, 28));
    let hi = format!(
        "{}-{:02}-{:02}",
        year + rng.range(0, 1),
        rng.range(7, 12),
        rng.range(1, 28)
    );
    (lo, hi)
}

// ---- scalars ---------------------------------------------------------------------------------

/// `x` rounded to `places` decimals, as an integer when it has none, so JavaScript and Python
/// print it the same way (cards.md §11: `1.0` would be one byte for JS and three for Python).
fn decimal(x: f64, places: usize) -> Value {
    let scale = [1.0, 10.0, 100.0][places.min(2)];
    let r = (x * scale).round() / scale;
    if r.fract() == 0.0 {
        json!(r as i64)
    } else {
        json!(r)
    }
}

/// A figure as people write them in cards: `€18,420.50`, `97 %`, `1.4 s`, `3 of 14`.
fn figure(rng: &mut Rng) -> String {
    let n = rng.range(1, 99_999);
    match rng.below(6) {
        0 => format!("€{},{:03}.{:02}", n / 1000, n % 1000, rng.below(100)),
        1 => format!("{} %", n % 100),
        2 => format!("{}.{} s", n % 60, rng.below(10)),
        3 => format!("{} of {}", n % 14, 14),
        4 => format!("{} {}", n, rng.pick(&CURRENCIES)),
        _ => format!("{n}"),
    }
}

const WORDS: [&str; 64] = [
    "invoice",
    "supplier",
    "amount",
    "approved",
    "pending",
    "review",
    "shipment",
    "quarter",
    "revenue",
    "forecast",
    "budget",
    "contract",
    "renewal",
    "payment",
    "schedule",
    "customer",
    "account",
    "balance",
    "report",
    "deployment",
    "service",
    "latency",
    "error",
    "rate",
    "region",
    "incident",
    "ticket",
    "owner",
    "deadline",
    "total",
    "net",
    "order",
    "delivery",
    "warehouse",
    "inventory",
    "price",
    "discount",
    "margin",
    "target",
    "team",
    "project",
    "milestone",
    "release",
    "build",
    "coverage",
    "policy",
    "audit",
    "risk",
    "update",
    "document",
    "the",
    "and",
    "for",
    "with",
    "from",
    "to",
    "of",
    "in",
    "on",
    "by",
    "needs",
    "ready",
    "matched",
    "flagged",
];

/// Words that exercise UTF-16 counting, multi-byte UTF-8 and JSON escapes.
const EXOTIC: [&str; 16] = [
    "Zürich",
    "café",
    "naïve",
    "→",
    "日本語の請求書",
    "Ελλάδα",
    "שלום",
    "😀",
    "✓",
    "Müller",
    "São Paulo",
    "Kraków",
    "½",
    "“quoted”",
    "\"quoted\"",
    "C:\\exports\\q3",
];

const TONES: [&str; 8] = [
    "neutral", "primary", "positive", "warning", "negative", "danger", "critical", "welcome",
];
const STATUSES: [&str; 4] = ["pending", "done", "blocked", "warning"];
const FIELD_TYPES: [&str; 10] = [
    "text",
    "textarea",
    "select",
    "multiSelect",
    "boolean",
    "date",
    "number",
    "currency",
    "searchSelect",
    "lineItems",
];
const CURRENCIES: [&str; 5] = ["EUR", "USD", "ILS", "GBP", "JPY"];
const ACTION_IDS: [&str; 10] = [
    "approve",
    "reject",
    "request-changes",
    "escalate",
    "snooze",
    "acknowledge",
    "submit",
    "cancel",
    "approve_adjusted",
    "hold",
];
const FIELD_NAMES: [&str; 10] = [
    "amount",
    "note",
    "costCenter",
    "dueDate",
    "reason",
    "owner",
    "quantity",
    "lines",
    "region",
    "confirm",
];
const ID_PREFIXES: [&str; 5] = ["INV", "PO", "INC", "DOC", "REQ"];

/// Free text of exactly `units` UTF-16 code units (cards.md §2.4), never blank: words with an
/// occasional non-ASCII word, quote or backslash, and now and then a line break.
fn text(rng: &mut Rng, units: usize) -> String {
    let units = units.max(1);
    let mut out = String::with_capacity(units + 8);
    let mut len = 0usize;
    let mut first = true;
    while len < units {
        if !first {
            let sep = if rng.chance(0.01) { "\n" } else { " " };
            out.push_str(sep);
            len += 1;
        }
        let word = if !first && rng.chance(0.06) {
            *rng.pick(&EXOTIC)
        } else {
            *rng.pick(&WORDS)
        };
        out.push_str(word);
        len += word.encode_utf16().count();
        first = false;
    }
    // Cut back to `units` on a character boundary, then pad with ASCII if an astral character
    // straddled the cut.
    while len > units {
        let c = out.pop().expect("len > 0 implies a character");
        len -= c.len_utf16();
    }
    while len < units {
        out.push('x');
        len += 1;
    }
    if out.ends_with(char::is_whitespace) {
        out.pop();
        out.push('.');
    }
    out
}

fn shuffled<T: Copy>(rng: &mut Rng, items: &[T]) -> Vec<T> {
    let mut v = items.to_vec();
    for i in (1..v.len()).rev() {
        let j = rng.below(i + 1);
        v.swap(i, j);
    }
    v
}

// ---- random numbers ------------------------------------------------------------------------

/// SplitMix64: a tiny, well-mixed, seedable stream; integer arithmetic only.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        if hi <= lo {
            return lo;
        }
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64) < p * (1u64 << 53) as f64
    }

    fn pick<'t, T>(&mut self, items: &'t [T]) -> &'t T {
        &items[self.below(items.len())]
    }
}

// ---- description -------------------------------------------------------------------------

/// What a corpus holds, for the bench's and the example's report.
pub(crate) struct Stats {
    pub(crate) count: usize,
    pub(crate) invalid: usize,
    pub(crate) total_bytes: usize,
    pub(crate) median_bytes: usize,
    pub(crate) max_bytes: usize,
    pub(crate) large: usize,
    pub(crate) large_bytes: usize,
    pub(crate) beyond_cap: usize,
}

pub(crate) fn stats(cards: &[CorpusCard]) -> Stats {
    let mut sizes: Vec<usize> = cards.iter().map(|c| c.text.len()).collect();
    sizes.sort_unstable();
    let large: Vec<usize> = sizes
        .iter()
        .copied()
        .filter(|&s| s >= LARGE_BYTES)
        .collect();
    Stats {
        count: cards.len(),
        invalid: cards.iter().filter(|c| !c.intended_valid()).count(),
        total_bytes: sizes.iter().sum(),
        median_bytes: sizes.get(sizes.len() / 2).copied().unwrap_or(0),
        max_bytes: sizes.last().copied().unwrap_or(0),
        large: large.len(),
        large_bytes: large.iter().sum(),
        beyond_cap: sizes.iter().filter(|&&s| s > CAP).count(),
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} cards, {:.2} MB; {} invalid ({:.1}%); size median {} B, max {} B; \
             {} large (>= {} B, {:.2} MB); {} beyond the {} B cap",
            self.count,
            self.total_bytes as f64 / 1e6,
            self.invalid,
            100.0 * self.invalid as f64 / self.count.max(1) as f64,
            self.median_bytes,
            self.max_bytes,
            self.large,
            LARGE_BYTES,
            self.large_bytes as f64 / 1e6,
            self.beyond_cap,
            CAP,
        )
    }
}

/// Validates every card once and checks that the generator did what it says: cards meant to be
/// valid pass, mutated cards fail, every block kind and field type occurs, and every message
/// template (cards.md §14, except the Python-only M02) is produced by a card that was mutated
/// to produce it. Returns a description of the problems (empty when there are none).
pub(crate) fn self_check(cards: &[CorpusCard]) -> Vec<String> {
    use canon_cards::vocab::{messages, BLOCK_KINDS, FIELD_TYPES as VOCAB_FIELD_TYPES};
    let mut problems = Vec::new();
    let mut produced = std::collections::BTreeSet::new();
    for (i, card) in cards.iter().enumerate() {
        let value: Value = serde_json::from_str(&card.text).expect("generated text is JSON");
        let verdict = canon_cards::validate_card(&value);
        if verdict.ok != card.intended_valid() {
            problems.push(format!(
                "card {i}: meant {} but validated {:?} (mutations {:?})",
                if card.intended_valid() {
                    "valid"
                } else {
                    "invalid"
                },
                verdict.errors,
                card.mutations
            ));
        }
        for m in &card.mutations {
            let id = m.template();
            let template = messages::TEMPLATES
                .iter()
                .find(|(t, _)| *t == id)
                .map(|(_, text)| *text)
                .expect("mutations name registry templates");
            if verdict.errors.iter().any(|e| template_matches(template, e)) {
                produced.insert(id);
            }
        }
    }
    for (id, _) in messages::TEMPLATES.iter() {
        if !messages::PYTHON_ONLY.contains(id) && !produced.contains(id) {
            problems.push(format!("no card produces template {id}"));
        }
    }
    let all_text: String = cards.iter().map(|c| c.text.as_str()).collect();
    for kind in BLOCK_KINDS {
        if !all_text.contains(&format!("\"kind\":\"{kind}\"")) {
            problems.push(format!("no block of kind {kind}"));
        }
    }
    for field_type in VOCAB_FIELD_TYPES {
        if !all_text.contains(&format!("\"type\":\"{field_type}\"")) {
            problems.push(format!("no field of type {field_type}"));
        }
    }
    problems
}

/// Whether `message` is an instance of `template`: literal text must match exactly; `{path}`,
/// `{lower}` and `{upper}` stand for a path (`card` then no spaces), `{max}` and `{count}` for a
/// decimal, any other placeholder for any text.
fn template_matches(template: &str, message: &str) -> bool {
    enum Piece<'t> {
        Literal(&'t str),
        Path,
        Digits,
        Any,
    }
    let mut pieces = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        let name = &rest[open + 1..open + close];
        // `{1,80}` in M09 is part of the literal pattern, not a placeholder.
        if !name.chars().all(|c| c.is_ascii_alphabetic()) {
            pieces.push(Piece::Literal(&rest[..open + close + 1]));
            rest = &rest[open + close + 1..];
            continue;
        }
        pieces.push(Piece::Literal(&rest[..open]));
        pieces.push(match name {
            "path" | "lower" | "upper" => Piece::Path,
            "max" | "count" => Piece::Digits,
            _ => Piece::Any,
        });
        rest = &rest[open + close + 1..];
    }
    pieces.push(Piece::Literal(rest));

    fn go(pieces: &[Piece<'_>], s: &str) -> bool {
        let Some((first, tail)) = pieces.split_first() else {
            return s.is_empty();
        };
        match first {
            Piece::Literal(lit) => s.strip_prefix(lit).is_some_and(|r| go(tail, r)),
            Piece::Path => {
                if !s.starts_with("card") {
                    return false;
                }
                let end = s.find(' ').unwrap_or(s.len());
                (4..=end).any(|i| s.is_char_boundary(i) && go(tail, &s[i..]))
            }
            Piece::Digits => {
                let end = s.bytes().take_while(u8::is_ascii_digit).count();
                (1..=end).any(|i| go(tail, &s[i..]))
            }
            Piece::Any => (0..=s.len()).any(|i| s.is_char_boundary(i) && go(tail, &s[i..])),
        }
    }
    go(&pieces, message)
}

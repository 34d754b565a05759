//! The hand-written control flow of canon.card.v1 validation (cards.md §3–§8). Every number,
//! list and message comes from the generated [`crate::vocab`] module.
//!
//! Invariants: collects every error in the normative evaluation order; never panics; recursion
//! depth is bounded by the card schema (a handful of levels), never by the input.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::js;
use crate::vocab::{
    self, messages as msg, BoundsKind, FieldTypeRule, RUNTIME_CARD_LIMITS as LIMITS,
};
use crate::Validation;

/// Entries kept inline before a scope spills to a hash set.
const SEEN_INLINE: usize = 16;

/// A set of strings seen in one uniqueness scope: an inline list while small (no allocation for
/// ordinary cards), hashed when large, so hostile cards with thousands of ids stay linear.
#[derive(Default)]
struct Seen<'a> {
    inline: [&'a str; SEEN_INLINE],
    len: usize,
    large: Option<HashSet<&'a str>>,
}

impl<'a> Seen<'a> {
    /// Records `s`; returns false when it was already present.
    fn insert(&mut self, s: &'a str) -> bool {
        if let Some(set) = &mut self.large {
            return set.insert(s);
        }
        if self.inline[..self.len]
            .iter()
            .any(|seen| js::key_eq(seen, s))
        {
            return false;
        }
        if self.len < SEEN_INLINE {
            self.inline[self.len] = s;
            self.len += 1;
        } else {
            let mut set: HashSet<&'a str> = self.inline.iter().copied().collect();
            set.insert(s);
            self.large = Some(set);
        }
        true
    }
}

pub(crate) fn validate(card: &Value) -> Validation {
    let Some(object) = card.as_object() else {
        return Validation::from_errors(vec![msg::m01()]);
    };
    let mut v = Validator {
        errors: Vec::new(),
        segments: Vec::with_capacity(16),
        action_ids: Seen::default(),
        total_actions: 0,
        actions_blocks: 0,
    };
    v.card(card, object);
    Validation::from_errors(v.errors)
}

/// One step of a path: `.key` or `[index]`.
#[derive(Clone, Copy)]
enum Segment {
    Key(&'static str),
    Index(usize),
}

struct Validator<'a> {
    errors: Vec<String>,
    /// The path of the value being checked, as segments below `card`.
    segments: Vec<Segment>,
    action_ids: Seen<'a>,
    total_actions: usize,
    actions_blocks: usize,
}

impl<'a> Validator<'a> {
    // ---- path handling -------------------------------------------------------------------
    //
    // The path is kept as segments and rendered only when a message needs it: valid cards never
    // pay for formatting.

    fn push_key(&mut self, key: &'static str) -> usize {
        let mark = self.segments.len();
        self.segments.push(Segment::Key(key));
        mark
    }

    fn push_index(&mut self, index: usize) -> usize {
        let mark = self.segments.len();
        self.segments.push(Segment::Index(index));
        mark
    }

    fn pop(&mut self, mark: usize) {
        self.segments.truncate(mark);
    }

    /// The current path (cards.md §2.3).
    fn path(&self) -> String {
        let mut p = String::with_capacity(16 + 12 * self.segments.len());
        p.push_str("card");
        for segment in &self.segments {
            match segment {
                Segment::Key(key) => {
                    p.push('.');
                    p.push_str(key);
                }
                Segment::Index(index) => {
                    p.push('[');
                    js::push_usize(&mut p, *index);
                    p.push(']');
                }
            }
        }
        p
    }

    /// The path of `key` below the current path.
    fn key_path(&self, key: &str) -> String {
        let mut p = self.path();
        p.push('.');
        p.push_str(key);
        p
    }

    // ---- primitive rules (cards.md §4) ---------------------------------------------------

    /// M05 for every key of `object` outside `allowed`, in ECMAScript own-key order.
    fn allowed_keys(&mut self, object: &Map<String, Value>, is_allowed: fn(&str) -> bool) {
        if object.keys().all(|k| is_allowed(k)) {
            return;
        }
        let path = self.path();
        for key in js::own_keys_where(object, |k| !is_allowed(k)) {
            self.errors.push(msg::m05(&path, key));
        }
    }

    /// The string rule applied to the value at the current path.
    fn string_value(&mut self, value: &Value, max: usize) {
        match value.as_str() {
            Some(s) if !js::is_blank(s) => {
                if js::utf16_len(s) > max {
                    self.errors.push(msg::m07(&self.path(), max));
                }
            }
            _ => self.errors.push(msg::m06(&self.path())),
        }
    }

    /// The string rule on `object[key]`.
    fn string(
        &mut self,
        object: &Map<String, Value>,
        key: &'static str,
        required: bool,
        max: usize,
    ) {
        match get(object, key) {
            None if required => self.errors.push(msg::m06(&self.key_path(key))),
            None => {}
            Some(value) => {
                let mark = self.push_key(key);
                self.string_value(value, max);
                self.pop(mark);
            }
        }
    }

    /// Optional vocabulary member (tone M08, status M16).
    fn optional_enum(
        &mut self,
        object: &Map<String, Value>,
        key: &str,
        vocabulary: &[&str],
        message: fn(&str) -> String,
    ) {
        if let Some(value) = get(object, key) {
            if !in_vocabulary(value, vocabulary) {
                self.errors.push(message(&self.key_path(key)));
            }
        }
    }

    /// Required vocabulary member (chart M14, media kind M17, column type M26); absent fails.
    fn required_enum(
        &mut self,
        object: &Map<String, Value>,
        key: &str,
        vocabulary: &[&str],
        message: fn(&str) -> String,
    ) {
        if !get(object, key).is_some_and(|v| in_vocabulary(v, vocabulary)) {
            self.errors.push(message(&self.key_path(key)));
        }
    }

    /// The id rule (M09); returns the id when it is valid.
    fn id(&mut self, object: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
        match get(object, key).and_then(Value::as_str) {
            Some(id) if is_valid_id(id) => Some(id),
            _ => {
                self.errors.push(msg::m09(&self.key_path(key)));
                None
            }
        }
    }

    /// The id rule plus de-duplication within `scope` (M09, M21).
    fn unique_id(&mut self, object: &'a Map<String, Value>, scope: &mut Seen<'a>) {
        if let Some(id) = self.id(object, "id") {
            if !scope.insert(id) {
                self.errors.push(msg::m21(&self.key_path("id"), id));
            }
        }
    }

    /// A finite number, when present (or always, when `required`); M15.
    fn finite_number(&mut self, object: &Map<String, Value>, key: &str, required: bool) {
        match get(object, key) {
            None if !required => {}
            value => {
                if finite(value).is_none() {
                    self.errors.push(msg::m15(&self.key_path(key)));
                }
            }
        }
    }

    /// A non-negative integer when present (M18); returns the value when valid.
    fn non_negative_integer(&mut self, object: &Map<String, Value>, key: &str) -> Option<f64> {
        let value = get(object, key)?;
        match finite(Some(value)) {
            Some(x) if x.fract() == 0.0 && x >= 0.0 => Some(x),
            _ => {
                self.errors.push(msg::m18(&self.key_path(key)));
                None
            }
        }
    }

    fn unit_interval(&mut self, object: &Map<String, Value>, key: &str) {
        if let Some(value) = get(object, key) {
            if !finite(Some(value)).is_some_and(|x| (0.0..=1.0).contains(&x)) {
                self.errors.push(msg::m19(&self.key_path(key)));
            }
        }
    }

    fn boolean(&mut self, object: &Map<String, Value>, key: &str) {
        if get(object, key).is_some_and(|v| !v.is_boolean()) {
            self.errors.push(msg::m27(&self.key_path(key)));
        }
    }

    /// The array rule on `object[key]`: M10 when absent, not an array or empty (entries then
    /// skipped), M11 when longer than `limit` (entries still visited). Returns the entries to
    /// visit, with the path left pointing at the array.
    fn array(&mut self, value: Option<&'a Value>, limit: usize) -> Option<&'a Vec<Value>> {
        match value.and_then(Value::as_array) {
            Some(items) if !items.is_empty() => {
                if items.len() > limit {
                    self.errors.push(msg::m11(&self.path(), limit));
                }
                Some(items)
            }
            _ => {
                self.errors.push(msg::m10(&self.path()));
                None
            }
        }
    }

    /// Visits each entry of an array rule with `visit`, the path set to the entry.
    fn each_entry(
        &mut self,
        object: &'a Map<String, Value>,
        key: &'static str,
        limit: usize,
        mut visit: impl FnMut(&mut Self, &'a Value),
    ) {
        let mark = self.push_key(key);
        if let Some(items) = self.array(get(object, key), limit) {
            for (i, item) in items.iter().enumerate() {
                let entry = self.push_index(i);
                visit(self, item);
                self.pop(entry);
            }
        }
        self.pop(mark);
    }

    /// The object rule for an array entry (M12); the path is the entry's.
    fn record(&mut self, value: &'a Value) -> Option<&'a Map<String, Value>> {
        let object = value.as_object();
        if object.is_none() {
            self.errors.push(msg::m12(&self.path()));
        }
        object
    }

    // ---- records -------------------------------------------------------------------------

    fn card(&mut self, card: &'a Value, object: &'a Map<String, Value>) {
        if js::json_stringify_len_exceeds(card, vocab::MAX_CARD_BYTES) {
            self.errors.push(msg::m03());
        }
        if get(object, "schema").and_then(Value::as_str) != Some(vocab::CARD_SCHEMA) {
            self.errors.push(msg::m04());
        }
        self.allowed_keys(object, vocab::is_allowed_key_card);
        self.string(object, "title", true, vocab::CAP_CARD_TITLE);
        self.string(object, "fallbackText", true, vocab::CAP_CARD_FALLBACK_TEXT);
        self.string(object, "template", false, vocab::CAP_CARD_TEMPLATE);
        self.optional_enum(object, "tone", &vocab::TONES, msg::m08);
        if has(object, "cardId") {
            self.id(object, "cardId");
        }
        self.each_entry(object, "blocks", LIMITS.blocks, |v, block| v.block(block));
        if self.total_actions > LIMITS.total_actions {
            self.errors
                .push(msg::m22(self.total_actions, LIMITS.total_actions));
        }
    }

    fn block(&mut self, value: &'a Value) {
        let Some(block) = self.record(value) else {
            return;
        };
        let kind = get(block, "kind");
        let Some(kind_name) = kind
            .and_then(Value::as_str)
            .filter(|k| contains(&vocab::BLOCK_KINDS, k))
        else {
            let rendered = js::js_string_of(kind);
            self.errors
                .push(msg::m13(&self.key_path("kind"), &rendered));
            return;
        };
        self.string(block, "title", false, vocab::CAP_BLOCK_TITLE);
        match kind_name {
            "summary" => {
                self.allowed_keys(block, vocab::is_allowed_key_summary);
                self.string(block, "text", true, vocab::CAP_SUMMARY_TEXT);
            }
            "callout" => {
                self.allowed_keys(block, vocab::is_allowed_key_callout);
                self.string(block, "text", true, vocab::CAP_CALLOUT_TEXT);
                self.optional_enum(block, "tone", &vocab::TONES, msg::m08);
            }
            "metricGrid" => {
                self.allowed_keys(block, vocab::is_allowed_key_metric_grid);
                self.each_entry(block, "metrics", LIMITS.metrics, Self::metric);
            }
            "chart" => {
                self.allowed_keys(block, vocab::is_allowed_key_chart);
                self.required_enum(block, "chart", &vocab::CHART_TYPES, msg::m14);
                self.string(block, "yLabel", false, vocab::CAP_CHART_Y_LABEL);
                self.each_entry(block, "series", LIMITS.series, Self::series);
            }
            "table" => {
                self.allowed_keys(block, vocab::is_allowed_key_table);
                self.each_entry(block, "columns", LIMITS.columns, |v, header| {
                    v.string_value(header, vocab::CAP_TABLE_COLUMNS_ENTRY);
                });
                self.each_entry(block, "rows", LIMITS.rows, |v, row| {
                    if let Some(cells) = v.array(Some(row), LIMITS.columns) {
                        for (j, cell) in cells.iter().enumerate() {
                            let mark = v.push_index(j);
                            v.string_value(cell, vocab::CAP_TABLE_ROWS_ENTRY_ENTRY);
                            v.pop(mark);
                        }
                    }
                });
            }
            "list" => {
                self.allowed_keys(block, vocab::is_allowed_key_list);
                self.each_entry(block, "items", LIMITS.list_items, Self::list_item);
            }
            "mediaPreview" => {
                self.allowed_keys(block, vocab::is_allowed_key_media_preview);
                self.string(
                    block,
                    "fallbackText",
                    false,
                    vocab::CAP_MEDIA_PREVIEW_FALLBACK_TEXT,
                );
                let mark = self.push_key("media");
                match get(block, "media").and_then(Value::as_object) {
                    Some(media) => self.media(media),
                    None => self.errors.push(msg::m12(&self.path())),
                }
                self.pop(mark);
            }
            "details" => {
                self.allowed_keys(block, vocab::is_allowed_key_details);
                self.each_entry(block, "rows", LIMITS.details_rows, Self::details_row);
            }
            "actions" => {
                self.allowed_keys(block, vocab::is_allowed_key_actions);
                if self.actions_blocks > 0 {
                    self.errors.push(msg::m20(&self.path()));
                }
                self.actions_blocks += 1;
                self.each_entry(block, "actions", LIMITS.actions, Self::action);
            }
            _ => {
                // BLOCK_KINDS and this match are both generated from / checked against the
                // registry; an unknown kind here means they disagree.
                debug_assert!(false, "block kind {kind_name} has no rules");
            }
        }
    }

    fn metric(&mut self, value: &'a Value) {
        let Some(metric) = self.record(value) else {
            return;
        };
        self.allowed_keys(metric, vocab::is_allowed_key_metric);
        self.string(metric, "label", true, vocab::CAP_METRIC_LABEL);
        self.string(metric, "value", true, vocab::CAP_METRIC_VALUE);
        self.string(metric, "delta", false, vocab::CAP_METRIC_DELTA);
        self.optional_enum(metric, "tone", &vocab::TONES, msg::m08);
    }

    fn series(&mut self, value: &'a Value) {
        let Some(series) = self.record(value) else {
            return;
        };
        self.allowed_keys(series, vocab::is_allowed_key_series);
        self.string(series, "name", false, vocab::CAP_SERIES_NAME);
        self.each_entry(series, "points", LIMITS.points, Self::point);
    }

    fn point(&mut self, value: &'a Value) {
        let Some(point) = self.record(value) else {
            return;
        };
        self.allowed_keys(point, vocab::is_allowed_key_point);
        self.string(point, "x", true, vocab::CAP_POINT_X);
        self.finite_number(point, "y", true);
    }

    fn list_item(&mut self, value: &'a Value) {
        let Some(item) = self.record(value) else {
            return;
        };
        self.allowed_keys(item, vocab::is_allowed_key_list_item);
        self.string(item, "label", true, vocab::CAP_LIST_ITEM_LABEL);
        self.string(item, "detail", false, vocab::CAP_LIST_ITEM_DETAIL);
        self.optional_enum(item, "status", &vocab::LIST_STATUSES, msg::m16);
    }

    fn media(&mut self, media: &'a Map<String, Value>) {
        self.allowed_keys(media, vocab::is_allowed_key_media);
        self.required_enum(media, "kind", &vocab::MEDIA_KINDS, msg::m17);
        self.string(media, "url", true, vocab::CAP_MEDIA_URL);
        self.string(media, "mimeType", true, vocab::CAP_MEDIA_MIME_TYPE);
        self.string(media, "fileName", false, vocab::CAP_MEDIA_FILE_NAME);
        self.string(media, "thumbnailUrl", false, vocab::CAP_MEDIA_THUMBNAIL_URL);
        self.non_negative_integer(media, "page");
        self.non_negative_integer(media, "pageCount");
    }

    fn details_row(&mut self, value: &'a Value) {
        let Some(row) = self.record(value) else {
            return;
        };
        self.allowed_keys(row, vocab::is_allowed_key_details_row);
        self.string(row, "label", true, vocab::CAP_DETAILS_ROW_LABEL);
        self.string(row, "value", true, vocab::CAP_DETAILS_ROW_VALUE);
        self.optional_enum(row, "tone", &vocab::TONES, msg::m08);
        self.unit_interval(row, "confidence");
        self.string(row, "hint", false, vocab::CAP_DETAILS_ROW_HINT);
    }

    fn action(&mut self, value: &'a Value) {
        let Some(action) = self.record(value) else {
            return;
        };
        self.allowed_keys(action, vocab::is_allowed_key_action);
        let mut ids = std::mem::take(&mut self.action_ids);
        self.unique_id(action, &mut ids);
        self.action_ids = ids;
        self.string(action, "label", true, vocab::CAP_ACTION_LABEL);
        self.optional_enum(action, "tone", &vocab::TONES, msg::m08);
        if has(action, "fields") {
            let mut field_ids = Seen::default();
            self.each_entry(action, "fields", LIMITS.fields, |v, field| {
                v.field(field, &mut field_ids);
            });
        }
        self.total_actions += 1;
    }

    fn field(&mut self, value: &'a Value, field_ids: &mut Seen<'a>) {
        let Some(field) = self.record(value) else {
            return;
        };
        self.allowed_keys(field, vocab::is_allowed_key_field);
        self.unique_id(field, field_ids);
        self.string(field, "label", true, vocab::CAP_FIELD_LABEL);
        let field_type = get(field, "type")
            .and_then(Value::as_str)
            .filter(|t| contains(&vocab::FIELD_TYPES, t));
        if field_type.is_none() {
            self.errors.push(msg::m29(&self.key_path("type")));
        }
        let rule = field_type_rule(field_type);
        self.string(field, "placeholder", false, vocab::CAP_FIELD_PLACEHOLDER);
        self.boolean(field, "required");
        self.boolean(field, "allowOther");
        self.boolean(field, "sensitive");

        let choices = get(field, "choices");
        if rule.choices_required && !choices.is_some_and(Value::is_array) {
            let type_name = field_type.unwrap_or_default();
            self.errors
                .push(msg::m30(&self.key_path("choices"), type_name));
        }
        if choices.is_some() {
            self.choices(field, rule.choices_limit);
        }

        match rule.bounds {
            Some(kind) => self.bounds(field, kind),
            None => {
                for key in ["min", "max"] {
                    if has(field, key) {
                        self.errors.push(msg::m31(&self.key_path(key)));
                    }
                }
            }
        }
        if has(field, "step") {
            if rule.step {
                self.finite_number(field, "step", false);
            } else {
                self.errors.push(msg::m32(&self.key_path("step")));
            }
        }
        if has(field, "precision") {
            if rule.precision {
                self.non_negative_integer(field, "precision");
            } else {
                self.errors.push(msg::m32(&self.key_path("precision")));
            }
        }
        if has(field, "currencyCode") {
            if rule.currency_code {
                self.string(field, "currencyCode", false, vocab::CAP_FIELD_CURRENCY_CODE);
            } else {
                self.errors.push(msg::m33(&self.key_path("currencyCode")));
            }
        }
        if rule.line_items {
            if get(field, "columns").is_some_and(Value::is_array) {
                let mut column_ids = Seen::default();
                self.each_entry(field, "columns", LIMITS.line_item_columns, |v, column| {
                    v.line_item_column(column, &mut column_ids);
                });
            } else {
                self.errors.push(msg::m34(&self.key_path("columns")));
            }
            let min_rows = self.non_negative_integer(field, "minRows");
            let max_rows = self.non_negative_integer(field, "maxRows");
            if let Some(max) = max_rows {
                if max > LIMITS.line_item_rows as f64 {
                    self.errors
                        .push(msg::m35(&self.key_path("maxRows"), LIMITS.line_item_rows));
                }
            }
            if let (Some(min), Some(max)) = (min_rows, max_rows) {
                if min > max {
                    self.errors.push(msg::m25(
                        &self.key_path("minRows"),
                        &self.key_path("maxRows"),
                    ));
                }
            }
        } else {
            for key in ["columns", "minRows", "maxRows"] {
                if has(field, key) {
                    self.errors.push(msg::m36(&self.key_path(key)));
                }
            }
        }
    }

    /// `choices` of a field or column: the array rule, then each choice with de-duplication
    /// scoped to this array (cards.md §8.3).
    fn choices(&mut self, owner: &'a Map<String, Value>, limit: usize) {
        let mut keys = Seen::default();
        self.each_entry(owner, "choices", limit, |v, choice| {
            v.choice(choice, &mut keys)
        });
    }

    fn choice(&mut self, value: &'a Value, keys: &mut Seen<'a>) {
        let Some(choice) = self.record(value) else {
            return;
        };
        self.allowed_keys(choice, vocab::is_allowed_key_choice);
        self.string(choice, "label", true, vocab::CAP_CHOICE_LABEL);
        self.string(choice, "value", false, vocab::CAP_CHOICE_VALUE);
        self.string(choice, "description", false, vocab::CAP_CHOICE_DESCRIPTION);
        self.string(choice, "preview", false, vocab::CAP_CHOICE_PREVIEW);
        let key = match get(choice, "value").and_then(Value::as_str) {
            Some(value) if !js::is_blank(value) => Some(js::js_trim(value)),
            _ => get(choice, "label")
                .and_then(Value::as_str)
                .map(js::js_trim),
        };
        if let Some(key) = key.filter(|k| !k.is_empty()) {
            if !keys.insert(key) {
                self.errors.push(msg::m23(&self.path(), key));
            }
        }
    }

    /// `min` / `max` and their ordering (cards.md §8.4).
    fn bounds(&mut self, object: &Map<String, Value>, kind: BoundsKind) {
        let ordered = match kind {
            BoundsKind::Number => {
                let min = self.number_bound(object, "min");
                let max = self.number_bound(object, "max");
                matches!((min, max), (Some(min), Some(max)) if min > max)
            }
            BoundsKind::Date => {
                let min = self.date_bound(object, "min");
                let max = self.date_bound(object, "max");
                matches!((min, max), (Some(min), Some(max)) if min > max)
            }
        };
        if ordered {
            self.errors
                .push(msg::m25(&self.key_path("min"), &self.key_path("max")));
        }
    }

    /// A numeric bound when present (M15); returns it when valid.
    fn number_bound(&mut self, object: &Map<String, Value>, key: &str) -> Option<f64> {
        let value = get(object, key)?;
        let x = finite(Some(value));
        if x.is_none() {
            self.errors.push(msg::m15(&self.key_path(key)));
        }
        x
    }

    /// A date bound when present (M24); returns it when valid.
    fn date_bound<'o>(&mut self, object: &'o Map<String, Value>, key: &str) -> Option<&'o str> {
        let value = get(object, key)?;
        let date = value.as_str().filter(|s| is_iso_date(s));
        if date.is_none() {
            self.errors.push(msg::m24(&self.key_path(key)));
        }
        date
    }

    fn line_item_column(&mut self, value: &'a Value, column_ids: &mut Seen<'a>) {
        let Some(column) = self.record(value) else {
            return;
        };
        self.allowed_keys(column, vocab::is_allowed_key_line_item_column);
        self.unique_id(column, column_ids);
        self.string(column, "label", true, vocab::CAP_LINE_ITEM_COLUMN_LABEL);
        self.required_enum(column, "type", &vocab::LINE_ITEM_COLUMN_TYPES, msg::m26);
        self.boolean(column, "required");
        self.boolean(column, "allowOther");
        let column_type = get(column, "type").and_then(Value::as_str);
        if column_type == Some("select") && !get(column, "choices").is_some_and(Value::is_array) {
            self.errors.push(msg::m28(&self.key_path("choices")));
        }
        if has(column, "choices") {
            self.choices(column, LIMITS.choices);
        }
        let kind = if column_type == Some("date") {
            BoundsKind::Date
        } else {
            BoundsKind::Number
        };
        self.bounds(column, kind);
        self.finite_number(column, "step", false);
        self.non_negative_integer(column, "precision");
        self.string(
            column,
            "currencyCode",
            false,
            vocab::CAP_LINE_ITEM_COLUMN_CURRENCY_CODE,
        );
    }
}

/// `object[key]`. Card records hold a handful of keys, where comparing keys in order beats
/// hashing the probe with SipHash; large (hostile) objects use the hash index.
#[inline]
fn get<'o>(object: &'o Map<String, Value>, key: &str) -> Option<&'o Value> {
    if object.len() <= 16 {
        object
            .iter()
            .find(|(k, _)| js::key_eq(k, key))
            .map(|(_, v)| v)
    } else {
        object.get(key)
    }
}

fn has(object: &Map<String, Value>, key: &str) -> bool {
    get(object, key).is_some()
}

fn in_vocabulary(value: &Value, vocabulary: &[&str]) -> bool {
    value.as_str().is_some_and(|s| contains(vocabulary, s))
}

fn contains(vocabulary: &[&str], s: &str) -> bool {
    vocabulary.iter().any(|v| js::key_eq(v, s))
}

/// The finite double of a JSON number; `None` for anything else (booleans are not numbers).
fn finite(value: Option<&Value>) -> Option<f64> {
    let x = js::number_as_f64(value?.as_number()?);
    x.is_finite().then_some(x)
}

/// Membership table of the id alphabet, built at compile time from the generated vocabulary.
const ID_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let alphabet = vocab::ACTION_ID_ALPHABET.as_bytes();
    let mut i = 0;
    while i < alphabet.len() {
        table[alphabet[i] as usize] = true;
        i += 1;
    }
    table
};

/// cards.md §2.7: 1 to 80 characters from the id alphabet.
fn is_valid_id(id: &str) -> bool {
    (vocab::ACTION_ID_MIN_LEN..=vocab::ACTION_ID_MAX_LEN).contains(&id.len())
        && id.bytes().all(|b| ID_BYTES[usize::from(b)])
}

/// cards.md §2.7: `DDDD-DD-DD` with ASCII digits, no calendar check.
fn is_iso_date(s: &str) -> bool {
    s.len() == vocab::ISO_DATE_LEN
        && s.bytes().enumerate().all(|(i, b)| {
            if vocab::ISO_DATE_DASH_POSITIONS.contains(&i) {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        })
}

fn field_type_rule(field_type: Option<&str>) -> &'static FieldTypeRule {
    field_type
        .and_then(|t| {
            vocab::FIELD_TYPE_RULES
                .iter()
                .find(|rule| rule.field_type.is_some_and(|f| js::key_eq(f, t)))
        })
        .unwrap_or(&vocab::UNRECOGNIZED_FIELD_TYPE_RULE)
}

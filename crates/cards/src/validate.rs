//! The hand-written control flow of canon.card.v1 validation (cards.md §3–§8). Every number,
//! list and message comes from the generated [`crate::vocab`] module.
//!
//! The rules walk a card once. Each record's entries are read in a single pass into slots, one per
//! allowed key in registry order, and every rule reads its slot instead of searching the
//! record again. The same pass measures the record for the 32 KiB cap (cards.md §11): the
//! walk adds up the stringified size of everything it visits and hands whatever it does not
//! visit (unknown keys, skipped sub-trees) to [`Sizes::measure`], so the cap costs no walk of
//! its own. The verdict on the size is taken at the end and its message put first, where the
//! evaluation order of cards.md §3 puts it.
//!
//! Before the walk, [`warm`] reads the parts of the card the rules read, breadth first, so
//! that the cache misses of a freshly parsed card overlap instead of stalling the walk one by
//! one; it only affects timing.
//!
//! Invariants: collects every error in the normative evaluation order; never panics; recursion
//! depth is bounded by the card schema (a handful of levels), never by the input; every value
//! of the card is measured exactly once.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::js::{self, Sizes};
use crate::vocab::{
    self, messages as msg, BoundsKind, FieldTypeRule, RUNTIME_CARD_LIMITS as LIMITS,
};
use crate::Validation;

/// Entries kept inline before a scope spills to a hash set.
const SEEN_INLINE: usize = 16;

/// A set of strings seen in one uniqueness scope: an inline list while small (no allocation for
/// ordinary cards), hashed when large, so hostile cards with thousands of ids stay linear.
struct Seen<'a> {
    inline: [&'a str; SEEN_INLINE],
    len: usize,
    large: Option<HashSet<&'a str>>,
    /// How many entries the scope may hold, to size the hash set once.
    expected: usize,
}

impl<'a> Seen<'a> {
    fn new(expected: usize) -> Seen<'a> {
        Seen {
            inline: [""; SEEN_INLINE],
            len: 0,
            large: None,
            expected,
        }
    }

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
            let mut set = HashSet::with_capacity(self.expected.max(2 * SEEN_INLINE));
            set.extend(self.inline.iter().copied());
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
        path: Path::default(),
        action_ids: Seen::new(LIMITS.total_actions),
        total_actions: 0,
        actions_blocks: 0,
        sizes: Sizes::default(),
    };
    warm(card);
    v.card(object);
    if v.sizes.exceeds(card, vocab::MAX_CARD_BYTES) {
        v.errors.insert(0, msg::m03());
    }
    Validation::from_errors(v.errors)
}

/// The stringified size of `card` as the validator measures it during its walk.
#[cfg(test)]
fn walked_sizes(card: &Map<String, Value>) -> Sizes {
    let mut v = Validator {
        errors: Vec::new(),
        path: Path::default(),
        action_ids: Seen::new(0),
        total_actions: 0,
        actions_blocks: 0,
        sizes: Sizes::default(),
    };
    v.card(card);
    v.sizes
}

/// One step of a path: `.key` or `[index]`.
#[derive(Clone, Copy)]
enum Segment {
    Key(&'static str),
    Index(usize),
}

/// The most segments a path below `card` can have: the schema's deepest value is
/// `card.blocks[i].actions[j].fields[k].columns[c].choices[n]`, ten segments.
const MAX_SEGMENTS: usize = 12;

/// The segments of the current path, kept inline (no allocation per card).
struct Path {
    segments: [Segment; MAX_SEGMENTS],
    len: usize,
}

impl Default for Path {
    fn default() -> Path {
        Path {
            segments: [Segment::Index(0); MAX_SEGMENTS],
            len: 0,
        }
    }
}

impl Path {
    #[inline]
    fn push(&mut self, segment: Segment) {
        // The schema never nests deeper than MAX_SEGMENTS; a deeper push would only shorten
        // the rendered path, never panic.
        debug_assert!(
            self.len < MAX_SEGMENTS,
            "path deeper than the schema allows"
        );
        if let Some(slot) = self.segments.get_mut(self.len) {
            *slot = segment;
        }
        self.len += 1;
    }

    fn segments(&self) -> &[Segment] {
        &self.segments[..self.len.min(MAX_SEGMENTS)]
    }
}

/// The slot of `key` in a record's allowed keys, computed at compile time; a key that is not
/// allowed fails the build.
const fn slot_of(keys: &[&str], key: &str) -> usize {
    let mut i = 0;
    while i < keys.len() {
        let (a, b) = (keys[i].as_bytes(), key.as_bytes());
        if a.len() == b.len() {
            let mut j = 0;
            while j < a.len() && a[j] == b[j] {
                j += 1;
            }
            if j == a.len() {
                return i;
            }
        }
        i += 1;
    }
    panic!("not an allowed key of this record")
}

/// `slot!(RECORD, "key")`: the slot of `key` in a record's [`Keys`], as a constant.
macro_rules! slot {
    ($keys:expr, $key:literal) => {
        const { slot_of(&$keys.names, $key) }
    };
}

/// A record's allowed keys (its slots, in registry order) and a table from a key to its slot,
/// built at compile time, so reading a record costs one table probe per entry.
struct Keys<const N: usize> {
    names: [&'static str; N],
    /// Slot by [`key_hash`]; [`NO_SLOT`] when no allowed key has that hash, [`SHARED`] when
    /// several do (the lookup then searches the names).
    table: [u8; 64],
}

const NO_SLOT: u8 = 0xff;
const SHARED: u8 = 0xfe;

/// A hash of a non-empty key from its first, second and last bytes; it tells apart every pair
/// of allowed keys of the current registry within a record, and [`SHARED`] covers any future
/// collision.
const fn key_hash(key: &[u8]) -> usize {
    let (first, second, last) = match key {
        [] => (0, 0, 0),
        [a] => (*a, *a, *a),
        [a, b] => (*a, *b, *b),
        [a, b, .., c] => (*a, *b, *c),
    };
    (first as usize + 11 * second as usize + last as usize) & 63
}

impl<const N: usize> Keys<N> {
    const fn new(names: [&'static str; N]) -> Keys<N> {
        let mut table = [NO_SLOT; 64];
        let mut i = 0;
        while i < N {
            // The size walk counts allowed keys without reading them for escapes.
            let bytes = names[i].as_bytes();
            let mut j = 0;
            while j < bytes.len() {
                assert!(bytes[j] >= 0x20 && bytes[j] != b'"' && bytes[j] != b'\\');
                j += 1;
            }
            let h = key_hash(names[i].as_bytes());
            table[h] = if table[h] == NO_SLOT { i as u8 } else { SHARED };
            i += 1;
        }
        Keys { names, table }
    }

    /// The slot of `key`, or `None` when it is not an allowed key.
    #[inline(always)]
    fn slot(&self, key: &str) -> Option<usize> {
        if key.is_empty() {
            return None;
        }
        match self.table[key_hash(key.as_bytes())] {
            NO_SLOT => None,
            SHARED => self.names.iter().position(|name| js::key_eq(name, key)),
            slot => {
                let slot = usize::from(slot);
                js::key_eq(self.names[slot], key).then_some(slot)
            }
        }
    }
}

const CARD: Keys<7> = Keys::new(vocab::ALLOWED_KEYS_CARD);
const SUMMARY: Keys<3> = Keys::new(vocab::ALLOWED_KEYS_SUMMARY);
const CALLOUT: Keys<4> = Keys::new(vocab::ALLOWED_KEYS_CALLOUT);
const METRIC_GRID: Keys<3> = Keys::new(vocab::ALLOWED_KEYS_METRIC_GRID);
const METRIC: Keys<4> = Keys::new(vocab::ALLOWED_KEYS_METRIC);
const CHART: Keys<5> = Keys::new(vocab::ALLOWED_KEYS_CHART);
const SERIES: Keys<2> = Keys::new(vocab::ALLOWED_KEYS_SERIES);
const POINT: Keys<2> = Keys::new(vocab::ALLOWED_KEYS_POINT);
const TABLE: Keys<4> = Keys::new(vocab::ALLOWED_KEYS_TABLE);
const LIST: Keys<3> = Keys::new(vocab::ALLOWED_KEYS_LIST);
const LIST_ITEM: Keys<3> = Keys::new(vocab::ALLOWED_KEYS_LIST_ITEM);
const MEDIA_PREVIEW: Keys<4> = Keys::new(vocab::ALLOWED_KEYS_MEDIA_PREVIEW);
const MEDIA: Keys<7> = Keys::new(vocab::ALLOWED_KEYS_MEDIA);
const DETAILS: Keys<3> = Keys::new(vocab::ALLOWED_KEYS_DETAILS);
const DETAILS_ROW: Keys<5> = Keys::new(vocab::ALLOWED_KEYS_DETAILS_ROW);
const ACTIONS: Keys<3> = Keys::new(vocab::ALLOWED_KEYS_ACTIONS);
const ACTION: Keys<4> = Keys::new(vocab::ALLOWED_KEYS_ACTION);
const FIELD: Keys<16> = Keys::new(vocab::ALLOWED_KEYS_FIELD);
const CHOICE: Keys<4> = Keys::new(vocab::ALLOWED_KEYS_CHOICE);
const LINE_ITEM_COLUMN: Keys<11> = Keys::new(vocab::ALLOWED_KEYS_LINE_ITEM_COLUMN);

// The vocabularies (cards.md §9), looked up the same way.
const BLOCK_KINDS: Keys<9> = Keys::new(vocab::BLOCK_KINDS);
const TONES: Keys<8> = Keys::new(vocab::TONES);
const LIST_STATUSES: Keys<4> = Keys::new(vocab::LIST_STATUSES);
const MEDIA_KINDS: Keys<2> = Keys::new(vocab::MEDIA_KINDS);
const CHART_TYPES: Keys<2> = Keys::new(vocab::CHART_TYPES);
const FIELD_TYPES: Keys<10> = Keys::new(vocab::FIELD_TYPES);
const LINE_ITEM_COLUMN_TYPES: Keys<5> = Keys::new(vocab::LINE_ITEM_COLUMN_TYPES);

// `FIELD_TYPE_RULES` is indexed like `FIELD_TYPES` (checked at compile time).
const _: () = {
    let mut i = 0;
    while i < vocab::FIELD_TYPES.len() {
        match vocab::FIELD_TYPE_RULES[i].field_type {
            Some(t) => assert!(slot_of(&vocab::FIELD_TYPES, t) == i),
            None => panic!("a field type rule without a type"),
        }
        i += 1;
    }
};

/// One record's entries by slot: slot `i` holds the value of the record's `i`-th allowed key
/// (`vocab::ALLOWED_KEYS_*` order), filled by [`Validator::open`] in one pass over the entries.
struct Record<'a, const N: usize> {
    object: &'a Map<String, Value>,
    slots: [Option<&'a Value>; N],
    /// Slots holding an array or object whose size is still to be measured: a rule that
    /// descends into one takes it over with [`Record::claim`], [`Validator::close`] measures
    /// the rest.
    unmeasured: u32,
    /// Whether the record has a key outside its allowed keys.
    stray: bool,
}

impl<'a, const N: usize> Record<'a, N> {
    #[inline]
    fn get(&self, slot: usize) -> Option<&'a Value> {
        self.slots[slot]
    }

    #[inline]
    fn has(&self, slot: usize) -> bool {
        self.slots[slot].is_some()
    }

    /// The value in `slot`, whose measurement the caller takes over.
    #[inline]
    fn claim(&mut self, slot: usize) -> Option<&'a Value> {
        self.unmeasured &= !(1 << slot);
        self.slots[slot]
    }
}

// Debug builds (the tests) check that no record skips `close`; release builds carry no drop glue.
#[cfg(debug_assertions)]
impl<const N: usize> Drop for Record<'_, N> {
    fn drop(&mut self) {
        debug_assert_eq!(
            self.unmeasured, 0,
            "a record was dropped without Validator::close"
        );
    }
}

struct Validator<'a> {
    errors: Vec<String>,
    /// The path of the value being checked.
    path: Path,
    action_ids: Seen<'a>,
    total_actions: usize,
    actions_blocks: usize,
    /// The stringified size of everything measured so far.
    sizes: Sizes,
}

impl<'a> Validator<'a> {
    // ---- path handling -------------------------------------------------------------------
    //
    // The path is kept as segments and rendered only when a message needs it: valid cards never
    // pay for formatting.

    #[inline]
    fn push_key(&mut self, key: &'static str) -> usize {
        let mark = self.path.len;
        self.path.push(Segment::Key(key));
        mark
    }

    #[inline]
    fn push_index(&mut self, index: usize) -> usize {
        let mark = self.path.len;
        self.path.push(Segment::Index(index));
        mark
    }

    #[inline]
    fn pop(&mut self, mark: usize) {
        self.path.len = mark;
    }

    /// Points the innermost segment, pushed by [`Validator::push_index`], at entry `index`.
    #[inline]
    fn set_index(&mut self, index: usize) {
        if let Some(last) = self
            .path
            .len
            .checked_sub(1)
            .and_then(|i| self.path.segments.get_mut(i))
        {
            *last = Segment::Index(index);
        }
    }

    /// The current path (cards.md §2.3).
    fn path(&self) -> String {
        let mut p = String::with_capacity(16 + 12 * self.path.len);
        p.push_str("card");
        for segment in self.path.segments() {
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

    // ---- records and sizes ---------------------------------------------------------------

    /// Reads `object`'s entries into slots by `keys` (the record's allowed keys) and measures
    /// the object, apart from the arrays and objects in its slots, which stay with the record.
    #[inline(always)]
    fn open<const N: usize>(
        &mut self,
        object: &'a Map<String, Value>,
        keys: &'static Keys<N>,
    ) -> Record<'a, N> {
        const { assert!(N <= 32, "a record's slots must fit the unmeasured mask") };
        let mut record = Record {
            object,
            slots: [None; N],
            unmeasured: 0,
            stray: false,
        };
        self.sizes.container(object.len());
        for (key, value) in object {
            match keys.slot(key) {
                Some(slot) => {
                    self.sizes.plain_key(key);
                    record.slots[slot] = Some(value);
                    match value {
                        Value::Array(_) | Value::Object(_) => record.unmeasured |= 1 << slot,
                        scalar => self.sizes.scalar(scalar),
                    }
                }
                None => {
                    record.stray = true;
                    self.sizes.key(key);
                    self.sizes.measure(value);
                }
            }
        }
        record
    }

    /// Measures what no rule descended into and releases the record.
    #[inline(always)]
    fn close<const N: usize>(&mut self, mut record: Record<'a, N>) {
        let mut pending = record.unmeasured;
        while pending != 0 {
            let slot = pending.trailing_zeros() as usize;
            pending &= pending - 1;
            if let Some(value) = record.slots[slot] {
                self.sizes.measure(value);
            }
        }
        // Everything is measured now (this also satisfies the debug check on drop).
        record.unmeasured = 0;
        drop(record);
    }

    /// The object rule for an array entry (M12), whose size is the caller's to measure; the
    /// path is the entry's. Returns the entry's slots when it is an object.
    #[inline(always)]
    fn open_entry<const N: usize>(
        &mut self,
        value: &'a Value,
        keys: &'static Keys<N>,
    ) -> Option<Record<'a, N>> {
        match value {
            Value::Object(object) => Some(self.open(object, keys)),
            _ => {
                self.sizes.measure_container(value);
                self.report(|v| msg::m12(&v.path()));
                None
            }
        }
    }

    // ---- primitive rules (cards.md §4) ---------------------------------------------------
    //
    // Each rule is a small check inlined where it is used; building a message is out of line
    // (`report`), since only invalid cards get there.

    /// Records the message `build` makes (it reads the current path from the validator).
    #[cold]
    #[inline(never)]
    fn report(&mut self, build: impl FnOnce(&Self) -> String) {
        let message = build(self);
        self.errors.push(message);
    }

    /// M05 for every key of the record outside its allowed keys, in ECMAScript own-key order.
    #[inline(always)]
    fn allowed_keys<const N: usize>(
        &mut self,
        record: &Record<'a, N>,
        is_allowed: fn(&str) -> bool,
    ) {
        if record.stray {
            self.stray_keys(record.object, is_allowed);
        }
    }

    #[cold]
    #[inline(never)]
    fn stray_keys(&mut self, object: &Map<String, Value>, is_allowed: fn(&str) -> bool) {
        let path = self.path();
        for key in js::own_keys_where(object, |k| !is_allowed(k)) {
            self.errors.push(msg::m05(&path, key));
        }
    }

    /// The string rule applied to an array entry at the current path (table headers and
    /// cells), which the caller has not measured if it is an array or object.
    #[inline(always)]
    fn string_entry(&mut self, value: &Value, max: usize) {
        self.sizes.measure_container(value);
        if let Some(failure) = string_failure(value, max) {
            self.report(|v| failure.message(&v.path(), max));
        }
    }

    /// The string rule on the record's `key`.
    #[inline(always)]
    fn string(&mut self, value: Option<&Value>, key: &'static str, required: bool, max: usize) {
        let failure = match value {
            None if required => Some(StringFailure::Blank),
            None => None,
            Some(value) => string_failure(value, max),
        };
        if let Some(failure) = failure {
            self.report(|v| failure.message(&v.key_path(key), max));
        }
    }

    /// Optional vocabulary member (tone M08, status M16).
    #[inline(always)]
    fn optional_enum<const N: usize>(
        &mut self,
        value: Option<&Value>,
        key: &'static str,
        vocabulary: &Keys<N>,
        message: fn(&str) -> String,
    ) {
        if let Some(value) = value {
            if !in_vocabulary(value, vocabulary) {
                self.report(|v| message(&v.key_path(key)));
            }
        }
    }

    /// Required vocabulary member (chart M14, media kind M17, column type M26); absent fails.
    #[inline(always)]
    fn required_enum<const N: usize>(
        &mut self,
        value: Option<&Value>,
        key: &'static str,
        vocabulary: &Keys<N>,
        message: fn(&str) -> String,
    ) {
        if !value.is_some_and(|v| in_vocabulary(v, vocabulary)) {
            self.report(|v| message(&v.key_path(key)));
        }
    }

    /// The id rule (M09); returns the id when it is valid.
    #[inline(always)]
    fn id(&mut self, value: Option<&'a Value>, key: &'static str) -> Option<&'a str> {
        match value.and_then(Value::as_str) {
            Some(id) if is_valid_id(id) => Some(id),
            _ => {
                self.report(|v| msg::m09(&v.key_path(key)));
                None
            }
        }
    }

    /// The id rule plus de-duplication within `scope` (M09, M21).
    #[inline(always)]
    fn unique_id(&mut self, value: Option<&'a Value>, scope: &mut Seen<'a>) {
        if let Some(id) = self.id(value, "id") {
            if !scope.insert(id) {
                self.report(|v| msg::m21(&v.key_path("id"), id));
            }
        }
    }

    /// A finite number, when present (or always, when `required`); M15.
    #[inline(always)]
    fn finite_number(&mut self, value: Option<&Value>, key: &'static str, required: bool) {
        match value {
            None if !required => {}
            value => {
                if finite(value).is_none() {
                    self.report(|v| msg::m15(&v.key_path(key)));
                }
            }
        }
    }

    /// A non-negative integer when present (M18); returns the value when valid.
    #[inline(always)]
    fn non_negative_integer(&mut self, value: Option<&Value>, key: &'static str) -> Option<f64> {
        let value = value?;
        match finite(Some(value)) {
            Some(x) if x.fract() == 0.0 && x >= 0.0 => Some(x),
            _ => {
                self.report(|v| msg::m18(&v.key_path(key)));
                None
            }
        }
    }

    #[inline(always)]
    fn unit_interval(&mut self, value: Option<&Value>, key: &'static str) {
        if let Some(value) = value {
            if !finite(Some(value)).is_some_and(|x| (0.0..=1.0).contains(&x)) {
                self.report(|v| msg::m19(&v.key_path(key)));
            }
        }
    }

    #[inline(always)]
    fn boolean(&mut self, value: Option<&Value>, key: &'static str) {
        if value.is_some_and(|v| !v.is_boolean()) {
            self.report(|v| msg::m27(&v.key_path(key)));
        }
    }

    /// The array rule on a value the caller has not measured if it is an array or object: M10
    /// when absent, not an array or empty (entries then skipped; the value is measured here),
    /// M11 when longer than `limit` (entries still visited). Returns the entries to visit, with
    /// the array's own brackets and commas measured; the caller measures the entries.
    #[inline]
    fn array(&mut self, value: Option<&'a Value>, limit: usize) -> Option<&'a [Value]> {
        match value {
            Some(Value::Array(items)) if !items.is_empty() => {
                if items.len() > limit {
                    self.report(|v| msg::m11(&v.path(), limit));
                }
                self.sizes.container(items.len());
                Some(items)
            }
            other => {
                if let Some(value) = other {
                    self.sizes.measure_container(value);
                }
                self.report(|v| msg::m10(&v.path()));
                None
            }
        }
    }

    /// Visits each entry of the array rule on `record[slot]` with `visit`, the path set to the
    /// entry. Scalar entries are measured here; `visit` measures the arrays and objects.
    fn each_entry<const N: usize>(
        &mut self,
        record: &mut Record<'a, N>,
        slot: usize,
        key: &'static str,
        limit: usize,
        mut visit: impl FnMut(&mut Self, &'a Value),
    ) {
        let value = record.claim(slot);
        let mark = self.push_key(key);
        if let Some(items) = self.array(value, limit) {
            self.push_index(0);
            for (i, item) in items.iter().enumerate() {
                self.sizes.scalar(item);
                self.set_index(i);
                visit(self, item);
            }
        }
        self.pop(mark);
    }

    // ---- records -------------------------------------------------------------------------

    fn card(&mut self, object: &'a Map<String, Value>) {
        let mut card = self.open(object, &CARD);
        // The size rule (M03) is decided once the walk has measured the whole card.
        if card.get(slot!(CARD, "schema")).and_then(Value::as_str) != Some(vocab::CARD_SCHEMA) {
            self.report(|_| msg::m04());
        }
        self.allowed_keys(&card, vocab::is_allowed_key_card);
        let title = card.get(slot!(CARD, "title"));
        self.string(title, "title", true, vocab::CAP_CARD_TITLE);
        let fallback = card.get(slot!(CARD, "fallbackText"));
        self.string(
            fallback,
            "fallbackText",
            true,
            vocab::CAP_CARD_FALLBACK_TEXT,
        );
        let template = card.get(slot!(CARD, "template"));
        self.string(template, "template", false, vocab::CAP_CARD_TEMPLATE);
        let tone = card.get(slot!(CARD, "tone"));
        self.optional_enum(tone, "tone", &TONES, msg::m08);
        if card.has(slot!(CARD, "cardId")) {
            self.id(card.get(slot!(CARD, "cardId")), "cardId");
        }
        self.each_entry(
            &mut card,
            slot!(CARD, "blocks"),
            "blocks",
            LIMITS.blocks,
            |v, block| {
                v.block(block);
            },
        );
        if self.total_actions > LIMITS.total_actions {
            self.report(|v| msg::m22(v.total_actions, LIMITS.total_actions));
        }
        self.close(card);
    }

    fn block(&mut self, value: &'a Value) {
        let Value::Object(block) = value else {
            self.sizes.measure_container(value);
            self.report(|v| msg::m12(&v.path()));
            return;
        };
        let kind = get(block, "kind");
        let Some(kind_name) = kind
            .and_then(Value::as_str)
            .filter(|k| BLOCK_KINDS.slot(k).is_some())
        else {
            // A block of no known kind is not visited further, so it is measured whole.
            self.sizes.measure(value);
            let rendered = js::js_string_of(kind);
            self.report(|v| msg::m13(&v.key_path("kind"), &rendered));
            return;
        };
        match kind_name {
            "summary" => {
                let b = self.open_block(block, &SUMMARY);
                self.allowed_keys(&b, vocab::is_allowed_key_summary);
                let text = b.get(slot!(SUMMARY, "text"));
                self.string(text, "text", true, vocab::CAP_SUMMARY_TEXT);
                self.close(b);
            }
            "callout" => {
                let b = self.open_block(block, &CALLOUT);
                self.allowed_keys(&b, vocab::is_allowed_key_callout);
                let text = b.get(slot!(CALLOUT, "text"));
                self.string(text, "text", true, vocab::CAP_CALLOUT_TEXT);
                let tone = b.get(slot!(CALLOUT, "tone"));
                self.optional_enum(tone, "tone", &TONES, msg::m08);
                self.close(b);
            }
            "metricGrid" => {
                let mut b = self.open_block(block, &METRIC_GRID);
                self.allowed_keys(&b, vocab::is_allowed_key_metric_grid);
                let slot = slot!(METRIC_GRID, "metrics");
                self.each_entry(&mut b, slot, "metrics", LIMITS.metrics, Self::metric);
                self.close(b);
            }
            "chart" => {
                let mut b = self.open_block(block, &CHART);
                self.allowed_keys(&b, vocab::is_allowed_key_chart);
                let chart = b.get(slot!(CHART, "chart"));
                self.required_enum(chart, "chart", &CHART_TYPES, msg::m14);
                let y_label = b.get(slot!(CHART, "yLabel"));
                self.string(y_label, "yLabel", false, vocab::CAP_CHART_Y_LABEL);
                let slot = slot!(CHART, "series");
                self.each_entry(&mut b, slot, "series", LIMITS.series, Self::series);
                self.close(b);
            }
            "table" => {
                let mut b = self.open_block(block, &TABLE);
                self.allowed_keys(&b, vocab::is_allowed_key_table);
                let slot = slot!(TABLE, "columns");
                self.each_entry(&mut b, slot, "columns", LIMITS.columns, |v, header| {
                    v.string_entry(header, vocab::CAP_TABLE_COLUMNS_ENTRY);
                });
                self.each_entry(
                    &mut b,
                    slot!(TABLE, "rows"),
                    "rows",
                    LIMITS.rows,
                    |v, row| {
                        if let Some(cells) = v.array(Some(row), LIMITS.columns) {
                            let mark = v.push_index(0);
                            for (j, cell) in cells.iter().enumerate() {
                                v.sizes.scalar(cell);
                                v.set_index(j);
                                v.string_entry(cell, vocab::CAP_TABLE_ROWS_ENTRY_ENTRY);
                            }
                            v.pop(mark);
                        }
                    },
                );
                self.close(b);
            }
            "list" => {
                let mut b = self.open_block(block, &LIST);
                self.allowed_keys(&b, vocab::is_allowed_key_list);
                let slot = slot!(LIST, "items");
                self.each_entry(&mut b, slot, "items", LIMITS.list_items, Self::list_item);
                self.close(b);
            }
            "mediaPreview" => {
                let mut b = self.open_block(block, &MEDIA_PREVIEW);
                self.allowed_keys(&b, vocab::is_allowed_key_media_preview);
                let fallback = b.get(slot!(MEDIA_PREVIEW, "fallbackText"));
                self.string(
                    fallback,
                    "fallbackText",
                    false,
                    vocab::CAP_MEDIA_PREVIEW_FALLBACK_TEXT,
                );
                let mark = self.push_key("media");
                match b.get(slot!(MEDIA_PREVIEW, "media")) {
                    Some(Value::Object(media)) => {
                        b.claim(slot!(MEDIA_PREVIEW, "media"));
                        self.media(media);
                    }
                    // Anything else stays with the block to be measured.
                    _ => self.report(|v| msg::m12(&v.path())),
                }
                self.pop(mark);
                self.close(b);
            }
            "details" => {
                let mut b = self.open_block(block, &DETAILS);
                self.allowed_keys(&b, vocab::is_allowed_key_details);
                let slot = slot!(DETAILS, "rows");
                self.each_entry(&mut b, slot, "rows", LIMITS.details_rows, Self::details_row);
                self.close(b);
            }
            "actions" => {
                let mut b = self.open_block(block, &ACTIONS);
                self.allowed_keys(&b, vocab::is_allowed_key_actions);
                if self.actions_blocks > 0 {
                    self.report(|v| msg::m20(&v.path()));
                }
                self.actions_blocks += 1;
                let slot = slot!(ACTIONS, "actions");
                self.each_entry(&mut b, slot, "actions", LIMITS.actions, Self::action);
                self.close(b);
            }
            _ => {
                // BLOCK_KINDS and this match are both generated from / checked against the
                // registry; an unknown kind here means they disagree.
                debug_assert!(false, "block kind {kind_name} has no rules");
                self.sizes.measure(value);
            }
        }
    }

    /// Opens a block of a known kind and applies the rule every kind shares, the optional
    /// title, which precedes the kind's own rules (cards.md §6.1).
    fn open_block<const N: usize>(
        &mut self,
        block: &'a Map<String, Value>,
        keys: &'static Keys<N>,
    ) -> Record<'a, N> {
        let record = self.open(block, keys);
        let title = record.get(slot_of(&keys.names, "title"));
        self.string(title, "title", false, vocab::CAP_BLOCK_TITLE);
        record
    }

    fn metric(&mut self, value: &'a Value) {
        let Some(metric) = self.open_entry(value, &METRIC) else {
            return;
        };
        self.allowed_keys(&metric, vocab::is_allowed_key_metric);
        let label = metric.get(slot!(METRIC, "label"));
        self.string(label, "label", true, vocab::CAP_METRIC_LABEL);
        let value = metric.get(slot!(METRIC, "value"));
        self.string(value, "value", true, vocab::CAP_METRIC_VALUE);
        let delta = metric.get(slot!(METRIC, "delta"));
        self.string(delta, "delta", false, vocab::CAP_METRIC_DELTA);
        let tone = metric.get(slot!(METRIC, "tone"));
        self.optional_enum(tone, "tone", &TONES, msg::m08);
        self.close(metric);
    }

    fn series(&mut self, value: &'a Value) {
        let Some(mut series) = self.open_entry(value, &SERIES) else {
            return;
        };
        self.allowed_keys(&series, vocab::is_allowed_key_series);
        let name = series.get(slot!(SERIES, "name"));
        self.string(name, "name", false, vocab::CAP_SERIES_NAME);
        let slot = slot!(SERIES, "points");
        self.each_entry(&mut series, slot, "points", LIMITS.points, Self::point);
        self.close(series);
    }

    fn point(&mut self, value: &'a Value) {
        let Some(point) = self.open_entry(value, &POINT) else {
            return;
        };
        self.allowed_keys(&point, vocab::is_allowed_key_point);
        self.string(point.get(slot!(POINT, "x")), "x", true, vocab::CAP_POINT_X);
        self.finite_number(point.get(slot!(POINT, "y")), "y", true);
        self.close(point);
    }

    fn list_item(&mut self, value: &'a Value) {
        let Some(item) = self.open_entry(value, &LIST_ITEM) else {
            return;
        };
        self.allowed_keys(&item, vocab::is_allowed_key_list_item);
        let label = item.get(slot!(LIST_ITEM, "label"));
        self.string(label, "label", true, vocab::CAP_LIST_ITEM_LABEL);
        let detail = item.get(slot!(LIST_ITEM, "detail"));
        self.string(detail, "detail", false, vocab::CAP_LIST_ITEM_DETAIL);
        let status = item.get(slot!(LIST_ITEM, "status"));
        self.optional_enum(status, "status", &LIST_STATUSES, msg::m16);
        self.close(item);
    }

    fn media(&mut self, object: &'a Map<String, Value>) {
        let media = self.open(object, &MEDIA);
        self.allowed_keys(&media, vocab::is_allowed_key_media);
        let kind = media.get(slot!(MEDIA, "kind"));
        self.required_enum(kind, "kind", &MEDIA_KINDS, msg::m17);
        let url = media.get(slot!(MEDIA, "url"));
        self.string(url, "url", true, vocab::CAP_MEDIA_URL);
        let mime_type = media.get(slot!(MEDIA, "mimeType"));
        self.string(mime_type, "mimeType", true, vocab::CAP_MEDIA_MIME_TYPE);
        let file_name = media.get(slot!(MEDIA, "fileName"));
        self.string(file_name, "fileName", false, vocab::CAP_MEDIA_FILE_NAME);
        let thumbnail = media.get(slot!(MEDIA, "thumbnailUrl"));
        self.string(
            thumbnail,
            "thumbnailUrl",
            false,
            vocab::CAP_MEDIA_THUMBNAIL_URL,
        );
        self.non_negative_integer(media.get(slot!(MEDIA, "page")), "page");
        self.non_negative_integer(media.get(slot!(MEDIA, "pageCount")), "pageCount");
        self.close(media);
    }

    fn details_row(&mut self, value: &'a Value) {
        let Some(row) = self.open_entry(value, &DETAILS_ROW) else {
            return;
        };
        self.allowed_keys(&row, vocab::is_allowed_key_details_row);
        let label = row.get(slot!(DETAILS_ROW, "label"));
        self.string(label, "label", true, vocab::CAP_DETAILS_ROW_LABEL);
        let value = row.get(slot!(DETAILS_ROW, "value"));
        self.string(value, "value", true, vocab::CAP_DETAILS_ROW_VALUE);
        let tone = row.get(slot!(DETAILS_ROW, "tone"));
        self.optional_enum(tone, "tone", &TONES, msg::m08);
        self.unit_interval(row.get(slot!(DETAILS_ROW, "confidence")), "confidence");
        let hint = row.get(slot!(DETAILS_ROW, "hint"));
        self.string(hint, "hint", false, vocab::CAP_DETAILS_ROW_HINT);
        self.close(row);
    }

    fn action(&mut self, value: &'a Value) {
        let Some(mut action) = self.open_entry(value, &ACTION) else {
            return;
        };
        self.allowed_keys(&action, vocab::is_allowed_key_action);
        // Action ids are unique across the card (cards.md §7.2).
        if let Some(id) = self.id(action.get(slot!(ACTION, "id")), "id") {
            if !self.action_ids.insert(id) {
                self.report(|v| msg::m21(&v.key_path("id"), id));
            }
        }
        let label = action.get(slot!(ACTION, "label"));
        self.string(label, "label", true, vocab::CAP_ACTION_LABEL);
        let tone = action.get(slot!(ACTION, "tone"));
        self.optional_enum(tone, "tone", &TONES, msg::m08);
        let fields = slot!(ACTION, "fields");
        if action.has(fields) {
            let mut field_ids = Seen::new(entries(action.get(fields)));
            self.each_entry(&mut action, fields, "fields", LIMITS.fields, |v, field| {
                v.field(field, &mut field_ids);
            });
        }
        self.total_actions += 1;
        self.close(action);
    }

    fn field(&mut self, value: &'a Value, field_ids: &mut Seen<'a>) {
        let Some(mut field) = self.open_entry(value, &FIELD) else {
            return;
        };
        self.allowed_keys(&field, vocab::is_allowed_key_field);
        self.unique_id(field.get(slot!(FIELD, "id")), field_ids);
        let label = field.get(slot!(FIELD, "label"));
        self.string(label, "label", true, vocab::CAP_FIELD_LABEL);
        let field_type = field
            .get(slot!(FIELD, "type"))
            .and_then(Value::as_str)
            .and_then(|t| Some((t, FIELD_TYPES.slot(t)?)));
        if field_type.is_none() {
            self.report(|v| msg::m29(&v.key_path("type")));
        }
        let rule = field_type_rule(field_type.map(|(_, slot)| slot));
        let field_type = field_type.map(|(name, _)| name);
        let placeholder = field.get(slot!(FIELD, "placeholder"));
        self.string(
            placeholder,
            "placeholder",
            false,
            vocab::CAP_FIELD_PLACEHOLDER,
        );
        self.boolean(field.get(slot!(FIELD, "required")), "required");
        self.boolean(field.get(slot!(FIELD, "allowOther")), "allowOther");
        self.boolean(field.get(slot!(FIELD, "sensitive")), "sensitive");

        let choices = field.get(slot!(FIELD, "choices"));
        if rule.choices_required && !choices.is_some_and(Value::is_array) {
            let type_name = field_type.unwrap_or_default();
            self.report(|v| msg::m30(&v.key_path("choices"), type_name));
        }
        if choices.is_some() {
            self.choices(&mut field, slot!(FIELD, "choices"), rule.choices_limit);
        }

        let (min, max) = (
            field.get(slot!(FIELD, "min")),
            field.get(slot!(FIELD, "max")),
        );
        match rule.bounds {
            Some(kind) => self.bounds(min, max, kind),
            None => {
                for (key, value) in [("min", min), ("max", max)] {
                    if value.is_some() {
                        self.report(|v| msg::m31(&v.key_path(key)));
                    }
                }
            }
        }
        let step = field.get(slot!(FIELD, "step"));
        if step.is_some() {
            if rule.step {
                self.finite_number(step, "step", false);
            } else {
                self.report(|v| msg::m32(&v.key_path("step")));
            }
        }
        let precision = field.get(slot!(FIELD, "precision"));
        if precision.is_some() {
            if rule.precision {
                self.non_negative_integer(precision, "precision");
            } else {
                self.report(|v| msg::m32(&v.key_path("precision")));
            }
        }
        let currency_code = field.get(slot!(FIELD, "currencyCode"));
        if currency_code.is_some() {
            if rule.currency_code {
                let cap = vocab::CAP_FIELD_CURRENCY_CODE;
                self.string(currency_code, "currencyCode", false, cap);
            } else {
                self.report(|v| msg::m33(&v.key_path("currencyCode")));
            }
        }
        let columns = slot!(FIELD, "columns");
        let (min_rows, max_rows) = (slot!(FIELD, "minRows"), slot!(FIELD, "maxRows"));
        if rule.line_items {
            if field.get(columns).is_some_and(Value::is_array) {
                let mut column_ids = Seen::new(entries(field.get(columns)));
                let limit = LIMITS.line_item_columns;
                self.each_entry(&mut field, columns, "columns", limit, |v, column| {
                    v.line_item_column(column, &mut column_ids);
                });
            } else {
                self.report(|v| msg::m34(&v.key_path("columns")));
            }
            let min_rows = self.non_negative_integer(field.get(min_rows), "minRows");
            let max_rows = self.non_negative_integer(field.get(max_rows), "maxRows");
            if let Some(max) = max_rows {
                if max > LIMITS.line_item_rows as f64 {
                    self.report(|v| msg::m35(&v.key_path("maxRows"), LIMITS.line_item_rows));
                }
            }
            if let (Some(min), Some(max)) = (min_rows, max_rows) {
                if min > max {
                    self.report(|v| msg::m25(&v.key_path("minRows"), &v.key_path("maxRows")));
                }
            }
        } else {
            for (key, slot) in [
                ("columns", columns),
                ("minRows", min_rows),
                ("maxRows", max_rows),
            ] {
                if field.has(slot) {
                    self.report(|v| msg::m36(&v.key_path(key)));
                }
            }
        }
        self.close(field);
    }

    /// `choices` of a field or column: the array rule, then each choice with de-duplication
    /// scoped to this array (cards.md §8.3).
    fn choices<const N: usize>(&mut self, owner: &mut Record<'a, N>, slot: usize, limit: usize) {
        let mut keys = Seen::new(entries(owner.get(slot)));
        self.each_entry(owner, slot, "choices", limit, |v, choice| {
            v.choice(choice, &mut keys);
        });
    }

    fn choice(&mut self, value: &'a Value, keys: &mut Seen<'a>) {
        let Some(choice) = self.open_entry(value, &CHOICE) else {
            return;
        };
        self.allowed_keys(&choice, vocab::is_allowed_key_choice);
        let label = choice.get(slot!(CHOICE, "label"));
        self.string(label, "label", true, vocab::CAP_CHOICE_LABEL);
        let value = choice.get(slot!(CHOICE, "value"));
        self.string(value, "value", false, vocab::CAP_CHOICE_VALUE);
        let description = choice.get(slot!(CHOICE, "description"));
        self.string(
            description,
            "description",
            false,
            vocab::CAP_CHOICE_DESCRIPTION,
        );
        let preview = choice.get(slot!(CHOICE, "preview"));
        self.string(preview, "preview", false, vocab::CAP_CHOICE_PREVIEW);
        let key = match value.and_then(Value::as_str) {
            Some(value) if !js::is_blank(value) => Some(js::js_trim(value)),
            _ => label.and_then(Value::as_str).map(js::js_trim),
        };
        if let Some(key) = key.filter(|k| !k.is_empty()) {
            if !keys.insert(key) {
                self.report(|v| msg::m23(&v.path(), key));
            }
        }
        self.close(choice);
    }

    /// `min` / `max` and their ordering (cards.md §8.4).
    fn bounds(&mut self, min: Option<&Value>, max: Option<&Value>, kind: BoundsKind) {
        let ordered = match kind {
            BoundsKind::Number => {
                let min = self.number_bound(min, "min");
                let max = self.number_bound(max, "max");
                matches!((min, max), (Some(min), Some(max)) if min > max)
            }
            BoundsKind::Date => {
                let min = self.date_bound(min, "min");
                let max = self.date_bound(max, "max");
                matches!((min, max), (Some(min), Some(max)) if min > max)
            }
        };
        if ordered {
            self.report(|v| msg::m25(&v.key_path("min"), &v.key_path("max")));
        }
    }

    /// A numeric bound when present (M15); returns it when valid.
    fn number_bound(&mut self, value: Option<&Value>, key: &str) -> Option<f64> {
        let value = value?;
        let x = finite(Some(value));
        if x.is_none() {
            self.report(|v| msg::m15(&v.key_path(key)));
        }
        x
    }

    /// A date bound when present (M24); returns it when valid.
    fn date_bound<'o>(&mut self, value: Option<&'o Value>, key: &str) -> Option<&'o str> {
        let value = value?;
        let date = value.as_str().filter(|s| is_iso_date(s));
        if date.is_none() {
            self.report(|v| msg::m24(&v.key_path(key)));
        }
        date
    }

    fn line_item_column(&mut self, value: &'a Value, column_ids: &mut Seen<'a>) {
        let Some(mut column) = self.open_entry(value, &LINE_ITEM_COLUMN) else {
            return;
        };
        self.allowed_keys(&column, vocab::is_allowed_key_line_item_column);
        self.unique_id(column.get(slot!(LINE_ITEM_COLUMN, "id")), column_ids);
        let label = column.get(slot!(LINE_ITEM_COLUMN, "label"));
        self.string(label, "label", true, vocab::CAP_LINE_ITEM_COLUMN_LABEL);
        let column_type = column.get(slot!(LINE_ITEM_COLUMN, "type"));
        self.required_enum(column_type, "type", &LINE_ITEM_COLUMN_TYPES, msg::m26);
        self.boolean(column.get(slot!(LINE_ITEM_COLUMN, "required")), "required");
        self.boolean(
            column.get(slot!(LINE_ITEM_COLUMN, "allowOther")),
            "allowOther",
        );
        let column_type = column_type.and_then(Value::as_str);
        let choices = slot!(LINE_ITEM_COLUMN, "choices");
        if column_type == Some("select") && !column.get(choices).is_some_and(Value::is_array) {
            self.report(|v| msg::m28(&v.key_path("choices")));
        }
        if column.has(choices) {
            self.choices(&mut column, choices, LIMITS.choices);
        }
        let kind = if column_type == Some("date") {
            BoundsKind::Date
        } else {
            BoundsKind::Number
        };
        let (min, max) = (
            column.get(slot!(LINE_ITEM_COLUMN, "min")),
            column.get(slot!(LINE_ITEM_COLUMN, "max")),
        );
        self.bounds(min, max, kind);
        self.finite_number(column.get(slot!(LINE_ITEM_COLUMN, "step")), "step", false);
        self.non_negative_integer(
            column.get(slot!(LINE_ITEM_COLUMN, "precision")),
            "precision",
        );
        let currency_code = column.get(slot!(LINE_ITEM_COLUMN, "currencyCode"));
        let cap = vocab::CAP_LINE_ITEM_COLUMN_CURRENCY_CODE;
        self.string(currency_code, "currencyCode", false, cap);
        self.close(column);
    }
}

/// How a value fails the string rule (cards.md §4).
#[derive(Clone, Copy)]
enum StringFailure {
    /// Not a string, or blank: M06.
    Blank,
    /// Longer than the cap: M07.
    TooLong,
}

impl StringFailure {
    fn message(self, path: &str, max: usize) -> String {
        match self {
            StringFailure::Blank => msg::m06(path),
            StringFailure::TooLong => msg::m07(path, max),
        }
    }
}

/// The string rule: a non-blank string of at most `max` UTF-16 code units.
#[inline(always)]
fn string_failure(value: &Value, max: usize) -> Option<StringFailure> {
    match value.as_str() {
        Some(s) if !js::is_blank(s) => {
            js::utf16_len_exceeds(s, max).then_some(StringFailure::TooLong)
        }
        _ => Some(StringFailure::Blank),
    }
}

/// How many arrays and objects [`warm`] keeps queued at once.
const WARM_QUEUE: usize = 128;

/// How many entries [`warm`] reads at most: several times those of a card at the 32 KiB cap,
/// so the warm-up of a hostile card stays short and does not push out what it read first.
const WARM_ENTRIES: usize = 4096;

/// Reads, before the rules run, the memory they will read: every entry of every array and
/// object of the card, the first byte of every key (to match it against the allowed keys) and
/// of every string value (the blank check), breadth first. Only timing depends on it; what it
/// reads is discarded.
///
/// A parsed card is a tree of separate allocations, which the walk of the rules meets one
/// dependent cache miss at a time, each behind the work on the value before it. Here the loads
/// of one container's entries depend only on the queue, not on each other or on any rule, so
/// the processor keeps many misses in flight and the rules then find the card in cache.
///
/// At most [`WARM_QUEUE`] containers wait at a time (a container found while the queue is full
/// is not read) and at most [`WARM_ENTRIES`] entries are read; the walk of the rules reads the
/// rest of a card beyond that on its own.
#[inline(never)]
fn warm(card: &Value) {
    let mut queue: [&Value; WARM_QUEUE] = [card; WARM_QUEUE];
    let (mut head, mut tail) = (0usize, 1usize);
    let mut budget = WARM_ENTRIES;
    let mut acc = 0u8;
    let first = |bytes: &[u8]| bytes.first().copied().unwrap_or(0);
    while head < tail && budget > 0 {
        let node = queue[head % WARM_QUEUE];
        head += 1;
        match node {
            Value::Object(map) => {
                budget = budget.saturating_sub(map.len());
                for (key, value) in map {
                    acc ^= first(key.as_bytes());
                    match value {
                        Value::String(s) => acc ^= first(s.as_bytes()),
                        Value::Array(_) | Value::Object(_) if tail - head < WARM_QUEUE => {
                            queue[tail % WARM_QUEUE] = value;
                            tail += 1;
                        }
                        _ => {}
                    }
                }
            }
            Value::Array(items) => {
                budget = budget.saturating_sub(items.len());
                for value in items {
                    match value {
                        Value::String(s) => acc ^= first(s.as_bytes()),
                        Value::Array(_) | Value::Object(_) if tail - head < WARM_QUEUE => {
                            queue[tail % WARM_QUEUE] = value;
                            tail += 1;
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    // Keeps the reads: without a use of what they read, the compiler would drop them.
    std::hint::black_box(acc);
}

/// The number of entries of an array value (zero for anything else), to size a uniqueness
/// scope.
fn entries(value: Option<&Value>) -> usize {
    value.and_then(Value::as_array).map_or(0, Vec::len)
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

#[inline(always)]
fn in_vocabulary<const N: usize>(value: &Value, vocabulary: &Keys<N>) -> bool {
    value.as_str().is_some_and(|s| vocabulary.slot(s).is_some())
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

/// The field-type matrix row of a field type's slot in `FIELD_TYPES` (cards.md §8.2).
fn field_type_rule(slot: Option<usize>) -> &'static FieldTypeRule {
    slot.and_then(|i| vocab::FIELD_TYPE_RULES.get(i))
        .unwrap_or(&vocab::UNRECOGNIZED_FIELD_TYPE_RULE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// The walk measures a card exactly as the standalone measurement does.
    fn check_sizes(card: &Value) {
        if let Some(object) = card.as_object() {
            let mut expected = Sizes::default();
            expected.measure(card);
            assert_eq!(walked_sizes(object), expected, "for {card}");
        }
    }

    #[test]
    fn walk_measures_every_parity_fixture() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/card-validation/parity.jsonl"
        );
        let text = std::fs::read_to_string(path).expect("parity fixtures are committed");
        for line in text.lines() {
            let case: Value = serde_json::from_str(line).expect("fixture lines are JSON");
            match case.get("cardText").and_then(Value::as_str) {
                Some(card_text) => {
                    if let Ok(card) = serde_json::from_str::<Value>(card_text) {
                        check_sizes(&card);
                    }
                }
                None => check_sizes(&case["card"]),
            }
        }
    }

    #[test]
    fn walk_measures_what_it_skips() {
        for card in [
            json!({"blocks": {"a": [1, {"b": null}]}, "extra": [[], {}]}),
            json!({"blocks": [[1, [2]], "x", {"kind": ["a"], "text": {}}, {"kind": "nope", "z": [1]}]}),
            json!({"blocks": [{"kind": "table", "columns": [[1], {"a": 2}, "h"], "rows": [{"a": 1}, [], [[1], {"b": [true]}, "c"], "r"]}]}),
            json!({"blocks": [{"kind": "mediaPreview", "media": [1, {"url": "u"}]}, {"kind": "mediaPreview", "media": {"kind": ["image"], "page": {}}}]}),
            json!({"blocks": [{"kind": "actions", "actions": [{"id": "a", "fields": [{"type": "text", "columns": [{"id": "c"}], "choices": [[1], {"label": {"x": 1}}], "min": [1]}]}]}]}),
            json!({"blocks": [{"kind": "actions", "actions": [{"id": "a", "fields": [{"type": "lineItems", "columns": [{"id": "c", "choices": {"a": 1}}, [2]], "minRows": [], "maxRows": {}}]}]}]}),
            json!({"title": [1.5, -0.0, 1e21], "blocks": [{"kind": "chart", "series": [{"points": [{"x": [], "y": {}}, 3]}], "chart": {"a": "b"}}]}),
        ] {
            check_sizes(&card);
        }
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            (-1e6f64..1e6).prop_map(|x| json!(x)),
            "[a-z\"\\\\\n\u{1}é😀 ]{0,6}".prop_map(Value::String),
            prop_oneof![
                Just("summary"),
                Just("callout"),
                Just("metricGrid"),
                Just("chart"),
                Just("table"),
                Just("list"),
                Just("mediaPreview"),
                Just("details"),
                Just("actions"),
                Just("lineItems"),
                Just("select"),
                Just("date"),
                Just("number"),
                Just("text"),
                Just("image"),
                Just("line"),
            ]
            .prop_map(|s| Value::String(s.to_owned())),
        ];
        let key = prop_oneof![
            Just("kind"),
            Just("title"),
            Just("text"),
            Just("blocks"),
            Just("actions"),
            Just("fields"),
            Just("choices"),
            Just("columns"),
            Just("rows"),
            Just("id"),
            Just("label"),
            Just("type"),
            Just("min"),
            Just("max"),
            Just("value"),
            Just("media"),
            Just("series"),
            Just("points"),
            Just("metrics"),
            Just("items"),
            Just("x"),
            Just("y"),
            Just("minRows"),
            Just("maxRows"),
            Just("zz"),
            Just("1"),
        ]
        .prop_map(str::to_owned);
        leaf.prop_recursive(6, 96, 8, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((key.clone(), inner), 0..8)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn walk_measures_arbitrary_cards(blocks in prop::collection::vec(arb_value(), 0..5), top in arb_value()) {
            let mut card = match top {
                Value::Object(map) => map,
                _ => Map::new(),
            };
            card.insert("blocks".to_owned(), Value::Array(blocks));
            check_sizes(&Value::Object(card));
        }
    }
}

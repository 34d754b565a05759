//! Submitted card field values (cards.md §17.1): [`validate_runtime_card_field_values`] checks
//! the `values` a human submitted for one action of an interactive card against that action's
//! `fields`, and returns the first problem, exactly as backend-contracts 8.6.1
//! `validateRuntimeCardFieldValues` does: same rules, same order, same message text.
//!
//! The TypeScript function runs on whatever JSON it is given, so the JavaScript semantics that
//! decide its result on hostile input are reproduced here too: truthiness, `String()` and
//! `ToNumber` coercions in comparisons and messages, and property lookups that fall through to
//! the prototype (a field whose id is `toString` finds `Object.prototype.toString` when the value
//! is absent). Where the TypeScript function would throw a `TypeError` (for example `actionFields`
//! that is an object, or a `null` choice), this function fails closed with
//! [`MALFORMED_ACTION_FIELDS`].
//!
//! The message templates below are the cards.md §17.1 table's; `fixtures/card-values/cases.jsonl`,
//! produced by running the real package, pins every one of them.
//!
//! Invariant: never panics, whatever the input; nothing recurses on the input's depth.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::js::{
    array_index, is_blank, js_number_string, js_string_of, js_trim, number_as_f64, own_keys_where,
    utf16_len,
};

/// Returned where backend-contracts' `validateRuntimeCardFieldValues` would throw instead of
/// answering (the action's field definitions are malformed, cards.md §17.1): the submission is
/// not accepted.
pub const MALFORMED_ACTION_FIELDS: &str = "Action fields are malformed";

/// Effective row cap of a `lineItems` field (`RUNTIME_CARD_LIMITS.lineItemRows`, cards.md §10.1).
const LINE_ITEM_ROWS: f64 = 50.0;

/// Own property names of `Object.prototype` (Node 20), found by any lookup that misses.
const OBJECT_PROTO: &[&str] = &[
    "__defineGetter__",
    "__defineSetter__",
    "__lookupGetter__",
    "__lookupSetter__",
    "__proto__",
    "constructor",
    "hasOwnProperty",
    "isPrototypeOf",
    "propertyIsEnumerable",
    "toLocaleString",
    "toString",
    "valueOf",
];

/// Own property names of `Array.prototype` (Node 20) besides `length`.
const ARRAY_PROTO: &[&str] = &[
    "at",
    "concat",
    "constructor",
    "copyWithin",
    "entries",
    "every",
    "fill",
    "filter",
    "find",
    "findIndex",
    "findLast",
    "findLastIndex",
    "flat",
    "flatMap",
    "forEach",
    "includes",
    "indexOf",
    "join",
    "keys",
    "lastIndexOf",
    "map",
    "pop",
    "push",
    "reduce",
    "reduceRight",
    "reverse",
    "shift",
    "slice",
    "some",
    "sort",
    "splice",
    "toLocaleString",
    "toReversed",
    "toSorted",
    "toSpliced",
    "toString",
    "unshift",
    "values",
    "with",
];

/// Own property names of `String.prototype` (Node 20) besides `length`.
const STRING_PROTO: &[&str] = &[
    "anchor",
    "at",
    "big",
    "blink",
    "bold",
    "charAt",
    "charCodeAt",
    "codePointAt",
    "concat",
    "constructor",
    "endsWith",
    "fixed",
    "fontcolor",
    "fontsize",
    "includes",
    "indexOf",
    "isWellFormed",
    "italics",
    "lastIndexOf",
    "link",
    "localeCompare",
    "match",
    "matchAll",
    "normalize",
    "padEnd",
    "padStart",
    "repeat",
    "replace",
    "replaceAll",
    "search",
    "slice",
    "small",
    "split",
    "startsWith",
    "strike",
    "sub",
    "substr",
    "substring",
    "sup",
    "toLocaleLowerCase",
    "toLocaleUpperCase",
    "toLowerCase",
    "toString",
    "toUpperCase",
    "toWellFormed",
    "trim",
    "trimEnd",
    "trimLeft",
    "trimRight",
    "trimStart",
    "valueOf",
];

/// Own property names of `Number.prototype` (Node 20).
const NUMBER_PROTO: &[&str] = &[
    "constructor",
    "toExponential",
    "toFixed",
    "toLocaleString",
    "toPrecision",
    "toString",
    "valueOf",
];

/// Own property names of `Boolean.prototype` (Node 20).
const BOOLEAN_PROTO: &[&str] = &["constructor", "toString", "valueOf"];

/// `Array.prototype` is itself an empty array (what `[]["__proto__"]` finds).
static EMPTY_ARRAY: Value = Value::Array(Vec::new());

/// Validates submitted card `values` against the chosen action's `fields` (cards.md §17.1) and
/// returns the first problem, or `None` when the submission is acceptable.
///
/// `action_id` is the submitted action id (`None` or `""`: nothing to check), `action_fields`
/// the action's `fields` as declared in the card (`Value::Null` when absent) and `values` the
/// submitted values (`Value::Null` when absent, read as `{}`). The result equals
/// backend-contracts 8.6.1 `validateRuntimeCardFieldValues({actionId, actionFields, values})`;
/// where that function would throw, the result is [`MALFORMED_ACTION_FIELDS`].
///
/// ```
/// use serde_json::json;
/// use canon_cards::values::validate_runtime_card_field_values;
///
/// let fields = json!([{"id": "amount", "label": "Amount", "type": "currency", "required": true}]);
/// let check = |values| validate_runtime_card_field_values(Some("pay"), &fields, &values);
/// assert_eq!(check(json!({"amount": 12.5})), None);
/// assert_eq!(check(json!({"amount": 1.005})).as_deref(), Some("Amount must have at most 2 decimal places"));
/// assert_eq!(check(json!({})).as_deref(), Some("Amount is required"));
/// assert_eq!(check(json!({"tip": 1})).as_deref(), Some("Unknown field: tip"));
/// ```
#[must_use]
pub fn validate_runtime_card_field_values(
    action_id: Option<&str>,
    action_fields: &Value,
    values: &Value,
) -> Option<String> {
    match check_values(action_id, action_fields, values) {
        Ok(verdict) => verdict,
        Err(Throw) => Some(MALFORMED_ACTION_FIELDS.to_owned()),
    }
}

/// The point where the JavaScript original would throw a `TypeError`.
#[derive(Debug)]
struct Throw;

type Step = Result<Option<String>, Throw>;

/// A JavaScript value a property lookup can produce from JSON input.
#[derive(Debug, Clone, Copy)]
enum Js<'a> {
    Undefined,
    Json(&'a Value),
    /// A `length` property.
    Number(f64),
    /// One UTF-16 code unit of a string container that is a valid character on its own.
    Char(char),
    /// One half of a surrogate pair: a non-blank string no valid string equals.
    LoneSurrogate,
    /// A function or a non-array prototype object inherited through the prototype chain.
    Opaque,
}

impl Js<'_> {
    fn is_nullish(self) -> bool {
        matches!(self, Js::Undefined | Js::Json(Value::Null))
    }

    /// `isMissingScalar`: nullish, a blank string or an empty array.
    fn is_missing(self) -> bool {
        match self {
            Js::Undefined | Js::Json(Value::Null) => true,
            Js::Json(Value::String(s)) => is_blank(s),
            Js::Json(Value::Array(a)) => a.is_empty(),
            Js::Char(c) => crate::js::is_js_whitespace(c),
            _ => false,
        }
    }

    fn is_string(self) -> bool {
        matches!(
            self,
            Js::Json(Value::String(_)) | Js::Char(_) | Js::LoneSurrogate
        )
    }

    /// The string content, unless this is not a string or is a lone surrogate.
    fn as_text(&self) -> Option<std::borrow::Cow<'_, str>> {
        match self {
            Js::Json(Value::String(s)) => Some(std::borrow::Cow::Borrowed(s.as_str())),
            Js::Char(c) => Some(std::borrow::Cow::Owned(c.to_string())),
            _ => None,
        }
    }
}

fn js_array<'a>(value: Js<'a>) -> Option<&'a [Value]> {
    match value {
        Js::Json(Value::Array(a)) => Some(a),
        _ => None,
    }
}

/// `container[key]` for a JSON container, including what the prototype chain supplies.
fn get<'a>(container: &'a Value, key: &str) -> Js<'a> {
    let inherited = |proto: &[&str]| {
        if proto.contains(&key) || OBJECT_PROTO.contains(&key) {
            Js::Opaque
        } else {
            Js::Undefined
        }
    };
    match container {
        Value::Object(map) => match map.get(key) {
            Some(v) => Js::Json(v),
            None => inherited(&[]),
        },
        Value::Array(items) => {
            if let Some(i) = array_index(key) {
                return items.get(i as usize).map_or(Js::Undefined, Js::Json);
            }
            match key {
                "length" => Js::Number(items.len() as f64),
                "__proto__" => Js::Json(&EMPTY_ARRAY),
                _ => inherited(ARRAY_PROTO),
            }
        }
        Value::String(s) => {
            if let Some(i) = array_index(key) {
                return string_unit(s, i as usize);
            }
            match key {
                "length" => Js::Number(utf16_len(s) as f64),
                _ => inherited(STRING_PROTO),
            }
        }
        Value::Number(_) => inherited(NUMBER_PROTO),
        Value::Bool(_) => inherited(BOOLEAN_PROTO),
        Value::Null => Js::Undefined,
    }
}

/// The `index`-th UTF-16 code unit of `s` as a JavaScript one-unit string.
fn string_unit(s: &str, index: usize) -> Js<'static> {
    let mut at = 0usize;
    for c in s.chars() {
        let width = c.len_utf16();
        if index < at + width {
            return if width == 1 {
                Js::Char(c)
            } else {
                Js::LoneSurrogate
            };
        }
        at += width;
    }
    Js::Undefined
}

/// `Object.keys(container)`.
fn own_keys(container: &Value) -> Vec<String> {
    match container {
        Value::Object(map) => own_keys_where(map, |_| true)
            .into_iter()
            .map(str::to_owned)
            .collect(),
        Value::Array(items) => (0..items.len()).map(|i| i.to_string()).collect(),
        Value::String(s) => (0..utf16_len(s)).map(|i| i.to_string()).collect(),
        _ => Vec::new(),
    }
}

/// ECMAScript truthiness of a JSON member (`None` is `undefined`).
fn truthy(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => {
            let x = number_as_f64(n);
            x != 0.0 && !x.is_nan()
        }
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(_) | Value::Object(_)) => true,
    }
}

fn number_of(value: Option<&Value>) -> Option<f64> {
    match value {
        Some(Value::Number(n)) => Some(number_as_f64(n)),
        _ => None,
    }
}

/// Whether `String(value)` (or any `ToPrimitive`) throws: a plain object with an own `toString`
/// member, found directly or as an element of (nested) arrays, has no callable conversion.
fn primitive_throws(value: &Value) -> bool {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) if map.contains_key("toString") => return true,
            Value::Array(items) => stack.extend(items.iter()),
            _ => {}
        }
    }
    false
}

/// ECMAScript `String(value)`, `` `${value}` `` or `ToPropertyKey(value)`.
fn to_string(value: Option<&Value>) -> Result<String, Throw> {
    if value.is_some_and(primitive_throws) {
        return Err(Throw);
    }
    Ok(js_string_of(value))
}

/// ECMAScript `ToNumber(value)`.
fn to_number(value: Option<&Value>) -> Result<f64, Throw> {
    Ok(match value {
        None => f64::NAN,
        Some(Value::Null) => 0.0,
        Some(Value::Bool(b)) => f64::from(u8::from(*b)),
        Some(Value::Number(n)) => number_as_f64(n),
        Some(Value::String(s)) => string_to_number(s),
        Some(v @ Value::Array(_)) => string_to_number(&to_string(Some(v))?),
        Some(v @ Value::Object(_)) => {
            if primitive_throws(v) {
                return Err(Throw);
            }
            f64::NAN
        }
    })
}

/// ECMAScript `StringToNumber`: whitespace-trimmed decimal literal, `Infinity`, or an unsigned
/// `0x`/`0o`/`0b` integer; empty is 0; anything else is NaN.
fn string_to_number(s: &str) -> f64 {
    let t = js_trim(s);
    if t.is_empty() {
        return 0.0;
    }
    let b = t.as_bytes();
    if b.len() > 2 && b[0] == b'0' {
        let radix_bits = match b[1] {
            b'x' | b'X' => Some(4),
            b'o' | b'O' => Some(3),
            b'b' | b'B' => Some(1),
            _ => None,
        };
        if let Some(bits) = radix_bits {
            return non_decimal(&t[2..], bits);
        }
    }
    let (sign, body) = match b[0] {
        b'+' => (1.0, &t[1..]),
        b'-' => (-1.0, &t[1..]),
        _ => (1.0, t),
    };
    if body == "Infinity" {
        return sign * f64::INFINITY;
    }
    if !is_decimal_literal(body.as_bytes()) {
        return f64::NAN;
    }
    body.parse::<f64>().map_or(f64::NAN, |x| sign * x)
}

/// `StrUnsignedDecimalLiteral` without `Infinity`: digits with an optional point (at least one
/// digit in all), then an optional exponent with at least one digit.
fn is_decimal_literal(b: &[u8]) -> bool {
    let mut i = 0;
    let mut digits = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
        digits += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return false;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    i == b.len()
}

/// The value of `digits` in radix 2^`bits`, rounded to the nearest double.
fn non_decimal(digits: &str, bits: u32) -> f64 {
    if digits.is_empty() {
        return f64::NAN;
    }
    let radix = 1u32 << bits;
    let mut binary: Vec<bool> = Vec::with_capacity(digits.len() * bits as usize);
    for c in digits.chars() {
        let Some(d) = c.to_digit(radix) else {
            return f64::NAN;
        };
        for k in (0..bits).rev() {
            binary.push(d >> k & 1 == 1);
        }
    }
    let first_one = binary.iter().position(|&bit| bit).unwrap_or(binary.len());
    let significant = &binary[first_one..];
    if significant.len() <= 64 {
        return significant
            .iter()
            .fold(0u64, |acc, &bit| acc << 1 | u64::from(bit)) as f64;
    }
    // The top 64 bits plus a sticky bit round exactly like the whole number.
    let (head, tail) = significant.split_at(64);
    let mut top = head
        .iter()
        .fold(0u64, |acc, &bit| acc << 1 | u64::from(bit));
    if tail.iter().any(|&bit| bit) {
        top |= 1;
    }
    let shift = i32::try_from(tail.len()).unwrap_or(i32::MAX).min(2000);
    // Scaling by powers of two is exact until it overflows to infinity.
    let mut x = top as f64;
    let mut left = shift;
    while left > 0 && x.is_finite() {
        let s = left.min(1000);
        x *= 2f64.powi(s);
        left -= s;
    }
    x
}

/// `Math.round`.
fn js_round(x: f64) -> f64 {
    let f = x.floor();
    if x - f >= 0.5 {
        f + 1.0
    } else {
        f
    }
}

/// `isValidCalendarDate`: `^\d{4}-\d{2}-\d{2}$` naming a real day of the proleptic Gregorian
/// calendar; `Date.UTC` maps years 0–99 to 1900–1999, so those never round-trip.
fn is_valid_calendar_date(s: &str) -> bool {
    let b = s.as_bytes();
    let shape = b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit());
    if !shape {
        return false;
    }
    let num = |r: std::ops::Range<usize>| {
        b[r].iter()
            .fold(0u32, |acc, &c| acc * 10 + u32::from(c - b'0'))
    };
    let (year, month, day) = (num(0..4), num(5..7), num(8..10));
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || year < 100 {
        return false;
    }
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    day <= days
}

/// `decimalPlaces`: 0 for integers, else `N` of an `e-N` rendering or the digits after the point.
fn decimal_places(x: f64) -> f64 {
    if x.fract() == 0.0 {
        return 0.0;
    }
    let text = js_number_string(x.abs());
    if let Some(e) = text.find(['e', 'E']) {
        let exp = text[e + 1..].trim_start_matches('-');
        let digits: String = exp.chars().take_while(char::is_ascii_digit).collect();
        return digits.parse::<f64>().unwrap_or(0.0);
    }
    match text.find('.') {
        Some(dot) => (text.len() - dot - 1) as f64,
        None => 0.0,
    }
}

/// The choice keys of `spec.choices` (`value ?? label`) that are strings, the only ones a
/// submitted string can equal.
fn allowed_choices(spec: &Value) -> Result<HashSet<&str>, Throw> {
    let choices = match spec.get("choices") {
        None | Some(Value::Null) => return Ok(HashSet::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(Throw),
    };
    let mut allowed = HashSet::new();
    for choice in choices {
        if choice.is_null() {
            return Err(Throw);
        }
        let key = match choice.get("value") {
            None | Some(Value::Null) => choice.get("label"),
            some => some,
        };
        if let Some(Value::String(s)) = key {
            allowed.insert(s.as_str());
        }
    }
    Ok(allowed)
}

fn label_of(spec: &Value) -> Result<String, Throw> {
    to_string(spec.get("label"))
}

/// `validateScalarValue(spec, value)` for a value that is not nullish.
fn check_scalar(spec: &Value, value: Js<'_>) -> Step {
    let problem = |what: &str| -> Step { Ok(Some(format!("{} {what}", label_of(spec)?))) };
    match spec.get("type").and_then(Value::as_str).unwrap_or("") {
        "boolean" => {
            if matches!(value, Js::Json(Value::Bool(_))) {
                Ok(None)
            } else {
                problem("must be true or false")
            }
        }
        "multiSelect" => {
            let Some(entries) = js_array(value).filter(|entries| {
                entries
                    .iter()
                    .all(|e| matches!(e, Value::String(s) if !is_blank(s)))
            }) else {
                return problem("must be a list of choices");
            };
            if !truthy(spec.get("allowOther")) {
                let allowed = allowed_choices(spec)?;
                if entries
                    .iter()
                    .any(|e| !e.as_str().is_some_and(|s| allowed.contains(s)))
                {
                    return problem("contains an invalid choice");
                }
            }
            Ok(None)
        }
        "date" => {
            let text = value.as_text();
            let Some(date) = text
                .as_deref()
                .map(js_trim)
                .filter(|d| is_valid_calendar_date(d))
            else {
                return problem("must be a valid date (YYYY-MM-DD)");
            };
            let bound = |key: &str| {
                spec.get(key)
                    .and_then(Value::as_str)
                    .filter(|b| is_valid_calendar_date(b))
            };
            if let Some(min) = bound("min").filter(|min| date < *min) {
                return problem(&format!("must be on or after {min}"));
            }
            if let Some(max) = bound("max").filter(|max| date > *max) {
                return problem(&format!("must be on or before {max}"));
            }
            Ok(None)
        }
        kind @ ("number" | "currency") => {
            let x = match value {
                Js::Json(Value::Number(n)) => number_as_f64(n),
                Js::Number(x) => x,
                _ => return problem("must be a number"),
            };
            if !x.is_finite() {
                return problem("must be a number");
            }
            if let Some(min) = number_of(spec.get("min")).filter(|min| x < *min) {
                return problem(&format!("must be at least {}", js_number_string(min)));
            }
            if let Some(max) = number_of(spec.get("max")).filter(|max| x > *max) {
                return problem(&format!("must be at most {}", js_number_string(max)));
            }
            let two = Value::from(2);
            let precision = match spec.get("precision") {
                None | Some(Value::Null) if kind == "currency" => Some(&two),
                p => p,
            };
            if let Some(p) = precision {
                if decimal_places(x) > to_number(Some(p))? {
                    let plural = if number_of(Some(p)) == Some(1.0) {
                        ""
                    } else {
                        "s"
                    };
                    let p = to_string(Some(p))?;
                    return problem(&format!("must have at most {p} decimal place{plural}"));
                }
            }
            if kind == "number" {
                if let Some(step) = spec.get("step") {
                    let s = to_number(Some(step))?;
                    if s > 0.0 {
                        let quotient = x / s;
                        if (quotient - js_round(quotient)).abs() >= 1e-9
                            || (quotient - js_round(quotient)).is_nan()
                        {
                            let step = to_string(Some(step))?;
                            return problem(&format!("must be a multiple of {step}"));
                        }
                    }
                }
            }
            Ok(None)
        }
        "select" | "searchSelect" => {
            if !value.is_string() {
                return problem("must be text");
            }
            if !truthy(spec.get("allowOther")) {
                let allowed = allowed_choices(spec)?;
                let text = value.as_text();
                if !text.as_deref().is_some_and(|s| allowed.contains(s)) {
                    return problem("contains an invalid choice");
                }
            }
            Ok(None)
        }
        _ => {
            if value.is_string() {
                Ok(None)
            } else {
                problem("must be text")
            }
        }
    }
}

/// `validateLineItemsValue(field, raw)` for a value that is not nullish.
fn check_line_items(field: &Value, raw: Js<'_>) -> Step {
    let label = || label_of(field);
    let Some(rows) = js_array(raw) else {
        return Ok(Some(format!("{} must be a list of rows", label()?)));
    };
    let count = rows.len() as f64;
    let max_rows = match field.get("maxRows") {
        None => LINE_ITEM_ROWS,
        Some(m) => {
            let m = to_number(Some(m))?;
            if m.is_nan() {
                m
            } else {
                m.min(LINE_ITEM_ROWS)
            }
        }
    };
    if count > max_rows {
        return Ok(Some(format!(
            "{} allows at most {} rows",
            label()?,
            js_number_string(max_rows)
        )));
    }
    if let Some(min_rows) = field.get("minRows") {
        if count < to_number(Some(min_rows))? {
            let plural = if number_of(Some(min_rows)) == Some(1.0) {
                ""
            } else {
                "s"
            };
            return Ok(Some(format!(
                "{} requires at least {} row{plural}",
                label()?,
                to_string(Some(min_rows))?
            )));
        }
    }
    if truthy(field.get("required")) && rows.is_empty() {
        return Ok(Some(format!("{} is required", label()?)));
    }
    let columns: &[Value] = match field.get("columns") {
        None | Some(Value::Null) => &[],
        Some(Value::Array(columns)) => columns,
        Some(_) => return Err(Throw),
    };
    if columns.iter().any(Value::is_null) {
        return Err(Throw);
    }
    let column_ids: HashSet<&str> = columns
        .iter()
        .filter_map(|c| c.get("id").and_then(Value::as_str))
        .collect();
    for (index, row) in rows.iter().enumerate() {
        let n = index + 1;
        let Some(cells) = row.as_object() else {
            return Ok(Some(format!("{}: row {n} must be an object", label()?)));
        };
        if let Some(key) = own_keys_where(cells, |k| !column_ids.contains(k)).first() {
            return Ok(Some(format!(
                "{}: row {n} has unknown column \"{key}\"",
                label()?
            )));
        }
        for column in columns {
            let cell = get(row, &to_string(column.get("id"))?);
            let missing = cell.is_missing();
            if missing && truthy(column.get("required")) {
                return Ok(Some(format!(
                    "{}: {} is required in row {n}",
                    label()?,
                    label_of(column)?
                )));
            }
            if missing {
                continue;
            }
            if let Some(problem) = check_scalar(column, cell)? {
                return Ok(Some(format!("{}: row {n}: {problem}", label()?)));
            }
        }
    }
    Ok(None)
}

fn check_values(action_id: Option<&str>, action_fields: &Value, values: &Value) -> Step {
    if action_id.is_none_or(str::is_empty) || !truthy(Some(action_fields)) {
        return Ok(None);
    }
    let fields = match action_fields {
        Value::Array(fields) if fields.is_empty() => return Ok(None),
        Value::Array(fields) => fields,
        Value::Object(map) if number_of(map.get("length")) == Some(0.0) => return Ok(None),
        _ => return Err(Throw),
    };
    if fields.iter().any(Value::is_null) {
        return Err(Throw);
    }
    let empty = Value::Object(Map::new());
    let values = if values.is_null() { &empty } else { values };
    let allowed_ids: HashSet<&str> = fields
        .iter()
        .filter_map(|f| f.get("id").and_then(Value::as_str))
        .collect();
    if let Some(key) = own_keys(values)
        .into_iter()
        .find(|k| !allowed_ids.contains(k.as_str()))
    {
        return Ok(Some(format!("Unknown field: {key}")));
    }
    for field in fields {
        let raw = get(values, &to_string(field.get("id"))?);
        if field.get("type").and_then(Value::as_str) == Some("lineItems") {
            if raw.is_nullish() {
                if truthy(field.get("required")) {
                    return Ok(Some(format!("{} is required", label_of(field)?)));
                }
                continue;
            }
            if let Some(problem) = check_line_items(field, raw)? {
                return Ok(Some(problem));
            }
            continue;
        }
        if truthy(field.get("required")) && raw.is_missing() {
            return Ok(Some(format!("{} is required", label_of(field)?)));
        }
        if raw.is_nullish() || matches!(raw, Js::Json(Value::String(s)) if s.is_empty()) {
            continue;
        }
        if let Some(problem) = check_scalar(field, raw)? {
            return Ok(Some(problem));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_to_number_follows_ecmascript() {
        for (text, expected) in [
            ("", 0.0),
            ("  2 ", 2.0),
            ("0x1A", 26.0),
            ("0b101", 5.0),
            ("0o17", 15.0),
            (".5", 0.5),
            ("5.", 5.0),
            ("-Infinity", f64::NEG_INFINITY),
            ("1e3", 1000.0),
        ] {
            assert_eq!(
                string_to_number(text).to_bits(),
                expected.to_bits(),
                "{text}"
            );
        }
        for text in [
            "-0x1",
            "inf",
            "nan",
            "1_000",
            ".",
            "e5",
            "0x",
            "1e",
            "Infinityx",
        ] {
            assert!(string_to_number(text).is_nan(), "{text}");
        }
        // 2^64 + 1 rounds to 2^64.
        assert_eq!(
            non_decimal("10000000000000001", 4),
            18_446_744_073_709_551_616.0
        );
    }

    #[test]
    fn calendar_dates_are_real_days_from_year_100() {
        assert!(is_valid_calendar_date("2024-02-29"));
        assert!(!is_valid_calendar_date("2023-02-29"));
        assert!(!is_valid_calendar_date("1900-02-29"));
        assert!(is_valid_calendar_date("2000-02-29"));
        assert!(!is_valid_calendar_date("0050-01-01"));
        assert!(is_valid_calendar_date("0100-01-01"));
        assert!(!is_valid_calendar_date("2024-04-31"));
    }

    #[test]
    fn decimal_places_use_the_exponent_of_small_numbers() {
        assert_eq!(decimal_places(1.5e-7), 7.0);
        assert_eq!(decimal_places(0.000_001_5), 7.0);
        assert_eq!(decimal_places(12.25), 2.0);
        assert_eq!(decimal_places(-3.0), 0.0);
    }

    #[test]
    fn math_round_rounds_halves_up() {
        assert_eq!(js_round(-2.5), -2.0);
        assert_eq!(js_round(2.5), 3.0);
        assert_eq!(js_round(0.499_999_999_999_999_94), 0.0);
    }
}

//! Small helpers for reading untrusted JSON values and for cutting
//! strings by code point.
//!
//! Invariant: nothing here panics, whatever the shape of the input.

use serde_json::{Map, Value};

/// The value as a JSON object, if it is one (never an array or a scalar).
pub(crate) fn as_record(value: Option<&Value>) -> Option<&Map<String, Value>> {
    value.and_then(Value::as_object)
}

/// The string at `key` of `value`, when `value` is an object and the member is
/// a string.
pub(crate) fn str_field<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// The first of `keys` whose member is a non-empty string.
pub(crate) fn first_nonempty_str<'a>(value: &'a Value, keys: &[&str]) -> Option<&'a str> {
    keys.iter()
        .filter_map(|key| str_field(value, key))
        .find(|s| !s.is_empty())
}

/// Python truthiness of a JSON value (`null`, `false`, `0`, `""`, `[]` and
/// `{}` are false).
pub fn is_truthy(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// The length of `s` in code points.
pub(crate) fn char_len(s: &str) -> usize {
    s.chars().count()
}

/// `s` unchanged when it has at most `max` code points; otherwise its first
/// `max - 3` code points followed by `...`.
pub(crate) fn truncate_with_ellipsis(s: &str, max: usize) -> String {
    if char_len(s) <= max {
        return s.to_owned();
    }
    let keep = max.saturating_sub(3);
    let end = s.char_indices().nth(keep).map_or(s.len(), |(i, _)| i);
    let mut out = String::with_capacity(end + 3);
    out.push_str(&s[..end]);
    out.push_str("...");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn truncation_counts_code_points() {
        assert_eq!(truncate_with_ellipsis("abcdef", 6), "abcdef");
        assert_eq!(truncate_with_ellipsis("abcdefg", 6), "abc...");
        assert_eq!(truncate_with_ellipsis("😀😀😀😀😀", 4), "😀...");
    }

    #[test]
    fn truthiness_follows_python() {
        for (value, expected) in [
            (json!(null), false),
            (json!(0), false),
            (json!(0.0), false),
            (json!(2), true),
            (json!(""), false),
            (json!("x"), true),
            (json!([]), false),
            (json!([0]), true),
            (json!({}), false),
            (json!({"a": 1}), true),
        ] {
            assert_eq!(is_truthy(Some(&value)), expected, "{value}");
        }
        assert!(!is_truthy(None));
    }
}

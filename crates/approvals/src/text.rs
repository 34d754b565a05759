//! Small text helpers that reproduce the reference plugin's string handling.
//!
//! The registry is shared with a Python implementation, so trimming, cutting
//! and value rendering follow Python semantics (approvals.md "Units": lengths
//! are Unicode scalar values, never bytes). Pure functions, no I/O.

use serde_json::Value;

/// Whether Python's `str.isspace` holds for `c`.
///
/// Rust's `char::is_whitespace` misses the four information separators
/// U+001C..U+001F that Python treats as whitespace.
pub(crate) fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python `str.strip()`.
pub(crate) fn py_strip(text: &str) -> &str {
    text.trim_matches(is_py_space)
}

/// Python `text[:max_chars]`: keeps at most `max_chars` Unicode scalar values.
pub(crate) fn cut_chars(text: &str, max_chars: usize) -> &str {
    match text.char_indices().nth(max_chars) {
        Some((index, _)) => &text[..index],
        None => text,
    }
}

/// Python truthiness of a JSON value.
pub(crate) fn is_truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Python `str(value)` for JSON values.
///
/// Strings, integers, booleans and null follow Python exactly; floats, arrays
/// and objects use compact JSON (approvals.md Q8 recommendation).
pub(crate) fn py_str(value: &Value) -> String {
    match value {
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Array(_) | Value::Object(_) => value.to_string(),
    }
}

/// Python `repr()` of a string, used in the "unexpected consume status" note.
pub(crate) fn py_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strip_matches_python() {
        assert_eq!(py_strip("\u{1c} a b \u{a0}\n"), "a b");
        assert_eq!(py_strip("   "), "");
    }

    #[test]
    fn cut_counts_scalar_values() {
        assert_eq!(cut_chars("héllo", 2), "hé");
        assert_eq!(cut_chars("😀😀😀", 2), "😀😀");
        assert_eq!(cut_chars("ab", 5), "ab");
    }

    #[test]
    fn str_and_truthiness() {
        assert_eq!(py_str(&json!(true)), "True");
        assert_eq!(py_str(&json!(null)), "None");
        assert_eq!(py_str(&json!(8200)), "8200");
        assert_eq!(py_str(&json!({"a":1})), "{\"a\":1}");
        assert!(!is_truthy(&json!(0)));
        assert!(!is_truthy(&json!(0.0)));
        assert!(!is_truthy(&json!("")));
        assert!(is_truthy(&json!(" ")));
    }

    #[test]
    fn repr_picks_quotes_like_python() {
        assert_eq!(py_repr("cancelled"), "'cancelled'");
        assert_eq!(py_repr("it's"), "\"it's\"");
        assert_eq!(py_repr("a'\"b"), "'a\\'\"b'");
    }
}

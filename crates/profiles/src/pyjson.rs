//! The bytes of Python's `json.dumps(value, indent=2, sort_keys=True)` (cli.md §6.1), so a file
//! we write is the file canon-hermes-plugin would write: two-space indent, `": "` between key
//! and value, `,` at line ends, keys sorted by code point, `{}` and `[]` for empty containers,
//! no trailing newline, every character outside printable ASCII (space to `~`) escaped as
//! `\n`-style or `\uXXXX` (lower-case hex, surrogate pairs above U+FFFF), and floats as
//! Python's `repr` prints them.
//!
//! Known gaps: an integer outside the 64-bit range is read by `serde_json` as a float, so it is
//! written in float form where Python would keep every digit; and Python's reader accepts
//! `NaN` and `Infinity`, which `serde_json` refuses as a parse error (no Canon file holds any).

use std::fmt::Write as _;

use serde_json::{Number, Value};

/// `json.dumps(value, indent=2, sort_keys=True)` (with Python's default `ensure_ascii=True`).
pub fn dumps(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value, 0);
    out
}

fn indent(out: &mut String, level: usize) {
    out.push('\n');
    for _ in 0..level {
        out.push_str("  ");
    }
}

fn write_value(out: &mut String, value: &Value, level: usize) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                indent(out, level + 1);
                write_value(out, item, level + 1);
            }
            indent(out, level);
            out.push(']');
        }
        Value::Object(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            // Rust orders `str` by UTF-8 bytes, which is code point order, as Python sorts.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                indent(out, level + 1);
                write_string(out, key);
                out.push_str(": ");
                write_value(out, item, level + 1);
            }
            indent(out, level);
            out.push('}');
        }
    }
}

/// A JSON string with Python's `ensure_ascii` escapes.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

fn write_number(out: &mut String, n: &Number) {
    if n.is_f64() {
        match n.as_f64() {
            Some(f) => out.push_str(&float_repr(f)),
            None => out.push_str(&n.to_string()),
        }
    } else {
        out.push_str(&n.to_string());
    }
}

/// Python's `repr(float)`: the shortest digits that round-trip, in fixed notation when the
/// decimal exponent is in `-4..16` (with `.0` for integral values), else `d.ddde±XX`.
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    // `{:e}` prints the shortest round-trip digits: `-1.2345e-7`.
    let sci = format!("{f:e}");
    let (negative, sci) = match sci.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, sci.as_str()),
    };
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    // Python's `decpt`: where the decimal point goes relative to the digits.
    let decpt = exponent + 1;
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    let len = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    if decpt <= -4 || decpt > 16 {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = decpt - 1;
        let _ = write!(out, "e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    } else if decpt <= 0 {
        out.push_str("0.");
        for _ in 0..-decpt {
            out.push('0');
        }
        out.push_str(&digits);
    } else if decpt < len {
        let point = usize::try_from(decpt).unwrap_or(0);
        out.push_str(&digits[..point]);
        out.push('.');
        out.push_str(&digits[point..]);
    } else {
        out.push_str(&digits);
        for _ in 0..decpt - len {
            out.push('0');
        }
        out.push_str(".0");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn layout_matches_python_json_dumps() {
        // Expected bytes from CPython 3.11: json.dumps(v, indent=2, sort_keys=True).
        let value = json!({"b": [1, {"z": null, "a": true}], "a": {}, "c": [], "é": "ü\u{1F600}\n\"\\/\u{7f}\u{1}"});
        let expected = "{\n  \"a\": {},\n  \"b\": [\n    1,\n    {\n      \"a\": true,\n      \"z\": null\n    }\n  ],\n  \"c\": [],\n  \"\\u00e9\": \"\\u00fc\\ud83d\\ude00\\n\\\"\\\\/\\u007f\\u0001\"\n}";
        assert_eq!(dumps(&value), expected);
        assert_eq!(dumps(&json!({})), "{}");
        assert_eq!(dumps(&json!("x")), "\"x\"");
    }

    #[test]
    fn floats_print_as_python_repr() {
        for (f, expected) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-0.0, "-0.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (2.5e300, "2.5e+300"),
            (12.5, "12.5"),
            (100.0, "100.0"),
        ] {
            assert_eq!(float_repr(f), expected, "{f}");
        }
        assert_eq!(dumps(&json!([1.0, 2, -3])), "[\n  1.0,\n  2,\n  -3\n]");
    }
}

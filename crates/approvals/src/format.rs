//! The registry file's byte format (approvals.md §3.4).
//!
//! Output: one JSON object, 2-space indentation, object keys sorted by code point
//! at every level, non-ASCII characters escaped as `\uXXXX` (surrogate pairs above
//! U+FFFF), no trailing newline. This matches what the Python plugin writes, so
//! diffs between the two writers stay readable; correctness never depends on the
//! bytes, readers parse JSON. Pure: no I/O.

use std::io;

use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;
use serde_json::ser::{Formatter, PrettyFormatter};
use serde_json::{Map, Value};

use crate::state::Registry;

/// Serializes the registry in the approvals.md §3.4 format.
pub fn to_file_bytes(registry: &Registry) -> Result<Vec<u8>, serde_json::Error> {
    // Entries are stored in a `BTreeMap`, so the top level is already sorted; the
    // entry objects are sorted on the fly, without cloning the document.
    let mut out = Vec::with_capacity(512 * registry.len() + 16);
    let mut serializer = serde_json::Serializer::with_formatter(
        &mut out,
        AsciiPretty(PrettyFormatter::with_indent(b"  ")),
    );
    let mut map = serializer.serialize_map(Some(registry.len()))?;
    for entry in registry.entries() {
        map.serialize_entry(entry.approval_id(), &Sorted::Object(entry.fields()))?;
    }
    SerializeMap::end(map)?;
    Ok(out)
}

/// Serializes any JSON value in the approvals.md §3.4 format.
pub fn to_canonical_bytes(value: &Value) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(4096);
    let mut serializer = serde_json::Serializer::with_formatter(
        &mut out,
        AsciiPretty(PrettyFormatter::with_indent(b"  ")),
    );
    Sorted::Value(value).serialize(&mut serializer)?;
    Ok(out)
}

/// A JSON value serialized with object keys in code-point order at every level.
enum Sorted<'a> {
    Value(&'a Value),
    Object(&'a Map<String, Value>),
}

impl Serialize for Sorted<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let object = match *self {
            Sorted::Object(map) | Sorted::Value(Value::Object(map)) => map,
            Sorted::Value(Value::Array(items)) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Sorted::Value(item))?;
                }
                return seq.end();
            }
            Sorted::Value(other) => return other.serialize(serializer),
        };
        let mut pairs: Vec<(&String, &Value)> = object.iter().collect();
        pairs.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut map = serializer.serialize_map(Some(pairs.len()))?;
        for (key, value) in pairs {
            map.serialize_entry(key, &Sorted::Value(value))?;
        }
        map.end()
    }
}

/// serde_json's pretty formatter with Python's `ensure_ascii` string escaping.
struct AsciiPretty<'a>(PrettyFormatter<'a>);

impl Formatter for AsciiPretty<'_> {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (index, c) in fragment.char_indices() {
            if c.is_ascii() {
                continue;
            }
            writer.write_all(&fragment.as_bytes()[start..index])?;
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(writer, "\\u{unit:04x}")?;
            }
            start = index + c.len_utf8();
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }

    fn begin_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_array(writer)
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array(writer)
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_array_value(writer, first)
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array_value(writer)
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object(writer)
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object(writer)
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_object_key(writer, first)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object_value(writer)
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object_value(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn matches_python_json_dumps_layout() {
        let value = json!({"b": {"z": 1, "a": [1.5, "é😀"]}, "a": {}, "c": []});
        let text = String::from_utf8(to_canonical_bytes(&value).unwrap()).unwrap();
        let expected = "{\n  \"a\": {},\n  \"b\": {\n    \"a\": [\n      1.5,\n      \"\\u00e9\\ud83d\\ude00\"\n    ],\n    \"z\": 1\n  },\n  \"c\": []\n}";
        assert_eq!(text, expected);
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
    }

    #[test]
    fn empty_registry_is_braces() {
        assert_eq!(to_file_bytes(&Registry::default()).unwrap(), b"{}");
    }
}

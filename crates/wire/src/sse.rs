//! The SSE frame parser of canon-wire.md §5.2, kept pure (no I/O, no clock).
//!
//! Bytes go in through [`SseParser::push`] in whatever chunks the network delivers;
//! complete [`Frame`]s come out. The accept/reject decisions are the reference
//! client's (canon-wire.md §5.2 steps 1–7), with the two \[target\] robustness fixes:
//!
//! * line endings are normalized on complete lines (CR, LF and CRLF all end a
//!   line, and a CRLF split across two chunks is still one line break), so the
//!   output never depends on how the bytes were split;
//! * the bytes buffered for one frame are bounded ([`MAX_FRAME_BYTES`] by
//!   default); a larger frame is a [`SseError::FrameTooLarge`] and the parser
//!   stays failed (the caller reconnects).
//!
//! UTF-8 is decoded incrementally. An invalid byte sequence is replaced by
//! U+FFFD (one per maximal invalid subpart, exactly as
//! [`String::from_utf8_lossy`] would on the whole stream) instead of failing:
//! failing would make the connection replay the same bytes forever. A frame
//! that is still incomplete when the stream ends is dropped.

use serde_json::Value;

/// Upper bound for the bytes of one frame (canon-wire.md §5.2 \[target\]).
pub const MAX_FRAME_BYTES: usize = 4 * 1024 * 1024;

/// The longest event id kept as a stream cursor (our number): Canon's ids are short; a longer
/// one is not a `Last-Event-ID` a client can resend.
pub const MAX_CURSOR_BYTES: usize = 1_024;

/// Whether an event id can be a stream cursor: a valid header value of at most
/// [`MAX_CURSOR_BYTES`] (visible ASCII and inner spaces). Any other id, sent back as
/// `Last-Event-ID`, would make every reconnect fail for good, so neither the stream client nor
/// a durable inbox adopts it: the previous cursor stays.
pub fn usable_cursor(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_CURSOR_BYTES && id.bytes().all(|b| (0x20..=0x7e).contains(&b))
}

/// The data of an accepted frame: JSON when the joined data lines parse as
/// JSON, else the raw text (canon-wire.md §5.2 step 6).
#[derive(Debug, Clone, PartialEq)]
pub enum FrameData {
    /// The data parsed as JSON (any JSON value, not only objects).
    Json(Value),
    /// The data did not parse as JSON and is kept as text.
    Text(String),
}

impl FrameData {
    /// The JSON object, when the data is one.
    pub fn as_object(&self) -> Option<&serde_json::Map<String, Value>> {
        match self {
            FrameData::Json(Value::Object(map)) => Some(map),
            _ => None,
        }
    }

    /// Converts the data into a JSON value (text becomes a JSON string).
    pub fn into_value(self) -> Value {
        match self {
            FrameData::Json(value) => value,
            FrameData::Text(text) => Value::String(text),
        }
    }

    fn parse(text: String) -> FrameData {
        match serde_json::from_str::<Value>(&text) {
            Ok(value) => FrameData::Json(value),
            Err(_) => FrameData::Text(text),
        }
    }
}

/// One accepted SSE frame (canon-wire.md §5.2 step 7).
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// The event name (never empty).
    pub event: String,
    /// The data, parsed as JSON where possible.
    pub data: FrameData,
    /// The event id; `None` when absent or empty (the cursor is unchanged).
    pub id: Option<String>,
}

/// Why the parser stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SseError {
    /// One frame grew past the configured bound.
    #[error("sse frame exceeds {limit} bytes")]
    FrameTooLarge {
        /// The bound in bytes.
        limit: usize,
    },
}

/// Incremental SSE frame parser (canon-wire.md §5.2).
#[derive(Debug, Clone)]
pub struct SseParser {
    max_frame_bytes: usize,
    /// Bytes of an incomplete UTF-8 sequence at the end of the last chunk.
    utf8_tail: Vec<u8>,
    /// The last character seen was CR: a directly following LF belongs to it.
    pending_cr: bool,
    /// The incomplete current line.
    line: String,
    /// Bytes of the complete lines of the current frame (terminators count 1).
    frame_bytes: usize,
    event: Option<String>,
    id: Option<String>,
    data: String,
    has_data: bool,
    failed: Option<SseError>,
}

impl Default for SseParser {
    fn default() -> Self {
        SseParser::new()
    }
}

impl SseParser {
    /// A parser with the default frame bound [`MAX_FRAME_BYTES`].
    pub fn new() -> SseParser {
        SseParser::with_max_frame_bytes(MAX_FRAME_BYTES)
    }

    /// A parser with a custom frame bound (at least 1 byte).
    pub fn with_max_frame_bytes(max_frame_bytes: usize) -> SseParser {
        SseParser {
            max_frame_bytes: max_frame_bytes.max(1),
            utf8_tail: Vec::new(),
            pending_cr: false,
            line: String::new(),
            frame_bytes: 0,
            event: None,
            id: None,
            data: String::new(),
            has_data: false,
            failed: None,
        }
    }

    /// Feeds one chunk of the byte stream; appends every frame it completes to
    /// `out`. After an error the parser stays failed and returns that error.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<Frame>) -> Result<(), SseError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let result = self.decode(chunk, out);
        if let Err(err) = &result {
            self.failed = Some(err.clone());
        }
        result
    }

    /// Convenience: parses one complete byte string in a fresh parser.
    pub fn parse_all(bytes: &[u8]) -> Result<Vec<Frame>, SseError> {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        parser.push(bytes, &mut out)?;
        Ok(out)
    }

    fn decode(&mut self, mut input: &[u8], out: &mut Vec<Frame>) -> Result<(), SseError> {
        // Finish a sequence split across chunks, a few bytes at a time, so the
        // decision for those bytes is the one a contiguous decode would make.
        while !self.utf8_tail.is_empty() && !input.is_empty() {
            let take = input.len().min(4);
            let mut small = std::mem::take(&mut self.utf8_tail);
            small.extend_from_slice(&input[..take]);
            input = &input[take..];
            self.decode_slice(&small, out)?;
        }
        if self.utf8_tail.is_empty() {
            self.decode_slice(input, out)?;
        } else {
            // Input exhausted while a sequence is still incomplete.
            debug_assert!(input.is_empty());
        }
        Ok(())
    }

    /// Decodes `bytes` (which start at a character boundary), keeping an
    /// incomplete trailing sequence in `utf8_tail`.
    fn decode_slice(&mut self, mut bytes: &[u8], out: &mut Vec<Frame>) -> Result<(), SseError> {
        loop {
            match std::str::from_utf8(bytes) {
                Ok(text) => return self.feed_text(text, out),
                Err(err) => {
                    let (valid, rest) = bytes.split_at(err.valid_up_to());
                    // `valid` is valid UTF-8 by construction.
                    if let Ok(text) = std::str::from_utf8(valid) {
                        self.feed_text(text, out)?;
                    }
                    match err.error_len() {
                        Some(len) => {
                            self.feed_text("\u{FFFD}", out)?;
                            bytes = rest.get(len..).unwrap_or_default();
                        }
                        None => {
                            self.utf8_tail = rest.to_vec();
                            return Ok(());
                        }
                    }
                }
            }
        }
    }

    fn feed_text(&mut self, mut text: &str, out: &mut Vec<Frame>) -> Result<(), SseError> {
        if text.is_empty() {
            return Ok(());
        }
        if self.pending_cr {
            self.pending_cr = false;
            if let Some(rest) = text.strip_prefix('\n') {
                text = rest;
            }
        }
        while !text.is_empty() {
            let Some(pos) = text.bytes().position(|b| b == b'\n' || b == b'\r') else {
                self.line.push_str(text);
                return self.check_size();
            };
            let line_part = &text[..pos];
            if self.line.is_empty() {
                self.frame_bytes += line_part.len() + 1;
                self.check_size()?;
                self.complete_line(line_part, out);
            } else {
                self.line.push_str(line_part);
                let line = std::mem::take(&mut self.line);
                self.frame_bytes += line.len() + 1;
                self.check_size()?;
                self.complete_line(&line, out);
                // Keep the allocation for the next long line.
                self.line = line;
                self.line.clear();
            }
            let terminator = text.as_bytes()[pos];
            text = &text[pos + 1..];
            if terminator == b'\r' {
                match text.strip_prefix('\n') {
                    Some(rest) => text = rest,
                    None if text.is_empty() => self.pending_cr = true,
                    None => {}
                }
            }
        }
        Ok(())
    }

    fn check_size(&self) -> Result<(), SseError> {
        if self.frame_bytes + self.line.len() > self.max_frame_bytes {
            Err(SseError::FrameTooLarge {
                limit: self.max_frame_bytes,
            })
        } else {
            Ok(())
        }
    }

    fn complete_line(&mut self, line: &str, out: &mut Vec<Frame>) {
        if line.is_empty() {
            self.end_frame(out);
        } else if line.starts_with(':') {
            // Comment or keepalive.
        } else if let Some(rest) = line.strip_prefix("id:") {
            self.id = Some(py_strip(rest).to_owned());
        } else if let Some(rest) = line.strip_prefix("event:") {
            self.event = Some(py_strip(rest).to_owned());
        } else if let Some(rest) = line.strip_prefix("data:") {
            if self.has_data {
                self.data.push('\n');
            }
            self.data.push_str(py_strip(rest));
            self.has_data = true;
        }
        // Every other line (`retry:`, unknown fields, bare `data`) is ignored.
    }

    fn end_frame(&mut self, out: &mut Vec<Frame>) {
        let event = self.event.take();
        let id = self.id.take().filter(|id| !id.is_empty());
        let data = std::mem::take(&mut self.data);
        let has_data = std::mem::replace(&mut self.has_data, false);
        self.frame_bytes = 0;
        if let Some(event) = event.filter(|event| !event.is_empty()) {
            if has_data {
                out.push(Frame {
                    event,
                    data: FrameData::parse(data),
                    id,
                });
            }
        }
    }
}

/// Strips surrounding whitespace the way Python's `str.strip()` does: Unicode
/// white space plus the separators U+001C–U+001F.
fn py_strip(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn only_header_safe_ids_become_the_cursor() {
        assert!(usable_cursor("1764000000000-0"));
        assert!(usable_cursor("evt 42"));
        assert!(!usable_cursor(""));
        assert!(!usable_cursor("bad\u{7f}id"));
        assert!(!usable_cursor("caf\u{e9}"));
        assert!(!usable_cursor("line\nbreak"));
        assert!(!usable_cursor(&"9".repeat(MAX_CURSOR_BYTES + 1)));
        assert!(usable_cursor(&"9".repeat(MAX_CURSOR_BYTES)));
    }

    fn frame(event: &str, data: FrameData, id: Option<&str>) -> Frame {
        Frame {
            event: event.to_owned(),
            data,
            id: id.map(str::to_owned),
        }
    }

    fn text(s: &str) -> FrameData {
        FrameData::Text(s.to_owned())
    }

    /// The canon-wire.md §5.2 vectors: frame text (lines joined by LF) → expected result.
    fn vectors() -> Vec<(&'static str, Option<Frame>)> {
        vec![
            (
                "event: message.created\ndata: {\"a\":1}",
                Some(frame(
                    "message.created",
                    FrameData::Json(json!({"a":1})),
                    None,
                )),
            ),
            ("data: {\"a\":1}", None),
            (
                "id: 7\nevent: ping\ndata:  hello  ",
                Some(frame("ping", text("hello"), Some("7"))),
            ),
            ("id: 8", None),
            (
                "event:x\ndata:1\ndata:2",
                Some(frame("x", text("1\n2"), None)),
            ),
            (
                ": comment\nevent: heartbeat\ndata: {}",
                Some(frame("heartbeat", FrameData::Json(json!({})), None)),
            ),
            ("event: e\ndata", None),
            (
                "id:9\nevent: e\ndata: [1]\nretry: 5",
                Some(frame("e", FrameData::Json(json!([1])), Some("9"))),
            ),
        ]
    }

    fn check(input: &str, expected: Option<Frame>) {
        for ending in ["\n", "\r\n", "\r"] {
            let wire = format!("{}{ending}{ending}", input.replace('\n', ending));
            let frames = SseParser::parse_all(wire.as_bytes()).expect("no error");
            assert_eq!(
                frames,
                expected.clone().into_iter().collect::<Vec<_>>(),
                "{wire:?}"
            );
        }
    }

    #[test]
    fn spec_vectors_accept_and_reject() {
        for (input, expected) in vectors() {
            check(input, expected);
        }
    }

    fn spec_stream() -> (Vec<u8>, Vec<Frame>) {
        let mut bytes = Vec::new();
        let mut frames = Vec::new();
        for (i, (input, expected)) in vectors().into_iter().enumerate() {
            let ending = ["\n", "\r\n", "\r"][i % 3];
            bytes.extend_from_slice(input.replace('\n', ending).as_bytes());
            bytes.extend_from_slice(ending.repeat(2).as_bytes());
            frames.extend(expected);
        }
        // Multi-byte characters, so splits land inside UTF-8 sequences too.
        bytes.extend_from_slice("event: ü\r\ndata: \"日本€😀\"\r\n\r\n".as_bytes());
        frames.push(frame("ü", FrameData::Json(json!("日本€😀")), None));
        (bytes, frames)
    }

    #[test]
    fn spec_vectors_survive_every_single_split_offset() {
        let (bytes, expected) = spec_stream();
        for cut in 0..=bytes.len() {
            let mut parser = SseParser::new();
            let mut out = Vec::new();
            parser.push(&bytes[..cut], &mut out).expect("first half");
            parser.push(&bytes[cut..], &mut out).expect("second half");
            assert_eq!(out, expected, "cut at {cut}");
        }
    }

    #[test]
    fn spec_vectors_survive_byte_by_byte_feeding() {
        let (bytes, expected) = spec_stream();
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for byte in &bytes {
            parser
                .push(std::slice::from_ref(byte), &mut out)
                .expect("byte");
        }
        assert_eq!(out, expected);
    }

    #[test]
    fn crlf_split_across_chunks_is_one_line_break() {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        parser.push(b"event: a\r", &mut out).unwrap();
        parser.push(b"\ndata: 1\r", &mut out).unwrap();
        assert!(out.is_empty(), "the split CRLF must not end the frame");
        parser.push(b"\n\r", &mut out).unwrap();
        parser.push(b"\n", &mut out).unwrap();
        assert_eq!(out, vec![frame("a", FrameData::Json(json!(1)), None)]);
    }

    #[test]
    fn empty_id_and_empty_event_are_absent() {
        check(
            "id: \nevent: e\ndata: 1",
            Some(frame("e", FrameData::Json(json!(1)), None)),
        );
        check(
            "id: 5\nid:\nevent: e\ndata: 1",
            Some(frame("e", FrameData::Json(json!(1)), None)),
        );
        check("event:   \ndata: 1", None);
        check("event: e\ndata:", Some(frame("e", text(""), None)));
    }

    #[test]
    fn later_field_lines_win_and_unknown_lines_are_ignored() {
        check(
            "event: a\nevent: b\nfoo: bar\n  data: x\ndata: 2",
            Some(frame("b", FrameData::Json(json!(2)), None)),
        );
    }

    #[test]
    fn strip_matches_python_whitespace() {
        check(
            "event:\u{a0}e\u{1f}\ndata:\u{3000}3\u{2003}",
            Some(frame("e", FrameData::Json(json!(3)), None)),
        );
    }

    #[test]
    fn incomplete_frame_at_end_of_stream_is_not_emitted() {
        assert_eq!(
            SseParser::parse_all(b"event: a\ndata: 1\n").unwrap(),
            vec![]
        );
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let frames = SseParser::parse_all(b"event: a\ndata: x\xffy\xe2\x82\n\n").unwrap();
        assert_eq!(frames, vec![frame("a", text("x\u{FFFD}y\u{FFFD}"), None)]);
    }

    #[test]
    fn oversize_frame_is_an_error_and_sticks() {
        let mut parser = SseParser::with_max_frame_bytes(16);
        let mut out = Vec::new();
        parser.push(b"event: a\ndata: 1\n\n", &mut out).unwrap_err();
        let mut parser = SseParser::with_max_frame_bytes(32);
        parser.push(b"event: a\ndata: 1\n\n", &mut out).unwrap();
        assert_eq!(out.len(), 1);
        let err = parser.push(&[b'x'; 40], &mut out).unwrap_err();
        assert_eq!(err, SseError::FrameTooLarge { limit: 32 });
        assert_eq!(parser.push(b"\n\n", &mut out), Err(err));
    }

    #[test]
    fn bound_counts_the_frame_not_the_stream() {
        let mut parser = SseParser::with_max_frame_bytes(32);
        let mut out = Vec::new();
        for _ in 0..100 {
            parser
                .push(b"event: a\ndata: 1\n\n: keepalive\n\n", &mut out)
                .unwrap();
        }
        assert_eq!(out.len(), 100);
    }

    fn parse_split(bytes: &[u8], cuts: &[usize], max: usize) -> (Vec<Frame>, Option<SseError>) {
        let mut parser = SseParser::with_max_frame_bytes(max);
        let mut out = Vec::new();
        let mut start = 0;
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        points.sort_unstable();
        points.push(bytes.len());
        for end in points {
            if let Err(err) = parser.push(&bytes[start..end], &mut out) {
                return (out, Some(err));
            }
            start = end;
        }
        (out, None)
    }

    fn sse_like() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just(b"event: ".to_vec()),
            Just(b"data: ".to_vec()),
            Just(b"id: ".to_vec()),
            Just(b": c".to_vec()),
            Just(b"\n".to_vec()),
            Just(b"\r".to_vec()),
            Just(b"\r\n".to_vec()),
            Just("é€😀".as_bytes().to_vec()),
            Just(b"{\"a\":[1,2]}".to_vec()),
            proptest::collection::vec(any::<u8>(), 0..6),
        ];
        proptest::collection::vec(piece, 0..40).prop_map(|parts| parts.concat())
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512),
                                          cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
            let _ = parse_split(&bytes, &cuts, 64);
            let _ = parse_split(&bytes, &cuts, MAX_FRAME_BYTES);
        }

        #[test]
        fn chunking_invariant(bytes in sse_like(),
                              cuts in proptest::collection::vec(any::<usize>(), 0..10),
                              max in prop_oneof![Just(24usize), Just(MAX_FRAME_BYTES)]) {
            let whole = parse_split(&bytes, &[], max);
            let split = parse_split(&bytes, &cuts, max);
            prop_assert_eq!(whole, split);
        }

        #[test]
        fn decoding_matches_lossy_utf8(bytes in proptest::collection::vec(any::<u8>(), 0..64),
                                       cuts in proptest::collection::vec(any::<usize>(), 0..6)) {
            // Wrap arbitrary bytes as one data line (newlines removed).
            let payload: Vec<u8> = bytes.into_iter().filter(|b| *b != b'\n' && *b != b'\r').collect();
            let mut wire = b"event: e\ndata:".to_vec();
            wire.extend_from_slice(&payload);
            wire.extend_from_slice(b"\n\n");
            let (frames, err) = parse_split(&wire, &cuts, MAX_FRAME_BYTES);
            prop_assert!(err.is_none());
            let lossy = String::from_utf8_lossy(&payload).into_owned();
            let expected = FrameData::parse(py_strip(&lossy).to_owned());
            prop_assert_eq!(frames, vec![Frame { event: "e".into(), data: expected, id: None }]);
        }
    }
}

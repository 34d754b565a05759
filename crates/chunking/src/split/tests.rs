//! Tests for the splitter: spec vectors, coverage-checklist cases and
//! proptest invariants (turns.md §3.1–§3.5, canon-wire.md §6.3).

use proptest::prelude::*;
use unicode_segmentation::{GraphemeCursor, UnicodeSegmentation};

use super::*;

const CP: Boundary = Boundary::CodePoint;
const GR: Boundary = Boundary::Grapheme;

/// Checks the byte lengths of the parts in one mode.
fn check(text: &str, max_bytes: usize, boundary: Boundary, expected: &[usize]) {
    let parts = split_text(text, max_bytes, boundary).expect("valid budget");
    let lengths: Vec<usize> = parts.iter().map(|part| utf8_len(part)).collect();
    assert_eq!(lengths, expected, "{boundary:?}, max_bytes {max_bytes}");
    assert_invariants(text, max_bytes, boundary);
}

/// Checks the byte lengths of the parts in both modes (they agree whenever
/// no code-point hard cut falls inside a grapheme cluster).
fn check_both(text: &str, max_bytes: usize, expected: &[usize]) {
    check(text, max_bytes, CP, expected);
    check(text, max_bytes, GR, expected);
}

/// Checks the exact part texts in both modes.
fn check_texts(text: &str, max_bytes: usize, expected: &[&str]) {
    for boundary in [CP, GR] {
        let parts = split_text(text, max_bytes, boundary).expect("valid budget");
        assert_eq!(parts, expected, "{boundary:?}, max_bytes {max_bytes}");
        assert_invariants(text, max_bytes, boundary);
    }
}

/// One emitted part with its position in the input.
struct Located<'a> {
    /// Byte offset of the part in the input.
    start: usize,
    /// The input from `start` on, i.e. the splitter's `remaining`.
    remaining: &'a str,
    part: Part<'a>,
}

fn locate(text: &str, max_bytes: usize, boundary: Boundary) -> Vec<Located<'_>> {
    let mut start = 0;
    let mut located = Vec::new();
    for part in split_parts(text, max_bytes, boundary).expect("valid budget") {
        located.push(Located {
            start,
            remaining: &text[start..],
            part,
        });
        start += part.text.len() + part.separator.as_str().len();
    }
    located
}

fn is_grapheme_boundary(text: &str, offset: usize) -> bool {
    GraphemeCursor::new(offset, text.len(), true)
        .is_boundary(text, 0)
        .unwrap_or(false)
}

fn first_grapheme_len(text: &str) -> usize {
    text.graphemes(true).next().map_or(0, str::len)
}

/// Whether a part ends with a carriage return whose line feed the input puts
/// right after the part (in a separator or the next part): a split CRLF.
fn splits_crlf(item: &Located<'_>) -> bool {
    item.part.text.ends_with('\r') && item.remaining[item.part.text.len()..].starts_with('\n')
}

/// The invariants of turns.md §3.2–§3.4 for one split.
fn assert_invariants(text: &str, max_bytes: usize, boundary: Boundary) {
    let budget = max_bytes.min(CANON_MESSAGE_TEXT_MAX_BYTES);
    let located = locate(text, max_bytes, boundary);
    assert!(!located.is_empty(), "the part list is never empty");
    if text.len() <= budget {
        assert_eq!(located.len(), 1);
        assert_eq!(
            located[0].part.text, text,
            "text within budget is returned unchanged"
        );
    }
    let mut rebuilt = String::with_capacity(text.len());
    let last = located.len() - 1;
    for (i, item) in located.iter().enumerate() {
        let Part {
            text: part,
            separator,
        } = item.part;
        assert!(
            utf8_len(part) <= budget,
            "part {i} has {} bytes > {budget}",
            part.len()
        );
        assert!(!part.is_empty() || text.is_empty(), "part {i} is empty");
        assert!(
            text.is_char_boundary(item.start) && text.is_char_boundary(item.start + part.len())
        );
        // The part is literally the slice of the input at its position.
        assert_eq!(&text[item.start..item.start + part.len()], part);
        if i == last {
            assert_eq!(separator, Separator::None, "nothing follows the last part");
        }
        if boundary == Boundary::Grapheme && separator == Separator::None && i != last {
            assert!(
                is_grapheme_boundary(item.remaining, part.len())
                    || first_grapheme_len(item.remaining) > budget,
                "hard cut of part {i} splits a grapheme cluster"
            );
        }
        if boundary == Boundary::Grapheme {
            assert!(
                !splits_crlf(item),
                "part {i} ends with the carriage return of a CRLF"
            );
        } else {
            assert_ne!(separator, Separator::CrLf, "code-point mode drops only LF");
        }
        rebuilt.push_str(part);
        rebuilt.push_str(separator.as_str());
    }
    assert_eq!(
        rebuilt, text,
        "parts plus dropped separators rebuild the input"
    );
}

// turns.md §3.5 worked examples (outputs of the 0.14.1 reference).

#[test]
fn spec_3_5_hard_cut_without_separator() {
    check_both(&"x".repeat(3801), 3800, &[3800, 1]);
}

#[test]
fn spec_3_5_paragraph_outside_window_loses_to_line() {
    let text = format!(
        "{}\n\n{}\n{} {}",
        "A".repeat(3000),
        "B".repeat(500),
        "C".repeat(200),
        "D".repeat(400)
    );
    assert_eq!(utf8_len(&text), 4104);
    check_both(&text, 3800, &[3502, 601]);
    let parts = split_text(&text, 3800, CP).unwrap();
    assert!(parts[0].ends_with('B') && parts[1].starts_with('C'));
}

#[test]
fn spec_3_5_hebrew_word_cuts() {
    let text = "שלום עולם ".repeat(500);
    assert_eq!(utf8_len(&text), 9000);
    check_both(&text, 3800, &[3797, 3797, 1404]);
    let cps: Vec<usize> = split_text(&text, 3800, CP)
        .unwrap()
        .iter()
        .map(|p| p.chars().count())
        .collect();
    assert_eq!(cps, [2109, 2109, 780]);
}

#[test]
fn spec_3_5_emoji_hard_cut_between_code_points() {
    check_both(&"😀".repeat(1000), 3800, &[3800, 200]);
}

#[test]
fn spec_3_5_trimmed_words() {
    check_both("word ".repeat(1000).trim(), 3800, &[3799, 1199]);
}

// canon-wire.md §6.3 vectors.

#[test]
fn wire_6_3_vectors() {
    check_both(&"a".repeat(8000), 3800, &[3800, 3800, 400]);
    check_both(&"word ".repeat(2000), 3800, &[3799, 3799, 2400]);
    check_both(&"ש".repeat(4000), 3800, &[3800, 3800, 400]);
}

// Fixture coverage checklist (turns.md "Fixture coverage checklist").

#[test]
fn within_budget_is_unchanged() {
    check_texts("", 3800, &[""]);
    check_texts("hello", 3800, &["hello"]);
    check_both(&"x".repeat(3800), 3800, &[3800]);
    check_both(&"x".repeat(3801), 3800, &[3800, 1]);
    // A text under the budget keeps its separators and trailing spaces.
    check_texts("a\n\nb ", 5, &["a\n\nb "]);
}

#[test]
fn separators_at_the_window_edge() {
    // cut = 1000 cp, window_start = 600 cp.
    let outside = format!("{} {}", "a".repeat(599), "a".repeat(500));
    check_both(&outside, 1000, &[1000, 100]);
    let inside = format!("{} {}", "a".repeat(600), "a".repeat(499));
    check_both(&inside, 1000, &[600, 499]);
    let line = format!("{}\n{}", "a".repeat(600), "a".repeat(499));
    check_both(&line, 1000, &[600, 499]);
    let paragraph = format!("{}\n\n{}", "a".repeat(600), "a".repeat(499));
    check_both(&paragraph, 1000, &[600, 499]);
    let paragraph_outside = format!("{}\n\n{}", "a".repeat(598), "a".repeat(500));
    check_both(&paragraph_outside, 1000, &[1000, 100]);
}

#[test]
fn window_is_counted_in_code_points() {
    // cut = 999 bytes = 500 cp; the window starts at cp 100 (byte 200),
    // where the space is. A byte-counted window would start at byte 599.
    let text = format!("{} {}", "ש".repeat(100), "ש".repeat(450));
    check_both(&text, 1000, &[200, 900]);
}

#[test]
fn paragraph_beats_a_closer_line_and_space() {
    let text = format!(
        "{}\n\n{}\n{} {}",
        "a".repeat(700),
        "b".repeat(200),
        "c".repeat(100),
        "d"
    );
    check_both(&text, 1000, &[700, 303]);
    let text = format!(
        "{}\n{} {}",
        "a".repeat(700),
        "b".repeat(200),
        "c".repeat(200)
    );
    check_both(&text, 1000, &[700, 401]);
}

#[test]
fn separator_at_index_zero_never_qualifies() {
    check_both(&format!("\n{}", "x".repeat(5000)), 3800, &[3800, 1201]);
    check_texts(" abcdefg", 4, &[" abc", "defg"]);
}

#[test]
fn runs_of_separators_drop_exactly_one() {
    check_texts(
        &format!("a\n\n\n{}", "b".repeat(10)),
        8,
        &["a\n", "bbbbbbbb", "bb"],
    );
    check_texts("aaa  bbbbbb", 8, &["aaa ", "bbbbbb"]);
    check_texts("ab cd ef", 4, &["ab", "cd", "ef"]);
}

#[test]
fn crlf_keeps_the_carriage_return_in_code_point_mode() {
    let text = "line1\r\nline2\r\n\r\nline3";
    let parts = split_text(text, 15, CP).unwrap();
    assert_eq!(parts, ["line1\r\nline2\r", "\r\nline3"]);
    assert_invariants(text, 15, CP);
}

/// turns.md §3.3: in grapheme mode `"\r\n"` is one line break, dropped
/// whole; no part ends with its `"\r"`.
#[test]
fn grapheme_mode_cuts_a_crlf_line_break_whole() {
    let text = "line1\r\nline2\r\n\r\nline3";
    let parts: Vec<Part<'_>> = split_parts(text, 15, GR).unwrap().collect();
    assert_eq!(
        parts,
        [
            Part {
                text: "line1\r\nline2",
                separator: Separator::CrLf
            },
            Part {
                text: "\r\nline3",
                separator: Separator::None
            },
        ]
    );
    assert_invariants(text, 15, GR);
    // A pair that opens the text is no line cut: the hard cut keeps it whole.
    let text = "\r\n😀😀";
    assert_eq!(split_text(text, 4, GR).unwrap(), ["\r\n", "😀", "😀"]);
    assert_eq!(split_text(text, 4, CP).unwrap(), ["\r", "😀", "😀"]);
    assert_invariants(text, 4, GR);
    // A carriage return alone is no line break in either mode.
    check_both("aaaa\rbbbbbb", 5, &[5, 5, 1]);
}

#[test]
fn other_whitespace_is_not_a_separator() {
    check_both(
        &format!("{}\t{}", "a".repeat(10), "b".repeat(10)),
        16,
        &[16, 5],
    );
    check_both(
        &format!("{}\u{a0}{}", "a".repeat(10), "b".repeat(10)),
        16,
        &[16, 6],
    );
    check_both(
        &format!("{}\r{}", "a".repeat(10), "b".repeat(10)),
        16,
        &[16, 5],
    );
}

#[test]
fn scripts_of_every_width() {
    check_both(&"a".repeat(10), 4, &[4, 4, 2]);
    check_both(&"ש".repeat(5), 5, &[4, 4, 2]);
    check_both(&"€".repeat(3), 4, &[3, 3, 3]);
    check_both(&"😀".repeat(2), 5, &[4, 4]);
    check_both(&"😀".repeat(3), 4, &[4, 4, 4]);
    check_both("a€😀ש", 4, &[4, 4, 2]);
}

#[test]
fn budgets_are_clamped_to_the_server_cap() {
    check_both(&"x".repeat(5000), 10_000, &[4096, 904]);
    check_both(&"x".repeat(4097), 4096, &[4096, 1]);
    check_both(&"x".repeat(4096), usize::MAX, &[4096]);
}

#[test]
fn tiny_budgets_are_refused() {
    for max_bytes in 0..4 {
        let err = split_text("abc", max_bytes, GR).unwrap_err();
        assert_eq!(err, SplitError::BudgetTooSmall { max_bytes });
        assert_eq!(err.to_string(), "max_bytes must be at least 4");
    }
    assert_eq!(Budget::new(4).map(Budget::get), Ok(4));
    assert_eq!(Budget::default().get(), CHUNKED_TEXT_MAX_BYTES);
}

// Grapheme mode (turns.md OQ-1).

#[test]
fn grapheme_mode_keeps_zwj_sequences_whole() {
    // One byte, then 25-byte families: the code-point cut falls 21 bytes
    // into family 152, before its last emoji.
    let text = format!("a{}", "👨\u{200d}👩\u{200d}👧\u{200d}👦".repeat(200));
    check(&text, 3800, CP, &[3797, 1204]);
    check(&text, 3800, GR, &[3776, 1225]);
}

#[test]
fn grapheme_mode_keeps_flags_whole() {
    let text = format!("ab{}", "🇮🇱".repeat(500));
    check(&text, 3800, CP, &[3798, 204]);
    check(&text, 3800, GR, &[3794, 208]);
}

#[test]
fn grapheme_mode_keeps_combining_marks_with_their_base() {
    let text = "e\u{301}".repeat(2000);
    check(&text, 3800, CP, &[3799, 2201]);
    check(&text, 3800, GR, &[3798, 2202]);
    // Hebrew letter with niqqud: shin, qamats, shin dot (6 bytes).
    let text = format!("xyz{}", "ש\u{5b8}\u{5c1}".repeat(1000));
    check(&text, 3800, CP, &[3799, 2204]);
    check(&text, 3800, GR, &[3795, 2208]);
}

#[test]
fn grapheme_mode_keeps_skin_tone_modifiers() {
    // Waving hand plus a skin-tone modifier is 8 bytes; 3800 = 1 + 474 × 8 + 7.
    let text = format!("a{}", "👋🏽".repeat(500));
    check(&text, 3800, CP, &[3797, 204]);
    check(&text, 3800, GR, &[3793, 208]);
}

#[test]
fn grapheme_mode_falls_back_for_an_oversized_cluster() {
    let text = format!("e{}", "\u{301}".repeat(3000));
    check_both(&text, 3800, &[3799, 2202]);
    check_both("👨\u{200d}👩", 4, &[4, 3, 4]);
}

#[test]
fn boundary_cuts_are_the_same_in_both_modes() {
    // A space followed by a combining mark still cuts at the space.
    let text = format!("{} \u{301}{}", "a".repeat(10), "b".repeat(10));
    check_both(&text, 16, &[10, 12]);
}

#[test]
fn a_mebibyte_arrives_complete() {
    let paragraph = "שלום עולם, hello world 😀👨\u{200d}👩\u{200d}👧 e\u{301}\n".repeat(8);
    let mut text = String::new();
    while text.len() < 1 << 20 {
        text.push_str(&paragraph);
        text.push('\n');
    }
    for boundary in [CP, GR] {
        assert_invariants(&text, CHUNKED_TEXT_MAX_BYTES, boundary);
        let parts = split_text(&text, CHUNKED_TEXT_MAX_BYTES, boundary).unwrap();
        assert!(parts.len() >= 276, "{} parts", parts.len());
    }
}

#[test]
fn parts_iterator_is_fused_and_sized() {
    let text = "x".repeat(10);
    let mut parts = split_parts(&text, 4, CP).unwrap();
    let (low, high) = parts.size_hint();
    assert!(low <= 3 && high >= Some(3));
    assert_eq!(parts.by_ref().count(), 3);
    assert_eq!(parts.next(), None);
    assert_eq!(parts.size_hint(), (0, Some(0)));
    assert_eq!(Separator::Paragraph.as_str(), "\n\n");
}

// Properties.

/// Fragments that exercise separators, every UTF-8 width and the grapheme
/// rules (ZWJ, regional indicators, combining marks, skin tones, CRLF).
const FRAGMENTS: &[&str] = &[
    "a",
    "b",
    "word",
    " ",
    " ",
    "\n",
    "\n\n",
    "\r\n",
    "\t",
    "\u{a0}",
    "ש",
    "שָׁ",
    "€",
    "😀",
    "👨",
    "\u{200d}",
    "🇮",
    "🇱",
    "🏽",
    "\u{301}",
    "e\u{301}",
    "क्षि",
    "👨\u{200d}👩\u{200d}👧",
];

/// Fragments of CRLF text: line and paragraph breaks, lone carriage returns
/// and line feeds, words, spaces and a multi-byte letter.
const CRLF_FRAGMENTS: &[&str] = &["\r\n", "\r\n\r\n", "\r", "\n", "word", "x", " ", "ש"];

fn fragment_text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(FRAGMENTS), 0..400).prop_map(|v| v.concat())
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![fragment_text(), any::<String>(), "[a \n]{0,2000}"]
}

fn any_budget() -> impl Strategy<Value = usize> {
    prop_oneof![4usize..64, 64usize..600, Just(3800), 4000usize..5000]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn invariants_hold_in_both_modes(text in any_text(), max_bytes in any_budget()) {
        assert_invariants(&text, max_bytes, CP);
        assert_invariants(&text, max_bytes, GR);
    }

    #[test]
    fn grapheme_mode_differs_only_at_split_clusters(text in fragment_text(), max_bytes in 4usize..80) {
        let budget = max_bytes.min(CANON_MESSAGE_TEXT_MAX_BYTES);
        let splits_cluster = locate(&text, max_bytes, CP).iter().any(|item| {
            let hard_cut_in_cluster = item.part.separator == Separator::None
                && item.part.text.len() < item.remaining.len()
                && !is_grapheme_boundary(item.remaining, item.part.text.len())
                && first_grapheme_len(item.remaining) <= budget;
            hard_cut_in_cluster || splits_crlf(item)
        });
        if !splits_cluster {
            prop_assert_eq!(split_text(&text, max_bytes, CP).unwrap(), split_text(&text, max_bytes, GR).unwrap());
        }
    }

    /// turns.md §3.3: whatever the budget, a grapheme-mode part never ends
    /// with the `"\r"` of a CRLF, and the text still rebuilds exactly.
    #[test]
    fn grapheme_mode_never_ends_a_part_inside_a_crlf(
        text in prop::collection::vec(prop::sample::select(CRLF_FRAGMENTS), 0..300)
            .prop_map(|v| v.concat()),
        max_bytes in 4usize..120,
    ) {
        assert_invariants(&text, max_bytes, GR);
        for item in locate(&text, max_bytes, GR) {
            prop_assert!(!splits_crlf(&item), "{:?} ends inside a CRLF", item.part.text);
        }
    }

    #[test]
    fn never_panics_and_refuses_only_tiny_budgets(text in any::<String>(), max_bytes in 0usize..10_000) {
        for boundary in [CP, GR] {
            match split_text(&text, max_bytes, boundary) {
                Ok(parts) => prop_assert!(max_bytes >= 4 && !parts.is_empty()),
                Err(err) => prop_assert_eq!(err, SplitError::BudgetTooSmall { max_bytes }),
            }
        }
    }
}

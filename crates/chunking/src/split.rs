//! UTF-8 byte measurement and the normative answer splitter.
//!
//! Implements turns.md §3.1–§3.4. A text that fits the budget is returned
//! unchanged as one part; otherwise each part ends at the last paragraph
//! break (`"\n\n"`), else line break (`"\n"`), else word space (U+0020) that
//! starts inside the last [`BOUNDARY_WINDOW_CHARS`] code points before the
//! byte cut, and that one separator is dropped. With no such separator the
//! part is cut hard at the cut point.
//!
//! Invariants, in every [`Boundary`] mode:
//!
//! * every part is a non-empty slice of the input, cut on a char boundary, so
//!   it is valid UTF-8, and its byte length is at most the budget;
//! * the parts interleaved with the dropped separators ([`Part::separator`])
//!   rebuild the input exactly;
//! * the splitter never panics and always terminates; the number of parts is
//!   not capped.
//!
//! [`Boundary::Grapheme`] additionally moves a hard cut back to an extended
//! grapheme cluster boundary (turns.md OQ-1) and treats `"\r\n"` as one line
//! break (turns.md §3.3), so no part ends with the carriage return of a
//! CRLF; [`Boundary::CodePoint`] reproduces the 0.14.1 reference exactly and
//! is what parity fixtures use.

use std::iter::FusedIterator;

use unicode_segmentation::GraphemeCursor;

use crate::limits::{
    BOUNDARY_WINDOW_CHARS, CANON_MESSAGE_TEXT_MAX_BYTES, CHUNKED_TEXT_MAX_BYTES, MIN_MAX_BYTES,
};

/// UTF-8 byte length of `text`: the unit Canon measures message text in
/// (turns.md §3.1).
///
/// A `&str` cannot hold a lone surrogate; the shim replaces those with
/// U+FFFD, which is also 3 bytes, so budgets match the reference.
pub const fn utf8_len(text: &str) -> usize {
    text.len()
}

/// Where a hard cut (no separator in the window) may fall (turns.md §3.4,
/// turns.md OQ-1). Separator cuts are identical in both modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Boundary {
    /// A hard cut moves back to the last extended grapheme cluster boundary
    /// at or before the code-point cut, so a ZWJ sequence, flag, skin-tone
    /// modifier or base letter with its combining marks stays whole. If the
    /// first cluster alone exceeds the budget, the code-point cut is used.
    /// A line break preceded by a carriage return is the `"\r\n"` pair,
    /// dropped whole ([`Separator::CrLf`]): `"\r\n"` is one cluster too.
    /// The production default.
    #[default]
    Grapheme,
    /// A hard cut falls on the last code point that fits. Byte-for-byte
    /// parity with canon-hermes-plugin 0.14.1.
    CodePoint,
}

/// The separator consumed after a part (turns.md §3.3). The message break
/// replaces it; nothing else is trimmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Separator {
    /// Nothing was dropped: a hard cut, or the last part.
    None,
    /// A paragraph break `"\n\n"` was dropped.
    Paragraph,
    /// A line break `"\n"` was dropped.
    Line,
    /// A CRLF line break `"\r\n"` was dropped ([`Boundary::Grapheme`] only).
    CrLf,
    /// A word space U+0020 was dropped.
    Word,
}

impl Separator {
    /// The dropped text: `""`, `"\n\n"`, `"\n"`, `"\r\n"` or `" "`.
    pub fn as_str(self) -> &'static str {
        match self {
            Separator::None => "",
            Separator::Paragraph => "\n\n",
            Separator::Line => "\n",
            Separator::CrLf => "\r\n",
            Separator::Word => " ",
        }
    }
}

/// Separators in order of preference (turns.md §3.2 step 4).
const PREFERENCE: [Separator; 3] = [Separator::Paragraph, Separator::Line, Separator::Word];

/// One part of a split text: a borrowed slice of the input plus the
/// separator that was dropped right after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part<'a> {
    /// The part's text; never empty unless the whole input was empty.
    pub text: &'a str,
    /// What the splitter consumed between this part and the next one.
    pub separator: Separator,
}

/// Why a split was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SplitError {
    /// `max_bytes` is below [`MIN_MAX_BYTES`]; one code point can need 4
    /// bytes, so no split could make progress. The message is the
    /// reference's parity string.
    #[error("max_bytes must be at least 4")]
    BudgetTooSmall {
        /// The refused value.
        max_bytes: usize,
    },
}

/// A validated per-part byte budget: `min(max_bytes, 4096)` with
/// `max_bytes ≥ 4` (turns.md §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Budget(usize);

impl Budget {
    /// Validates `max_bytes` and clamps it to the server cap.
    pub fn new(max_bytes: usize) -> Result<Budget, SplitError> {
        if max_bytes < MIN_MAX_BYTES {
            return Err(SplitError::BudgetTooSmall { max_bytes });
        }
        Ok(Budget(max_bytes.min(CANON_MESSAGE_TEXT_MAX_BYTES)))
    }

    /// The effective budget in bytes.
    pub fn get(self) -> usize {
        self.0
    }
}

impl Default for Budget {
    /// The working part budget, [`CHUNKED_TEXT_MAX_BYTES`].
    fn default() -> Budget {
        Budget(CHUNKED_TEXT_MAX_BYTES)
    }
}

/// Splits `text` into parts of at most `min(max_bytes, 4096)` bytes
/// (turns.md §3.2). Returns borrowed slices of `text`; the list is never
/// empty (`""` yields `[""]`).
///
/// ```
/// use canon_chunking::split::{split_text, Boundary};
///
/// let text = "x".repeat(3801);
/// let parts = split_text(&text, 3800, Boundary::Grapheme).unwrap();
/// assert_eq!(parts.iter().map(|p| p.len()).collect::<Vec<_>>(), [3800, 1]);
/// ```
pub fn split_text(
    text: &str,
    max_bytes: usize,
    boundary: Boundary,
) -> Result<Vec<&str>, SplitError> {
    Ok(split_parts(text, max_bytes, boundary)?
        .map(|part| part.text)
        .collect())
}

/// Like [`split_text`], but lazy, and each item also reports the separator
/// dropped after the part.
pub fn split_parts(
    text: &str,
    max_bytes: usize,
    boundary: Boundary,
) -> Result<Parts<'_>, SplitError> {
    Ok(Parts::new(text, Budget::new(max_bytes)?, boundary))
}

/// Iterator over the [`Part`]s of a text, created by [`split_parts`] or
/// [`Parts::new`].
#[derive(Debug, Clone)]
pub struct Parts<'a> {
    /// Text not yet emitted, or `None` once the last part was emitted.
    remaining: Option<&'a str>,
    budget: usize,
    boundary: Boundary,
}

impl<'a> Parts<'a> {
    /// Starts splitting `text` with an already validated budget.
    pub fn new(text: &'a str, budget: Budget, boundary: Boundary) -> Parts<'a> {
        Parts {
            remaining: Some(text),
            budget: budget.get(),
            boundary,
        }
    }
}

impl<'a> Iterator for Parts<'a> {
    type Item = Part<'a>;

    fn next(&mut self) -> Option<Part<'a>> {
        let remaining = self.remaining?;
        // Step 2.1 (and step 1, which also covers the empty text).
        if remaining.len() <= self.budget {
            self.remaining = None;
            return Some(Part {
                text: remaining,
                separator: Separator::None,
            });
        }
        let (end, separator) = next_cut(remaining, self.budget, self.boundary);
        let skip = separator.as_str().len();
        debug_assert!(end >= 1 && end + skip < remaining.len());
        self.remaining = Some(&remaining[end + skip..]);
        Some(Part {
            text: &remaining[..end],
            separator,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self.remaining {
            None => (0, Some(0)),
            // A part and its separator never take more than `budget` bytes,
            // and every part but the last takes at least one.
            Some(rest) => (
                rest.len().div_ceil(self.budget).max(1),
                Some(rest.len().max(1)),
            ),
        }
    }
}

impl FusedIterator for Parts<'_> {}

/// Computes `(end, separator)` for the next part of `remaining`, whose
/// length exceeds `budget` (turns.md §3.2 steps 2.2–2.5). `end` is a byte
/// offset on a char boundary with `1 ≤ end` and `end + separator length ≤
/// cut < remaining.len()`.
fn next_cut(remaining: &str, budget: usize, boundary: Boundary) -> (usize, Separator) {
    // Step 2.2: the largest char boundary at or below the budget. The budget
    // is at least 4 bytes, so at least one char fits and `cut ≥ 1`.
    let mut cut = budget;
    while !remaining.is_char_boundary(cut) {
        cut -= 1;
    }
    let region = &remaining[..cut];

    // Step 2.3, in bytes: `window_start` is the byte offset of code point
    // `max(1, cut_cp − 400)`.
    let window_start = window_start(region);

    // Step 2.4: the last separator occurrence lying entirely inside `region`
    // and starting at or after `window_start`. The separators are ASCII, so
    // a byte search only ever matches on char boundaries, and searching the
    // window slice finds exactly the qualifying occurrences.
    for separator in PREFERENCE {
        if let Some(found) = last_separator(region, window_start, separator, boundary) {
            return found;
        }
    }

    // Step 2.5: hard cut.
    let end = match boundary {
        Boundary::CodePoint => cut,
        Boundary::Grapheme => grapheme_cut(remaining, cut).unwrap_or(cut),
    };
    (end, Separator::None)
}

/// The last occurrence of `separator` in `region` starting at or after
/// `window_start`, as `(end, separator dropped)`. In grapheme mode a line
/// feed right after a carriage return belongs to the CRLF cluster: a line
/// break there is the `"\r\n"` pair, dropped whole (unless the pair opens
/// the text, which would leave an empty part), and a paragraph break there
/// does not count, so the search goes on to the previous occurrence.
fn last_separator(
    region: &str,
    window_start: usize,
    separator: Separator,
    boundary: Boundary,
) -> Option<(usize, Separator)> {
    let pattern = separator.as_str();
    let mut window = &region[window_start..];
    while let Some(found) = window.rfind(pattern) {
        let at = window_start + found;
        let after_cr = boundary == Boundary::Grapheme
            && pattern.starts_with('\n')
            && region[..at].ends_with('\r');
        if !after_cr {
            return Some((at, separator));
        }
        if separator == Separator::Line && at > 1 {
            return Some((at - 1, Separator::CrLf));
        }
        // An earlier occurrence may overlap this one (`"\n\n\n"`).
        window = &window[..found + pattern.len() - 1];
    }
    None
}

/// Byte offset of code point `max(1, n − 400)` of `region`, where `n` is the
/// number of code points in `region` (which is non-empty).
fn window_start(region: &str) -> usize {
    // Walk back over at most 400 chars instead of counting the whole region.
    match region.char_indices().rev().nth(BOUNDARY_WINDOW_CHARS - 1) {
        Some((offset, _)) if offset > 0 => offset,
        // At most 400 chars: the window starts at code point 1.
        _ => region.chars().next().map_or(region.len(), char::len_utf8),
    }
}

/// The last extended grapheme cluster boundary of `remaining` at or before
/// `cut`, if it is after the first code point; `None` means "use the
/// code-point cut" (the first cluster alone exceeds the budget).
fn grapheme_cut(remaining: &str, cut: usize) -> Option<usize> {
    let mut cursor = GraphemeCursor::new(cut, remaining.len(), true);
    // The whole string is passed as one chunk starting at 0, so the cursor
    // never asks for more context; an error is treated as "no boundary".
    if cursor.is_boundary(remaining, 0).ok()? {
        return Some(cut);
    }
    let previous = cursor.prev_boundary(remaining, 0).ok()??;
    (previous > 0).then_some(previous)
}

#[cfg(test)]
mod tests;

//! JavaScript semantics the validator must reproduce exactly (cards.md §2.4–§2.6, §11, §13):
//! UTF-16 string length, `String.prototype.trim`, own-key order, `Number::toString`, `String()`
//! of any JSON value and the UTF-8 length of `JSON.stringify`.
//!
//! Invariant: nothing here recurses on the input's nesting depth, so a value nested a million
//! levels deep cannot overflow the stack.

use std::fmt::Write as _;

use serde_json::{Map, Number, Value};

use crate::vocab::JS_TRIM_CODE_POINTS;

/// The length of `s` as JavaScript's `String.length` counts it: UTF-16 code units.
#[must_use]
pub fn utf16_len(s: &str) -> usize {
    // Every UTF-8 byte that does not continue a sequence starts one character of one unit, and
    // a four-byte leader (0xF0 and up) starts a supplementary character of two units. Summing
    // per byte vectorizes, where decoding characters would not.
    s.bytes()
        .map(|b| usize::from((b & 0xc0) != 0x80) + usize::from(b >= 0xf0))
        .sum()
}

/// Whether `s` is longer than `max` UTF-16 code units (cards.md §2.4), counting only when the
/// byte length cannot decide: a character never takes more units than bytes, nor fewer than a
/// third of its bytes.
#[inline]
#[must_use]
pub(crate) fn utf16_len_exceeds(s: &str, max: usize) -> bool {
    let bytes = s.len();
    if bytes <= max {
        return false;
    }
    if bytes.div_ceil(3) > max {
        return true;
    }
    utf16_len(s) > max
}

/// Whether `c` is removed by ECMAScript `String.prototype.trim` (cards.md §2.5).
#[must_use]
pub fn is_js_whitespace(c: char) -> bool {
    match c {
        '\t' | '\n' | '\u{b}' | '\u{c}' | '\r' | ' ' => true,
        c if (c as u32) < 0x80 => false,
        c => JS_TRIM_CODE_POINTS.contains(&c),
    }
}

/// `s.trim()` with the ECMAScript whitespace set (not Rust's, not Python's).
#[inline]
#[must_use]
pub fn js_trim(s: &str) -> &str {
    // A string that starts and ends with printable ASCII has nothing to trim.
    let bytes = s.as_bytes();
    if let (Some(&first), Some(&last)) = (bytes.first(), bytes.last()) {
        if first > b' ' && first < 0x80 && last > b' ' && last < 0x80 {
            return s;
        }
    }
    s.trim_matches(is_js_whitespace)
}

/// Whether `s` is empty after ECMAScript trim.
#[inline]
#[must_use]
pub fn is_blank(s: &str) -> bool {
    // Almost every string starts with a printable ASCII character, which settles it.
    match s.as_bytes().first() {
        None => true,
        Some(&b) if b > b' ' && b < 0x80 => false,
        Some(_) => s.chars().all(is_js_whitespace),
    }
}

/// Whether `key` is an array index in the sense of ECMAScript own-key ordering: the canonical
/// decimal form of an integer from 0 to 2^32 − 2.
#[must_use]
pub fn array_index(key: &str) -> Option<u32> {
    let bytes = key.as_bytes();
    if bytes.is_empty() || bytes.len() > 10 || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if bytes.len() > 1 && bytes[0] == b'0' {
        return None;
    }
    let n: u64 = key.parse().ok()?;
    if n <= 4_294_967_294 {
        u32::try_from(n).ok()
    } else {
        None
    }
}

/// The keys of `object` that `keep` selects, in ECMAScript own-key order: array-index keys
/// ascending, then every other key in document order (cards.md §2.6).
pub fn own_keys_where(
    object: &Map<String, Value>,
    mut keep: impl FnMut(&str) -> bool,
) -> Vec<&str> {
    let mut indexed: Vec<(u32, &str)> = Vec::new();
    let mut named: Vec<&str> = Vec::new();
    for key in object.keys() {
        if !keep(key) {
            continue;
        }
        match array_index(key) {
            Some(n) => indexed.push((n, key)),
            None => named.push(key),
        }
    }
    if indexed.is_empty() {
        return named;
    }
    indexed.sort_unstable_by_key(|&(n, _)| n);
    indexed.into_iter().map(|(_, k)| k).chain(named).collect()
}

/// Appends `n` in plain decimal (without going through `core::fmt`, which dominates path
/// building otherwise).
pub fn push_usize(out: &mut String, mut n: usize) {
    if n < 10 {
        out.push(char::from(b'0' + n as u8));
        return;
    }
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[i..] {
        out.push(char::from(d));
    }
}

/// Whether two keys are equal: lengths first, then, for keys of up to 16 bytes, at most two
/// overlapping machine words each instead of a byte loop or a call to `memcmp`.
#[inline]
#[must_use]
pub fn key_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => word4(a, 0) == word4(b, 0) && word4(a, n - 4) == word4(b, n - 4),
        8..=16 => word8(a, 0) == word8(b, 0) && word8(a, n - 8) == word8(b, n - 8),
        _ => a == b,
    }
}

/// The four bytes of `s` at `at` as one word.
#[inline]
fn word4(s: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&s[at..at + 4]);
    u32::from_ne_bytes(word)
}

/// The eight bytes of `s` at `at` as one word.
#[inline]
fn word8(s: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&s[at..at + 8]);
    u64::from_ne_bytes(word)
}

/// A fixed buffer for one formatted double; `{:e}` of an `f64` never exceeds it.
struct NumberBuf {
    bytes: [u8; 40],
    len: usize,
}

impl std::fmt::Write for NumberBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        if end > self.bytes.len() {
            return Err(std::fmt::Error);
        }
        self.bytes[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Appends ECMAScript `Number::toString(x)` (cards.md §13.2).
pub fn push_js_number(out: &mut String, x: f64) {
    if x.is_nan() {
        out.push_str("NaN");
        return;
    }
    if x == 0.0 {
        out.push('0');
        return;
    }
    if x.is_infinite() {
        out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    let x = if x < 0.0 {
        out.push('-');
        -x
    } else {
        x
    };
    // Rust's `{:e}` prints the shortest round-tripping digits as `d[.ddd]e<exp>`.
    let mut buf = NumberBuf {
        bytes: [0; 40],
        len: 0,
    };
    if write!(buf, "{x:e}").is_err() {
        // Unreachable for a finite f64; fall back to Display rather than panic.
        let _ = write!(out, "{x}");
        return;
    }
    let text = std::str::from_utf8(&buf.bytes[..buf.len]).unwrap_or("0e0");
    let (mantissa, exponent) = text.split_once('e').unwrap_or((text, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let mut digits = [0u8; 20];
    let mut k = 0usize;
    for b in mantissa.bytes().filter(u8::is_ascii_digit) {
        if k < digits.len() {
            digits[k] = b;
            k += 1;
        }
    }
    let digits = std::str::from_utf8(&digits[..k]).unwrap_or("0");
    let k = i32::try_from(k).unwrap_or(0);
    let n = exponent + 1;
    if k <= n && n <= 21 {
        out.push_str(digits);
        for _ in 0..(n - k) {
            out.push('0');
        }
    } else if 0 < n && n <= 21 {
        let split = usize::try_from(n).unwrap_or(0);
        out.push_str(&digits[..split]);
        out.push('.');
        out.push_str(&digits[split..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        for _ in 0..(-n) {
            out.push('0');
        }
        out.push_str(digits);
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if n > 0 { '+' } else { '-' });
        let _ = write!(out, "{}", (n - 1).unsigned_abs());
    }
}

/// ECMAScript `Number::toString` of `x`.
#[must_use]
pub fn js_number_string(x: f64) -> String {
    let mut out = String::new();
    push_js_number(&mut out, x);
    out
}

/// The double `JSON.parse` would produce for this number.
#[must_use]
pub fn number_as_f64(n: &Number) -> f64 {
    // `as_f64` converts u64/i64 with round-to-nearest, which is what JSON.parse does to an
    // integer literal beyond 2^53.
    n.as_f64().unwrap_or(f64::NAN)
}

/// ECMAScript `String(value)` of a JSON value, with `None` standing for `undefined`
/// (cards.md §13.1). Arrays join their elements with `,`, `null` elements render empty,
/// objects render `[object Object]`.
#[must_use]
pub fn js_string_of(value: Option<&Value>) -> String {
    let Some(value) = value else {
        return "undefined".to_owned();
    };
    let mut out = String::new();
    // An explicit stack of array iterators: rendering never recurses.
    let mut stack: Vec<std::slice::Iter<'_, Value>> = Vec::new();
    let mut first_in_level: Vec<bool> = Vec::new();
    match value {
        Value::Array(items) => {
            stack.push(items.iter());
            first_in_level.push(true);
        }
        scalar => push_scalar(&mut out, scalar, false),
    }
    while let Some(iter) = stack.last_mut() {
        match iter.next() {
            None => {
                stack.pop();
                first_in_level.pop();
            }
            Some(item) => {
                if let Some(first) = first_in_level.last_mut() {
                    if !*first {
                        out.push(',');
                    }
                    *first = false;
                }
                match item {
                    Value::Array(inner) => {
                        // A nested array's elements continue the same comma-separated run;
                        // the first of them is not preceded by a second comma.
                        stack.push(inner.iter());
                        first_in_level.push(true);
                    }
                    scalar => push_scalar(&mut out, scalar, true),
                }
            }
        }
    }
    out
}

fn push_scalar(out: &mut String, value: &Value, in_array: bool) {
    match value {
        Value::Null if in_array => {}
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => push_js_number(out, number_as_f64(n)),
        Value::String(s) => out.push_str(s),
        Value::Object(_) => out.push_str("[object Object]"),
        Value::Array(_) => {}
    }
}

/// UTF-8 byte length of ECMAScript `JSON.stringify(value)` (compact, non-ASCII raw), computed
/// without serializing (cards.md §11).
#[must_use]
pub fn json_stringify_len(value: &Value) -> usize {
    let mut sizes = Sizes::default();
    sizes.measure(value);
    sizes.unescaped + escape_extras(value)
}

/// Whether `JSON.stringify(value)` is longer than `limit` bytes (cards.md §11).
#[must_use]
pub fn json_stringify_len_exceeds(value: &Value, limit: usize) -> bool {
    let mut sizes = Sizes::default();
    sizes.measure(value);
    sizes.exceeds(value, limit)
}

/// The most bytes an escape adds to one byte of a string (`\u00XX` for a control character).
const MAX_ESCAPE_EXTRA: usize = 5;

/// The stringified size of a value, gathered without reading the bytes of its string values:
/// the exact length with every string value counted unescaped (its quotes plus its bytes), and
/// the number of string-value bytes, which bounds what their escapes can add. Keys are counted
/// exactly: an allowed key has no escapes, and any other key is read on the spot.
///
/// The validator fills one while it walks a card, so a card is traversed once for both; any
/// part it does not visit it hands to [`Sizes::measure`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sizes {
    /// The stringified length with every string value counted as its quotes plus its bytes.
    pub(crate) unescaped: usize,
    /// The bytes of every string value.
    pub(crate) string_bytes: usize,
}

impl Sizes {
    /// A scalar (null, boolean, number or string); arrays and objects add nothing here.
    #[inline]
    pub(crate) fn scalar(&mut self, value: &Value) {
        match value {
            Value::Null | Value::Bool(true) => self.unescaped += 4,
            Value::Bool(false) => self.unescaped += 5,
            Value::Number(n) => self.unescaped += number_len(n),
            Value::String(s) => self.string(s),
            Value::Array(_) | Value::Object(_) => {}
        }
    }

    #[inline]
    fn string(&mut self, s: &str) {
        self.unescaped += 2 + s.len();
        self.string_bytes += s.len();
    }

    /// An object member's key and its colon.
    #[inline]
    pub(crate) fn key(&mut self, key: &str) {
        self.unescaped += 3 + key.len() + string_escape_extra(key);
    }

    /// An object member's key known to need no escape (an allowed key), and its colon.
    #[inline]
    pub(crate) fn plain_key(&mut self, key: &str) {
        self.unescaped += 3 + key.len();
    }

    /// The brackets and commas of an array or object of `n` entries.
    #[inline]
    pub(crate) fn container(&mut self, n: usize) {
        self.unescaped += 2 + n.saturating_sub(1);
    }

    /// `value` and everything below it.
    pub(crate) fn measure(&mut self, value: &Value) {
        match value {
            Value::Array(_) | Value::Object(_) => measure_recursive(value, 0, self),
            scalar => self.scalar(scalar),
        }
    }

    /// `value` and everything below it when it is an array or object; a scalar is measured by
    /// its parent.
    #[inline]
    pub(crate) fn measure_container(&mut self, value: &Value) {
        if matches!(value, Value::Array(_) | Value::Object(_)) {
            measure_recursive(value, 0, self);
        }
    }

    /// Whether `value`, which these sizes describe, stringifies to more than `limit` bytes.
    ///
    /// An escape adds at most five bytes to a character, so the unescaped length and the string
    /// bytes settle nearly every card; only a card whose escapes could decide it is read byte by
    /// byte.
    pub(crate) fn exceeds(&self, value: &Value, limit: usize) -> bool {
        if self.unescaped > limit {
            return true;
        }
        let slack = limit - self.unescaped;
        escapes_exceed(value, self.string_bytes, slack)
    }
}

/// Nesting handled by plain recursion before switching to an explicit stack; real cards are a
/// handful of levels deep, hostile ones may be a million.
const RECURSION_BUDGET: usize = 48;

fn measure_recursive(value: &Value, depth: usize, sizes: &mut Sizes) {
    if depth >= RECURSION_BUDGET {
        measure_iterative(value, sizes);
        return;
    }
    // Scalars are counted in their container's loop, so only containers cost a call.
    match value {
        Value::Array(items) => {
            sizes.container(items.len());
            for item in items {
                match item {
                    Value::Array(_) | Value::Object(_) => measure_recursive(item, depth + 1, sizes),
                    scalar => sizes.scalar(scalar),
                }
            }
        }
        Value::Object(map) => {
            sizes.container(map.len());
            for (key, item) in map {
                sizes.key(key);
                match item {
                    Value::Array(_) | Value::Object(_) => measure_recursive(item, depth + 1, sizes),
                    scalar => sizes.scalar(scalar),
                }
            }
        }
        scalar => sizes.scalar(scalar),
    }
}

fn measure_iterative(value: &Value, sizes: &mut Sizes) {
    let mut stack: Vec<&Value> = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(items) => {
                sizes.container(items.len());
                stack.extend(items.iter());
            }
            Value::Object(map) => {
                sizes.container(map.len());
                for (key, item) in map {
                    sizes.key(key);
                    stack.push(item);
                }
            }
            scalar => sizes.scalar(scalar),
        }
    }
}

/// Whether the escapes of the string values under `value`, which hold `string_bytes` bytes,
/// add more than `slack` bytes. Strings are read only until the answer is certain: the
/// escapes found so far already exceed the slack, or five more per byte still unread would
/// not.
fn escapes_exceed(value: &Value, string_bytes: usize, slack: usize) -> bool {
    if string_bytes.saturating_mul(MAX_ESCAPE_EXTRA) <= slack {
        return false;
    }
    let mut extra = 0usize;
    let mut unread = string_bytes;
    let mut decided = |s: &str| -> Option<bool> {
        extra += string_escape_extra(s);
        unread = unread.saturating_sub(s.len());
        if extra > slack {
            Some(true)
        } else if unread.saturating_mul(MAX_ESCAPE_EXTRA) <= slack - extra {
            Some(false)
        } else {
            None
        }
    };
    let mut stack: Vec<&Value> = vec![value];
    // Strings directly inside an array or object are read in the loop over its entries;
    // arrays and objects wait on the stack.
    macro_rules! entry {
        ($item:expr) => {
            match $item {
                Value::String(s) => {
                    if let Some(answer) = decided(s) {
                        return answer;
                    }
                }
                item @ (Value::Array(_) | Value::Object(_)) => stack.push(item),
                _ => {}
            }
        };
    }
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => {
                if let Some(answer) = decided(s) {
                    return answer;
                }
            }
            Value::Array(items) => {
                for item in items {
                    entry!(item);
                }
            }
            Value::Object(map) => {
                for item in map.values() {
                    entry!(item);
                }
            }
            _ => {}
        }
    }
    extra > slack
}

/// The bytes escapes add to every string value under `value` (keys are counted exactly by
/// [`Sizes`]).
fn escape_extras(value: &Value) -> usize {
    let mut extra = 0usize;
    let mut stack: Vec<&Value> = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => extra += string_escape_extra(s),
            Value::Array(items) => {
                for item in items {
                    match item {
                        Value::String(s) => extra += string_escape_extra(s),
                        Value::Array(_) | Value::Object(_) => stack.push(item),
                        _ => {}
                    }
                }
            }
            Value::Object(map) => {
                for item in map.values() {
                    match item {
                        Value::String(s) => extra += string_escape_extra(s),
                        Value::Array(_) | Value::Object(_) => stack.push(item),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    extra
}

fn number_len(n: &Number) -> usize {
    if let Some(u) = n.as_u64() {
        if u < (1 << 53) {
            return decimal_digits(u);
        }
    } else if let Some(i) = n.as_i64() {
        if i > -(1 << 53) {
            return 1 + decimal_digits(i.unsigned_abs());
        }
    }
    let x = number_as_f64(n);
    if let Some(len) = short_decimal_len(x) {
        return len;
    }
    let mut buf = String::new();
    push_js_number(&mut buf, x);
    buf.len()
}

/// The length of `Number::toString(x)` for doubles with at most four decimal places, without
/// running the shortest-digits algorithm.
///
/// For the smallest `p` such that `r = round(x * 10^p)` divided by `10^p` is exactly `x`, the
/// decimal `r × 10^-p` round-trips (both operands are exact, so the quotient is the correctly
/// rounded value `JSON.parse` gives that decimal). Keeping `x * 10^4` below 2^49 makes the
/// spacing of doubles there at most 1/8, so no other integer can round-trip and `r` is the
/// digit string ECMAScript chooses.
///
/// One scaling by 10^4 finds every such `p`: when `p` works, `x * 10^4` lies within rounding
/// error of the integer `r × 10^(4-p)`, whose quotient by 10^4 is the same correctly rounded
/// double, so `R = round(x * 10^4)` passes the check exactly when some `p <= 4` does, and
/// stripping the trailing zeros of `R` gives the smallest `p` and its `r`.
fn short_decimal_len(x: f64) -> Option<usize> {
    const SCALE: f64 = 10_000.0;
    const SCALED_MAX: f64 = (1u64 << 49) as f64;
    let sign = usize::from(x < 0.0);
    let a = x.abs();
    let y = a * SCALE;
    if !(1.0..SCALED_MAX).contains(&y) {
        return None;
    }
    // Truncating `y + 0.5` rounds to nearest without a libm call. The sum may itself round,
    // but only where `y` is far from every integer, and there no candidate passes the check
    // below anyway. `y` < 2^49, so both casts are exact.
    let mut r = (y + 0.5) as u64;
    if r as f64 / SCALE != a {
        return None;
    }
    let mut p = 4;
    while p > 0 && r % 10 == 0 {
        r /= 10;
        p -= 1;
    }
    let digits = decimal_digits(r);
    Some(
        sign + if a < 1.0 {
            2 + p
        } else {
            digits + usize::from(p > 0)
        },
    )
}

/// The number of decimal digits of `u`: one plus the powers of ten it reaches.
fn decimal_digits(u: u64) -> usize {
    const POWERS: [u64; 19] = {
        let mut powers = [0u64; 19];
        let mut p = 10u64;
        let mut i = 0;
        while i < 19 {
            powers[i] = p;
            p = p.wrapping_mul(10);
            i += 1;
        }
        powers
    };
    1 + POWERS.iter().take_while(|&&p| u >= p).count()
}

/// [`escape_extra`] as a table, for branch-free loops.
const ESCAPE_EXTRA: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = escape_extra(b as u8) as u8;
        b += 1;
    }
    table
};

/// Bytes an escape adds beyond the character's own byte.
#[inline]
const fn escape_extra(b: u8) -> usize {
    match b {
        b'"' | b'\\' | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => 1,
        0..=0x1f => 5,
        _ => 0,
    }
}

/// The bytes `JSON.stringify` adds to `s` beyond its own bytes and quotes: one for each
/// two-byte short escape, five for each other `\u00XX` control escape.
///
/// Nearly every piece of text needs no escape, so the work is finding that out cheaply, with
/// fixed-size windows the compiler turns into a few vector instructions each: 64-byte blocks,
/// then the window that ends the string for the last partial block; a string shorter than a
/// block is covered by two overlapping windows of 32 or 16 bytes, or by machine words. Only a
/// piece that holds an escape is counted byte by byte.
#[inline]
fn string_escape_extra(s: &str) -> usize {
    let bytes = s.as_bytes();
    let n = bytes.len();
    let flagged = match n {
        0..=15 => short_needs_escape(bytes),
        16..=31 => window_needs_escape::<16>(bytes, 0) || window_needs_escape::<16>(bytes, n - 16),
        32..=63 => window_needs_escape::<32>(bytes, 0) || window_needs_escape::<32>(bytes, n - 32),
        _ => return long_escape_extra(bytes),
    };
    if flagged {
        counted_escape_extra(bytes)
    } else {
        0
    }
}

fn long_escape_extra(bytes: &[u8]) -> usize {
    let n = bytes.len();
    let mut extra = 0usize;
    let mut blocks = bytes.chunks_exact(64);
    for block in &mut blocks {
        if window_needs_escape::<64>(block, 0) {
            extra += counted_escape_extra(block);
        }
    }
    let tail = blocks.remainder();
    if !tail.is_empty() && window_needs_escape::<64>(bytes, n - 64) {
        extra += counted_escape_extra(tail);
    }
    extra
}

/// Whether the `K` bytes of `bytes` from `at` hold a byte that needs an escape (true when
/// there are fewer, which only makes the caller count).
#[inline]
fn window_needs_escape<const K: usize>(bytes: &[u8], at: usize) -> bool {
    let Some(window) = bytes
        .get(at..at + K)
        .and_then(|w| <&[u8; K]>::try_from(w).ok())
    else {
        return true;
    };
    window.iter().fold(0u8, |acc, &b| {
        acc | u8::from(b < 0x20) | u8::from(b == b'"') | u8::from(b == b'\\')
    }) != 0
}

fn counted_escape_extra(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .map(|&b| usize::from(ESCAPE_EXTRA[usize::from(b)]))
        .sum()
}

/// Whether a string of fewer than 16 bytes holds a byte that needs an escape: one word, and a
/// second overlapping it.
#[inline]
fn short_needs_escape(bytes: &[u8]) -> bool {
    let n = bytes.len();
    if n < 8 {
        return bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
    }
    word_needs_escape(word8(bytes, 0)) || word_needs_escape(word8(bytes, n - 8))
}

/// Whether one of the eight bytes of `word` is a control character, `"` or `\` (the classic
/// exact tests for a zero byte and for a byte below a bound, applied to all bytes at once).
#[inline]
fn word_needs_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let has_zero = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS != 0;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGHS != 0;
    below_space
        || has_zero(word ^ (ONES * u64::from(b'"')))
        || has_zero(word ^ (ONES * u64::from(b'\\')))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check_number(text: &str, expected: &str) {
        let v: Value = serde_json::from_str(text).expect("test input is JSON");
        let n = v.as_number().expect("number");
        assert_eq!(js_number_string(number_as_f64(n)), expected, "for {text}");
        assert_eq!(number_len(n), expected.len(), "length for {text}");
    }

    #[test]
    fn number_to_string_matches_ecmascript() {
        for (text, expected) in [
            ("0", "0"),
            ("-0", "0"),
            ("-0.0", "0"),
            ("1.0", "1"),
            ("7", "7"),
            ("1.5", "1.5"),
            ("-1.5", "-1.5"),
            ("1e16", "10000000000000000"),
            ("1e20", "100000000000000000000"),
            ("1e21", "1e+21"),
            ("1.5e300", "1.5e+300"),
            ("2.5e-7", "2.5e-7"),
            ("1e-7", "1e-7"),
            ("1.23e-18", "1.23e-18"),
            ("0.000001", "0.000001"),
            ("0.0000012", "0.0000012"),
            ("123456789012345678901", "123456789012345680000"),
            ("12345678901234567890", "12345678901234567000"),
            ("9007199254740993", "9007199254740992"),
            ("-9007199254740993", "-9007199254740992"),
            ("1e308", "1e+308"),
            ("5e-324", "5e-324"),
            ("0.1", "0.1"),
            ("123.456", "123.456"),
            ("100", "100"),
        ] {
            check_number(text, expected);
        }
    }

    #[test]
    fn string_of_values_matches_ecmascript() {
        for (value, expected) in [
            (json!(null), "null"),
            (json!(true), "true"),
            (json!("Summary"), "Summary"),
            (json!([]), ""),
            (json!([1, "a"]), "1,a"),
            (json!([null]), ""),
            (json!([[1, 2], [3]]), "1,2,3"),
            (json!([true, {"a": 1}]), "true,[object Object]"),
            (json!([[], []]), ","),
            (json!([[[]], 1]), ",1"),
            (json!({}), "[object Object]"),
            (json!([null, null, 1]), ",,1"),
        ] {
            assert_eq!(js_string_of(Some(&value)), expected, "for {value}");
        }
        assert_eq!(js_string_of(None), "undefined");
    }

    #[test]
    fn stringify_length_counts_escapes_and_utf8() {
        let v = json!({"a": "x\"\\\n\u{1}\u{7f}\u{20ac}\u{1f600}", "b": [1.5, null, true, false, {}], "c": []});
        // "x" 1, \" 2, \\ 2, \n 2, \u0001 6, DEL 1, € 3, 😀 4 → 21 + 2 quotes.
        let expected =
            2 + (3 + 1 + 23) + 1 + (3 + 1 + (2 + 3 + 4 + 4 + 5 + 2 + 4)) + 1 + (3 + 1 + 2);
        assert_eq!(json_stringify_len(&v), expected);
    }

    #[test]
    fn array_index_keys() {
        assert_eq!(array_index("0"), Some(0));
        assert_eq!(array_index("17"), Some(17));
        assert_eq!(array_index("4294967294"), Some(4_294_967_294));
        assert_eq!(array_index("4294967295"), None);
        assert_eq!(array_index("01"), None);
        assert_eq!(array_index("-1"), None);
        assert_eq!(array_index(""), None);
        assert_eq!(array_index("1a"), None);
    }

    #[test]
    fn trim_uses_the_ecmascript_set() {
        assert!(is_blank("\u{feff}"));
        assert!(is_blank(" \t\n\u{3000}"));
        assert!(!is_blank("\u{85}"));
        assert!(!is_blank("\u{1f}"));
        assert_eq!(js_trim("\u{feff} a \u{a0}"), "a");
        assert_eq!(utf16_len("\u{1f600}a"), 3);
    }

    /// Every decimal of up to five places in a small range (and with a few large integer
    /// parts), measured through the fast path or around it, against `Number::toString`.
    #[test]
    fn short_decimal_lengths_match_number_to_string_exhaustively() {
        for places in 0..=5 {
            let scale = 10f64.powi(places);
            let large = [1i64 << 40, 5_629_499_534_213, 9_007_199_254_740_991];
            let units = (-30_000i64..30_000).chain(large.iter().flat_map(|&u| [u, -u, u + 7]));
            for units in units {
                let x = units as f64 / scale;
                let n = Number::from_f64(x).expect("finite");
                assert_eq!(number_len(&n), js_number_string(x).len(), "x = {x}");
            }
        }
    }

    proptest::proptest! {
        /// Decimals across the whole range the fast path covers (up to about 5.6e10) and past
        /// it agree with `Number::toString`.
        #[test]
        fn decimal_lengths_match_number_to_string(
            units in -100_000_000_000_000i64..100_000_000_000_000,
            places in 0i32..7,
        ) {
            let x = units as f64 / 10f64.powi(places);
            let n = Number::from_f64(x).expect("finite");
            assert_eq!(number_len(&n), js_number_string(x).len(), "x = {x}");
        }

        /// The early-exit escape check agrees with the exact length on escape-heavy text, for
        /// every limit around it (the slack check, the bound and the byte count all decide).
        #[test]
        fn escape_check_agrees_with_exact_length(
            texts in proptest::collection::vec("[a\"\\\\\u{1}\n\u{1f}é]{0,150}", 0..12),
            key in "[a\"\u{2}]{0,6}",
        ) {
            let mut object = Map::new();
            object.insert(key, Value::Array(texts.into_iter().map(Value::String).collect()));
            let value = Value::Object(object);
            let exact = json_stringify_len(&value);
            assert_eq!(exact, serde_json::to_string(&value).map_or(0, |t| t.len()));
            for limit in exact.saturating_sub(40)..=exact + 40 {
                assert_eq!(json_stringify_len_exceeds(&value, limit), exact > limit, "limit {limit}");
            }
        }
    }

    #[test]
    fn deep_nesting_does_not_recurse() {
        let mut v = json!(1);
        for _ in 0..200_000 {
            v = Value::Array(vec![v]);
        }
        assert_eq!(json_stringify_len(&v), 200_000 * 2 + 1);
        assert_eq!(js_string_of(Some(&v)), "1");
        // serde_json drops nested values recursively; unwind it by hand so the test itself
        // does not overflow the stack.
        let mut current = v;
        while let Value::Array(mut items) = current {
            current = items.pop().unwrap_or(Value::Null);
        }
    }
}

//! Timestamps (coms-bridge.md §4.1, §6.8): every coms timestamp we write has the JavaScript
//! `toISOString` shape, `2026-07-08T12:34:56.000Z` (UTC, exactly three fractional digits), which
//! `humantime::format_rfc3339_millis` produces. What we read is parsed by our own grammar, the
//! ISO-8601 subset that JavaScript's `Date.parse` accepts for ISO strings: `YYYY`, `YYYY-MM`,
//! `YYYY-MM-DD`, optionally followed by `T` (or one space) and `HH:mm`, optional `:ss`, optional
//! `.` and 1–9 digits, and optional `Z`/`z` or `±HH:mm`, with calendar-valid ranges. No crate
//! parses exactly that set (date-only forms, offsets and the space separator together), and the
//! free-form strings `Date.parse` also takes are deliberately refused (coms-bridge.md §15, open
//! question 12). A date-time without an offset is read as UTC here; JavaScript would read local
//! time, which only matters for liveness of an entry nobody writes that way.
//!
//! Pure: no clock. `now` is always a parameter.

use std::time::{Duration, UNIX_EPOCH};

/// The last millisecond of year 9999, the largest time the four-digit shape can show.
pub const MAX_MS: u64 = 253_402_300_799_999;

/// `ms` (milliseconds since the Unix epoch) as `YYYY-MM-DDTHH:MM:SS.mmmZ`; later times than
/// [`MAX_MS`] are shown as [`MAX_MS`].
pub fn format_ms(ms: u64) -> String {
    let time = UNIX_EPOCH + Duration::from_millis(ms.min(MAX_MS));
    humantime::format_rfc3339_millis(time).to_string()
}

/// Milliseconds since the Unix epoch of an ISO-8601 string of the accepted subset, or `None`.
pub fn parse_ms(text: &str) -> Option<i64> {
    let mut cursor = Cursor {
        bytes: text.as_bytes(),
        at: 0,
    };
    let year = cursor.digits(4)?;
    let (mut month, mut day) = (1, 1);
    if cursor.eat(b'-') {
        month = cursor.digits(2)?;
        if cursor.eat(b'-') {
            day = cursor.digits(2)?;
        }
    }
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    let days = days_from_civil(i64::from(year), month, day);
    if cursor.done() {
        return Some(days * 86_400_000);
    }
    if !(cursor.eat(b'T') || cursor.eat(b' ')) {
        return None;
    }
    let hour = cursor.digits(2)?;
    if !cursor.eat(b':') {
        return None;
    }
    let minute = cursor.digits(2)?;
    let (mut second, mut millis, mut fraction_zero) = (0, 0, true);
    if cursor.eat(b':') {
        second = cursor.digits(2)?;
        if cursor.eat(b'.') {
            let start = cursor.at;
            while cursor.peek().is_some_and(|b| b.is_ascii_digit()) {
                cursor.at += 1;
            }
            let fraction = &cursor.bytes[start..cursor.at];
            if fraction.is_empty() || fraction.len() > 9 {
                return None;
            }
            fraction_zero = fraction.iter().all(|&b| b == b'0');
            millis = fraction
                .iter()
                .chain(std::iter::repeat(&b'0'))
                .take(3)
                .fold(0, |n, &b| n * 10 + u32::from(b - b'0'));
        }
    }
    // `24:00` is the end of the day in ECMAScript's format, and nothing later in that hour.
    let end_of_day = hour == 24 && minute == 0 && second == 0 && fraction_zero;
    if (hour > 23 && !end_of_day) || minute > 59 || second > 59 {
        return None;
    }
    let mut offset_minutes: i64 = 0;
    if cursor.eat(b'Z') || cursor.eat(b'z') {
    } else if let Some(sign) = cursor.peek().filter(|b| matches!(b, b'+' | b'-')) {
        cursor.at += 1;
        let hours = cursor.digits(2)?;
        if !cursor.eat(b':') {
            return None;
        }
        let minutes = cursor.digits(2)?;
        if hours > 23 || minutes > 59 {
            return None;
        }
        offset_minutes = i64::from(hours * 60 + minutes);
        if sign == b'-' {
            offset_minutes = -offset_minutes;
        }
    }
    if !cursor.done() {
        return None;
    }
    let seconds = i64::from(hour * 3600 + minute * 60 + second) - offset_minutes * 60;
    Some(days * 86_400_000 + seconds * 1000 + i64::from(millis))
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        if found {
            self.at += 1;
        }
        found
    }

    fn done(&self) -> bool {
        self.at == self.bytes.len()
    }

    /// Exactly `count` ASCII digits as a number.
    fn digits(&mut self, count: usize) -> Option<u32> {
        let digits = self.bytes.get(self.at..self.at + count)?;
        if !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.at += count;
        Some(digits.iter().fold(0, |n, &b| n * 10 + u32::from(b - b'0')))
    }
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn formats_the_javascript_shape() {
        assert_eq!(format_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_ms(1_784_896_496_000), "2026-07-24T12:34:56.000Z");
        assert_eq!(format_ms(1_784_896_496_007), "2026-07-24T12:34:56.007Z");
        assert_eq!(format_ms(u64::MAX), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn parses_the_iso_subset() {
        let at = |s: &str| parse_ms(s);
        assert_eq!(at("2026-07-24T12:34:56.000Z"), Some(1_784_896_496_000));
        assert_eq!(at("2026-07-24T12:34:56Z"), Some(1_784_896_496_000));
        assert_eq!(at("2026-07-24 12:34:56.5z"), Some(1_784_896_496_500));
        assert_eq!(
            at("2026-07-24T12:34:56.123456789Z"),
            Some(1_784_896_496_123)
        );
        assert_eq!(at("2026-07-24T14:34:56+02:00"), Some(1_784_896_496_000));
        assert_eq!(at("2026-07-24T10:04:56-02:30"), Some(1_784_896_496_000));
        assert_eq!(at("2026-07-24T12:34"), Some(1_784_896_440_000));
        assert_eq!(at("2026-07-24"), Some(1_784_851_200_000));
        assert_eq!(at("2026-07"), at("2026-07-01"));
        assert_eq!(at("2026"), at("2026-01-01"));
        assert_eq!(at("2026T00:00Z"), at("2026-01-01"));
        assert_eq!(at("2024-02-29"), Some(1_709_164_800_000));
        assert_eq!(at("2026-07-24T24:00Z"), at("2026-07-25"));
        assert_eq!(at("1969-12-31T23:59:59.999Z"), Some(-1));
        for bad in [
            "nope",
            "",
            "July 8, 2026",
            "2026-7-8",
            "2026-13-01",
            "2026-00-01",
            "2026-02-29",
            "2026-04-31",
            "2026-07-24T",
            "2026-07-24T12",
            "2026-07-24T12:60",
            "2026-07-24T12:34:60",
            "2026-07-24T24:00:01",
            "2026-07-24T12:34:56.",
            "2026-07-24T12:34:56.1234567890Z",
            "2026-07-24T12:34.5",
            "2026-07-24T12:34:56+0200",
            "2026-07-24T12:34:56+24:00",
            "2026-07-24Z",
            "2026-07-24T12:34:56Z ",
            " 2026-07-24",
            "2026-07-24t12:34",
            "+002026-07-24",
        ] {
            assert_eq!(at(bad), None, "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn what_we_format_we_parse_back(ms in 0..=MAX_MS) {
            prop_assert_eq!(parse_ms(&format_ms(ms)), Some(ms as i64));
        }

        #[test]
        fn parsing_never_panics(text in "\\PC{0,40}") {
            let _ = parse_ms(&text);
        }

        #[test]
        fn offsets_shift_by_their_minutes(
            ms in 0..=MAX_MS / 2,
            hours in 0u32..24,
            minutes in 0u32..60,
            east in any::<bool>(),
        ) {
            let utc = format_ms(ms);
            let base = parse_ms(&utc).expect("parses");
            let sign = if east { '+' } else { '-' };
            let shifted = format!("{}{sign}{hours:02}:{minutes:02}", &utc[..utc.len() - 1]);
            let delta = i64::from(hours * 60 + minutes) * 60_000;
            let expected = if east { base - delta } else { base + delta };
            prop_assert_eq!(parse_ms(&shifted), Some(expected));
        }
    }
}

//! The UTC timestamps setup stores: `registeredAt` in `agents.json` (cli.md §6.1) and
//! `submittedAt` in `pending-registrations.json` (cli.md §4.3 step 5), both
//! `YYYY-MM-DDTHH:MM:SSZ` (Python `time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())`).
//! The caller reads the clock; this module only formats.

/// `YYYY-MM-DDTHH:MM:SSZ` for `epoch_secs` seconds after 1970-01-01T00:00:00Z.
pub fn utc_seconds(epoch_secs: u64) -> String {
    let days = i64::try_from(epoch_secs / 86_400).unwrap_or(i64::MAX / 2);
    let rem = epoch_secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since the epoch to (year, month, day) in the proleptic Gregorian calendar (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let year = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    (if month <= 2 { year + 1 } else { year }, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(utc_seconds(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_seconds(1_767_225_600), "2026-01-01T00:00:00Z");
        assert_eq!(utc_seconds(951_782_400 + 86_399), "2000-02-29T23:59:59Z");
        assert_eq!(utc_seconds(4_102_444_800), "2100-01-01T00:00:00Z");
        assert_eq!(utc_seconds(1_709_210_096), "2024-02-29T12:34:56Z");
    }
}

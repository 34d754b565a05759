//! The simulator's controllable clock (canon-wire.md §11.1 S5).
//!
//! Every deadline, tombstone age, replay-buffer age, rate-limit window and turn-state staleness
//! check reads this clock, never the system time directly. A clock either follows the system
//! time plus an offset, or is frozen at an instant; tests freeze it and advance it explicitly,
//! so nothing in a test waits for real time to pass.

use std::time::{SystemTime, UNIX_EPOCH};

/// A clock that can be frozen, advanced and set (epoch milliseconds).
#[derive(Debug, Clone, Default)]
pub struct SimClock {
    frozen_at: Option<u64>,
    offset_ms: i64,
}

impl SimClock {
    /// A clock frozen at `at_ms`.
    pub fn frozen(at_ms: u64) -> Self {
        Self {
            frozen_at: Some(at_ms),
            offset_ms: 0,
        }
    }

    /// A clock that follows the system time.
    pub fn system() -> Self {
        Self::default()
    }

    /// The current sim time in epoch milliseconds.
    pub fn now_ms(&self) -> u64 {
        match self.frozen_at {
            Some(at) => at,
            None => {
                let real = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                    .unwrap_or(0);
                real.saturating_add_signed(self.offset_ms)
            }
        }
    }

    /// Stops the clock at its current reading.
    pub fn freeze(&mut self) {
        self.frozen_at = Some(self.now_ms());
    }

    /// Lets the clock run again from its current reading.
    pub fn unfreeze(&mut self) {
        let now = self.now_ms();
        self.frozen_at = None;
        let real = Self::system().now_ms();
        self.offset_ms = i64::try_from(now).unwrap_or(i64::MAX) - i64::try_from(real).unwrap_or(0);
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&mut self, ms: u64) {
        match self.frozen_at.as_mut() {
            Some(at) => *at = at.saturating_add(ms),
            None => {
                self.offset_ms = self
                    .offset_ms
                    .saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))
            }
        }
    }

    /// Sets the clock to `at_ms` (keeping it frozen or running as it was).
    pub fn set(&mut self, at_ms: u64) {
        match self.frozen_at.as_mut() {
            Some(at) => *at = at_ms,
            None => {
                let real = Self::system().now_ms();
                self.offset_ms =
                    i64::try_from(at_ms).unwrap_or(i64::MAX) - i64::try_from(real).unwrap_or(0);
            }
        }
    }

    /// Whether the clock is frozen.
    pub fn is_frozen(&self) -> bool {
        self.frozen_at.is_some()
    }
}

/// Formats epoch milliseconds as an ISO-8601 UTC timestamp with milliseconds
/// (`2026-01-02T03:04:05.678Z`), the shape JavaScript's `Date#toISOString` produces.
pub fn iso_8601(ms: u64) -> String {
    let secs = ms / 1000;
    let millis = ms % 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_formatting_matches_known_instants() {
        assert_eq!(iso_8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_8601(1_767_225_600_123), "2026-01-01T00:00:00.123Z");
        assert_eq!(iso_8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn frozen_clock_only_moves_when_told() {
        let mut clock = SimClock::frozen(1000);
        assert_eq!(clock.now_ms(), 1000);
        clock.advance(500);
        assert_eq!(clock.now_ms(), 1500);
        clock.set(10);
        assert_eq!(clock.now_ms(), 10);
        assert!(clock.is_frozen());
    }
}

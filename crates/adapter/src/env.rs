//! What only the shell may read: the clock and fresh randomness, handed to
//! the pure core as `now_ms` and `u128` values, and small helpers around
//! them.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The crash tests' clock offset (`Config::clock_offset_ms`); 0 in production.
static CLOCK_OFFSET_MS: AtomicU64 = AtomicU64::new(0);

/// Sets the offset every later [`now_ms`] adds (once, at start).
pub(crate) fn set_clock_offset_ms(offset: u64) {
    CLOCK_OFFSET_MS.store(offset, Ordering::Relaxed);
}

/// Milliseconds since the Unix epoch (0 before it), plus the test offset.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
        .saturating_add(CLOCK_OFFSET_MS.load(Ordering::Relaxed))
}

/// Fresh randomness for turn ids, epochs and lease tokens, from the kernel CSPRNG
/// (`getrandom`; never a hash of the clock). Should the kernel refuse, the standard library's
/// per-process random hasher keys, a counter and the clock stand in, so an id is still unique;
/// nothing secret is derived from these values.
pub(crate) fn random_u128() -> u128 {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        match rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return fallback_u128(),
        }
    }
    u128::from_le_bytes(bytes)
}

fn fallback_u128() -> u128 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let half = || {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        hasher.write_u64(now_ms());
        hasher.finish()
    };
    (u128::from(half()) << 64) | u128::from(half())
}

#[cfg(test)]
mod tests {
    #[test]
    fn random_values_differ() {
        let values: std::collections::HashSet<u128> =
            (0..64).map(|_| super::random_u128()).collect();
        assert_eq!(values.len(), 64);
        assert_ne!(super::fallback_u128(), super::fallback_u128());
    }
}

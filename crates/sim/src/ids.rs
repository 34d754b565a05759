//! Deterministic ids and tokens (canon-wire.md §11.1 S5).
//!
//! Every generated id, key and token comes from one seeded SplitMix64 generator, so two runs
//! with the same seed and the same requests produce the same ids.

/// A seeded id generator.
#[derive(Debug, Clone)]
pub struct IdGen {
    state: u64,
    counter: u64,
}

impl IdGen {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            state: seed ^ 0x9E37_79B9_7F4A_7C15,
            counter: 0,
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `n` lowercase hex characters.
    pub fn hex(&mut self, n: usize) -> String {
        let mut out = String::with_capacity(n + 16);
        while out.len() < n {
            out.push_str(&format!("{:016x}", self.next_u64()));
        }
        out.truncate(n);
        out
    }

    /// A URL-safe token of `n` characters (letters, digits, `-`, `_`).
    pub fn token(&mut self, n: usize) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::with_capacity(n);
        let mut bits = 0u64;
        let mut left = 0;
        for _ in 0..n {
            if left < 6 {
                bits = self.next_u64();
                left = 64;
            }
            out.push(char::from(
                ALPHABET[usize::try_from(bits & 63).unwrap_or(0)],
            ));
            bits >>= 6;
            left -= 6;
        }
        out
    }

    /// A sequential id `<prefix>-<6 digits>` (sequence shared by all prefixes).
    pub fn seq(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}-{:06}", self.counter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_ids() {
        let mut a = IdGen::new(7);
        let mut b = IdGen::new(7);
        assert_eq!(a.hex(40), b.hex(40));
        assert_eq!(a.token(43), b.token(43));
        assert_eq!(a.seq("m"), "m-000001");
        assert_ne!(IdGen::new(8).hex(20), IdGen::new(7).hex(20));
    }
}

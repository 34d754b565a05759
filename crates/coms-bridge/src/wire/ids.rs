//! ULIDs (coms-bridge.md §4.1): 26 upper-case Crockford base32 characters, the first 10 the Unix
//! time in milliseconds, the last 16 eighty random bits. Generation uses the `ulid` crate, whose
//! layout is exactly that; validation is our own, because the qid rule is the regular expression
//! `^[0-9A-HJKMNP-TV-Z]{26}$` (upper case only, any first character), which is stricter than a
//! ULID decoder (that folds case and maps `I`, `L`, `O`) and looser (it has no 128-bit overflow
//! check).

/// The Crockford base32 alphabet (no I, L, O, U).
pub const CROCKFORD: &str = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// The length of a ULID in characters.
pub const ULID_LEN: usize = 26;

/// Whether `text` matches `^[0-9A-HJKMNP-TV-Z]{26}$` (coms-bridge.md §4.1).
pub fn is_ulid(text: &str) -> bool {
    text.len() == ULID_LEN && text.bytes().all(|b| CROCKFORD.as_bytes().contains(&b))
}

/// A fresh ULID from the current time and the thread's random generator.
pub fn new_ulid() -> String {
    ulid::Ulid::generate().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_qid_rule_is_the_regex() {
        assert!(is_ulid("01ARZ3NDEKTSV4RRFFQ69G5FAV"));
        assert!(is_ulid("ZZZZZZZZZZZZZZZZZZZZZZZZZZ"), "no overflow check");
        assert!(!is_ulid("01arz3ndektsv4rrffq69g5fav"), "lower case");
        assert!(!is_ulid("01ARZ3NDEKTSV4RRFFQ69G5FAI"), "I");
        assert!(!is_ulid("01ARZ3NDEKTSV4RRFFQ69G5FAL"));
        assert!(!is_ulid("01ARZ3NDEKTSV4RRFFQ69G5FAO"));
        assert!(!is_ulid("01ARZ3NDEKTSV4RRFFQ69G5FAU"));
        assert!(!is_ulid("01ARZ3NDEKTSV4RRFFQ69G5FA"), "25 characters");
        assert!(!is_ulid("01ARZ3NDEKTSV4RRFFQ69G5FAVV"), "27 characters");
        assert!(!is_ulid(""));
        assert!(!is_ulid("short"));
    }

    #[test]
    fn generated_ulids_are_valid_unique_and_start_with_the_time() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..1000 {
            let id = new_ulid();
            assert!(is_ulid(&id), "{id}");
            assert!(seen.insert(id));
        }
        let id = new_ulid();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis();
        let mut time: u128 = 0;
        for c in id[..10].bytes() {
            let digit = CROCKFORD.bytes().position(|d| d == c).expect("alphabet");
            time = time * 32 + digit as u128;
        }
        assert!(now.abs_diff(time) < 60_000, "{time} vs {now}");
    }

    proptest! {
        #[test]
        fn only_the_alphabet_at_length_26_passes(text in "[0-9A-Za-z]{20,30}") {
            let expected = text.len() == 26
                && text.chars().all(|c| CROCKFORD.contains(c));
            prop_assert_eq!(is_ulid(&text), expected);
        }
    }
}

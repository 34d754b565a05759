//! Names setup derives: the default local profile name (cli.md §4.3 step 1) and the
//! `localRegistrationId` of a pending registration (cli.md §4.3 step 4).

/// The profile name used when the slug of a display name is empty.
pub const DEFAULT_PROFILE_SLUG: &str = "hermes";

/// The default local profile name for a display name (cli.md §4.3 step 1): lower-cased, ASCII
/// letters and digits kept, each run of other characters turned into one `-`, leading and
/// trailing `-` removed; `hermes` when nothing is left.
pub fn profile_slug(display_name: &str) -> String {
    let mut slug = String::with_capacity(display_name.len());
    let mut pending_dash = false;
    for c in display_name.to_lowercase().chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            if pending_dash && !slug.is_empty() {
                slug.push('-');
            }
            pending_dash = false;
            slug.push(c);
        } else {
            pending_dash = true;
        }
    }
    if slug.is_empty() {
        DEFAULT_PROFILE_SLUG.to_owned()
    } else {
        slug
    }
}

/// `hermes-` and the 128 random bits as 32 lowercase hex digits (the caller draws them).
pub fn local_registration_id(random: u128) -> String {
    format!("hermes-{random:032x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn slug_rule() {
        for (name, expected) in [
            ("Hermes", "hermes"),
            ("My Hermes Agent", "my-hermes-agent"),
            ("  --Ops__Bot 2!!  ", "ops-bot-2"),
            ("Zoë's bot", "zo-s-bot"),
            ("日本語", "hermes"),
            ("", "hermes"),
            ("---", "hermes"),
            ("A1", "a1"),
            // U+212A KELVIN SIGN lower-cases to ASCII `k`, as in Python.
            ("\u{212a}elvin", "kelvin"),
        ] {
            assert_eq!(profile_slug(name), expected, "{name:?}");
        }
    }

    #[test]
    fn registration_id_is_32_lowercase_hex() {
        assert_eq!(
            local_registration_id(0),
            "hermes-00000000000000000000000000000000"
        );
        assert_eq!(
            local_registration_id(u128::MAX),
            "hermes-ffffffffffffffffffffffffffffffff"
        );
        assert_eq!(
            local_registration_id(0xABC),
            "hermes-00000000000000000000000000000abc"
        );
    }

    /// The rule in its regex form, as the reference writes it:
    /// `re.sub("[^a-z0-9]+", "-", name.lower()).strip("-") or "hermes"`.
    fn reference(name: &str) -> String {
        let lowered = name.to_lowercase();
        let mut out = String::new();
        let mut in_run = false;
        for c in lowered.chars() {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                out.push(c);
                in_run = false;
            } else if !in_run {
                out.push('-');
                in_run = true;
            }
        }
        let trimmed = out.trim_matches('-');
        if trimmed.is_empty() {
            "hermes".to_owned()
        } else {
            trimmed.to_owned()
        }
    }

    proptest! {
        #[test]
        fn slug_is_a_valid_name_and_matches_the_regex_form(name in any::<String>()) {
            let slug = profile_slug(&name);
            prop_assert_eq!(&slug, &reference(&name));
            prop_assert!(!slug.is_empty());
            prop_assert!(!slug.starts_with('-') && !slug.ends_with('-'));
            prop_assert!(!slug.contains("--"));
            prop_assert!(slug.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
            prop_assert_eq!(profile_slug(&slug), slug.clone());
        }
    }
}

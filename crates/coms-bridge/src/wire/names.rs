//! Project and peer names (coms-bridge.md §4.1), with the exact error texts peers print.

/// A name that breaks the rules of coms-bridge.md §4.1. The value is shown JSON-quoted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// Not a valid project name.
    #[error("Invalid project name: {}", quoted(.0))]
    Project(String),
    /// Not a valid peer name.
    #[error("Invalid coms name: {}", quoted(.0))]
    Peer(String),
    /// The reserved peer name `projects`.
    #[error("Invalid reserved coms name: {}", quoted(.0))]
    Reserved(String),
}

/// `value` as a JSON string literal.
pub(crate) fn quoted(value: &str) -> String {
    serde_json::Value::from(value).to_string()
}

/// Checks a project name: non-empty, not `.`, no `..`, `/` or `\`, and
/// `^[A-Za-z0-9][A-Za-z0-9._-]*$`.
pub fn validate_project(project: &str) -> Result<(), NameError> {
    let bytes = project.as_bytes();
    let ok = !bytes.is_empty()
        && project != "."
        && !project.contains("..")
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(NameError::Project(project.to_owned()))
    }
}

/// Checks a peer name: `^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`, and not `projects`.
pub fn validate_peer(name: &str) -> Result<(), NameError> {
    let bytes = name.as_bytes();
    let ok = (1..=64).contains(&bytes.len())
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
    if !ok {
        return Err(NameError::Peer(name.to_owned()));
    }
    if name == "projects" {
        return Err(NameError::Reserved(name.to_owned()));
    }
    Ok(())
}

/// Whether `name` is a Hermes profile id: `^[a-z0-9][a-z0-9_-]{0,63}$` (hermes-agent 0.19.0
/// `profiles.py`). Hermes does not consume a `--profile` value outside that rule, and every send
/// then fails with a usage error, so the daemon and the controller both require it
/// (coms-bridge.md §5.1 DEVIATION, §15 open question 10).
pub fn is_hermes_profile(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=64).contains(&bytes.len())
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn project_rule() {
        for good in ["default", "af", "acme.prod", "hermes-bridge-test", "A_1"] {
            assert_eq!(validate_project(good), Ok(()), "{good}");
        }
        for bad in [
            "", ".", "..", "a..b", "../bad", "a/b", "a\\b", "-a", ".a", "a b", "é",
        ] {
            assert!(validate_project(bad).is_err(), "{bad}");
        }
        assert_eq!(
            validate_project("../bad").unwrap_err().to_string(),
            r#"Invalid project name: "../bad""#
        );
    }

    #[test]
    fn peer_rule() {
        assert_eq!(validate_peer("user-remote"), Ok(()));
        assert_eq!(validate_peer(&"a".repeat(64)), Ok(()));
        assert!(validate_peer(&"a".repeat(65)).is_err());
        for bad in ["", "-a", "a.b", "a b", "_a"] {
            assert_eq!(
                validate_peer(bad).unwrap_err().to_string(),
                format!("Invalid coms name: {}", quoted(bad))
            );
        }
        assert_eq!(
            validate_peer("projects").unwrap_err().to_string(),
            r#"Invalid reserved coms name: "projects""#
        );
    }

    #[test]
    fn hermes_profile_rule() {
        for good in ["default", "gateway-prod", "a", "0_x", &"a".repeat(64)] {
            assert!(is_hermes_profile(good), "{good}");
        }
        for bad in [
            "",
            "Default",
            "gateway.prod",
            "-a",
            "_a",
            "a b",
            &"a".repeat(65),
        ] {
            assert!(!is_hermes_profile(bad), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn valid_peer_names_are_valid_projects(name in "[A-Za-z0-9][A-Za-z0-9_-]{0,63}") {
            prop_assume!(name != "projects");
            prop_assert_eq!(validate_peer(&name), Ok(()));
            prop_assert_eq!(validate_project(&name), Ok(()));
        }
    }
}

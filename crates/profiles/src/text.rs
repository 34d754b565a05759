//! Python string helpers the resolver's rules are written in.

/// Python's `str.isspace()` set: Unicode whitespace plus U+001C..U+001F.
pub(crate) fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip()`.
pub(crate) fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// A value trimmed the Python way, or `None` when nothing is left.
pub(crate) fn non_blank(s: &str) -> Option<&str> {
    let trimmed = py_strip(s);
    (!trimmed.is_empty()).then_some(trimmed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_uses_python_whitespace() {
        assert_eq!(py_strip("\u{1c} a b \u{a0}\n"), "a b");
        assert_eq!(non_blank(" \t"), None);
        assert_eq!(non_blank(" x "), Some("x"));
    }
}

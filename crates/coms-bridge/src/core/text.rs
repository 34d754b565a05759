//! Text rules shared by the question format and answer mapping: the JavaScript whitespace set
//! (coms-bridge.md §6.5; Rust's `char::is_whitespace` differs: it includes U+0085 and excludes
//! U+FEFF), UTF-16 lengths (Telegram's measure), the truncation rule of coms-bridge.md §6.6, and
//! the neutralisation of Hermes attachment directives in peer-supplied text (coms-bridge.md §15,
//! open question 9).

/// Whether `c` is whitespace for JavaScript's `String.prototype.trim` and `\s`.
pub fn is_js_whitespace(c: char) -> bool {
    matches!(
        c,
        '\u{9}'..='\u{D}'
            | ' '
            | '\u{A0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200A}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202F}'
            | '\u{205F}'
            | '\u{3000}'
            | '\u{FEFF}'
    )
}

/// `text` without JavaScript whitespace at either end.
pub fn js_trim(text: &str) -> &str {
    text.trim_matches(is_js_whitespace)
}

/// The length of `text` in UTF-16 code units.
pub fn utf16_len(text: &str) -> usize {
    text.chars().map(char::len_utf16).sum()
}

/// The ellipsis that ends a truncated text (U+2026, one UTF-16 unit).
pub const ELLIPSIS: char = '…';

/// `text` cut to at most `limit` UTF-16 units: unchanged when it fits, empty for a limit of 0,
/// `…` for 1, else the first `limit − 1` units and `…`. A cut never splits a surrogate pair; it
/// then ends one unit earlier (coms-bridge.md §6.6 DEVIATION).
pub fn truncate_utf16(text: &str, limit: usize) -> String {
    if utf16_len(text) <= limit {
        return text.to_owned();
    }
    if limit == 0 {
        return String::new();
    }
    let keep = limit - 1;
    let mut units = 0;
    let mut out = String::new();
    for c in text.chars() {
        if units + c.len_utf16() > keep {
            break;
        }
        units += c.len_utf16();
        out.push(c);
    }
    out.push(ELLIPSIS);
    out
}

/// `text` with every run of whitespace replaced by one space, and trimmed.
pub fn collapse_whitespace(text: &str) -> String {
    text.split(is_js_whitespace)
        .filter(|piece| !piece.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The zero-width space we insert to break a directive (U+200B).
pub const ZWSP: char = '\u{200B}';

/// Peer-supplied `text` with Hermes' attachment directives broken: a zero-width space after
/// `MEDIA` when optional whitespace and `:` follow, and after the opening `[[` of
/// `[[as_document]]` and `[[audio_as_voice]]`. Hermes would otherwise attach local files that
/// another agent named (coms-bridge.md §15, open question 9).
pub fn neutralise_directives(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("MEDIA") {
        let (before, from) = rest.split_at(at);
        out.push_str(before);
        out.push_str("MEDIA");
        let after = &from["MEDIA".len()..];
        if after.trim_start_matches(is_js_whitespace).starts_with(':') {
            out.push(ZWSP);
        }
        rest = after;
    }
    out.push_str(rest);
    for directive in ["as_document]]", "audio_as_voice]]"] {
        out = out.replace(&format!("[[{directive}"), &format!("[[{ZWSP}{directive}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn whitespace_is_the_javascript_set() {
        for c in [
            '\t', '\n', '\u{B}', '\u{C}', '\r', ' ', '\u{A0}', '\u{1680}', '\u{2000}', '\u{200A}',
            '\u{2028}', '\u{2029}', '\u{202F}', '\u{205F}', '\u{3000}', '\u{FEFF}',
        ] {
            assert!(is_js_whitespace(c), "{c:?}");
        }
        for c in ['\u{85}', '\u{200B}', 'a', '\u{180E}'] {
            assert!(!is_js_whitespace(c), "{c:?}");
        }
        assert_eq!(js_trim("\u{FEFF} a b\u{3000}"), "a b");
        assert_eq!(js_trim("\u{85}a"), "\u{85}a");
        assert_eq!(collapse_whitespace("  my \t proj\n x "), "my proj x");
        assert_eq!(collapse_whitespace("   "), "");
    }

    #[test]
    fn truncation_rule() {
        assert_eq!(truncate_utf16("abc", 3), "abc");
        assert_eq!(truncate_utf16("abcd", 3), "ab…");
        assert_eq!(truncate_utf16("abcd", 1), "…");
        assert_eq!(truncate_utf16("abcd", 0), "");
        assert_eq!(truncate_utf16("", 0), "");
        // 📁 is two units; cutting inside it ends one unit earlier.
        assert_eq!(truncate_utf16("a📁bc", 3), "a…");
        assert_eq!(truncate_utf16("a📁bc", 4), "a📁…");
        assert_eq!(utf16_len("❓📁—↩…"), 6);
    }

    #[test]
    fn directives_are_broken() {
        assert_eq!(
            neutralise_directives("see MEDIA:/etc/passwd"),
            "see MEDIA\u{200B}:/etc/passwd"
        );
        assert_eq!(neutralise_directives("MEDIA  : x"), "MEDIA\u{200B}  : x");
        assert_eq!(neutralise_directives("MEDIA is fine"), "MEDIA is fine");
        assert_eq!(neutralise_directives("MEDIAMEDIA:"), "MEDIAMEDIA\u{200B}:");
        assert_eq!(
            neutralise_directives("[[as_document]] and [[audio_as_voice]] but [[other]]"),
            "[[\u{200B}as_document]] and [[\u{200B}audio_as_voice]] but [[other]]"
        );
    }

    proptest! {
        #[test]
        fn truncation_fits_and_is_a_prefix(text in "\\PC{0,60}", limit in 0usize..80) {
            let cut = truncate_utf16(&text, limit);
            prop_assert!(utf16_len(&cut) <= limit);
            if utf16_len(&text) <= limit {
                prop_assert_eq!(&cut, &text);
            } else if limit > 0 {
                let body = cut.strip_suffix(ELLIPSIS).expect("ends with the ellipsis");
                prop_assert!(text.starts_with(body));
                prop_assert!(utf16_len(body) + 2 >= limit, "at most one unit short");
            }
        }

        #[test]
        fn neutralising_only_adds_zero_width_spaces(text in "(MEDIA|\\[\\[as_document\\]\\]|:| |x|\\[|\\]){0,20}") {
            let out = neutralise_directives(&text);
            prop_assert_eq!(out.replace(ZWSP, ""), text);
            let stripped: String = out.chars().filter(|c| !is_js_whitespace(*c)).collect();
            prop_assert!(!stripped.contains("MEDIA:"));
            prop_assert!(!out.contains("[[as_document]]"));
        }
    }
}

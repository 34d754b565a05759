//! The editor on each layout it reads (one `check` per change, cases as data), each structure it
//! refuses, and its properties over generated configs (`sample_configs`, shared with the venv
//! test in `hermes/tests.rs` that parses the same texts with Hermes' loader): install is
//! idempotent, lines outside the edited keys are kept, install then uninstall gives back a file
//! without the keys byte for byte, and what the editor writes it reads back.

use super::*;

const PLUGIN: &str = "canon-hermes";
const PLATFORM: &str = "canon";

fn check_install(before: &str, after: &str) {
    let edit = install(before, PLUGIN, PLATFORM).unwrap_or_else(|e| panic!("{e}:\n{before}"));
    assert_eq!(edit.text, after, "install of:\n{before}");
    let again = install(&edit.text, PLUGIN, PLATFORM).expect("a second install");
    assert_eq!(again.text, after, "a second install changes nothing");
    assert!(!again.plugin_changed && !again.platform_changed);
}

fn check_uninstall(before: &str, after: &str) {
    let edit = uninstall(before, PLUGIN, PLATFORM).unwrap_or_else(|e| panic!("{e}:\n{before}"));
    assert_eq!(edit.text, after, "uninstall of:\n{before}");
    let again = uninstall(&edit.text, PLUGIN, PLATFORM).expect("a second uninstall");
    assert_eq!(again.text, after, "a second uninstall changes nothing");
}

fn check_refused(text: &str, line: usize, kind: ErrorKind) {
    let expected = EditError { line, kind };
    assert_eq!(
        install(text, PLUGIN, PLATFORM).map(|e| e.text),
        Err(expected.clone()),
        "install of:\n{text}"
    );
}

#[test]
fn missing_sections_are_appended_in_hermes_layout() {
    check_install(
        "",
        "plugins:\n  enabled:\n    - canon-hermes\nplatforms:\n  canon:\n    enabled: true\n",
    );
    check_install(
        "# mine\nmodel:\n  default: x  # pinned\n\n",
        "# mine\nmodel:\n  default: x  # pinned\n\nplugins:\n  enabled:\n    - canon-hermes\n\
         platforms:\n  canon:\n    enabled: true\n",
    );
}

#[test]
fn the_file_s_own_indentation_sequence_offset_and_line_breaks_are_used() {
    check_install(
        "model:\n    default: x\nlist:\n    - a\n",
        "model:\n    default: x\nlist:\n    - a\nplugins:\n    enabled:\n        - canon-hermes\n\
         platforms:\n    canon:\n        enabled: true\n",
    );
    check_install(
        "a:\r\n  b: 1\r\n",
        "a:\r\n  b: 1\r\nplugins:\r\n  enabled:\r\n    - canon-hermes\r\nplatforms:\r\n  canon:\r\n    enabled: true\r\n",
    );
    // No final line break before, none after (and uninstall gives the bytes back).
    let before = "a: 1";
    let installed = install(before, PLUGIN, PLATFORM).expect("install").text;
    assert_eq!(
        installed,
        "a: 1\nplugins:\n  enabled:\n    - canon-hermes\nplatforms:\n  canon:\n    enabled: true"
    );
    check_uninstall(&installed, before);
    // A leading document marker is fine.
    check_install(
        "---\na: 1\n",
        "---\na: 1\nplugins:\n  enabled:\n    - canon-hermes\nplatforms:\n  canon:\n    enabled: true\n",
    );
}

#[test]
fn block_sequences_get_the_plugin_in_their_own_style() {
    let platform = "platforms:\n  canon:\n    enabled: true\n";
    for (before, after) in [
        (
            "plugins:\n  enabled:\n  - a\n  # keep\n  disabled: [x]\n",
            "plugins:\n  enabled:\n  - a\n  - canon-hermes\n  # keep\n  disabled: [x]\n",
        ),
        (
            "plugins:\n  enabled:\n    - a\n    - 'b'\n\nother: 1\n",
            "plugins:\n  enabled:\n    - a\n    - 'b'\n    - canon-hermes\n\nother: 1\n",
        ),
        (
            "plugins:\n  disabled:\n  - x\n",
            "plugins:\n  disabled:\n  - x\n  enabled:\n  - canon-hermes\n",
        ),
        (
            "plugins:  # mine\n",
            "plugins:  # mine\n  enabled:\n    - canon-hermes\n",
        ),
        (
            "plugins: ~ # none\n",
            "plugins: # none\n  enabled:\n    - canon-hermes\n",
        ),
        (
            "plugins:\n  enabled:\n",
            "plugins:\n  enabled:\n    - canon-hermes\n",
        ),
    ] {
        check_install(
            &format!("{before}{platform}"),
            &format!("{after}{platform}"),
        );
    }
}

#[test]
fn flow_sequences_are_rewritten_on_their_line() {
    let platform = "platforms:\n  canon:\n    enabled: true\n";
    for (before, after) in [
        (
            "  enabled: [zzz, aaa]  # mine",
            "  enabled: [zzz, aaa, canon-hermes]  # mine",
        ),
        ("  enabled: [ a,b ]", "  enabled: [ a,b,canon-hermes ]"),
        ("  enabled: []", "  enabled: [canon-hermes]"),
        (
            "  enabled: [\"x\", canon-hermes]",
            "  enabled: [\"x\", canon-hermes]",
        ),
    ] {
        check_install(
            &format!("plugins:\n{before}\n{platform}"),
            &format!("plugins:\n{after}\n{platform}"),
        );
    }
}

#[test]
fn the_platform_is_enabled_where_it_is_and_a_true_value_is_left_alone() {
    let plugins = "plugins:\n  enabled: [canon-hermes]\n";
    for (before, after) in [
        (
            "platforms:\n  telegram:\n    enabled: true\n",
            "platforms:\n  telegram:\n    enabled: true\n  canon:\n    enabled: true\n",
        ),
        (
            "platforms:\n  canon:\n    enabled: false  # off for now\n",
            "platforms:\n  canon:\n    enabled: true  # off for now\n",
        ),
        (
            "platforms:\n  canon:\n    enabled: \"true\"\n",
            "platforms:\n  canon:\n    enabled: true\n",
        ),
        (
            "platforms:\n  canon:\n    enabled:\n",
            "platforms:\n  canon:\n    enabled: true\n",
        ),
        (
            "platforms:\n  canon:\n    extra: 1\n",
            "platforms:\n  canon:\n    extra: 1\n    enabled: true\n",
        ),
        (
            "platforms:\n  canon:\n",
            "platforms:\n  canon:\n    enabled: true\n",
        ),
        (
            "platforms:\n    canon:\n        enabled: yes\n",
            "platforms:\n    canon:\n        enabled: yes\n",
        ),
        ("platforms:\n", "platforms:\n  canon:\n    enabled: true\n"),
    ] {
        check_install(&format!("{plugins}{before}"), &format!("{plugins}{after}"));
    }
}

#[test]
fn what_is_already_there_is_not_touched() {
    let text = "# c\nplugins:\n  enabled:\n  - \"canon-hermes\"\nplatforms:\n  canon:\n    enabled: True # on\n";
    let edit = install(text, PLUGIN, PLATFORM).expect("install");
    assert_eq!(
        edit,
        Edit {
            text: text.to_owned(),
            plugin_changed: false,
            platform_changed: false
        }
    );
}

#[test]
fn uninstall_removes_what_install_added_and_keeps_the_rest() {
    for (before, after) in [
        // Emptied entries go, up to the section.
        (
            "a: 1\nplugins:\n  enabled:\n  - canon-hermes\nplatforms:\n  canon:\n    enabled: true\n",
            "a: 1\n",
        ),
        // Other plugins, other platforms and other keys stay.
        (
            "plugins:\n  enabled:\n  - a\n  - canon-hermes\n  - b\nplatforms:\n  x:\n    enabled: true\n  canon:\n    enabled: true\n",
            "plugins:\n  enabled:\n  - a\n  - b\nplatforms:\n  x:\n    enabled: true\n",
        ),
        (
            "plugins:\n  enabled: [a, canon-hermes, 'b']\n  disabled: []\nplatforms:\n  canon:\n    enabled: true\n    extra: 1\n",
            "plugins:\n  enabled: [a, 'b']\n  disabled: []\nplatforms:\n  canon:\n    enabled: false\n    extra: 1\n",
        ),
        (
            "plugins:\n  enabled: [canon-hermes]\n  disabled: []\nplatforms:\n  canon:\n    extra: 1\n",
            "plugins:\n  disabled: []\nplatforms:\n  canon:\n    extra: 1\n    enabled: false\n",
        ),
        // Comments inside a removed entry stay.
        (
            "plugins:\n  enabled:\n  # mine\n  - canon-hermes\n",
            "  # mine\n",
        ),
        // Nothing of ours: nothing changes.
        (
            "plugins:\n  enabled: [a]\nplatforms:\n  x:\n    enabled: true\n",
            "plugins:\n  enabled: [a]\nplatforms:\n  x:\n    enabled: true\n",
        ),
        ("", ""),
    ] {
        check_uninstall(before, after);
    }
    let disabled = "platforms:\n  canon:\n    enabled: off\n    extra: 1\n";
    assert!(
        !uninstall(disabled, PLUGIN, PLATFORM)
            .expect("uninstall")
            .platform_changed
    );
}

#[test]
fn structures_the_editor_does_not_read_are_refused() {
    use ErrorKind::*;
    for (text, line, kind) in [
        ("\u{feff}a: 1\n", 0, ByteOrderMark),
        ("plugins:\n\tenabled: []\n", 2, Tab),
        ("a: 1\n---\nb: 2\n", 2, DocumentMarker),
        ("a: 1\n...\n", 2, DocumentMarker),
        ("%YAML 1.1\n---\na: 1\n", 1, Directive),
        ("plugins: &p\n  enabled: []\n", 1, Anchor),
        ("plugins: *p\n", 1, Alias),
        ("plugins: !!map\n  enabled: []\n", 1, Tag),
        ("<<: *base\n", 1, MergeKey),
        ("plugins:\n  <<: *base\n", 2, MergeKey),
        ("? plugins\n: x\n", 1, ComplexKey),
        ("plugins: {enabled: [a]}\n", 1, FlowMapping),
        ("plugins:\n  enabled: [a,\n    b]\n", 2, MultiLineFlow),
        ("plugins:\n  enabled: [[a]]\n", 2, MultiLineFlow),
        (
            "plugins:\n  enabled:\n  - canon-\n    hermes\n",
            3,
            MultiLineScalar,
        ),
        ("plugins: |\n  text\n", 1, BlockScalar),
        ("plugins:\n  enabled: [\"\\u0063anon-hermes\"]\n", 2, Escape),
        ("- a\n", 1, RootNotAMapping),
        ("  a: 1\n", 1, RootNotAMapping),
        (
            "plugins: 1\nplugins: 2\n",
            2,
            DuplicateKey("plugins".into()),
        ),
        ("plugins: on\n", 1, NotAMapping("plugins".into())),
        (
            "plugins:\n  enabled: all\n",
            2,
            NotASequence("plugins.enabled".into()),
        ),
        ("plugins: {}\n", 1, FlowMapping),
    ] {
        check_refused(text, line, kind);
    }
    // Appending after a block scalar that ends the file without a line break would add one to
    // its value.
    check_refused("a: |\n  text", 2, BlockScalar);
    check_install(
        "a: |-\n  text\n",
        "a: |-\n  text\nplugins:\n  enabled:\n    - canon-hermes\nplatforms:\n  canon:\n    enabled: true\n",
    );
    // Removing the last lines keeps the line break of a block scalar's last line.
    check_uninstall(
        "a: |\n  text\nplugins:\n  enabled: [canon-hermes]",
        "a: |\n  text\n",
    );
    assert_eq!(
        EditError {
            line: 3,
            kind: ErrorKind::DuplicateKey("plugins".into())
        }
        .to_string(),
        "plugins twice on line 3"
    );
}

/// A small deterministic generator (xorshift64*), so every run checks the same configs.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).expect("n fits")
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a>(&mut self, options: &[&'a str]) -> &'a str {
        options[self.below(options.len())]
    }
}

/// One generated config: its text and whether it holds a `plugins` or `platforms` section.
pub(crate) struct Sample {
    pub(crate) text: String,
    pub(crate) has_sections: bool,
}

/// `count` configs in the layouts operators write: comments, blank lines, both sequence styles,
/// flow sequences, quoted scalars, block scalars, two indentation units, CRLF, with and without a
/// final line break, and every shape of `plugins` and `platforms` the editor handles.
pub(crate) fn sample_configs(seed: u64, count: usize) -> Vec<Sample> {
    let mut rng = Rng::new(seed);
    (0..count).map(|_| sample(&mut rng)).collect()
}

fn sample(rng: &mut Rng) -> Sample {
    let unit = if rng.chance(70) { 2 } else { 4 };
    let offset = if rng.chance(50) { 0 } else { unit };
    let (u, o) = (" ".repeat(unit), " ".repeat(offset));
    let comment = |rng: &mut Rng| {
        if rng.chance(30) {
            format!(
                "  # {}",
                rng.pick(&["note", "set by hand", "keep: this", "- not an item"])
            )
        } else {
            String::new()
        }
    };
    let mut chunks: Vec<String> = Vec::new();
    for n in 0..rng.below(6) {
        let chunk = match rng.below(9) {
            0 => format!("# comment {n}\n"),
            1 => "\n".to_owned(),
            2 => format!(
                "key_{n}: {}{}\n",
                rng.pick(&["1", "text", "'q: x'", "\"d\"", "~", "true"]),
                comment(rng)
            ),
            3 => format!(
                "model_{n}:{}\n{u}provider: custom\n{u}default: fake # pinned\n",
                comment(rng)
            ),
            4 => format!("list_{n}:\n{o}- a\n{o}- 'b c'\n"),
            5 => format!("flow_{n}: [1, two, \"three\"]{}\n", comment(rng)),
            6 => format!("text_{n}: |\n{u}line one\n{u}# not a comment\n\n{u}plugins: not a key\n"),
            7 => format!("nested_{n}:\n{u}deeper:\n{u}{u}- x\n{u}{u}# inside\n{u}other: [a]\n"),
            _ => format!("\"quoted key {n}\": 'v'\n"),
        };
        chunks.push(chunk);
    }
    let mut has_sections = false;
    if rng.chance(60) {
        has_sections = true;
        let item = |rng: &mut Rng| {
            if rng.chance(30) {
                format!("{u}{o}- canon-hermes\n")
            } else {
                String::new()
            }
        };
        let flow_item = |rng: &mut Rng| if rng.chance(30) { ", canon-hermes" } else { "" };
        let section = match rng.below(8) {
            0 => format!("plugins:{}\n", comment(rng)),
            1 => format!("plugins:\n{u}disabled:\n{u}{o}- x\n"),
            2 => format!(
                "plugins:\n{u}enabled:\n{u}{o}- a\n{}{u}# between\n{u}{o}- b\n",
                item(rng)
            ),
            3 => format!(
                "plugins:\n{u}enabled: [a{}]{}\n",
                flow_item(rng),
                comment(rng)
            ),
            4 => format!("plugins:\n{u}enabled: []\n{u}disabled: [x]\n"),
            5 => format!("plugins:\n{u}enabled:\n{u}disabled: []\n"),
            6 => format!("plugins:\n{u}enabled:\n{}", item(rng)),
            _ => "plugins: ~\n".to_owned(),
        };
        chunks.insert(rng.below(chunks.len() + 1), section);
    }
    if rng.chance(60) {
        has_sections = true;
        let value = rng.pick(&["true", "false", "yes", "off", "\"true\"", ""]);
        let enabled = if value.is_empty() {
            format!("{u}{u}enabled:\n")
        } else {
            format!("{u}{u}enabled: {value}\n")
        };
        let section = match rng.below(6) {
            0 => "platforms:\n".to_owned(),
            1 => format!("platforms:\n{u}telegram:\n{u}{u}enabled: true\n"),
            2 => format!("platforms:\n{u}canon:\n{enabled}"),
            3 => format!(
                "platforms:\n{u}canon:\n{enabled}{u}{u}extra: 1{}\n",
                comment(rng)
            ),
            4 => format!("platforms:\n{u}canon:\n{u}{u}extra: [a]\n"),
            _ => format!("platforms:\n{u}canon:\n{u}slack:\n{u}{u}enabled: false\n"),
        };
        chunks.insert(rng.below(chunks.len() + 1), section);
    }
    let mut text: String = chunks.concat();
    if rng.chance(15) {
        text = text.replace('\n', "\r\n");
    }
    if rng.chance(15) {
        // A block scalar that ends the file without a line break is refused (tested above).
        if text.trim_end().ends_with("plugins: not a key") {
            text.push_str("tail: 1\n");
        }
        while text.ends_with('\n') || text.ends_with('\r') {
            text.pop();
        }
    }
    Sample { text, has_sections }
}

/// Whether `line` is one of the lines an edit may change: a key or item of `plugins`,
/// `platforms`, `enabled` or `canon`.
fn edited_key_line(line: &str) -> bool {
    let body = line.trim_start();
    [
        "plugins:",
        "platforms:",
        "enabled:",
        "canon:",
        "- canon-hermes",
    ]
    .iter()
    .any(|key| body.starts_with(key))
}

/// Every line of `before` that is no edited key line appears in `after`, in order.
fn keeps_other_lines(before: &str, after: &str) -> bool {
    let mut rest = after.split_inclusive('\n');
    before
        .split_inclusive('\n')
        .filter(|line| !edited_key_line(line))
        .all(|line| {
            let wanted = line.trim_end_matches(['\r', '\n']);
            rest.any(|candidate| candidate.trim_end_matches(['\r', '\n']) == wanted)
        })
}

/// The four properties on one generated config; whether install then uninstall gave its bytes
/// back (only asked of a config without the sections).
fn keeps_the_four_properties(sample: &Sample) -> bool {
    let Sample { text, has_sections } = sample;
    let context = || format!("config:\n{text}\n---");
    let once = install(text, PLUGIN, PLATFORM).unwrap_or_else(|e| panic!("{e}: {}", context()));
    // (1) Idempotent.
    let twice = install(&once.text, PLUGIN, PLATFORM).expect("install again");
    assert_eq!(twice.text, once.text, "{}", context());
    assert!(!twice.plugin_changed && !twice.platform_changed);
    // (2) Lines outside the edited keys are kept.
    assert!(
        keeps_other_lines(text, &once.text),
        "{}\nafter:\n{}",
        context(),
        once.text
    );
    // (4) What it wrote, it reads back.
    assert_eq!(
        read(&once.text, PLUGIN, PLATFORM),
        Ok((true, Some(true))),
        "{}\nafter:\n{}",
        context(),
        once.text
    );
    let removed = uninstall(&once.text, PLUGIN, PLATFORM).expect("uninstall");
    let (listed, enabled) = read(&removed.text, PLUGIN, PLATFORM).expect("read back");
    assert!(
        !listed && enabled != Some(true),
        "{}\nafter:\n{}",
        context(),
        removed.text
    );
    assert!(
        keeps_other_lines(text, &removed.text),
        "{}\nafter:\n{}",
        context(),
        removed.text
    );
    let again = uninstall(&removed.text, PLUGIN, PLATFORM).expect("uninstall again");
    assert_eq!(again.text, removed.text, "{}", context());
    // (3) Install then uninstall on a file without the keys gives its bytes back.
    if *has_sections {
        return false;
    }
    assert_eq!(&removed.text, text, "{}", context());
    true
}

#[test]
fn a_fixed_corpus_covers_configs_with_and_without_the_sections() {
    let samples = sample_configs(0x5eed_cafe, 3000);
    let restored = samples
        .iter()
        .filter(|s| keeps_the_four_properties(s))
        .count();
    assert!(
        restored > 300,
        "only {restored} configs without the sections"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

    /// proptest draws the generator's seed: a failure is saved and replayed like any other case.
    #[test]
    fn generated_configs_keep_the_four_properties(seed in proptest::prelude::any::<u64>()) {
        keeps_the_four_properties(&sample(&mut Rng::new(seed)));
    }
}

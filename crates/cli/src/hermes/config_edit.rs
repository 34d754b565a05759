//! Surgical edits of Hermes' `config.yaml` for `install` and `uninstall` (cli.md §3.2, §3.5):
//! the keys canon-hermes owns change and every other byte stays as the operator wrote it
//! (comments, blank lines, key order, indentation, quoting, line endings, a missing final line
//! break).
//!
//! The editor reads the YAML that Hermes configs are written in: block mappings by indentation,
//! block sequences in both styles (`key:\n- a` and `key:\n  - a`), single-line flow sequences
//! (`key: [a, b]`), comments, blank lines, plain and quoted scalars, `key: value  # comment`. It
//! inserts and removes whole lines, or rewrites the one line of a flow sequence or a scalar, in
//! the file's own style (its indentation and sequence offset, detected from the file); a missing
//! `plugins:` or `platforms:` section is appended at the end. What it does not read on the way to
//! the keys it edits (anchors, aliases, tags, merge keys, flow mappings, flow collections or
//! scalars over several lines, block scalars, complex keys, tabs in indentation, document
//! markers and directives, a root that is no block mapping, a duplicated key) is an
//! [`EditError`], never a guess: the Hermes helper then tries its round-trip fallback
//! (cli.md §3.2). The helper parses every text this editor proposes with Hermes' own loader and
//! writes it only when it holds exactly the intended change.
//!
//! The changes (the helper's `apply_install` and `apply_uninstall` in `helper.py` are the same
//! rules on parsed YAML):
//! - install: `plugins` is a mapping (a null value becomes one) whose `enabled` is a sequence (a
//!   null value becomes one) that holds the plugin, appended at its end when missing; and
//!   `platforms.<platform>.enabled` is `true`.
//! - uninstall: every item naming the plugin leaves `plugins.enabled`; an `enabled` left empty is
//!   removed, and so is a `plugins` left empty. A `platforms.<platform>` that holds only `enabled`
//!   is removed (and a `platforms` left empty with it); one that holds other keys gets
//!   `enabled: false`.
//!
//! Pure: text in, text out; no I/O. Errors are a hand-written error type (style.md §6.4
//! fallback: this crate does not depend on `thiserror`).

use std::fmt;

/// The text after an edit and what it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Edit {
    /// The whole file after the edit (the input itself when nothing changed).
    pub(crate) text: String,
    /// Whether `plugins.enabled` changed.
    pub(crate) plugin_changed: bool,
    /// Whether `platforms.<platform>` changed.
    pub(crate) platform_changed: bool,
}

/// A structure the editor does not edit, and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EditError {
    /// The 1-based line, 0 for the file as a whole.
    pub(crate) line: usize,
    /// What is there.
    pub(crate) kind: ErrorKind,
}

/// The structures of an [`EditError`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum ErrorKind {
    /// A UTF-8 byte order mark at the start of the file.
    ByteOrderMark,
    /// A tab in the indentation of a line that decides the structure.
    Tab,
    /// `---` after the first content, or `...`.
    DocumentMarker,
    /// A `%` directive.
    Directive,
    /// An anchor (`&name`).
    Anchor,
    /// An alias (`*name`).
    Alias,
    /// A tag (`!name`, `!!str`).
    Tag,
    /// A merge key (`<<`).
    MergeKey,
    /// A complex key (`? key`) or a flow collection as a key.
    ComplexKey,
    /// A flow mapping (`{a: 1}`).
    FlowMapping,
    /// A flow sequence that does not close on its line, or one holding collections.
    MultiLineFlow,
    /// A scalar that goes on over the next lines.
    MultiLineScalar,
    /// A block scalar (`|`, `>`).
    BlockScalar,
    /// A double-quoted escape other than `\"` and `\\`.
    Escape,
    /// A line of a mapping that is no `key: value`.
    NotAKey,
    /// The document is not a block mapping at column 0.
    RootNotAMapping,
    /// Indentation that fits no enclosing block.
    Indentation,
    /// The key (a dotted path) appears twice in its mapping.
    DuplicateKey(String),
    /// The key (a dotted path) holds something other than a mapping.
    NotAMapping(String),
    /// The key (a dotted path) holds something other than a sequence.
    NotASequence(String),
}

impl fmt::Display for EditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match &self.kind {
            ErrorKind::ByteOrderMark => "a byte order mark".to_owned(),
            ErrorKind::Tab => "a tab in the indentation".to_owned(),
            ErrorKind::DocumentMarker => "a document marker".to_owned(),
            ErrorKind::Directive => "a directive".to_owned(),
            ErrorKind::Anchor => "an anchor".to_owned(),
            ErrorKind::Alias => "an alias".to_owned(),
            ErrorKind::Tag => "a tag".to_owned(),
            ErrorKind::MergeKey => "a merge key".to_owned(),
            ErrorKind::ComplexKey => "a complex key".to_owned(),
            ErrorKind::FlowMapping => "a flow mapping".to_owned(),
            ErrorKind::MultiLineFlow => "a flow sequence over several lines".to_owned(),
            ErrorKind::MultiLineScalar => "a scalar over several lines".to_owned(),
            ErrorKind::BlockScalar => "a block scalar".to_owned(),
            ErrorKind::Escape => "an escape sequence".to_owned(),
            ErrorKind::NotAKey => "a line that is no key".to_owned(),
            ErrorKind::RootNotAMapping => "a document that is no block mapping".to_owned(),
            ErrorKind::Indentation => "an unexpected indentation".to_owned(),
            ErrorKind::DuplicateKey(key) => format!("{key} twice"),
            ErrorKind::NotAMapping(key) => format!("{key} that is not a mapping"),
            ErrorKind::NotASequence(key) => format!("{key} that is not a list"),
        };
        if self.line == 0 {
            write!(f, "{what}")
        } else {
            write!(f, "{what} on line {}", self.line)
        }
    }
}

impl std::error::Error for EditError {}

/// The install change (module docs).
pub(crate) fn install(text: &str, plugin: &str, platform: &str) -> Result<Edit, EditError> {
    let mut doc = Doc::parse(text)?;
    let style = Style::detect(&doc);
    let plugin_changed = install_plugin(&mut doc, &style, plugin)?;
    let platform_changed = install_platform(&mut doc, &style, platform)?;
    Ok(Edit {
        text: doc.render(),
        plugin_changed,
        platform_changed,
    })
}

/// The uninstall change (module docs).
pub(crate) fn uninstall(text: &str, plugin: &str, platform: &str) -> Result<Edit, EditError> {
    let mut doc = Doc::parse(text)?;
    let plugin_changed = uninstall_plugin(&mut doc, plugin)?;
    let platform_changed = uninstall_platform(&mut doc, platform)?;
    Ok(Edit {
        text: doc.render(),
        plugin_changed,
        platform_changed,
    })
}

/// What a config says about the plugin and the platform, read the way the editor reads it:
/// whether `plugins.enabled` lists the plugin, and `platforms.<platform>.enabled` as a
/// boolean (`None` when absent or not a boolean).
#[cfg(test)]
pub(crate) fn read(
    text: &str,
    plugin: &str,
    platform: &str,
) -> Result<(bool, Option<bool>), EditError> {
    let doc = Doc::parse(text)?;
    let root = doc.root()?;
    let mut listed = false;
    if let Some(plugins) = find(&root, "plugins", "plugins")? {
        if let Shape::Mapping(indent) = doc.shape(&plugins)? {
            let entries = doc.entries(plugins.line + 1, plugins.end, indent)?;
            if let Some(enabled) = find(&entries, "enabled", "plugins.enabled")? {
                listed = match doc.shape(&enabled)? {
                    Shape::Sequence(indent) => doc
                        .items(enabled.line + 1, enabled.end, indent)?
                        .iter()
                        .any(|item| item.value.as_deref() == Some(plugin)),
                    Shape::Flow(flow) => flow.items.iter().any(|i| i.value == plugin),
                    _ => false,
                };
            }
        }
    }
    let mut enabled_value = None;
    if let Some(platforms) = find(&root, "platforms", "platforms")? {
        if let Shape::Mapping(indent) = doc.shape(&platforms)? {
            let entries = doc.entries(platforms.line + 1, platforms.end, indent)?;
            if let Some(canon) = find(&entries, platform, "platforms.<platform>")? {
                if let Shape::Mapping(indent) = doc.shape(&canon)? {
                    let entries = doc.entries(canon.line + 1, canon.end, indent)?;
                    if let Some(enabled) = find(&entries, "enabled", "enabled")? {
                        if let (Shape::Scalar, ValueKind::Plain(text)) =
                            (doc.shape(&enabled)?, &enabled.value.kind)
                        {
                            enabled_value = bool_token(text);
                        }
                    }
                }
            }
        }
    }
    Ok((listed, enabled_value))
}

fn install_plugin(doc: &mut Doc, style: &Style, plugin: &str) -> Result<bool, EditError> {
    let root = doc.root()?;
    let unit = style.unit;
    let Some(plugins) = find(&root, "plugins", "plugins")? else {
        doc.append(vec![
            "plugins:".to_owned(),
            format!("{}enabled:", spaces(unit)),
            format!("{}- {plugin}", spaces(unit + style.offset)),
        ])?;
        return Ok(true);
    };
    let indent = match doc.shape(&plugins)? {
        Shape::Empty => {
            let child = plugins.indent + unit;
            doc.open(&plugins);
            doc.insert(
                plugins.line + 1,
                vec![
                    format!("{}enabled:", spaces(child)),
                    format!("{}- {plugin}", spaces(child + style.offset)),
                ],
            );
            return Ok(true);
        }
        Shape::Mapping(indent) => indent,
        _ => return Err(doc.error(plugins.line, ErrorKind::NotAMapping("plugins".into()))),
    };
    let entries = doc.entries(plugins.line + 1, plugins.end, indent)?;
    let Some(enabled) = find(&entries, "enabled", "plugins.enabled")? else {
        let after = doc.last_content(&plugins);
        doc.insert(
            after + 1,
            vec![
                format!("{}enabled:", spaces(indent)),
                format!("{}- {plugin}", spaces(indent + style.offset)),
            ],
        );
        return Ok(true);
    };
    match doc.shape(&enabled)? {
        Shape::Empty => {
            doc.open(&enabled);
            doc.insert(
                enabled.line + 1,
                vec![format!("{}- {plugin}", spaces(indent + style.offset))],
            );
            Ok(true)
        }
        Shape::Sequence(items_indent) => {
            let items = doc.items(enabled.line + 1, enabled.end, items_indent)?;
            if items
                .iter()
                .any(|item| item.value.as_deref() == Some(plugin))
            {
                return Ok(false);
            }
            let after = doc.last_content(&enabled);
            doc.insert(
                after + 1,
                vec![format!("{}- {plugin}", spaces(items_indent))],
            );
            Ok(true)
        }
        Shape::Flow(flow) => {
            if flow.items.iter().any(|item| item.value == plugin) {
                return Ok(false);
            }
            let text = &doc.lines[enabled.line].text;
            let new = match flow.items.last() {
                Some(last) => format!(
                    "{}{}{plugin}{}",
                    &text[..last.end],
                    flow.separator(text),
                    &text[last.end..]
                ),
                None => format!(
                    "{}[{plugin}]{}",
                    &text[..flow.open],
                    &text[flow.close + 1..]
                ),
            };
            doc.lines[enabled.line].text = new;
            Ok(true)
        }
        Shape::Scalar | Shape::Mapping(_) => Err(doc.error(
            enabled.line,
            ErrorKind::NotASequence("plugins.enabled".into()),
        )),
    }
}

fn install_platform(doc: &mut Doc, style: &Style, platform: &str) -> Result<bool, EditError> {
    let root = doc.root()?;
    let unit = style.unit;
    let Some(platforms) = find(&root, "platforms", "platforms")? else {
        doc.append(vec![
            "platforms:".to_owned(),
            format!("{}{platform}:", spaces(unit)),
            format!("{}enabled: true", spaces(2 * unit)),
        ])?;
        return Ok(true);
    };
    let indent = match doc.shape(&platforms)? {
        Shape::Empty => {
            let child = platforms.indent + unit;
            doc.open(&platforms);
            doc.insert(
                platforms.line + 1,
                vec![
                    format!("{}{platform}:", spaces(child)),
                    format!("{}enabled: true", spaces(child + unit)),
                ],
            );
            return Ok(true);
        }
        Shape::Mapping(indent) => indent,
        _ => return Err(doc.error(platforms.line, ErrorKind::NotAMapping("platforms".into()))),
    };
    let path = format!("platforms.{platform}");
    let entries = doc.entries(platforms.line + 1, platforms.end, indent)?;
    let Some(canon) = find(&entries, platform, &path)? else {
        let after = doc.last_content(&platforms);
        doc.insert(
            after + 1,
            vec![
                format!("{}{platform}:", spaces(indent)),
                format!("{}enabled: true", spaces(indent + unit)),
            ],
        );
        return Ok(true);
    };
    let inner = match doc.shape(&canon)? {
        Shape::Empty => {
            doc.open(&canon);
            doc.insert(
                canon.line + 1,
                vec![format!("{}enabled: true", spaces(indent + unit))],
            );
            return Ok(true);
        }
        Shape::Mapping(inner) => inner,
        _ => return Err(doc.error(canon.line, ErrorKind::NotAMapping(path))),
    };
    let entries = doc.entries(canon.line + 1, canon.end, inner)?;
    let Some(enabled) = find(&entries, "enabled", &format!("{path}.enabled"))? else {
        let after = doc.last_content(&canon);
        doc.insert(after + 1, vec![format!("{}enabled: true", spaces(inner))]);
        return Ok(true);
    };
    doc.set_scalar(&enabled, true)
}

fn uninstall_plugin(doc: &mut Doc, plugin: &str) -> Result<bool, EditError> {
    let root = doc.root()?;
    let Some(plugins) = find(&root, "plugins", "plugins")? else {
        return Ok(false);
    };
    let Shape::Mapping(indent) = doc.shape(&plugins)? else {
        return Ok(false);
    };
    let entries = doc.entries(plugins.line + 1, plugins.end, indent)?;
    let Some(enabled) = find(&entries, "enabled", "plugins.enabled")? else {
        return Ok(false);
    };
    let last_entry = entries.len() == 1;
    match doc.shape(&enabled)? {
        Shape::Sequence(items_indent) => {
            let items = doc.items(enabled.line + 1, enabled.end, items_indent)?;
            let matching: Vec<usize> = items
                .iter()
                .filter(|item| item.value.as_deref() == Some(plugin))
                .map(|item| item.line)
                .collect();
            if matching.is_empty() {
                return Ok(false);
            }
            if matching.len() < items.len() {
                doc.remove(&matching);
            } else if last_entry {
                doc.remove_entry(&plugins);
            } else {
                doc.remove_entry(&enabled);
            }
            Ok(true)
        }
        Shape::Flow(flow) => {
            let kept: Vec<&FlowItem> = flow.items.iter().filter(|i| i.value != plugin).collect();
            if kept.len() == flow.items.len() {
                return Ok(false);
            }
            if !kept.is_empty() {
                let text = &doc.lines[enabled.line].text;
                let raw: Vec<&str> = kept.iter().map(|i| &text[i.start..i.end]).collect();
                let first = &flow.items[0];
                let last = &flow.items[flow.items.len() - 1];
                let new = format!(
                    "{}{}{}",
                    &text[..first.start],
                    raw.join(&flow.separator(text)),
                    &text[last.end..]
                );
                doc.lines[enabled.line].text = new;
            } else if last_entry {
                doc.remove_entry(&plugins);
            } else {
                doc.remove_entry(&enabled);
            }
            Ok(true)
        }
        Shape::Empty | Shape::Scalar | Shape::Mapping(_) => Ok(false),
    }
}

fn uninstall_platform(doc: &mut Doc, platform: &str) -> Result<bool, EditError> {
    let root = doc.root()?;
    let Some(platforms) = find(&root, "platforms", "platforms")? else {
        return Ok(false);
    };
    let Shape::Mapping(indent) = doc.shape(&platforms)? else {
        return Ok(false);
    };
    let path = format!("platforms.{platform}");
    let entries = doc.entries(platforms.line + 1, platforms.end, indent)?;
    let Some(canon) = find(&entries, platform, &path)? else {
        return Ok(false);
    };
    let Shape::Mapping(inner) = doc.shape(&canon)? else {
        return Ok(false);
    };
    let keys = doc.entries(canon.line + 1, canon.end, inner)?;
    let enabled = find(&keys, "enabled", &format!("{path}.enabled"))?;
    if keys.len() == 1 && enabled.is_some() {
        if entries.len() == 1 {
            doc.remove_entry(&platforms);
        } else {
            doc.remove_entry(&canon);
        }
        return Ok(true);
    }
    match enabled {
        Some(enabled) => doc.set_scalar(&enabled, false),
        None => {
            let after = doc.last_content(&canon);
            doc.insert(after + 1, vec![format!("{}enabled: false", spaces(inner))]);
            Ok(true)
        }
    }
}

fn spaces(n: usize) -> String {
    " ".repeat(n)
}

/// PyYAML's reading of a plain scalar as a boolean (YAML 1.1, `resolver.py` of PyYAML 6).
fn bool_token(plain: &str) -> Option<bool> {
    match plain {
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => Some(true),
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => Some(false),
        _ => None,
    }
}

/// The `entries` whose key is `key`: none, one, or a [`ErrorKind::DuplicateKey`] (`path` names
/// it).
fn find(entries: &[Entry], key: &str, path: &str) -> Result<Option<Entry>, EditError> {
    let mut found = entries.iter().filter(|e| e.key == key);
    let first = found.next().cloned();
    match found.next() {
        Some(second) => Err(EditError {
            line: second.line + 1,
            kind: ErrorKind::DuplicateKey(path.to_owned()),
        }),
        None => Ok(first),
    }
}

/// The file's indentation: `unit` spaces per mapping level, and a sequence's `- ` sits `offset`
/// spaces right of its key.
#[derive(Debug, Clone, Copy)]
struct Style {
    unit: usize,
    offset: usize,
}

impl Style {
    /// The first mapping key whose value is a nested mapping gives the unit, the first whose
    /// value is a block sequence gives the offset; Hermes' own layout (2 and 2) otherwise.
    fn detect(doc: &Doc) -> Style {
        let (mut unit, mut offset) = (None, None);
        let content: Vec<(usize, usize, &str)> = doc
            .lines
            .iter()
            .enumerate()
            .filter_map(|(i, line)| match classify(&line.text) {
                Class::Content {
                    indent,
                    tabbed: false,
                } => Some((i, indent, &line.text[indent..])),
                _ => None,
            })
            .collect();
        for pair in content.windows(2) {
            let ((_, indent, body), (_, next_indent, next_body)) = (pair[0], pair[1]);
            let opens = parse_key(body)
                .ok()
                .is_some_and(|(_, colon)| value_at(body, colon + 1).kind == ValueKind::Empty);
            if !opens {
                continue;
            }
            if is_dash(next_body) && next_indent >= indent {
                offset = offset.or(Some(next_indent - indent));
            } else if next_indent > indent {
                unit = unit.or(Some(next_indent - indent));
            }
            if unit.is_some() && offset.is_some() {
                break;
            }
        }
        let unit = unit.unwrap_or(2);
        Style {
            unit,
            offset: offset.unwrap_or(unit),
        }
    }
}

/// One line and the line break after it (`""` for a last line without one).
#[derive(Debug, Clone)]
struct Line {
    text: String,
    eol: &'static str,
}

/// The file as lines.
#[derive(Debug, Clone)]
struct Doc {
    lines: Vec<Line>,
    /// The line break of new lines: the first line's, else LF.
    eol: &'static str,
}

/// What a line is to the structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Blank,
    Comment,
    /// `indent` leading spaces; `tabbed` when a tab follows them before the content.
    Content {
        indent: usize,
        tabbed: bool,
    },
}

fn classify(text: &str) -> Class {
    let trimmed = text.trim_start_matches([' ', '\t']);
    if trimmed.is_empty() {
        return Class::Blank;
    }
    if trimmed.starts_with('#') {
        return Class::Comment;
    }
    let indent = text.len() - text.trim_start_matches(' ').len();
    Class::Content {
        indent,
        tabbed: text.len() - trimmed.len() > indent,
    }
}

fn is_dash(body: &str) -> bool {
    body == "-" || body.starts_with("- ") || body.starts_with("-\t")
}

/// A `key: value` line of a block mapping and the lines of its value.
#[derive(Debug, Clone)]
struct Entry {
    /// The key's line (0-based).
    line: usize,
    /// The key's column.
    indent: usize,
    key: String,
    /// The byte offset of the `:` in the line.
    colon: usize,
    value: Value,
    /// The first line after the entry's value (0-based, exclusive).
    end: usize,
}

/// The inline value of a key or a sequence item: its kind and byte span in the line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Value {
    kind: ValueKind,
    start: usize,
    end: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ValueKind {
    /// Nothing but maybe a comment: null, or a block collection on the next lines.
    Empty,
    /// `~`, `null`, `Null`, `NULL`.
    Null,
    /// A plain scalar's text.
    Plain(String),
    /// A quoted scalar's value.
    Quoted(String),
    Flow(Flow),
    /// What the editor does not read.
    Other(ErrorKind),
}

/// A single-line flow sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Flow {
    /// Byte offsets of `[` and `]`.
    open: usize,
    close: usize,
    items: Vec<FlowItem>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FlowItem {
    /// The item's bytes in the line.
    start: usize,
    end: usize,
    /// Its scalar value.
    value: String,
}

impl Flow {
    /// What separates the items: `,` plus the whitespace after the first comma, else `, `.
    fn separator(&self, text: &str) -> String {
        match self.items.as_slice() {
            [first, second, ..] => {
                let between = &text[first.end..second.start];
                let after = between.find(',').map_or("", |comma| &between[comma + 1..]);
                format!(",{after}")
            }
            _ => ", ".to_owned(),
        }
    }
}

/// A block sequence item: its line and, when it is a single-line scalar, its value.
#[derive(Debug, Clone)]
struct Item {
    line: usize,
    value: Option<String>,
}

/// What an entry's value is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    /// Null: nothing inline and nothing below.
    Empty,
    /// A block mapping whose keys sit at this column.
    Mapping(usize),
    /// A block sequence whose `- ` sit at this column.
    Sequence(usize),
    /// A single-line flow sequence.
    Flow(Flow),
    /// A single-line scalar.
    Scalar,
}

impl Doc {
    fn parse(text: &str) -> Result<Doc, EditError> {
        if text.starts_with('\u{feff}') {
            return Err(EditError {
                line: 0,
                kind: ErrorKind::ByteOrderMark,
            });
        }
        let mut lines = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let (line, eol, next) = match rest.find('\n') {
                Some(at) if rest[..at].ends_with('\r') => {
                    (&rest[..at - 1], "\r\n", &rest[at + 1..])
                }
                Some(at) => (&rest[..at], "\n", &rest[at + 1..]),
                None => (rest, "", ""),
            };
            lines.push(Line {
                text: line.to_owned(),
                eol,
            });
            rest = next;
        }
        let eol = match lines.first() {
            Some(Line { eol: "\r\n", .. }) => "\r\n",
            _ => "\n",
        };
        Ok(Doc { lines, eol })
    }

    fn render(&self) -> String {
        let mut out = String::new();
        for line in &self.lines {
            out.push_str(&line.text);
            out.push_str(line.eol);
        }
        out
    }

    fn error(&self, line: usize, kind: ErrorKind) -> EditError {
        EditError {
            line: line + 1,
            kind,
        }
    }

    /// Inserts `new` before line `at`. Appended to a file whose last line has no line break, the
    /// old last line gets one and the new last line none, so removing the lines again gives the
    /// original bytes back.
    fn insert(&mut self, at: usize, new: Vec<String>) {
        let eol = self.eol;
        let mut last_eol = eol;
        if at == self.lines.len() {
            if let Some(last) = self.lines.last_mut() {
                if last.eol.is_empty() {
                    last.eol = eol;
                    last_eol = "";
                }
            }
        }
        let count = new.len();
        let lines = new.into_iter().enumerate().map(|(i, text)| Line {
            text,
            eol: if i + 1 == count { last_eol } else { eol },
        });
        self.lines.splice(at..at, lines);
    }

    /// Appends `new` at the end of the file. A last line without a line break gets one, which
    /// would change a block scalar that ends the file: that is refused.
    fn append(&mut self, new: Vec<String>) -> Result<(), EditError> {
        let last = self.lines.len().checked_sub(1);
        if let Some(last) = last.filter(|i| self.lines[*i].eol.is_empty()) {
            if self.in_block_scalar(last) {
                return Err(self.error(last, ErrorKind::BlockScalar));
            }
        }
        self.insert(self.lines.len(), new);
        Ok(())
    }

    /// Removes the lines `indices` (0-based). When the last line had no line break, the new
    /// last line loses its own, unless it is empty (it would be gone) or the content of a block
    /// scalar (whose value would lose its final line break).
    fn remove(&mut self, indices: &[usize]) {
        let unterminated = self.lines.last().is_some_and(|l| l.eol.is_empty());
        let mut index = 0;
        self.lines.retain(|_| {
            let keep = !indices.contains(&index);
            index += 1;
            keep
        });
        let Some(last) = self.lines.len().checked_sub(1) else {
            return;
        };
        if unterminated && !self.lines[last].text.is_empty() && !self.in_block_scalar(last) {
            self.lines[last].eol = "";
        }
    }

    /// Whether line `line` is the content of a block scalar: the nearest line above it that is
    /// indented less (blank lines aside) opens one (`key: |`, `- >`).
    fn in_block_scalar(&self, line: usize) -> bool {
        let indent_of = |text: &str| text.len() - text.trim_start_matches([' ', '\t']).len();
        let text = &self.lines[line].text;
        if text.trim().is_empty() {
            return false;
        }
        let target = indent_of(text);
        let Some(header) = (0..line)
            .rev()
            .map(|i| &self.lines[i].text)
            .find(|t| !t.trim().is_empty() && indent_of(t) < target)
        else {
            return false;
        };
        let indent = indent_of(header);
        let body = &header[indent..];
        let value = if is_dash(body) {
            value_at(header, indent + 1)
        } else {
            match parse_key(body) {
                Ok((_, colon)) => value_at(header, indent + colon + 1),
                Err(_) => return false,
            }
        };
        value.kind == ValueKind::Other(ErrorKind::BlockScalar)
    }

    /// Removes an entry: its key line and every content line of its value. Comments stay.
    fn remove_entry(&mut self, entry: &Entry) {
        let lines: Vec<usize> = (entry.line..entry.end)
            .filter(|i| matches!(classify(&self.lines[*i].text), Class::Content { .. }))
            .collect();
        self.remove(&lines);
    }

    /// The last content line of an entry (its key line when its value is inline).
    fn last_content(&self, entry: &Entry) -> usize {
        (entry.line..entry.end)
            .rev()
            .find(|i| matches!(classify(&self.lines[*i].text), Class::Content { .. }))
            .unwrap_or(entry.line)
    }

    /// Makes a key line ready for a block value below it: an explicit null goes (its comment
    /// stays).
    fn open(&mut self, entry: &Entry) {
        if entry.value.kind == ValueKind::Null {
            let text = &self.lines[entry.line].text;
            let new = format!("{}{}", &text[..=entry.colon], &text[entry.value.end..]);
            self.lines[entry.line].text = new;
        }
    }

    /// Sets a scalar entry to `true` or `false` unless PyYAML already reads it so; whether it
    /// changed. A block value below the key is refused.
    fn set_scalar(&mut self, entry: &Entry, value: bool) -> Result<bool, EditError> {
        let token = if value { "true" } else { "false" };
        match (self.shape(entry)?, &entry.value.kind) {
            (Shape::Scalar, ValueKind::Plain(text)) if bool_token(text) == Some(value) => {
                return Ok(false)
            }
            (Shape::Mapping(_) | Shape::Sequence(_), _) => {
                return Err(self.error(entry.line, ErrorKind::MultiLineScalar))
            }
            _ => {}
        }
        let text = &self.lines[entry.line].text;
        let new = if entry.value.kind == ValueKind::Empty {
            format!(
                "{} {token}{}",
                &text[..=entry.colon],
                &text[entry.colon + 1..]
            )
        } else {
            format!(
                "{}{token}{}",
                &text[..entry.value.start],
                &text[entry.value.end..]
            )
        };
        self.lines[entry.line].text = new;
        Ok(true)
    }

    /// The entries of the root mapping.
    fn root(&self) -> Result<Vec<Entry>, EditError> {
        let mut start = 0;
        let mut seen_content = false;
        for (i, line) in self.lines.iter().enumerate() {
            let text = line.text.as_str();
            if text.starts_with('%') {
                return Err(self.error(i, ErrorKind::Directive));
            }
            let marker = |m: &str| {
                text.strip_prefix(m)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
            };
            if marker("---") {
                let rest = text[3..].trim_start_matches([' ', '\t']);
                if seen_content || start != 0 || !(rest.is_empty() || rest.starts_with('#')) {
                    return Err(self.error(i, ErrorKind::DocumentMarker));
                }
                start = i + 1;
            } else if marker("...") {
                return Err(self.error(i, ErrorKind::DocumentMarker));
            } else if matches!(classify(text), Class::Content { .. }) {
                seen_content = true;
            }
        }
        self.entries(start, self.lines.len(), 0)
    }

    /// The entries of the block mapping whose keys sit at column `indent` in lines `from..to`.
    fn entries(&self, from: usize, to: usize, indent: usize) -> Result<Vec<Entry>, EditError> {
        let mut entries: Vec<Entry> = Vec::new();
        for i in from..to {
            let text = &self.lines[i].text;
            let Class::Content { indent: n, tabbed } = classify(text) else {
                continue;
            };
            if tabbed && n <= indent {
                return Err(self.error(i, ErrorKind::Tab));
            }
            if n < indent {
                return Err(self.error(i, ErrorKind::Indentation));
            }
            let body = &text[n..];
            if n == indent && !is_dash(body) {
                if let Some(last) = entries.last_mut() {
                    last.end = i;
                }
                let (key, colon) = parse_key(body).map_err(|kind| self.error(i, kind))?;
                entries.push(Entry {
                    line: i,
                    indent,
                    key,
                    colon: n + colon,
                    value: value_at(text, n + colon + 1),
                    end: to,
                });
            } else if entries.is_empty() {
                let kind = if indent == 0 {
                    ErrorKind::RootNotAMapping
                } else {
                    ErrorKind::Indentation
                };
                return Err(self.error(i, kind));
            }
        }
        Ok(entries)
    }

    /// What `entry`'s value is. Anything the editor does not read is an error.
    fn shape(&self, entry: &Entry) -> Result<Shape, EditError> {
        let below = (entry.line + 1..entry.end).find_map(|i| match classify(&self.lines[i].text) {
            Class::Content { indent, .. } => Some((i, indent)),
            _ => None,
        });
        match (&entry.value.kind, below) {
            (ValueKind::Other(kind), _) => Err(self.error(entry.line, kind.clone())),
            (ValueKind::Empty | ValueKind::Null, None) => Ok(Shape::Empty),
            (ValueKind::Empty, Some((i, indent))) => {
                if is_dash(&self.lines[i].text[indent..]) {
                    Ok(Shape::Sequence(indent))
                } else if indent > entry.indent {
                    Ok(Shape::Mapping(indent))
                } else {
                    Err(self.error(i, ErrorKind::Indentation))
                }
            }
            (_, Some((i, _))) => Err(self.error(i, ErrorKind::MultiLineScalar)),
            (ValueKind::Flow(flow), None) => Ok(Shape::Flow(flow.clone())),
            (ValueKind::Plain(_) | ValueKind::Quoted(_), None) => Ok(Shape::Scalar),
        }
    }

    /// The items of the block sequence whose `- ` sit at column `indent` in lines `from..to`.
    /// An item naming a scalar over more lines is refused.
    fn items(&self, from: usize, to: usize, indent: usize) -> Result<Vec<Item>, EditError> {
        let mut items: Vec<Item> = Vec::new();
        let mut continued = false;
        let check = |items: &[Item], continued: bool| match items.last() {
            Some(Item {
                line,
                value: Some(_),
            }) if continued => Err(self.error(*line, ErrorKind::MultiLineScalar)),
            _ => Ok(()),
        };
        for i in from..to {
            let text = &self.lines[i].text;
            let Class::Content { indent: n, tabbed } = classify(text) else {
                continue;
            };
            if tabbed && n <= indent {
                return Err(self.error(i, ErrorKind::Tab));
            }
            if n > indent && !items.is_empty() {
                continued = true;
                continue;
            }
            if n != indent || !is_dash(&text[n..]) {
                return Err(self.error(i, ErrorKind::Indentation));
            }
            check(&items, continued)?;
            continued = false;
            let value = value_at(text, n + 1);
            let value = match value.kind {
                ValueKind::Plain(text) | ValueKind::Quoted(text) => Some(text),
                ValueKind::Other(kind) => return Err(self.error(i, kind)),
                ValueKind::Empty | ValueKind::Null | ValueKind::Flow(_) => None,
            };
            items.push(Item { line: i, value });
        }
        check(&items, continued)?;
        Ok(items)
    }
}

/// The key of a `key: value` body (the line after its indentation) and the byte offset of its
/// `:` in `body`.
fn parse_key(body: &str) -> Result<(String, usize), ErrorKind> {
    let (key, after) = match body.chars().next() {
        Some('"' | '\'') => {
            let (value, len) = quoted(body).ok_or(ErrorKind::NotAKey)??;
            let rest = &body[len..];
            let gap = rest.len() - rest.trim_start_matches([' ', '\t']).len();
            (value, len + gap)
        }
        Some('?') => return Err(ErrorKind::ComplexKey),
        Some('[' | '{') => return Err(ErrorKind::ComplexKey),
        Some('&') => return Err(ErrorKind::Anchor),
        Some('*') => return Err(ErrorKind::Alias),
        Some('!') => return Err(ErrorKind::Tag),
        Some('|' | '>' | '%' | '@' | '`' | '#') | None => return Err(ErrorKind::NotAKey),
        Some(_) => {
            let colon = key_colon(body).ok_or(ErrorKind::NotAKey)?;
            let key = body[..colon].trim_end_matches([' ', '\t']);
            if key == "<<" {
                return Err(ErrorKind::MergeKey);
            }
            (key.to_owned(), colon)
        }
    };
    let rest = &body[after..];
    let separated = rest.len() == 1 || rest[1..].starts_with([' ', '\t']);
    if rest.starts_with(':') && separated {
        Ok((key, after))
    } else {
        Err(ErrorKind::NotAKey)
    }
}

/// The first `:` of a plain key that is followed by a space, a tab or the end of the line,
/// unless a comment starts before it.
fn key_colon(body: &str) -> Option<usize> {
    let bytes = body.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        match b {
            b'#' if i > 0 && matches!(bytes[i - 1], b' ' | b'\t') => return None,
            b':' if matches!(bytes.get(i + 1), None | Some(b' ' | b'\t')) => return Some(i),
            _ => {}
        }
    }
    None
}

/// A quoted scalar at the start of `text`: its value and its length in bytes, `None` when it does
/// not close on the line, `Some(Err)` for an escape the editor does not decode.
fn quoted(text: &str) -> Option<Result<(String, usize), ErrorKind>> {
    let quote = text.chars().next()?;
    let mut value = String::new();
    let mut chars = text.char_indices().skip(1).peekable();
    while let Some((i, c)) = chars.next() {
        match (quote, c) {
            ('\'', '\'') => {
                if chars.peek().is_some_and(|(_, next)| *next == '\'') {
                    chars.next();
                    value.push('\'');
                } else {
                    return Some(Ok((value, i + 1)));
                }
            }
            ('"', '"') => return Some(Ok((value, i + 1))),
            ('"', '\\') => match chars.next() {
                Some((_, escaped @ ('"' | '\\'))) => value.push(escaped),
                _ => return Some(Err(ErrorKind::Escape)),
            },
            _ => value.push(c),
        }
    }
    None
}

/// The value that starts at byte `from` of `text` (after a key's `:` or a sequence's `-`).
fn value_at(text: &str, from: usize) -> Value {
    let rest = &text[from..];
    let start = from + (rest.len() - rest.trim_start_matches([' ', '\t']).len());
    let v = &text[start..];
    let other = |kind| Value {
        kind: ValueKind::Other(kind),
        start,
        end: text.len(),
    };
    // A comment needs a space before it: right after `:` or `-` it is no comment.
    if v.is_empty() || (v.starts_with('#') && start > from) {
        return Value {
            kind: ValueKind::Empty,
            start: from,
            end: from,
        };
    }
    let after_ok = |end: usize| {
        let tail = &text[end..];
        let trimmed = tail.trim_start_matches([' ', '\t']);
        trimmed.is_empty() || (trimmed.starts_with('#') && trimmed.len() < tail.len())
    };
    match v.chars().next() {
        Some('[') => match flow(text, start) {
            Ok((flow, end)) if after_ok(end) => Value {
                kind: ValueKind::Flow(flow),
                start,
                end,
            },
            Ok(_) => other(ErrorKind::NotAKey),
            Err(kind) => other(kind),
        },
        Some('{') => other(ErrorKind::FlowMapping),
        Some('&') => other(ErrorKind::Anchor),
        Some('*') => other(ErrorKind::Alias),
        Some('!') => other(ErrorKind::Tag),
        Some('|' | '>') => other(ErrorKind::BlockScalar),
        Some('"' | '\'') => match quoted(v) {
            None => other(ErrorKind::MultiLineScalar),
            Some(Err(kind)) => other(kind),
            Some(Ok((value, len))) if after_ok(start + len) => Value {
                kind: ValueKind::Quoted(value),
                start,
                end: start + len,
            },
            Some(Ok(_)) => other(ErrorKind::NotAKey),
        },
        _ => {
            let bytes = v.as_bytes();
            let comment = (1..bytes.len())
                .find(|&i| bytes[i] == b'#' && matches!(bytes[i - 1], b' ' | b'\t'))
                .unwrap_or(bytes.len());
            let plain = v[..comment].trim_end_matches([' ', '\t']);
            let kind = match plain {
                "~" | "null" | "Null" | "NULL" => ValueKind::Null,
                _ => ValueKind::Plain(plain.to_owned()),
            };
            Value {
                kind,
                start,
                end: start + plain.len(),
            }
        }
    }
}

/// The single-line flow sequence whose `[` is at byte `open` of `text`, and the byte after its
/// `]`. Items must be plain or quoted scalars.
fn flow(text: &str, open: usize) -> Result<(Flow, usize), ErrorKind> {
    let bytes = text.as_bytes();
    let skip = |mut i: usize| {
        while i < bytes.len() && matches!(bytes[i], b' ' | b'\t') {
            i += 1;
        }
        i
    };
    let mut items = Vec::new();
    let mut i = skip(open + 1);
    if bytes.get(i) == Some(&b']') {
        return Ok((
            Flow {
                open,
                close: i,
                items,
            },
            i + 1,
        ));
    }
    loop {
        let start = i;
        let (value, end) = match bytes.get(i) {
            None => return Err(ErrorKind::MultiLineFlow),
            Some(b'"' | b'\'') => {
                let (value, len) = quoted(&text[i..]).ok_or(ErrorKind::MultiLineFlow)??;
                (value, i + len)
            }
            Some(b'[' | b'{') => return Err(ErrorKind::MultiLineFlow),
            Some(b'&') => return Err(ErrorKind::Anchor),
            Some(b'*') => return Err(ErrorKind::Alias),
            Some(b'!') => return Err(ErrorKind::Tag),
            Some(b'?' | b',' | b']' | b'#') => return Err(ErrorKind::MultiLineFlow),
            Some(_) => {
                let mut j = i;
                while j < bytes.len() && !matches!(bytes[j], b',' | b']' | b'[' | b'{' | b'}') {
                    if bytes[j] == b'#' && matches!(bytes[j - 1], b' ' | b'\t') {
                        return Err(ErrorKind::MultiLineFlow);
                    }
                    if bytes[j] == b':'
                        && matches!(bytes.get(j + 1), None | Some(b' ' | b'\t' | b',' | b']'))
                    {
                        return Err(ErrorKind::FlowMapping);
                    }
                    j += 1;
                }
                let value = text[i..j].trim_end_matches([' ', '\t']);
                (value.to_owned(), i + value.len())
            }
        };
        items.push(FlowItem { start, end, value });
        i = skip(end);
        match bytes.get(i) {
            Some(b',') => {
                i = skip(i + 1);
                if matches!(bytes.get(i), Some(b']')) {
                    return Err(ErrorKind::MultiLineFlow);
                }
            }
            Some(b']') => {
                return Ok((
                    Flow {
                        open,
                        close: i,
                        items,
                    },
                    i + 1,
                ))
            }
            _ => return Err(ErrorKind::MultiLineFlow),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;

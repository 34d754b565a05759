//! Renders the Hermes skill document `SKILL.md` (cards.md §19.2) from the registry's `skill`
//! section and our template `fixtures/rich-cards/skill/SKILL.md.tmpl`, and extracts the cards of
//! its fenced `json` blocks so the parity fixtures prove every example valid.

use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use super::{Artifact, Registry};

/// The rendered document and the example cards found in it.
pub(crate) struct Skill {
    pub(crate) artifact: Artifact,
    pub(crate) examples: Vec<Value>,
}

pub(crate) fn generate(project_root: &Path, registry: &Registry) -> anyhow::Result<Skill> {
    let template_path = registry.str_at("/skill/template")?;
    let template = std::fs::read_to_string(project_root.join(template_path))
        .with_context(|| format!("reading {template_path}"))?;
    let text = render(registry, &template)?;
    let examples = examples(&text)?;
    Ok(Skill {
        artifact: Artifact {
            path: registry.str_at("/skill/output")?.into(),
            text,
        },
        examples,
    })
}

/// Substitutes every `{{name}}` placeholder; an unknown placeholder is an error.
fn render(registry: &Registry, template: &str) -> anyhow::Result<String> {
    let mut out = String::with_capacity(template.len() + 1024);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find("}}")
            .context("SKILL.md template has an unclosed {{")?;
        let name = &rest[start + 2..start + end];
        out.push_str(&placeholder(registry, name)?);
        rest = &rest[start + end + 2..];
    }
    out.push_str(rest);
    // LF only, exactly one trailing LF.
    let mut out = out.replace("\r\n", "\n");
    while out.ends_with("\n\n") {
        out.pop();
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    Ok(out)
}

fn placeholder(registry: &Registry, name: &str) -> anyhow::Result<String> {
    let list = |key: &str| -> anyhow::Result<String> {
        let spec = registry.object_at(&format!("/skill/lists/{key}"))?;
        let items = if let Some(e) = spec.get("enum").and_then(Value::as_str) {
            registry.str_list_at(&format!("/enums/{e}"))?
        } else {
            let from = spec
                .get("from")
                .and_then(Value::as_str)
                .context("skill list needs enum or from")?;
            registry.str_list_at(&format!("/{}", from.replace('.', "/")))?
        };
        let style = spec.get("style").and_then(Value::as_str).unwrap_or("code");
        let join = spec.get("join").and_then(Value::as_str).unwrap_or("comma");
        Ok(join_list(&items, style, join))
    };
    Ok(match name {
        "skill.name" => registry.str_at("/skill/name")?.to_owned(),
        "skill.frontmatterDescription" => {
            registry.str_at("/skill/frontmatterDescription")?.to_owned()
        }
        "skill.allowedTools" => format!(
            "[{}]",
            registry.str_list_at("/skill/allowedTools")?.join(", ")
        ),
        "marker" => registry.str_at("/skill/markerComment")?.to_owned(),
        "requiredCardKeys" | "blockKinds" | "fieldTypes" | "tones" => list(name)?,
        "listItemOptionalKeys" => {
            let keys = registry.str_list_at("/records/listItem/allowedKeys")?;
            let optional: Vec<String> = keys.into_iter().filter(|k| k != "label").collect();
            join_list(&optional, "code", "comma-and")
        }
        "maxCardKiB" => (registry.u64_at("/limits/maxCardBytes")? / 1024).to_string(),
        "patterns.actionId" => registry.str_at("/patterns/actionId/regex")?.to_owned(),
        "caps.card.title" | "caps.card.fallbackText" => {
            let key = name.trim_start_matches("caps.card.");
            let checks = registry
                .at("/records/card/checks")?
                .as_array()
                .context("records.card.checks")?;
            checks
                .iter()
                .find(|c| c["key"] == key && c["rule"] == "string")
                .and_then(|c| c["max"].as_u64())
                .with_context(|| format!("records.card has no string cap for {key}"))?
                .to_string()
        }
        other => match other.strip_prefix("limits.") {
            Some(limit) => registry.limit(limit)?.to_string(),
            None => anyhow::bail!("SKILL.md template uses unknown placeholder {{{{{other}}}}}"),
        },
    })
}

/// cards.md §19.2 list joins: `comma`, `comma-and`, `comma-or`; style `code` adds backticks.
fn join_list(items: &[String], style: &str, join: &str) -> String {
    let items: Vec<String> = items
        .iter()
        .map(|i| {
            if style == "code" {
                format!("`{i}`")
            } else {
                i.clone()
            }
        })
        .collect();
    let word = match join {
        "comma-and" => "and",
        "comma-or" => "or",
        _ => return items.join(", "),
    };
    match items.len() {
        0 => String::new(),
        1 => items[0].clone(),
        2 => format!("{} {word} {}", items[0], items[1]),
        n => format!("{}, {word} {}", items[..n - 1].join(", "), items[n - 1]),
    }
}

/// The cards of every fenced `json` block: the `card` member of a tool call, else the object.
fn examples(text: &str) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() != "```json" {
            continue;
        }
        let mut block = String::new();
        for inner in lines.by_ref() {
            if inner.trim() == "```" {
                break;
            }
            block.push_str(inner);
            block.push('\n');
        }
        let value: Value =
            serde_json::from_str(&block).context("a SKILL.md json block does not parse")?;
        out.push(match value.get("action") {
            Some(_) => value
                .get("card")
                .cloned()
                .context("a tool-call example has no card")?,
            None => value,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::join_list;

    #[test]
    fn list_joins() {
        let items: Vec<String> = ["a", "b", "c"].iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(join_list(&items, "code", "comma"), "`a`, `b`, `c`");
        assert_eq!(join_list(&items, "code", "comma-and"), "`a`, `b`, and `c`");
        assert_eq!(join_list(&items[..2], "code", "comma-or"), "`a` or `b`");
        assert_eq!(join_list(&items[..1], "plain", "comma-and"), "a");
    }
}

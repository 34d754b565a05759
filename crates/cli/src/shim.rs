//! The Python shim as `canon-hermes install` writes it (cli.md §3.3, hermes-host.md §19.2): the
//! package's modules and the rich-cards skill embedded at build time (never read from the source
//! tree at run time), the generated `plugin.yaml` and `manifest.json`, and [`SHIM_HASH`], the
//! hash of the package's code that the shim recomputes from its installed files and sends as
//! `hello.manifest_sha256`, so that a daemon comparing it with [`shim_sha256`] detects a shim
//! that is not the one this binary installs (hermes-host.md §19.5 `stale_shim`).

use std::path::Path;

use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

/// The plugin directory under `<HERMES_HOME>/plugins/` and the plugin's name (hermes-host.md §2.3).
pub(crate) const PLUGIN_NAME: &str = "canon-hermes";

/// The platform's name under `platforms:` (hermes-host.md §6).
pub(crate) const PLATFORM_NAME: &str = canon_host::protocol::PLATFORM;

/// This binary's version, the shim's and the plugin's.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What the system prompt tells the model about Canon: the 0.14.1 hint and its skill sentence
/// (hermes-host.md §6, exact), then what the Canon tool lets the model do.
pub(crate) const PLATFORM_HINT: &str = "You are chatting via Canon. Canon conversations can be direct or group chats. Use concise conversational text; slash commands are preserved when users send them. Messages sent by Hermes are marked as turn-complete for Canon's UI. Before authoring a rich card, load the plugin skill canon-hermes:rich-cards with skill_view. With the canon_runtime_control tool you can show a card (send_card), ask the person you are talking with to answer a card or a question (request_card, request_input), or end a turn without posting anything (no_reply, for group chats where you have nothing to add).";

/// The package's modules, by file name in byte order (the order of [`shim_sha256`]).
pub(crate) const PACKAGE: [(&str, &[u8]); 7] = [
    (
        "__init__.py",
        include_bytes!("../assets/hermes/plugin/canon-hermes/__init__.py"),
    ),
    (
        "_adapter.py",
        include_bytes!("../assets/hermes/plugin/canon-hermes/_adapter.py"),
    ),
    (
        "_api.py",
        include_bytes!("../assets/hermes/plugin/canon-hermes/_api.py"),
    ),
    (
        "_busy.py",
        include_bytes!("../assets/hermes/plugin/canon-hermes/_busy.py"),
    ),
    (
        "_constants.py",
        include_bytes!("../assets/hermes/plugin/canon-hermes/_constants.py"),
    ),
    (
        "_daemon.py",
        include_bytes!("../assets/hermes/plugin/canon-hermes/_daemon.py"),
    ),
    (
        "_tools.py",
        include_bytes!("../assets/hermes/plugin/canon-hermes/_tools.py"),
    ),
];

/// The generated rich-cards skill (`cargo xtask codegen`), and where the shim keeps it.
pub(crate) const SKILL: (&str, &[u8]) = (
    "skills/rich-cards/SKILL.md",
    include_bytes!("../assets/hermes/skills/rich-cards/SKILL.md"),
);

/// How [`shim_sha256`] is computed, named in the manifest so both sides agree on it.
pub(crate) const SHIM_HASH: &str = "sha256 over the package's .py files in byte order of their names, each as <name> LF <length in bytes, decimal> LF <bytes>";

/// Per-message limit the adapter reports to Hermes, in UTF-8 bytes
/// (`canon_chunking::limits::HOST_MAX_MESSAGE_LENGTH`, checked by a test).
const MAX_MESSAGE_LENGTH: u64 = 3900;

/// Largest streamed answer before Hermes overflows to a new message, in UTF-8 bytes
/// (`canon_chunking::limits::STREAMED_ANSWER_MAX_BYTES`, checked by a test).
const STREAMING_OVERFLOW_LIMIT: u64 = 60_800;

/// The hooks the shim registers (`__init__.py` `register`).
const HOOKS: [&str; 3] = ["pre_tool_call", "post_tool_call", "subagent_stop"];

/// The `optional_env` entries of `plugin.yaml`: name, description, prompt, password (the
/// 0.14.1 operator-facing labels of cli.md §8.1).
const OPTIONAL_ENV: [(&str, &str, &str, bool); 15] = [
    (
        "CANON_API_KEY",
        "Advanced/headless Canon agent API key override",
        "Canon API key override",
        true,
    ),
    (
        "CANON_AGENT",
        "Canon profile name from ~/.canon/agents.json",
        "Canon profile",
        false,
    ),
    (
        "CANON_AGENTS_JSON_BOOTSTRAP",
        "Initial agents.json contents for fresh volumes",
        "Canon agents.json bootstrap",
        true,
    ),
    (
        "CANON_HOME",
        "Canon profile directory, defaults to ~/.canon",
        "Canon home",
        false,
    ),
    (
        "CANON_ENVIRONMENT_ID",
        "Required Canon trust-domain id when CANON_API_KEY is used directly",
        "Canon environment ID",
        false,
    ),
    (
        "CANON_BASE_URL",
        "Canon agent REST API base URL",
        "Canon base URL",
        false,
    ),
    (
        "CANON_STREAM_URL",
        "Canon agent SSE stream base URL",
        "Canon stream URL",
        false,
    ),
    (
        "CANON_RTDB_URL",
        "Canon Realtime Database URL",
        "Canon RTDB URL",
        false,
    ),
    (
        "CANON_FIREBASE_API_KEY",
        "Public Firebase web API key for Canon RTDB authentication",
        "Canon Firebase web API key",
        false,
    ),
    (
        "CANON_HOME_CHANNEL",
        "Default Canon conversation ID for cron / notification delivery",
        "Canon home conversation ID",
        false,
    ),
    (
        "CANON_ALLOWED_USERS",
        "Comma-separated Canon user IDs allowed to talk to Hermes",
        "Allowed Canon user IDs",
        false,
    ),
    (
        "CANON_ALLOW_ALL_USERS",
        "Allow any Canon user to talk to Hermes",
        "Allow all users? (true/false)",
        false,
    ),
    (
        "CANON_INBOUND_IMAGE_DELIVERY",
        "Inbound image delivery: model or trusted-only",
        "Inbound image delivery",
        false,
    ),
    (
        "CANON_INBOUND_VISUAL_MEDIA_DELIVERY",
        "Inbound image/PDF delivery: model or trusted-only",
        "Inbound visual media delivery",
        false,
    ),
    (
        "CANON_TURN_VERBOSITY",
        "Turn verbosity: auto (quiet in groups), verbose, or quiet",
        "Turn verbosity",
        false,
    ),
];

/// SHA-256 (lowercase hex) of the package this binary installs, computed as [`SHIM_HASH`] says;
/// `_daemon.py` computes the same over the installed files.
pub(crate) fn shim_sha256() -> String {
    package_sha256(PACKAGE.iter().map(|(name, bytes)| (*name, *bytes)))
}

/// [`SHIM_HASH`] over `files`, which must come in byte order of their names.
pub(crate) fn package_sha256<'a>(files: impl Iterator<Item = (&'a str, &'a [u8])>) -> String {
    let mut hasher = Sha256::new();
    for (name, bytes) in files {
        hasher.update(name.as_bytes());
        hasher.update(format!("\n{}\n", bytes.len()).as_bytes());
        hasher.update(bytes);
    }
    hex(&hasher.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A YAML double-quoted scalar.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| String::from("\"\""))
}

/// `plugin.yaml` (cli.md §3.3). `provides_tools` lists the tools the shim really registers: the
/// manifest's (`canon_runtime_control` and `canon_communicate`, runtime-control.md §4, §5).
pub(crate) fn plugin_yaml() -> String {
    let mut out =
        String::from("# Written by canon-hermes install; the next install rewrites it.\n");
    out.push_str(&format!(
        "name: {PLUGIN_NAME}\nkind: platform\nversion: {VERSION}\n"
    ));
    out.push_str("label: Canon\n");
    out.push_str(
        "description: Canon platform for Hermes; forwards every gateway call to the canon-hermes daemon.\n",
    );
    out.push_str("author: Canon\nrequires_env: []\n");
    let tools: Vec<String> = canon_host::tools::manifest_tools()
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
        .collect();
    out.push_str(&format!("provides_tools: [{}]\n", tools.join(", ")));
    out.push_str(&format!("provides_hooks: [{}]\n", HOOKS.join(", ")));
    out.push_str("optional_env:\n");
    for (name, description, prompt, password) in OPTIONAL_ENV {
        out.push_str(&format!(
            "  - name: {name}\n    description: {}\n    prompt: {}\n    password: {password}\n",
            quoted(description),
            quoted(prompt)
        ));
    }
    out
}

/// `RUNTIME_CARD_LIMITS` (cards.md §10.1) in export order, for the shim's export of that name.
fn card_limits() -> Value {
    let mut limits = serde_json::Map::new();
    for (name, value) in canon_cards::vocab::RUNTIME_CARD_LIMITS_IN_ORDER {
        limits.insert(name.to_owned(), Value::from(value));
    }
    Value::Object(limits)
}

/// The skill's `description` from its front matter.
fn skill_description() -> String {
    let text = String::from_utf8_lossy(SKILL.1);
    text.lines()
        .skip(1)
        .take_while(|line| *line != "---")
        .find_map(|line| line.strip_prefix("description:"))
        .map(|d| d.trim().to_owned())
        .unwrap_or_default()
}

/// The files `install` writes besides the manifest, relative to the plugin directory, in the
/// order it writes them: the package, `plugin.yaml`, the skill.
pub(crate) fn files() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = PACKAGE
        .iter()
        .map(|(name, bytes)| ((*name).to_owned(), bytes.to_vec()))
        .collect();
    files.push(("plugin.yaml".to_owned(), plugin_yaml().into_bytes()));
    files.push((SKILL.0.to_owned(), SKILL.1.to_vec()));
    files
}

/// `manifest.json` (hermes-host.md §19.2) for a shim that spawns `binary`: what the shim reads
/// at `register()` (platform and adapter constants, the audited host, the binary), the hash of
/// its code, and the files this install wrote (the next install removes those it no longer
/// writes). Pretty-printed with a final newline; the same binary always writes the same bytes.
pub(crate) fn manifest(binary: &Path) -> String {
    let files: Vec<String> = files().into_iter().map(|(name, _)| name).collect();
    let value: Value = json!({
        "protocol": canon_host::protocol::PROTOCOL_VERSION,
        "binary": binary.to_string_lossy(),
        "binary_version": VERSION,
        "audited_host": {
            "hermes_agent": canon_host::protocol::AUDITED_HERMES,
            "python": canon_host::protocol::AUDITED_PYTHON,
        },
        "shim_sha256": shim_sha256(),
        "shim_hash": SHIM_HASH,
        "files": files,
        "platform": {
            "name": PLATFORM_NAME,
            "label": "Canon",
            "max_message_length": MAX_MESSAGE_LENGTH,
            "allowed_users_env": "CANON_ALLOWED_USERS",
            "allow_all_env": "CANON_ALLOW_ALL_USERS",
            "cron_deliver_env_var": "CANON_HOME_CHANNEL",
            "install_hint": "Run canon-hermes setup to register or reconnect a Canon agent profile",
            "platform_hint": PLATFORM_HINT,
            "emoji": "C",
        },
        "adapter": {
            "max_message_length": MAX_MESSAGE_LENGTH,
            "streaming_overflow_limit": STREAMING_OVERFLOW_LIMIT,
            "splits_long_messages": true,
            "requires_edit_finalize": true,
            "authorization_is_upstream": true,
        },
        "tools": canon_host::tools::manifest_tools(),
        "card_limits": card_limits(),
        "toolset_aliases": {canon_host::tools::TOOLSET_ALIAS: canon_host::tools::TOOLSET},
        "hooks": HOOKS,
        "skills": [{
            "name": "rich-cards",
            "path": SKILL.0,
            "description": skill_description(),
        }],
    });
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| String::from("{}"));
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_package_is_every_module_of_the_source_directory_in_byte_order() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/hermes/plugin/canon-hermes");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .expect("the shim directory")
            .map(|entry| {
                entry
                    .expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|name| name.ends_with(".py"))
            .collect();
        on_disk.sort();
        let embedded: Vec<&str> = PACKAGE.iter().map(|(name, _)| *name).collect();
        assert_eq!(embedded, on_disk, "PACKAGE must list every module, sorted");
        for (name, bytes) in PACKAGE {
            assert_eq!(
                std::fs::read(dir.join(name)).expect("a module"),
                bytes,
                "{name}"
            );
        }
    }

    #[test]
    fn limits_are_the_chunking_crate_s() {
        use canon_chunking::limits;
        assert_eq!(MAX_MESSAGE_LENGTH, limits::HOST_MAX_MESSAGE_LENGTH as u64);
        assert_eq!(
            STREAMING_OVERFLOW_LIMIT,
            limits::STREAMED_ANSWER_MAX_BYTES as u64
        );
    }

    #[test]
    fn the_hash_covers_names_lengths_and_bytes() {
        let base = package_sha256([("a.py", &b"xy"[..]), ("b.py", b"z")].into_iter());
        assert_eq!(base.len(), 64);
        assert_ne!(
            base,
            package_sha256([("a.py", &b"x"[..]), ("b.py", b"yz")].into_iter())
        );
        assert_ne!(
            base,
            package_sha256([("a.py", &b"xy"[..]), ("c.py", b"z")].into_iter())
        );
        assert_ne!(base, package_sha256([("a.py", &b"xy"[..])].into_iter()));
    }

    #[test]
    fn the_manifest_is_deterministic_and_names_the_skill() {
        let one = manifest(Path::new("/opt/bin/canon-hermes"));
        assert_eq!(one, manifest(Path::new("/opt/bin/canon-hermes")));
        let value: Value = serde_json::from_str(&one).expect("JSON");
        assert_eq!(value["binary"], "/opt/bin/canon-hermes");
        assert_eq!(value["shim_sha256"], shim_sha256());
        assert!(value["skills"][0]["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("Build and send validated Canon rich cards")));
        // The package's modules, then plugin.yaml and the skill.
        assert_eq!(value["files"][PACKAGE.len()], "plugin.yaml");
        assert_eq!(value["files"][0], "__init__.py");
        assert_eq!(value["card_limits"]["blocks"], 24);
    }
}

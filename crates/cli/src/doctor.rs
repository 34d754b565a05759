//! `canon-hermes doctor` (cli.md §9): whether the active Hermes profile would run the Canon
//! platform, one line per check in the order of cli.md §9, then hints, then
//! `Canon Hermes plugin looks ready.` (exit 0) or `Canon Hermes plugin needs setup.` (exit 1).
//! `--json` prints the same checks as one JSON object instead.
//!
//! Where the facts come from: the profile and the Hermes Python as `install` finds them
//! (`hermes`, cli.md §2); the host, the config and the hooks from the read-only `host.probe`
//! helper run in that Python (Hermes' own config readers; it writes nothing); the shim from its
//! installed files, hashed as the shim hashes itself (`shim::package_sha256`), and the binary's
//! copy install made beside them, compared with the binary running doctor; the `hermes`
//! launcher from `PATH`; the credentials through `credentials::resolve`, the very call
//! `serve --stdio` makes, with the inputs it gives it (the process environment over
//! `<HERMES_HOME>/.env`, `CANON_HOME`, no platform config), so doctor and the daemon never
//! disagree; and with
//! `--online` the environment through canon-transport's health check, the one the daemon runs at
//! connect and `setup` runs before it saves a connection (cli.md §5.3; no API key is sent, the
//! client doctor builds does not even hold it).
//!
//! Never prints a secret: errors of the resolver carry none by construction, and every line is
//! also stripped of the API key values doctor has seen before it is printed.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use canon_profiles::files::CanonPaths;
use canon_profiles::{CredentialSource, Credentials, DotEnv, EnvLookup, HermesEnv, Resolution};
use serde_json::{json, Value};

use crate::exit;
use crate::hermes::{self, HostEnv, Launcher};
use crate::shim;

/// `canon-hermes doctor` (cli.md §1).
#[derive(Debug, clap::Args)]
pub(crate) struct DoctorArgs {
    /// The Hermes profile to check (default: the active profile, as `hermes` picks it)
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// The Python of the Hermes environment (default: $HERMES_PYTHON, the `python` beside this
    /// binary when it sits in a venv's bin/, the `hermes` launcher's interpreter,
    /// ~/.hermes/hermes-agent/venv/bin/python)
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
    /// Also check that the Canon API and stream belong to the configured environment
    #[arg(long)]
    online: bool,
    /// Print one JSON object with every check instead of the lines
    #[arg(long)]
    json: bool,
}

/// [parity] cli.md §9, the last line when every check passes.
const READY: &str = "Canon Hermes plugin looks ready.";
/// [parity] cli.md §9, the last line otherwise.
const NOT_READY: &str = "Canon Hermes plugin needs setup.";
/// What replaces an API key that would otherwise reach the output.
const REDACTED: &str = "[redacted]";

/// Runs `doctor`; returns the exit code (cli.md §1: 0 ready, 1 needs setup or failed).
pub(crate) fn doctor_command(args: &DoctorArgs) -> u8 {
    let mut out = std::io::stdout().lock();
    let env = HostEnv::from_process();
    let profile = match hermes::locate_profile(args.profile.as_deref(), &env) {
        Ok(profile) => profile,
        Err(error) => {
            let _ = writeln!(std::io::stderr().lock(), "{error:#}");
            return exit::REJECTED;
        }
    };
    let mut report = Report::new(args.json, &mut out);
    run(args, &env, &profile, &mut report);
    report.finish()
}

/// One line of the table (cli.md §9): `<name>: <value>`; `ok` is false when it fails readiness.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Check {
    name: &'static str,
    value: String,
    ok: bool,
}

/// The checks as they are made: printed at once (text), or kept for one JSON object.
struct Report<'a> {
    json: bool,
    out: &'a mut dyn std::io::Write,
    checks: Vec<Check>,
    hints: Vec<String>,
    /// API key values seen so far; never printed.
    secrets: Vec<String>,
}

impl<'a> Report<'a> {
    fn new(json: bool, out: &'a mut dyn std::io::Write) -> Report<'a> {
        Report {
            json,
            out,
            checks: Vec::new(),
            hints: Vec::new(),
            secrets: Vec::new(),
        }
    }

    fn secret(&mut self, value: &str) {
        let value = value.trim();
        if !value.is_empty() && !self.secrets.iter().any(|s| s == value) {
            self.secrets.push(value.to_owned());
        }
    }

    fn redact(&self, text: &str) -> String {
        self.secrets.iter().fold(text.to_owned(), |text, secret| {
            text.replace(secret, REDACTED)
        })
    }

    fn check(&mut self, name: &'static str, value: impl Into<String>, ok: bool) {
        let value = self.redact(&value.into());
        if !self.json {
            let _ = writeln!(self.out, "{name}: {value}");
            let _ = self.out.flush();
        }
        self.checks.push(Check { name, value, ok });
    }

    fn hint(&mut self, line: String) {
        let line = self.redact(&line);
        if !self.hints.contains(&line) {
            self.hints.push(line);
        }
    }

    fn ready(&self) -> bool {
        self.checks.iter().all(|check| check.ok)
    }

    /// Prints the hints and the verdict (or the JSON object); the exit code.
    fn finish(self) -> u8 {
        let ready = self.ready();
        if self.json {
            let checks: Vec<Value> = self
                .checks
                .iter()
                .map(|c| json!({"name": c.name, "value": c.value, "ok": c.ok}))
                .collect();
            let object = json!({"ready": ready, "checks": checks, "hints": self.hints});
            let _ = writeln!(self.out, "{object}");
        } else {
            for hint in &self.hints {
                let _ = writeln!(self.out, "{hint}");
            }
            let _ = writeln!(self.out, "{}", if ready { READY } else { NOT_READY });
        }
        let _ = self.out.flush();
        if ready {
            exit::OK
        } else {
            exit::REJECTED
        }
    }
}

/// Every check of cli.md §9, in order.
fn run(args: &DoctorArgs, env: &HostEnv, profile: &hermes::Profile, report: &mut Report<'_>) {
    // The resolver's environment first, so that the keys it holds are known before any line.
    let dotenv_path = profile.home.join(".env");
    let (lookup, dotenv_error) = match DotEnv::read(&dotenv_path) {
        Ok(dotenv) => (HermesEnv::new(dotenv), None),
        Err(error) => (HermesEnv::new(DotEnv::default()), Some(error)),
    };
    if let Some(key) = lookup.var("CANON_API_KEY") {
        report.secret(&key);
    }

    let (name, home) = (&profile.name, profile.home.display());
    report.check("Hermes profile", format!("{name} ({home})"), true);
    report.check("Canon Hermes plugin package", shim::VERSION, true);

    let python = hermes::locate_python(args.python.as_deref(), env);
    let probe = match &python {
        Ok(python) => hermes::Helpers::new(python.clone(), profile.home.clone())
            .call("host.probe", json!({}))
            .map_err(|error| format!("{error:#}")),
        Err(error) => Err(format!("{error:#}")),
    };
    let facts = probe.as_ref().ok();

    host_checks(&probe, report);

    // 5: the shim.
    let conflict = facts.and_then(|f| f["pip_entry_point_conflict"].as_str());
    let (value, ok) = entry_point(&profile.home, conflict);
    report.check("Hermes entry point", value, ok);

    // 6: the `hermes` launcher (informational).
    report.check(
        "Hermes command",
        hermes_command(env, python.as_ref().ok().map(PathBuf::as_path)),
        true,
    );

    // 7–11: the Hermes config.
    let config_error = match &probe {
        Err(_) => Some("no Hermes Python".to_owned()),
        Ok(facts) => facts["config_error"].as_str().map(str::to_owned),
    };
    match (config_error, facts) {
        (None, Some(facts)) => config_checks(facts, report),
        (error, _) => {
            let error = error.unwrap_or_else(|| "no Hermes Python".to_owned());
            report.check("Hermes config", format!("unknown ({error})"), false);
        }
    }

    // 12: the credentials, as `serve --stdio` resolves them.
    let credentials = credentials(&lookup, env, report);
    if let Some(error) = dotenv_error {
        report.hint(format!(
            "⚠ {} cannot be read ({error}); Canon settings in it are not seen",
            dotenv_path.display()
        ));
    }

    // 13: the hooks the shim registers for tool-call activity.
    let hooks = facts
        .and_then(|f| f["valid_hooks"].as_array())
        .is_some_and(|hooks| {
            ["pre_tool_call", "post_tool_call"]
                .iter()
                .all(|hook| hooks.iter().any(|h| h == hook))
        });
    report.check("Tool-call activity hooks", yes_no(hooks), hooks);

    // 14: the environment (only with --online).
    if args.online {
        let (value, ok) = match &credentials {
            Some(credentials) => match verify_online(credentials) {
                Ok(environment) => (format!("verified ({environment})"), true),
                Err(error) => (format!("error ({error})"), false),
            },
            None => ("error (no Canon credentials to check)".to_owned(), false),
        };
        report.check("Canon environment", value, ok);
    }

    // After the table of cli.md §9: the stream gaps the daemon recorded, only when there are.
    if let Some(paths) = CanonPaths::from_env(&lookup, env.home.as_deref()) {
        event_gaps(&paths.canon_home, report);
    }

    if let Some(facts) = facts {
        for warning in crate::install::warnings(facts) {
            report.hint(warning);
        }
    }
}

/// The gap records of `canon_home` (`canon_inbox::gaps`, one per agent and Canon origin the
/// daemon served): when Canon's event replay expired, messages sent in the window were never
/// delivered, and the daemon cannot fetch them; the operator hears of it here. No line when no
/// gap was ever recorded; informational (it never fails readiness).
fn event_gaps(canon_home: &Path, report: &mut Report<'_>) {
    use canon_inbox::gaps::{GapRecord, MAX_BYTES};
    let Ok(entries) = std::fs::read_dir(canon_home) else {
        return;
    };
    let mut records: Vec<GapRecord> = entries
        .filter_map(Result::ok)
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with("event-gaps-") && name.ends_with(".json")
        })
        .filter(|entry| {
            entry
                .metadata()
                .is_ok_and(|m| m.is_file() && m.len() <= MAX_BYTES as u64)
        })
        .filter_map(|entry| std::fs::read_to_string(entry.path()).ok())
        .filter_map(|text| GapRecord::parse(&text).ok())
        .collect();
    if records.is_empty() {
        return;
    }
    let total: u64 = records.iter().map(|r| r.gaps).sum();
    records.sort_by(|a, b| {
        let to = |r: &GapRecord| r.last.get("to").and_then(Value::as_str).map(str::to_owned);
        to(a).cmp(&to(b))
    });
    let last = &records[records.len() - 1].last;
    let text = |key: &str| last.get(key).and_then(Value::as_str);
    let window = match (text("from"), text("to")) {
        (Some(from), Some(to)) => format!("between {from} and {to}"),
        (None, Some(to)) => format!("before {to}"),
        _ => "at an unknown time".to_owned(),
    };
    let conversations: Vec<&str> = last
        .get("conversationIds")
        .and_then(Value::as_array)
        .map(|ids| ids.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let more = last
        .get("moreConversations")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let mut named = conversations.join(", ");
    if more > 0 {
        named.push_str(&format!(" and {more} more"));
    }
    if named.is_empty() {
        named = "no conversation known".to_owned();
    }
    let times = if total == 1 { "once" } else { "times" };
    let count = if total == 1 {
        String::new()
    } else {
        format!("{total} ")
    };
    report.check(
        "Missed Canon events",
        format!("{count}{times}; last {window} in {named}"),
        true,
    );
    report.hint(format!(
        "⚠ Canon's event replay expired {count}{times}: messages sent in those conversations \
         {window} may never have reached the agent (Canon does not send them again). Look there \
         for unanswered messages."
    ));
}

/// Lines 3 and 4: the Hermes package (its distribution version, else `source checkout` when
/// `hermes_cli` imports without one, else `not installed`) and the host gate of cli.md §7.2,
/// which `install` applies too.
fn host_checks(probe: &Result<Value, String>, report: &mut Report<'_>) {
    let facts = match probe {
        Ok(facts) => facts,
        Err(error) => {
            report.check("Hermes package", format!("unknown ({error})"), false);
            report.check("Hermes host", "unknown (no Hermes Python)", false);
            return;
        }
    };
    let version = facts["hermes_version"].as_str();
    let package = match version {
        Some(version) => version,
        None if facts["hermes_importable"] == true => "source checkout",
        None => "not installed",
    };
    let installed = package != "not installed";
    report.check("Hermes package", package, installed);
    // The refusal names what line 3 shows, a source checkout included.
    let mut gate = facts.clone();
    if installed {
        gate["hermes_version"] = Value::from(package);
    }
    match crate::install::host_refusal(&gate) {
        None => {
            let python = facts["python_version"].as_str().unwrap_or("unknown");
            report.check(
                "Hermes host",
                format!("supported (hermes-agent {package}, Python {python})"),
                true,
            );
        }
        Some(refusal) => report.check("Hermes host", format!("unsupported ({refusal})"), false),
    }
}

fn yes_no(value: bool) -> &'static str {
    if value {
        "yes"
    } else {
        "no"
    }
}

/// Lines 7–11 from a probe that could read the config, and the hint for the no-platform trap:
/// with the plugin or the platform off, the gateway starts without Canon (and with no platform
/// at all when Canon is its only one), which looks like a hang rather than an error.
fn config_checks(facts: &Value, report: &mut Report<'_>) {
    let listed = |key: &str| {
        facts[key]
            .as_array()
            .is_some_and(|names| names.iter().any(|n| n == shim::PLUGIN_NAME))
    };
    let (in_enabled, in_disabled) = (listed("plugins_enabled"), listed("plugins_disabled"));
    let plugin = in_enabled && !in_disabled;
    report.check("Plugin enabled", yes_no(plugin), plugin);
    let platform = facts["canon_platform_enabled"] == true;
    report.check("Canon platform enabled", yes_no(platform), platform);
    let multiplex = facts["multiplex_profiles"] == true;
    report.check(
        "Multiplex profiles",
        if multiplex { "on" } else { "off" },
        !multiplex,
    );
    let mode = facts["approvals_mode"].as_str().unwrap_or("unknown");
    let advice = if mode == "manual" {
        ""
    } else {
        " (recommended: manual)"
    };
    report.check("Approvals mode", format!("{mode}{advice}"), true);
    let streaming = facts["streaming_enabled"] == true;
    report.check("Streaming", if streaming { "on" } else { "off" }, true);

    if !plugin || !platform {
        let mut remedies = Vec::new();
        if !in_enabled || !platform {
            remedies.push("run canon-hermes install".to_owned());
        }
        if in_disabled {
            remedies.push(format!(
                "remove {0} from plugins.disabled (hermes plugins enable {0})",
                shim::PLUGIN_NAME
            ));
        }
        report.hint(format!(
            "⚠ Hermes would start with no Canon platform: {}",
            remedies.join(", then ")
        ));
    }
}

/// Line 5: the shim Hermes would load, and whether it is the one this binary installs.
fn entry_point(home: &Path, conflict: Option<&str>) -> (String, bool) {
    let install = "run canon-hermes install";
    if let Some(version) = conflict {
        return (
            format!("no (canon-hermes-plugin {version} entry point overrides the shim)"),
            false,
        );
    }
    let dir = home.join("plugins").join(shim::PLUGIN_NAME);
    let manifest = std::fs::read(dir.join("manifest.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .filter(Value::is_object);
    let Some(manifest) = manifest else {
        return (format!("no (shim not installed; {install})"), false);
    };
    let version = manifest["binary_version"].as_str().unwrap_or("unknown");
    if version != shim::VERSION {
        return (
            format!(
                "no (shim {version} does not match canon-hermes {}; {install})",
                shim::VERSION
            ),
            false,
        );
    }
    match installed_sha256(&dir) {
        Ok(hash) if hash == shim::shim_sha256() => {}
        Ok(_) => {
            return (
                format!(
                    "no (shim files differ from the ones canon-hermes {} installs; {install})",
                    shim::VERSION
                ),
                false,
            )
        }
        Err(error) => {
            return (
                format!("no (shim files cannot be read: {error}; {install})"),
                false,
            )
        }
    }
    // Install's copy, recorded relative to the plugin directory (an absolute path as it is),
    // resolved as the shim resolves it.
    let binary = dir.join(manifest["binary"].as_str().unwrap_or_default());
    if !is_executable(&binary) {
        return (
            format!(
                "no (shim binary {} is not an executable file; {install})",
                binary.display()
            ),
            false,
        );
    }
    let ready = format!("yes ({}, shim {version}", dir.display());
    if differs_from_this_binary(&binary) {
        // The gateway runs that copy, which matches its shim: ready, with an upgrade to offer.
        return (
            format!(
                "{ready}; installed binary {} differs from this canon-hermes {}; run canon-hermes \
                 install to upgrade)",
                binary.display(),
                shim::VERSION
            ),
            true,
        );
    }
    (format!("{ready})"), true)
}

/// Whether the installed copy of the binary holds other bytes than the binary running doctor
/// (sizes first, then the bytes); an unreadable file counts as different.
fn differs_from_this_binary(installed: &Path) -> bool {
    let open = |path: &Path| std::fs::File::open(path);
    match (open(&crate::install::running_binary()), open(installed)) {
        (Ok(mut this), Ok(mut other)) => {
            !crate::install::same_contents(&mut this, &mut other).unwrap_or(false)
        }
        _ => true,
    }
}

/// The hash the installed shim sends as `hello.manifest_sha256` (its `.py` files in byte order
/// of their names, `shim::SHIM_HASH`), computed from the files in `dir`.
fn installed_sha256(dir: &Path) -> std::io::Result<String> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
            continue;
        };
        if name.ends_with(".py") && path.is_file() {
            files.push((name, std::fs::read(&path)?));
        }
    }
    files.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    Ok(shim::package_sha256(
        files
            .iter()
            .map(|(name, bytes)| (name.as_str(), bytes.as_slice())),
    ))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Line 6 (cli.md §9): the `hermes` on `PATH` and what it runs, against the Hermes Python
/// doctor uses (`current`).
fn hermes_command(env: &HostEnv, current: Option<&Path>) -> String {
    let Some((launcher, kind)) = hermes::hermes_launcher(env) else {
        return "not found on PATH".to_owned();
    };
    let path = launcher.display();
    match kind {
        Launcher::Python(exe) => match current {
            Some(current) if hermes::same_environment(&exe, current) => {
                format!("{path} (same Python environment)")
            }
            Some(current) => format!(
                "{path} (launcher: {}; current: {})",
                exe.display(),
                current.display()
            ),
            None => format!("{path} (launcher: {}; current: unknown)", exe.display()),
        },
        Launcher::NonPython => format!("{path} (non-Python launcher)"),
        Launcher::Unknown => format!("{path} (unknown launcher)"),
        Launcher::Unreadable => format!("{path} (unable to inspect launcher)"),
    }
}

/// Line 12: `credentials::resolve`, shared with `serve --stdio`, over the inputs the daemon gives
/// it (the process environment over the profile's `.env`, `CANON_HOME` and the `agents.json`
/// overrides, the bootstrap merge, no platform config). Unlike the daemon, doctor has no direct test mode:
/// a key with URLs and no environment id is reported as the resolver refuses it. The resolved
/// credentials, for `--online`.
fn credentials(lookup: &HermesEnv, env: &HostEnv, report: &mut Report<'_>) -> Option<Credentials> {
    let paths = CanonPaths::from_env(lookup, env.home.as_deref());
    match crate::credentials::resolve(lookup, paths.as_ref(), None) {
        Ok(Resolution::Configured(credentials)) => {
            report.secret(credentials.api_key.expose());
            let value = match &credentials.source {
                CredentialSource::Profile(identity) => format!("yes {}", identity.name),
                CredentialSource::DirectKey => "yes (api key override)".to_owned(),
            };
            report.check("Canon credentials", value, true);
            Some(credentials)
        }
        Ok(Resolution::Unconfigured) => {
            report.check("Canon credentials", "no (none)", false);
            None
        }
        Err(error) => {
            report.check("Canon credentials", format!("no ({error})"), false);
            None
        }
    }
}

/// Line 14 (cli.md §5.3): the health check through canon-transport with a client that holds no
/// key ([`crate::canon::verify_connection`], the check `setup` runs too). The environment id on
/// success; a safe error text otherwise.
fn verify_online(credentials: &Credentials) -> Result<String, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the tokio runtime: {e}"))?;
    runtime
        .block_on(crate::canon::verify_connection(&credentials.connection))
        .map(|connection| connection.environment_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_never_reaches_a_line() {
        let mut out = Vec::new();
        let mut report = Report::new(false, &mut out);
        report.secret(" sk-secret ");
        report.check("Canon credentials", "no (bad sk-secret here)", false);
        report.hint("⚠ sk-secret".to_owned());
        assert_eq!(report.finish(), exit::REJECTED);
        let text = String::from_utf8(out).expect("utf-8");
        assert_eq!(
            text,
            "Canon credentials: no (bad [redacted] here)\n⚠ [redacted]\nCanon Hermes plugin needs setup.\n"
        );
    }

    #[test]
    fn json_is_one_object_with_every_check() {
        let mut out = Vec::new();
        let mut report = Report::new(true, &mut out);
        report.check("Streaming", "off", true);
        report.check("Approvals mode", "smart (recommended: manual)", true);
        assert_eq!(report.finish(), exit::OK);
        let value: Value = serde_json::from_slice(&out).expect("one JSON value");
        assert_eq!(
            value,
            json!({"ready": true, "hints": [], "checks": [
                {"name": "Streaming", "value": "off", "ok": true},
                {"name": "Approvals mode", "value": "smart (recommended: manual)", "ok": true},
            ]})
        );
    }
}

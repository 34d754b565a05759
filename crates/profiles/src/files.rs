//! The files under `CANON_HOME` this crate owns (cli.md §6): where they are ([`CanonPaths`]),
//! `agents.json` ([`AgentProfiles`], [`load_agents`] with the `CANON_AGENTS_JSON_BOOTSTRAP`
//! merge), `pending-registrations.json` ([`PendingRegistrations`]), and the one write procedure
//! both use ([`write_json_file`]).
//!
//! Invariants: a file that cannot be read or parsed is reported with its exact [parity] error
//! and never overwritten; a write replaces the whole file atomically (temp file in the same
//! directory, `0600`, rename), and entries it does not touch are kept as they were.

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use canon_wire::types::RegistrationTicket;
use serde_json::{Map, Value};

use crate::credentials::is_for_hermes;
use crate::env::EnvLookup;
use crate::environment::Connection;
use crate::text::{non_blank, py_strip};

/// `agents.json`'s file name under `CANON_HOME` (cli.md §6.1).
pub const AGENTS_FILE: &str = "agents.json";

/// `pending-registrations.json`'s file name under `CANON_HOME` (cli.md §6.2).
pub const PENDING_FILE: &str = "pending-registrations.json";

/// The bootstrap variable (cli.md §8.1).
pub const BOOTSTRAP_ENV: &str = "CANON_AGENTS_JSON_BOOTSTRAP";

/// A Canon file that cannot be read, parsed or written (cli.md §6). Messages are [parity] text
/// where the spec gives one; the embedded error is the underlying I/O or JSON error's text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// `agents.json` is not valid JSON.
    #[error("Could not parse {path}: {message}", path = path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The JSON error.
        message: String,
    },
    /// `agents.json` could not be read.
    #[error("Could not read {path}: {message}", path = path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        message: String,
    },
    /// A file that must be an object keyed by profile name is not one.
    #[error("{path} must be a JSON object keyed by profile name", path = path.display())]
    NotAnObject {
        /// The file.
        path: PathBuf,
    },
    /// One `agents.json` entry is not an object.
    #[error("Canon profile \"{name}\" in {path} must be an object", path = path.display())]
    ProfileNotAnObject {
        /// The profile name.
        name: String,
        /// The file.
        path: PathBuf,
    },
    /// The bootstrap is neither JSON nor base64 of JSON.
    #[error("CANON_AGENTS_JSON_BOOTSTRAP must be agents.json JSON or base64 JSON")]
    BootstrapInvalid,
    /// The bootstrap is JSON but not an object.
    #[error("CANON_AGENTS_JSON_BOOTSTRAP must be a JSON object keyed by profile name")]
    BootstrapNotAnObject,
    /// A bootstrap entry's name is blank.
    #[error("CANON_AGENTS_JSON_BOOTSTRAP contains an empty profile name")]
    BootstrapEmptyName,
    /// A bootstrap entry is not an object.
    #[error("CANON_AGENTS_JSON_BOOTSTRAP profile \"{name}\" must be an object")]
    BootstrapProfileNotAnObject {
        /// The profile name (trimmed).
        name: String,
    },
    /// `pending-registrations.json` could not be read or parsed.
    #[error(
        "Could not read pending Canon registrations from {path}: {message}",
        path = path.display()
    )]
    PendingRead {
        /// The file.
        path: PathBuf,
        /// The I/O or JSON error.
        message: String,
    },
    /// One pending entry is not an object.
    #[error("Pending Canon registration \"{name}\" must be an object")]
    PendingNotAnObject {
        /// The profile name.
        name: String,
    },
    /// A submitted registration was made against another connection (cli.md §4.3 step 4).
    #[error("Pending Canon registration for {name} is not bound to this environment")]
    PendingNotBound {
        /// The profile name.
        name: String,
    },
    /// A write failed (the target is unchanged).
    #[error("Could not write {path}: {message}", path = path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        message: String,
    },
}

/// `~` or `~/…` expanded against `home_dir` (Python's `expanduser` for the current user).
fn expand_tilde(path: &str, home_dir: Option<&Path>) -> Option<PathBuf> {
    if path == "~" {
        return home_dir.map(Path::to_path_buf);
    }
    if let Some(rest) = path.strip_prefix("~/") {
        return home_dir.map(|h| h.join(rest));
    }
    Some(PathBuf::from(path))
}

/// `CANON_HOME` (cli.md §6): the variable trimmed and `~`-expanded, else `~/.canon`; `None` when
/// that needs a home directory and there is none.
pub fn canon_home(canon_home_env: Option<&str>, home_dir: Option<&Path>) -> Option<PathBuf> {
    match canon_home_env.and_then(non_blank) {
        Some(value) => expand_tilde(value, home_dir),
        None => home_dir.map(|h| h.join(".canon")),
    }
}

/// Where the Canon files of this process are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonPaths {
    /// `CANON_HOME`.
    pub canon_home: PathBuf,
    /// `agents.json`: `CANON_AGENTS_FILE`, else `CANON_AGENTS_PATH` (trimmed, `~` expanded),
    /// else `<CANON_HOME>/agents.json`.
    pub agents: PathBuf,
    /// `<CANON_HOME>/pending-registrations.json` (no override).
    pub pending: PathBuf,
}

impl CanonPaths {
    /// The paths from `CANON_HOME`, `CANON_AGENTS_FILE` and `CANON_AGENTS_PATH` in `env`;
    /// `None` when `CANON_HOME` needs a home directory and there is none.
    pub fn from_env(env: &dyn EnvLookup, home_dir: Option<&Path>) -> Option<CanonPaths> {
        let home = canon_home(env.var("CANON_HOME").as_deref(), home_dir)?;
        let agents = ["CANON_AGENTS_FILE", "CANON_AGENTS_PATH"]
            .into_iter()
            .find_map(|name| {
                let value = env.var(name)?;
                expand_tilde(non_blank(&value)?, home_dir)
            })
            .unwrap_or_else(|| home.join(AGENTS_FILE));
        Some(CanonPaths {
            pending: home.join(PENDING_FILE),
            agents,
            canon_home: home,
        })
    }
}

/// Reads a JSON file: `Ok(None)` when it does not exist.
fn read_json(path: &Path) -> Result<Option<Value>, ReadFailure> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(ReadFailure::Io(error.to_string())),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|error| ReadFailure::Json(error.to_string()))
}

enum ReadFailure {
    Io(String),
    Json(String),
}

/// The profiles of one `agents.json`: every entry is an object. Other runtimes' profiles (other
/// `clientType`s) live in the same file and are kept as they are.
#[derive(Clone, PartialEq)]
pub struct AgentProfiles {
    path: PathBuf,
    entries: Map<String, Value>,
}

impl std::fmt::Debug for AgentProfiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Entries hold API keys: show only the names.
        let names: Vec<&str> = self.entries.keys().map(String::as_str).collect();
        f.debug_struct("AgentProfiles")
            .field("path", &self.path)
            .field("names", &names)
            .finish()
    }
}

impl AgentProfiles {
    /// No profiles, to be saved at `path`.
    pub fn empty(path: PathBuf) -> AgentProfiles {
        AgentProfiles {
            path,
            entries: Map::new(),
        }
    }

    /// Parses the text of an `agents.json` at `path` (the path names it in errors).
    pub fn parse(path: &Path, text: &str) -> Result<AgentProfiles, StoreError> {
        let value: Value = serde_json::from_str(text).map_err(|e| StoreError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        AgentProfiles::from_value(path, value)
    }

    fn from_value(path: &Path, value: Value) -> Result<AgentProfiles, StoreError> {
        let Value::Object(entries) = value else {
            return Err(StoreError::NotAnObject {
                path: path.to_owned(),
            });
        };
        if let Some((name, _)) = entries.iter().find(|(_, v)| !v.is_object()) {
            return Err(StoreError::ProfileNotAnObject {
                name: name.clone(),
                path: path.to_owned(),
            });
        }
        Ok(AgentProfiles {
            path: path.to_owned(),
            entries,
        })
    }

    /// Reads `path`; a missing file is empty (cli.md §6.1 read errors).
    pub fn read(path: &Path) -> Result<AgentProfiles, StoreError> {
        match read_json(path) {
            Ok(None) => Ok(AgentProfiles::empty(path.to_owned())),
            Ok(Some(value)) => AgentProfiles::from_value(path, value),
            Err(ReadFailure::Io(message)) => Err(StoreError::Read {
                path: path.to_owned(),
                message,
            }),
            Err(ReadFailure::Json(message)) => Err(StoreError::Parse {
                path: path.to_owned(),
                message,
            }),
        }
    }

    /// The file these profiles belong to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The entry `name`.
    pub fn get(&self, name: &str) -> Option<&Map<String, Value>> {
        self.entries.get(name).and_then(Value::as_object)
    }

    /// Every profile name, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.entries.keys().cloned().collect();
        names.sort();
        names
    }

    /// The names of the profiles Hermes may use (`clientType` absent or `hermes`), sorted
    /// (cli.md §4.4 step 2, §5.1 rule 3).
    pub fn hermes_candidates(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, v)| v.as_object().is_some_and(is_for_hermes))
            .map(|(k, _)| k.clone())
            .collect();
        names.sort();
        names
    }

    /// Replaces the whole entry `name` (cli.md §6.1: saving keeps every other entry).
    pub fn insert(&mut self, name: &str, entry: Map<String, Value>) {
        self.entries.insert(name.to_owned(), Value::Object(entry));
    }

    /// Removes the entry `name` (`uninstall --purge-credentials`, cli.md §3.5); whether it was
    /// there. Every other entry is kept as it was.
    pub fn remove(&mut self, name: &str) -> bool {
        self.entries.shift_remove(name).is_some()
    }

    /// The whole file as JSON.
    pub fn to_value(&self) -> Value {
        Value::Object(self.entries.clone())
    }

    /// Writes the profiles to their file ([`write_json_file`]).
    pub fn save(&self) -> Result<(), StoreError> {
        write_json_file(&self.path, &self.to_value())
    }
}

/// The profiles of a bootstrap, under their trimmed names, in the variable's order.
pub type BootstrapEntries = Vec<(String, Map<String, Value>)>;

/// Parses `CANON_AGENTS_JSON_BOOTSTRAP` (cli.md §6.1): JSON text, or base64 of JSON text
/// (standard alphabet, padding optional, whitespace ignored); an object whose names, trimmed,
/// are non-empty and whose values are objects. Returns the entries under their trimmed names.
pub fn parse_bootstrap(raw: &str) -> Result<BootstrapEntries, StoreError> {
    let text = py_strip(raw);
    let value: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(_) => decode_base64_json(text).ok_or(StoreError::BootstrapInvalid)?,
    };
    let Value::Object(entries) = value else {
        return Err(StoreError::BootstrapNotAnObject);
    };
    let mut out = Vec::with_capacity(entries.len());
    for (name, entry) in entries {
        let name = py_strip(&name).to_owned();
        if name.is_empty() {
            return Err(StoreError::BootstrapEmptyName);
        }
        let Value::Object(entry) = entry else {
            return Err(StoreError::BootstrapProfileNotAnObject { name });
        };
        out.push((name, entry));
    }
    Ok(out)
}

fn decode_base64_json(text: &str) -> Option<Value> {
    let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let bytes = engine.decode(compact.as_bytes()).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    serde_json::from_str(text).ok()
}

/// Reads `agents.json` at `path` and merges the bootstrap (cli.md §6.1): a bootstrap entry is
/// added only when its trimmed name is not already in the file; the merged file is written when
/// something was added or the file did not exist. A blank bootstrap counts as unset. The file is
/// read and the bootstrap parsed before anything is written, so an error in either leaves the
/// file as it was.
pub fn load_agents(path: &Path, bootstrap: Option<&str>) -> Result<AgentProfiles, StoreError> {
    let existed = path.exists();
    let mut profiles = AgentProfiles::read(path)?;
    let Some(raw) = bootstrap.filter(|b| !py_strip(b).is_empty()) else {
        return Ok(profiles);
    };
    let mut added = false;
    for (name, entry) in parse_bootstrap(raw)? {
        if !profiles.entries.contains_key(&name) {
            profiles.insert(&name, entry);
            added = true;
        }
    }
    if added || !existed {
        profiles.save()?;
    }
    Ok(profiles)
}

/// The write procedure of cli.md §6.1: create the parent directory when missing (mode `0700`),
/// write `.<name>.<pid>.tmp` beside the target with the [`crate::pyjson::dumps`] bytes (created
/// `0600`, then chmod `0600`, errors ignored), flush it to disk, rename it over the target, and
/// flush the directory, so a just-approved key survives a power cut. The temp file is always
/// a new file: whatever stands at its name (a leftover, or a link planted to make the write
/// land elsewhere) is removed first, and the create refuses to follow or reuse anything. On
/// failure the temp file is removed and the target is unchanged.
pub fn write_json_file(path: &Path, value: &Value) -> Result<(), StoreError> {
    let failed = |error: io::Error| StoreError::Write {
        path: path.to_owned(),
        message: error.to_string(),
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    if !parent.exists() {
        create_private_dir(&parent).map_err(failed)?;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = parent.join(format!(".{name}.{}.tmp", std::process::id()));
    let bytes = crate::pyjson::dumps(value);
    let _ = fs::remove_file(&temp);
    let written = write_private(&temp, bytes.as_bytes()).and_then(|()| fs::rename(&temp, path));
    if let Err(error) = written {
        let _ = fs::remove_file(&temp);
        return Err(failed(error));
    }
    sync_dir(&parent);
    Ok(())
}

/// Flushes a directory's entries (the rename) to disk; errors are ignored (some file systems
/// cannot sync a directory, and the file itself is synced already).
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(dir) = fs::File::open(dir) {
        let _ = dir.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    // The mode above is masked by the umask; the directory that holds API keys is 0700 whatever
    // the umask (cli.md Q8).
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)
}

fn write_private(temp: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut options = fs::OpenOptions::new();
    // A new file or nothing: O_CREAT|O_EXCL neither follows a link nor opens what exists.
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        options.mode(0o600);
        let mut file = options.open(temp)?;
        // chmod as well: the mode above is masked by the umask. Errors are ignored, as
        // cli.md §6.1 says.
        let _ = file.set_permissions(fs::Permissions::from_mode(0o600));
        file.write_all(bytes)?;
        file.sync_all()
    }
    #[cfg(not(unix))]
    {
        let mut file = options.open(temp)?;
        file.write_all(bytes)?;
        file.sync_all()
    }
}

/// The connection fields a pending registration is bound to (cli.md §4.3 step 4, §6.2).
const PENDING_CONNECTION_KEYS: [&str; 5] = [
    "environmentId",
    "baseUrl",
    "streamUrl",
    "rtdbUrl",
    "firebaseApiKey",
];

fn connection_fields(connection: &Connection) -> [(&'static str, &str); 5] {
    [
        ("environmentId", connection.environment_id.as_str()),
        ("baseUrl", connection.base_url.as_str()),
        ("streamUrl", connection.stream_url.as_str()),
        ("rtdbUrl", connection.rtdb_url.as_str()),
        ("firebaseApiKey", connection.firebase_api_key.as_str()),
    ]
}

/// `pending-registrations.json` (cli.md §6.2): profile name → `{localRegistrationId,
/// requestId?, pollToken?, environmentId, baseUrl, streamUrl, rtdbUrl, firebaseApiKey,
/// submittedAt?}`. Unknown fields are kept.
#[derive(Clone, PartialEq)]
pub struct PendingRegistrations {
    path: PathBuf,
    entries: Map<String, Value>,
}

impl std::fmt::Debug for PendingRegistrations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Entries hold poll tokens: show only the names.
        let names: Vec<&str> = self.entries.keys().map(String::as_str).collect();
        f.debug_struct("PendingRegistrations")
            .field("path", &self.path)
            .field("names", &names)
            .finish()
    }
}

impl PendingRegistrations {
    /// Reads `path`; a missing file is empty.
    pub fn read(path: &Path) -> Result<PendingRegistrations, StoreError> {
        let failed = |message: String| StoreError::PendingRead {
            path: path.to_owned(),
            message,
        };
        let value = match read_json(path) {
            Ok(value) => value.unwrap_or_else(|| Value::Object(Map::new())),
            Err(ReadFailure::Io(message) | ReadFailure::Json(message)) => {
                return Err(failed(message))
            }
        };
        let Value::Object(entries) = value else {
            return Err(StoreError::NotAnObject {
                path: path.to_owned(),
            });
        };
        if let Some((name, _)) = entries.iter().find(|(_, v)| !v.is_object()) {
            return Err(StoreError::PendingNotAnObject { name: name.clone() });
        }
        Ok(PendingRegistrations {
            path: path.to_owned(),
            entries,
        })
    }

    /// The entry of profile `name`.
    pub fn get(&self, name: &str) -> Option<&Map<String, Value>> {
        self.entries.get(name).and_then(Value::as_object)
    }

    /// The entry of `name`, created empty when missing.
    fn entry_mut(&mut self, name: &str) -> &mut Map<String, Value> {
        let slot = self
            .entries
            .entry(name.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        if !slot.is_object() {
            *slot = Value::Object(Map::new());
        }
        slot.as_object_mut()
            .expect("an object: entries are objects, or replaced just above")
    }

    /// Gives `name` a `localRegistrationId` (`hermes-` + 32 lowercase hex of `random`) when it
    /// has none; returns whether it did (the caller then saves at once, cli.md §4.3 step 4).
    pub fn ensure_local_registration_id(&mut self, name: &str, random: u128) -> bool {
        let entry = self.entry_mut(name);
        let has_id = entry
            .get("localRegistrationId")
            .and_then(Value::as_str)
            .is_some_and(|id| !id.is_empty());
        if has_id {
            return false;
        }
        entry.insert(
            "localRegistrationId".to_owned(),
            Value::String(crate::naming::local_registration_id(random)),
        );
        true
    }

    /// Binds `name` to `connection` (cli.md §4.3 step 4): an entry that already has a
    /// `requestId` must hold exactly this connection's five fields, else
    /// [`StoreError::PendingNotBound`]; then the fields are stored.
    pub fn bind(&mut self, name: &str, connection: &Connection) -> Result<(), StoreError> {
        let fields = connection_fields(connection);
        let entry = self.entry_mut(name);
        let submitted = entry
            .get("requestId")
            .is_some_and(|v| v.as_str().is_some_and(|s| !s.is_empty()));
        if submitted {
            let same = fields
                .iter()
                .all(|(key, value)| entry.get(*key).and_then(Value::as_str) == Some(*value));
            if !same {
                return Err(StoreError::PendingNotBound {
                    name: name.to_owned(),
                });
            }
        }
        debug_assert_eq!(fields.map(|(k, _)| k), PENDING_CONNECTION_KEYS);
        for (key, value) in fields {
            entry.insert(key.to_owned(), Value::String(value.to_owned()));
        }
        Ok(())
    }

    /// The submitted request of `name` (cli.md §4.3 step 5): its `requestId` (trimmed, must be
    /// non-empty) and its `pollToken` when it is a non-empty string; `None` when the entry has
    /// not been submitted (or does not exist), so the next run submits it.
    pub fn ticket(&self, name: &str) -> Option<RegistrationTicket> {
        let entry = self.get(name)?;
        let request_id = entry
            .get("requestId")
            .and_then(Value::as_str)
            .and_then(non_blank)?;
        let poll_token = entry
            .get("pollToken")
            .and_then(Value::as_str)
            .filter(|token| !token.is_empty())
            .map(str::to_owned);
        Some(RegistrationTicket {
            request_id: request_id.to_owned(),
            poll_token,
        })
    }

    /// Records the answer of `POST /agents/register` for `name` (cli.md §4.3 step 5):
    /// `requestId`, `pollToken` (`null` when Canon issued none, as the reference writes it) and
    /// `submittedAt`.
    pub fn record_submission(
        &mut self,
        name: &str,
        ticket: &RegistrationTicket,
        submitted_at: &str,
    ) {
        let entry = self.entry_mut(name);
        entry.insert(
            "requestId".to_owned(),
            Value::String(ticket.request_id.clone()),
        );
        entry.insert(
            "pollToken".to_owned(),
            ticket.poll_token.clone().map_or(Value::Null, Value::String),
        );
        entry.insert(
            "submittedAt".to_owned(),
            Value::String(submitted_at.to_owned()),
        );
    }

    /// Sets one field of `name`'s entry (`requestId`, `pollToken`, `submittedAt`, …).
    pub fn set(&mut self, name: &str, key: &str, value: Value) {
        self.entry_mut(name).insert(key.to_owned(), value);
    }

    /// Removes `name`'s entry; returns whether there was one.
    pub fn remove(&mut self, name: &str) -> bool {
        self.entries.remove(name).is_some()
    }

    /// The whole file as JSON.
    pub fn to_value(&self) -> Value {
        Value::Object(self.entries.clone())
    }

    /// Writes the file ([`write_json_file`]).
    pub fn save(&self) -> Result<(), StoreError> {
        write_json_file(&self.path, &self.to_value())
    }
}

#[cfg(test)]
mod tests;

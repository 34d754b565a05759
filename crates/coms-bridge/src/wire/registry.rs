//! The pool registry (coms-bridge.md §3, §4.2, §4.3): one JSON file per peer at
//! `COMS_DIR/projects/<project>/agents/<name>.json`, replaced atomically (temp file
//! `<file>.tmp-<pid>-<epoch-ms>` in the same directory, then rename), pretty-printed with two
//! spaces and no trailing newline, and removed on clean exit.
//!
//! Liveness (the envelope readers' rule): an entry whose `heartbeat_at` is within
//! [−5 s, +90 s] of now is live; otherwise its `pid` is probed with signal 0, and only `ESRCH`
//! makes it dead, in which case the reader deletes the file. A `pid` that cannot be probed (not
//! a positive 32-bit integer) counts as live, as it does for the JavaScript readers, so a reader
//! never deletes an entry on doubt.
//!
//! Synchronous file I/O; `now_ms` is always a parameter.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::wire::ids::is_ulid;
use crate::wire::iso;

/// How far ahead of now a heartbeat may be and still count (clock skew), in milliseconds.
pub const HEARTBEAT_FUTURE_MS: i64 = 5_000;
/// How old a heartbeat may be and still count, in milliseconds.
pub const HEARTBEAT_MAX_AGE_MS: i64 = 90_000;

/// One registry entry as every peer writes it (coms-bridge.md §4.2). All fields are always
/// written, because readers differ in what they require.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryEntry {
    /// A ULID, new per process start.
    pub session_id: String,
    /// The resolved unique name.
    pub name: String,
    /// Shown by `coms-cli list` and `coms_list`.
    pub purpose: String,
    /// The model label.
    pub model: String,
    /// `#RRGGBB`.
    pub color: String,
    /// The real process id, for liveness.
    pub pid: u32,
    /// The absolute socket path.
    pub endpoint: String,
    /// The working directory.
    pub cwd: String,
    /// Registration time; set once.
    pub started_at: String,
    /// `false`: visible to discovery.
    pub explicit: bool,
    /// Always `1`: the Hermes-side Python reader refuses other versions.
    pub version: u32,
    /// Context use in percent.
    pub context_used_pct: u32,
    /// Pending questions.
    pub queue_depth: usize,
    /// Time of this write.
    pub heartbeat_at: String,
}

/// The coms root directory, `COMS_DIR`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coms {
    root: PathBuf,
}

impl Coms {
    /// A pool rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Coms { root: root.into() }
    }

    /// `PI_COMS_DIR` when set and non-empty, else `$HOME/.pi/coms`.
    pub fn from_env(pi_coms_dir: Option<&OsStr>, home: &Path) -> Self {
        match pi_coms_dir.filter(|d| !d.is_empty()) {
            Some(dir) => Coms::new(dir),
            None => Coms::new(home.join(".pi").join("coms")),
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `COMS_DIR/projects/<project>/agents`.
    pub fn agents_dir(&self, project: &str) -> PathBuf {
        self.root.join("projects").join(project).join("agents")
    }

    /// `COMS_DIR/projects/<project>/agents/<name>.json`.
    pub fn entry_path(&self, project: &str, name: &str) -> PathBuf {
        self.agents_dir(project).join(format!("{name}.json"))
    }

    /// `COMS_DIR/sockets`.
    pub fn sockets_dir(&self) -> PathBuf {
        self.root.join("sockets")
    }

    /// `COMS_DIR/sockets/<session_id>.sock`.
    pub fn endpoint(&self, session_id: &str) -> PathBuf {
        self.sockets_dir().join(format!("{session_id}.sock"))
    }

    /// Whether `endpoint` is spelled as a peer endpoint of this pool:
    /// `COMS_DIR/sockets/<session ULID>.sock` (coms-bridge.md §4.4), with no `..` component. Every
    /// coms client derives its endpoint this way (Node's `path.join`, which also resolves `..`
    /// in `PI_COMS_DIR` lexically, as this check does on our side). Lexical only: it touches no
    /// file, so a peer cannot make it wait on a path of its choosing.
    pub fn is_pool_endpoint(&self, endpoint: &Path) -> bool {
        use std::path::Component;
        if endpoint
            .components()
            .any(|c| matches!(c, Component::ParentDir))
        {
            return false;
        }
        let named_for_a_session = endpoint
            .file_name()
            .and_then(OsStr::to_str)
            .and_then(|name| name.strip_suffix(".sock"))
            .is_some_and(is_ulid);
        named_for_a_session
            && endpoint.parent() == Some(lexically_normal(&self.sockets_dir()).as_path())
    }

    /// Creates the project's agents directory and the sockets directory, and sets the root to
    /// mode 0700 (best effort).
    pub fn ensure_dirs(&self, project: &str) -> io::Result<()> {
        std::fs::create_dir_all(self.agents_dir(project))?;
        std::fs::create_dir_all(self.sockets_dir())?;
        let _ = rustix::fs::chmod(&self.root, rustix::fs::Mode::from_raw_mode(0o700));
        Ok(())
    }

    /// Writes `entry` atomically; returns the entry's path.
    pub fn write_entry(
        &self,
        project: &str,
        entry: &RegistryEntry,
        now_ms: u64,
    ) -> io::Result<PathBuf> {
        let file = self.entry_path(project, &entry.name);
        let mut temp = file.clone().into_os_string();
        temp.push(format!(".tmp-{}-{now_ms}", std::process::id()));
        let text = serde_json::to_string_pretty(entry).map_err(io::Error::other)?;
        std::fs::write(&temp, text)?;
        if let Err(error) = std::fs::rename(&temp, &file) {
            let _ = std::fs::remove_file(&temp);
            return Err(error);
        }
        Ok(file)
    }

    /// Removes a peer's entry (best effort).
    pub fn remove_entry(&self, project: &str, name: &str) {
        let _ = std::fs::remove_file(self.entry_path(project, name));
    }

    /// Every parseable entry of the project with a string `name` and `endpoint`, with its path;
    /// files not ending in `.json` (temps among them) are ignored.
    pub fn read_entries(&self, project: &str) -> Vec<(PathBuf, Value)> {
        let Ok(dir) = std::fs::read_dir(self.agents_dir(project)) else {
            return Vec::new();
        };
        let mut entries: Vec<(PathBuf, Value)> = dir
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .filter_map(|path| {
                let value: Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
                let usable = value.get("name").is_some_and(Value::is_string)
                    && value.get("endpoint").is_some_and(Value::is_string);
                usable.then_some((path, value))
            })
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries
    }

    /// The live entries of the project; dead ones are deleted on the way (coms-bridge.md §4.3).
    pub fn live_entries(&self, project: &str, now_ms: u64) -> Vec<Value> {
        let mut live = Vec::new();
        for (path, entry) in self.read_entries(project) {
            if is_live(&entry, now_ms) {
                live.push(entry);
            } else {
                let _ = std::fs::remove_file(path);
            }
        }
        live
    }

    /// `desired` when no live entry uses it, else `desired` with the smallest integer suffix
    /// ≥ 2 that is unused (coms-bridge.md §4.3).
    pub fn unique_name(&self, project: &str, desired: &str, now_ms: u64) -> String {
        let taken: Vec<String> = self
            .live_entries(project, now_ms)
            .iter()
            .filter_map(|e| e.get("name").and_then(Value::as_str).map(str::to_owned))
            .collect();
        let used = |name: &str| taken.iter().any(|t| t == name);
        if !used(desired) {
            return desired.to_owned();
        }
        (2u64..)
            .map(|n| format!("{desired}{n}"))
            .find(|name| !used(name))
            .expect("an unbounded range has an unused name")
    }

    /// The live entry named `name` in the project.
    pub fn find_peer(&self, project: &str, name: &str, now_ms: u64) -> Option<Value> {
        self.live_entries(project, now_ms)
            .into_iter()
            .find(|e| e.get("name").and_then(Value::as_str) == Some(name))
    }
}

/// `path` with `.` dropped and each `..` removing the component before it, without looking at
/// the file system (as Node's `path.normalize`).
fn lexically_normal(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(normal.components().next_back(), Some(Component::Normal(_))) =>
            {
                normal.pop();
            }
            other => normal.push(other),
        }
    }
    normal
}

/// Whether `heartbeat_at` parses and lies within [−5 s, +90 s] of now.
pub fn is_fresh(heartbeat_at: Option<&str>, now_ms: u64) -> bool {
    let Some(at) = heartbeat_at.and_then(iso::parse_ms) else {
        return false;
    };
    let age = i64::try_from(now_ms).unwrap_or(i64::MAX) - at;
    (-HEARTBEAT_FUTURE_MS..=HEARTBEAT_MAX_AGE_MS).contains(&age)
}

/// Whether a registry entry is live: a fresh heartbeat, or a pid that signal 0 does not report
/// as gone.
pub fn is_live(entry: &Value, now_ms: u64) -> bool {
    if is_fresh(entry.get("heartbeat_at").and_then(Value::as_str), now_ms) {
        return true;
    }
    let pid = entry
        .get("pid")
        .and_then(Value::as_i64)
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw);
    match pid {
        Some(pid) => rustix::process::test_kill_process(pid) != Err(rustix::io::Errno::SRCH),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: u64 = 1_784_896_496_000;

    /// A pid that is certainly gone: a child we started and reaped.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        child.wait().expect("wait");
        pid
    }

    fn entry(name: &str, pid: u32, heartbeat_ms: u64) -> RegistryEntry {
        RegistryEntry {
            session_id: "01ARZ3NDEKTSV4RRFFQ69G5FAV".into(),
            name: name.into(),
            purpose: "p".into(),
            model: "m".into(),
            color: "#38BDF8".into(),
            pid,
            endpoint: "/x.sock".into(),
            cwd: "/".into(),
            started_at: iso::format_ms(NOW),
            explicit: false,
            version: 1,
            context_used_pct: 0,
            queue_depth: 0,
            heartbeat_at: iso::format_ms(heartbeat_ms),
        }
    }

    #[test]
    fn heartbeat_window() {
        let at = |ms: u64| iso::format_ms(ms);
        assert!(is_fresh(Some(&at(NOW - 60_000)), NOW), "60 s old");
        assert!(is_fresh(Some(&at(NOW - 90_000)), NOW), "90 s old");
        assert!(!is_fresh(Some(&at(NOW - 91_000)), NOW), "91 s old");
        assert!(is_fresh(Some(&at(NOW + 5_000)), NOW));
        assert!(!is_fresh(Some(&at(NOW + 5_001)), NOW));
        assert!(!is_fresh(Some("yesterday"), NOW));
        assert!(!is_fresh(None, NOW));
    }

    #[test]
    fn paths_follow_pi_coms_dir_or_home() {
        let home = Path::new("/home/u");
        assert_eq!(
            Coms::from_env(None, home).root(),
            Path::new("/home/u/.pi/coms")
        );
        assert_eq!(
            Coms::from_env(Some(OsStr::new("")), home).root(),
            Path::new("/home/u/.pi/coms")
        );
        let coms = Coms::from_env(Some(OsStr::new("/c")), home);
        assert_eq!(
            coms.entry_path("default", "user-remote"),
            Path::new("/c/projects/default/agents/user-remote.json")
        );
        assert_eq!(coms.endpoint("S"), Path::new("/c/sockets/S.sock"));
    }

    #[test]
    fn pool_endpoints_are_session_sockets_of_our_sockets_directory() {
        const SESSION: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
        let coms = Coms::new("/c");
        let yes = |path: &str| coms.is_pool_endpoint(Path::new(path));
        assert!(yes(&format!("/c/sockets/{SESSION}.sock")));
        assert!(yes(&format!("/c/./sockets//{SESSION}.sock")));
        for refused in [
            "/var/run/docker.sock".to_owned(),
            format!("/c/{SESSION}.sock"),
            format!("/c/sockets/sub/{SESSION}.sock"),
            format!("/c/sockets/../sockets/{SESSION}.sock"),
            format!("/c/sockets/{}.sock", SESSION.to_lowercase()),
            format!("/c/sockets/{SESSION}"),
            "/c/sockets/peer.sock".to_owned(),
            format!("c/sockets/{SESSION}.sock"),
            format!("/d/sockets/{SESSION}.sock"),
        ] {
            assert!(!yes(&refused), "{refused}");
        }
        // A `PI_COMS_DIR` spelled with `..` is compared as Node peers spell it.
        let dotted = Coms::new("/x/../c");
        assert!(dotted.is_pool_endpoint(&coms.endpoint(SESSION)));
    }

    #[test]
    fn write_is_pretty_without_newline_and_leaves_no_temp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let coms = Coms::new(dir.path());
        coms.ensure_dirs("p").expect("dirs");
        let path = coms
            .write_entry("p", &entry("user-remote", std::process::id(), NOW), NOW)
            .expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(
            text.starts_with("{\n  \"session_id\": \"01ARZ3NDEKTSV4RRFFQ69G5FAV\",\n  \"name\"")
        );
        assert!(text.ends_with("\"heartbeat_at\": \"2026-07-24T12:34:56.000Z\"\n}"));
        let names: Vec<_> = std::fs::read_dir(coms.agents_dir("p"))
            .expect("dir")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, ["user-remote.json"]);
        let back: RegistryEntry = serde_json::from_str(&text).expect("parses");
        assert_eq!(back.version, 1);
        let mode = std::fs::metadata(dir.path()).expect("meta");
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(mode.permissions().mode() & 0o777, 0o700);
    }

    #[test]
    fn pruning_removes_dead_pids_and_keeps_fresh_heartbeats() {
        let dir = tempfile::tempdir().expect("tempdir");
        let coms = Coms::new(dir.path());
        coms.ensure_dirs("p").expect("dirs");
        let gone = dead_pid();
        let stale = NOW - 200_000;
        coms.write_entry("p", &entry("dead", gone, stale), NOW)
            .expect("write");
        coms.write_entry("p", &entry("fresh", gone, NOW - 1_000), NOW)
            .expect("write");
        coms.write_entry("p", &entry("alive", std::process::id(), stale), NOW)
            .expect("write");
        std::fs::write(coms.agents_dir("p").join("junk.json"), "{").expect("junk");
        std::fs::write(
            coms.agents_dir("p").join("noname.json"),
            json!({"endpoint": "/e"}).to_string(),
        )
        .expect("noname");
        let mut live: Vec<_> = coms
            .live_entries("p", NOW)
            .iter()
            .map(|e| e["name"].as_str().expect("name").to_owned())
            .collect();
        live.sort();
        assert_eq!(live, ["alive", "fresh"]);
        assert!(!coms.entry_path("p", "dead").exists());
        assert!(coms.entry_path("p", "fresh").exists());
        assert!(
            coms.agents_dir("p").join("junk.json").exists(),
            "unparseable: skipped"
        );
        // An entry whose pid cannot be probed is never deleted.
        let odd = json!({"name": "odd", "endpoint": "/e", "pid": "x"});
        assert!(is_live(&odd, NOW));
    }

    #[test]
    fn unique_names_take_the_smallest_free_suffix() {
        let dir = tempfile::tempdir().expect("tempdir");
        let coms = Coms::new(dir.path());
        coms.ensure_dirs("p").expect("dirs");
        assert_eq!(coms.unique_name("p", "user-remote", NOW), "user-remote");
        let me = std::process::id();
        coms.write_entry("p", &entry("user-remote", me, NOW), NOW)
            .expect("write");
        coms.write_entry("p", &entry("user-remote3", me, NOW), NOW)
            .expect("write");
        assert_eq!(coms.unique_name("p", "user-remote", NOW), "user-remote2");
        coms.write_entry("p", &entry("user-remote2", dead_pid(), NOW - 200_000), NOW)
            .expect("write");
        assert_eq!(coms.unique_name("p", "user-remote", NOW), "user-remote2");
        assert!(!coms.entry_path("p", "user-remote2").exists(), "pruned");
    }
}

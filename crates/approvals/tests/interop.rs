//! Lock interoperability with a Python process (approvals.md §4, §17 "Cross-process
//! lock interop").
//!
//! A plain `python3 -c "import fcntl …"` takes `flock(LOCK_EX)` on
//! `.detached-approvals.lock`, rewrites the registry (adding an entry, as the
//! Python plugin would), holds the lock for a while and releases it. Our store
//! must time out while Python holds the lock, must wait for it otherwise, and must
//! then see Python's write (no lost update). Skips only when `python3` is absent.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use canon_approvals::error::RegistryError;
use canon_approvals::store::{Store, StoreOptions};

use crate::util::{approval, new_approval, T0};

const HOLDER: &str = r#"
import fcntl, json, os, sys, time
home, hold = sys.argv[1], float(sys.argv[2])
with open(os.path.join(home, ".detached-approvals.lock"), "a+") as lock:
    fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
    path = os.path.join(home, "detached-approvals.json")
    with open(path, encoding="utf-8") as f:
        registry = json.load(f)
    registry["hermes-pypypypypypypypypypy"] = {
        "approvalId": "hermes-pypypypypypypypypypy", "conversationId": "conv-py",
        "status": "pending", "expiresAt": 1796254084389, "pythonOnly": True}
    tmp = path + ".py.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(registry, f, indent=2, sort_keys=True)
        f.flush(); os.fsync(f.fileno())
    os.replace(tmp, path)
    print("locked", flush=True)
    time.sleep(hold)
    fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
"#;

fn python_available() -> bool {
    match Command::new("python3").arg("--version").output() {
        Ok(out) => out.status.success(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => panic!("cannot run python3: {e}"),
    }
}

#[test]
fn store_and_python_flock_exclude_each_other() {
    if !python_available() {
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"python3 absent: interop test skipped\n",
        );
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::new(dir.path()).expect("store");
    store
        .create_begin(&new_approval(1, "conv1"), T0)
        .expect("create");

    let hold = Duration::from_millis(1_500);
    let mut python = Command::new("python3")
        .arg("-c")
        .arg(HOLDER)
        .arg(dir.path())
        .arg(hold.as_secs_f64().to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn python3");
    let mut line = String::new();
    BufReader::new(python.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    assert_eq!(line.trim(), "locked");
    let locked_at = Instant::now();

    // While Python holds the lock, a bounded wait times out and writes nothing.
    let impatient = Store::with_options(
        dir.path(),
        StoreOptions {
            lock_timeout: Some(Duration::from_millis(200)),
        },
    )
    .expect("store");
    let before = std::fs::read(store.registry_path()).expect("bytes");
    let err = impatient
        .create_begin(&new_approval(2, "conv1"), T0)
        .unwrap_err();
    assert!(matches!(err, RegistryError::LockTimeout { .. }), "{err:?}");
    assert_eq!(std::fs::read(store.registry_path()).expect("bytes"), before);

    // An unbounded wait blocks until Python releases, then sees Python's entry.
    let patient =
        Store::with_options(dir.path(), StoreOptions { lock_timeout: None }).expect("store");
    patient
        .create_begin(&new_approval(3, "conv1"), T0)
        .expect("create after python");
    let waited = locked_at.elapsed();
    assert!(
        waited >= hold - Duration::from_millis(100),
        "did not wait for python: {waited:?}"
    );
    assert!(python.wait().expect("python").success());

    let registry = store.snapshot().expect("snapshot");
    let py = registry
        .get("hermes-pypypypypypypypypypy")
        .expect("python's write survived");
    assert_eq!(py.get("pythonOnly"), Some(&serde_json::Value::Bool(true)));
    assert!(registry.get(approval(1).as_str()).is_some());
    assert!(registry.get(approval(3).as_str()).is_some());
    assert!(registry.get(approval(2).as_str()).is_none());
}

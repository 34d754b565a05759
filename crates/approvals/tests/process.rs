//! Process-level durability tests for the registry store (style.md §6.6).
//!
//! This test binary has its own `main` (`harness = false`) because it re-executes
//! itself as the child process: with `CANON_APPROVALS_CHILD` set it runs a child
//! role instead of the tests, so no extra product binary is needed.
//!
//! * `crash_consistency`: a child performs random registry operations in a loop,
//!   printing each one to stdout (flushed) only after the store call returned;
//!   the parent SIGKILLs it at random moments and checks, after every kill, that
//!   the file parses and validates, that every reported operation is still
//!   visible, and that at most one temp file (the killed writer's) is left,
//!   which the next writer removes. Default 200 kills; set `CANON_CRASH_KILLS`
//!   (e.g. `CANON_CRASH_KILLS=5000`) for a longer run.
//! * `multi_process_contention`: three processes with two threads each create
//!   entries and race for the same consume leases on one registry; no update may
//!   be lost and every lease must have exactly one holder.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use canon_approvals::ids::ApprovalId;
use canon_approvals::state::{
    ConsumeClaim, ConsumeFinish, Decision, NewApproval, Registry, ServerOutcome, Status, WakeStatus,
};
use canon_approvals::store::{self, Store, TEMP_FILE_PREFIX, TEMP_FILE_SUFFIX};

const CHILD_ROLE: &str = "CANON_APPROVALS_CHILD";
const CHILD_HOME: &str = "CANON_APPROVALS_CHILD_HOME";
const CHILD_SEED: &str = "CANON_APPROVALS_CHILD_SEED";
const CHILD_NOW: &str = "CANON_APPROVALS_CHILD_NOW";
const KILLS_VAR: &str = "CANON_CRASH_KILLS";
const DEFAULT_KILLS: usize = 200;

const T0: u64 = 1_795_994_884_394;
/// Clock jump between child runs: longer than the consume and wake leases, shorter
/// than the create lease, and small enough that 5 000 runs stay far inside the
/// 14-day retention (so nothing reported is ever pruned).
const RUN_CLOCK_STEP_MS: u64 = 120_000;

fn main() {
    match std::env::var(CHILD_ROLE).as_deref() {
        Ok("crash") => crash_child(),
        Ok("contend") => contend_child(),
        _ => {
            let started = Instant::now();
            crash_consistency();
            multi_process_contention();
            note(&format!("process tests passed in {:?}", started.elapsed()));
        }
    }
}

fn note(text: &str) {
    let _ = writeln!(io::stderr(), "{text}");
}

/// SplitMix64: a tiny deterministic generator (no rand dependency).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn env_u64(name: &str) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} must be set for the child"))
}

// ---------------------------------------------------------------------------
// Crash consistency.

/// Child: random operations forever; one stdout line per committed operation.
fn crash_child() {
    let home = std::env::var(CHILD_HOME).expect("child home");
    let mut rng = Rng(env_u64(CHILD_SEED));
    let mut now = env_u64(CHILD_NOW);
    let store = Store::new(&home).expect("store");
    let mut out = io::stdout().lock();
    let mut report = |line: String| {
        // Written and flushed only after the store call returned.
        out.write_all(line.as_bytes()).expect("stdout");
        out.write_all(b"\n").expect("stdout");
        out.flush().expect("stdout");
    };
    loop {
        now += 1;
        let registry = store.snapshot().expect("registry must stay readable");
        let ids: Vec<String> = registry
            .entries()
            .map(|e| e.approval_id().to_owned())
            .collect();
        let live = registry
            .entries()
            .filter(|e| !e.status().is_terminal())
            .count();
        if ids.is_empty() || (live < 12 && ids.len() < 400 && rng.below(3) == 0) {
            let id = store::random_approval_id().expect("id");
            let new = NewApproval::new(
                id.clone(),
                "conv1",
                now + 3_600_000,
                Some("q?"),
                Some("human1"),
            )
            .expect("valid request");
            let reservation = store.create_begin(&new, now).expect("create_begin");
            report(format!("create {id}"));
            match rng.below(10) {
                0..=6 => {
                    let responder = if rng.below(8) == 0 {
                        "mallory"
                    } else {
                        "human1"
                    };
                    let outcome = store
                        .create_commit(
                            id.as_str(),
                            &reservation.create_claim,
                            None,
                            Some(responder),
                            now,
                        )
                        .expect("create_commit");
                    let status = match outcome {
                        canon_approvals::state::Activation::Activated(e)
                        | canon_approvals::state::Activation::Orphaned(e) => e.status(),
                        other => panic!("unexpected activation {other:?}"),
                    };
                    report(format!("commit {id} {}", status.as_str()));
                }
                7 => {
                    store
                        .create_fail(
                            id.as_str(),
                            &reservation.create_claim,
                            Some("rejected"),
                            now,
                        )
                        .expect("create_fail");
                    report(format!("commit {id} orphaned"));
                }
                _ => {} // Ambiguous failure: stays creating until its lease expires.
            }
            continue;
        }
        let id = &ids[rng.below(ids.len() as u64) as usize];
        let entry = registry.get(id).expect("listed id");
        match (entry.status(), entry.wake_status()) {
            (Status::Resolved, Some(WakeStatus::Pending | WakeStatus::Delivering)) => {
                if let Some(job) = store.wake_claim(id, now).expect("wake_claim") {
                    let delivered = rng.below(4) != 0;
                    if store
                        .wake_finish(&job, delivered, now)
                        .expect("wake_finish")
                        && delivered
                    {
                        report(format!("wake {id}"));
                    }
                }
            }
            (status, _) if status.is_terminal() || rng.below(5) == 0 => {
                store.receipt(id, now).expect("receipt");
                report(format!("receipt {id}"));
            }
            _ => {
                let claim = store.consume_begin(id, None, now).expect("consume_begin");
                let ConsumeClaim::Claimed(lease) = claim else {
                    continue;
                };
                let outcome = match rng.below(8) {
                    0 | 1 => ServerOutcome::Decision {
                        decision: Decision::Allow,
                        responded_by: Some("human1".into()),
                    },
                    2 => ServerOutcome::Decision {
                        decision: Decision::Deny,
                        responded_by: Some("human1".into()),
                    },
                    3 => ServerOutcome::Pending { expires_at: None },
                    4 => ServerOutcome::Timeout,
                    5 => ServerOutcome::Gone,
                    6 => ServerOutcome::Failed,
                    _ => ServerOutcome::Malformed,
                };
                let finish = store
                    .consume_finish(&lease, &outcome, rng.below(2) == 0, now)
                    .expect("consume_finish");
                if let ConsumeFinish::Recorded(_) | ConsumeFinish::Deferred = finish {
                    let after = store.get(id).expect("get").expect("entry");
                    let decision = after.decision().map_or("-", Decision::as_str);
                    report(format!(
                        "finish {id} {} {decision}",
                        after.status().as_str()
                    ));
                }
            }
        }
    }
}

/// What the parent knows must hold for one id, from the child's reports.
#[derive(Debug, Default, Clone)]
struct Facts {
    created: bool,
    activated: bool,
    terminal: Option<(Status, Option<Decision>)>,
    delivered: bool,
}

fn apply_report(facts: &mut BTreeMap<String, Facts>, line: &str) {
    let parts: Vec<&str> = line.split(' ').collect();
    let fact = facts.entry(parts[1].to_owned()).or_default();
    match parts[0] {
        "create" => fact.created = true,
        "commit" | "finish" => {
            let status = Status::parse(parts[2]).expect("status");
            if status.is_terminal() {
                let decision = parts.get(3).and_then(|d| Decision::parse(d));
                fact.terminal = Some((status, decision));
            } else {
                fact.activated = true;
            }
        }
        "wake" => fact.delivered = true,
        "receipt" => {}
        other => panic!("unknown report {other}"),
    }
}

fn check_facts(registry: &Registry, facts: &BTreeMap<String, Facts>) -> Result<(), String> {
    for (id, fact) in facts {
        let Some(entry) = registry.get(id) else {
            if fact.created {
                return Err(format!("{id}: reported created, missing from the registry"));
            }
            continue;
        };
        if fact.activated && entry.status() == Status::Creating {
            return Err(format!(
                "{id}: reported activated/consumed, back to creating"
            ));
        }
        if let Some((status, decision)) = fact.terminal {
            if entry.status() != status || (decision.is_some() && entry.decision() != decision) {
                return Err(format!(
                    "{id}: reported {status:?}/{decision:?}, found {:?}/{:?}",
                    entry.status(),
                    entry.decision()
                ));
            }
        }
        if fact.delivered && entry.wake_status() != Some(WakeStatus::Delivered) {
            return Err(format!(
                "{id}: reported wake delivered, found {:?}",
                entry.wake_status()
            ));
        }
    }
    Ok(())
}

fn temp_files(home: &Path) -> Vec<String> {
    std::fs::read_dir(home)
        .expect("home")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(TEMP_FILE_PREFIX) && n.ends_with(TEMP_FILE_SUFFIX))
        .collect()
}

fn crash_consistency() {
    let kills: usize = std::env::var(KILLS_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_KILLS);
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path();
    let exe = std::env::current_exe().expect("current exe");
    let mut rng = Rng(0x5eed ^ u64::from(std::process::id()));
    let mut facts: BTreeMap<String, Facts> = BTreeMap::new();
    let mut reported = 0usize;
    let mut kills_mid_write = 0usize;
    let mut kills_before_first_op = 0usize;
    let mut killed_pids = std::collections::HashSet::new();
    let started = Instant::now();
    for run in 0..kills {
        let mut child = Command::new(&exe)
            .env(CHILD_ROLE, "crash")
            .env(CHILD_HOME, home)
            .env(CHILD_SEED, rng.next().to_string())
            .env(CHILD_NOW, (T0 + run as u64 * RUN_CLOCK_STEP_MS).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = BufReader::new(stdout).read_to_string(&mut text);
            text
        });
        std::thread::sleep(Duration::from_micros(3_000 + rng.below(80_000)));
        child.kill().expect("SIGKILL");
        let status = child.wait().expect("wait");
        let text = reader.join().expect("reader");
        if status.success() || status.code().is_some() {
            let mut stderr = String::new();
            let _ = child
                .stderr
                .take()
                .map(|mut s| s.read_to_string(&mut stderr));
            panic!("child {run} exited by itself ({status}): {stderr}");
        }
        // Only complete lines were committed reports; a cut-off last line is ignored.
        let complete = match text.rfind('\n') {
            Some(end) => &text[..end],
            None => "",
        };
        let lines: Vec<&str> = complete.lines().collect();
        if lines.is_empty() {
            kills_before_first_op += 1;
        }
        for line in &lines {
            apply_report(&mut facts, line);
        }
        reported += lines.len();

        let temps = temp_files(home);
        assert!(temps.len() <= 1, "run {run}: several temp files {temps:?}");
        if let Some(temp) = temps.first() {
            kills_mid_write += 1;
            let pid_of = |name: &str| -> u32 {
                name[TEMP_FILE_PREFIX.len()..]
                    .split('.')
                    .next()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or_else(|| panic!("run {run}: bad temp file name {name}"))
            };
            let owner = pid_of(temp);
            assert!(
                killed_pids.contains(&owner) || owner == child.id(),
                "run {run}: temp file {temp} does not belong to a killed writer"
            );
            // A committed mutation in this run removed older temp files first, so a
            // temp file left now is this child's own half-finished write.
            if !lines.is_empty() {
                assert_eq!(
                    owner,
                    child.id(),
                    "run {run}: stale temp file {temp} survived a mutation"
                );
            }
        }
        killed_pids.insert(child.id());
        // The file parses and validates (a plain read under the lock) ...
        let reader_store = Store::new(home).expect("store");
        let registry = reader_store
            .snapshot()
            .unwrap_or_else(|e| panic!("run {run}: registry unreadable after SIGKILL: {e}"));
        // ... and is byte-for-byte a complete document.
        let bytes = std::fs::read(reader_store.registry_path()).unwrap_or_default();
        if !bytes.is_empty() {
            assert_eq!(bytes.last(), Some(&b'}'), "run {run}: truncated file");
        }
        if let Err(problem) = check_facts(&registry, &facts) {
            panic!("run {run}: lost or corrupted committed operation: {problem}");
        }
    }
    // A final mutation removes a stale temp file, if the last kill left one.
    let store = Store::new(home).expect("store");
    store
        .receipt("hermes-00000000000000000000", T0)
        .expect("receipt");
    let new = NewApproval::new(
        ApprovalId::from_random([0; 10]),
        "conv1",
        T0,
        None,
        Some("h"),
    )
    .expect("valid");
    let _ = store.create_begin(&new, T0 + kills as u64 * RUN_CLOCK_STEP_MS);
    assert!(
        temp_files(home).is_empty(),
        "stale temp file survived a mutation"
    );
    let registry = store.snapshot().expect("final registry");
    check_facts(&registry, &facts).expect("final facts");
    assert!(
        reported > kills,
        "children reported too few operations ({reported})"
    );
    note(&format!(
        "crash_consistency: {kills} SIGKILLs survived, 0 lost/corrupted; {reported} committed ops \
         reported, {} ids tracked, {kills_mid_write} kills found a temp file left by a killed writer, \
         {kills_before_first_op} kills before the first op, final registry {} entries, {:?}",
        facts.len(),
        registry.len(),
        started.elapsed()
    ));
}

// ---------------------------------------------------------------------------
// Multi-process, multi-thread contention.

const PROCESSES: usize = 3;
const THREADS: usize = 2;
const OWN_PER_THREAD: usize = 15;
const SHARED: usize = 8;
const CONTEND_NOW: u64 = T0 + 10_000;

fn shared_id(i: usize) -> ApprovalId {
    let mut bytes = [0xab; 10];
    bytes[9] = i as u8;
    ApprovalId::from_random(bytes)
}

/// Child: `THREADS` threads on one `Store`, each creating its own entries and racing
/// for the consume leases of the shared ids.
fn contend_child() {
    let home = std::env::var(CHILD_HOME).expect("child home");
    let seed = env_u64(CHILD_SEED);
    let store = Arc::new(Store::new(&home).expect("store"));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let mut rng = Rng(seed * 31 + t as u64);
                let mut lines = Vec::new();
                let mut shared: Vec<usize> = (0..SHARED).collect();
                for i in 0..OWN_PER_THREAD.max(SHARED) {
                    if i < OWN_PER_THREAD {
                        let id = store::random_approval_id().expect("id");
                        let new =
                            NewApproval::new(id.clone(), "conv1", T0 + 9_999_999, None, Some("h"))
                                .expect("valid");
                        let reservation = store.create_begin(&new, CONTEND_NOW).expect("create");
                        store
                            .create_commit(
                                id.as_str(),
                                &reservation.create_claim,
                                None,
                                None,
                                CONTEND_NOW,
                            )
                            .expect("commit");
                        lines.push(format!("own {id}"));
                    }
                    if !shared.is_empty() {
                        let pick = shared.swap_remove(rng.below(shared.len() as u64) as usize);
                        let id = shared_id(pick);
                        if let ConsumeClaim::Claimed(_) = store
                            .consume_begin(id.as_str(), None, CONTEND_NOW)
                            .expect("consume")
                        {
                            lines.push(format!("claimed {id}"));
                        }
                    }
                }
                lines
            })
        })
        .collect();
    let mut out = io::stdout().lock();
    for handle in handles {
        for line in handle.join().expect("worker") {
            writeln!(out, "{line}").expect("stdout");
        }
    }
}

fn multi_process_contention() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path();
    let store = Store::new(home).expect("store");
    for i in 0..SHARED {
        let new = NewApproval::new(shared_id(i), "conv1", T0 + 9_999_999, None, Some("h"))
            .expect("valid");
        let reservation = store.create_begin(&new, T0).expect("create");
        store
            .create_commit(
                shared_id(i).as_str(),
                &reservation.create_claim,
                None,
                None,
                T0,
            )
            .expect("commit");
    }
    let exe = std::env::current_exe().expect("current exe");
    let started = Instant::now();
    let children: Vec<_> = (0..PROCESSES)
        .map(|p| {
            Command::new(&exe)
                .env(CHILD_ROLE, "contend")
                .env(CHILD_HOME, home)
                .env(CHILD_SEED, (p as u64 + 1).to_string())
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    // The parent's own thread contends too: receipts on the shared ids.
    for i in 0..SHARED {
        store
            .receipt(shared_id(i).as_str(), CONTEND_NOW)
            .expect("receipt");
    }
    let mut own = Vec::new();
    let mut claims: HashMap<String, usize> = HashMap::new();
    for child in children {
        let output = child.wait_with_output().expect("child output");
        assert!(
            output.status.success(),
            "contend child failed: {}",
            output.status
        );
        for line in BufReader::new(&output.stdout[..]).lines() {
            let line = line.expect("line");
            match line.split_once(' ') {
                Some(("own", id)) => own.push(id.to_owned()),
                Some(("claimed", id)) => *claims.entry(id.to_owned()).or_default() += 1,
                _ => panic!("bad line {line}"),
            }
        }
    }
    let registry = store.snapshot().expect("registry");
    assert_eq!(own.len(), PROCESSES * THREADS * OWN_PER_THREAD);
    assert_eq!(
        registry.len(),
        SHARED + own.len(),
        "lost update: entries missing"
    );
    for id in &own {
        assert_eq!(
            registry.get(id).map(|e| e.status()),
            Some(Status::Pending),
            "{id}"
        );
    }
    for i in 0..SHARED {
        let id = shared_id(i).as_str().to_owned();
        assert_eq!(
            claims.get(&id),
            Some(&1),
            "{id}: consume lease must have exactly one holder"
        );
        let entry = registry.get(&id).expect("shared entry");
        assert_eq!(entry.status(), Status::Consuming);
        assert!(
            entry.receipt_pending(),
            "{id}: the parent's receipt was lost"
        );
    }
    assert!(temp_files(home).is_empty());
    note(&format!(
        "multi_process_contention: {PROCESSES} processes x {THREADS} threads + parent, {} writes, \
         0 lost updates, {SHARED}/{SHARED} leases with one holder, {:?}",
        own.len() * 2 + SHARED * (PROCESSES * THREADS + 1),
        started.elapsed()
    ));
}

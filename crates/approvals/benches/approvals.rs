//! Registry throughput with full durability, beside the raw fsync + rename floor.
//!
//! `store/receipt/N`: one complete `Store::receipt` call (process mutex, `flock`,
//! read + parse + validate N entries, mutate, prune, serialize, temp file,
//! `fsync`, rename, directory `fsync`) on a registry of N pending entries.
//! `floor/small`: create + write 128 bytes + `fsync` + rename + directory `fsync`
//! in the same directory, the least any durable rewrite can cost on this disk.
//! `floor/bytes/N`: the same with a file as large as the N-entry registry.
//! `cpu/parse_validate/N` and `cpu/serialize/N`: the in-memory part of an operation.
//!
//! Run: `cargo bench -p canon-approvals --bench approvals -- --warm-up-time 1 --measurement-time 3`.
//! The registries live in a temporary directory under `CANON_BENCH_DIR` (default: the
//! system temp dir), so point that at the disk you care about.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use criterion::{BenchmarkId, Criterion, Throughput};

use canon_approvals::format::to_file_bytes;
use canon_approvals::ids::{ApprovalId, ClaimId};
use canon_approvals::state::{NewApproval, Registry};
use canon_approvals::store::Store;

const T0: u64 = 1_795_994_884_394;
const SIZES: [usize; 3] = [10, 1_000, 10_000];

fn bench_dir() -> tempfile::TempDir {
    match std::env::var_os("CANON_BENCH_DIR") {
        Some(dir) => tempfile::tempdir_in(dir).expect("bench dir"),
        None => tempfile::tempdir().expect("bench dir"),
    }
}

fn id(n: usize) -> ApprovalId {
    let mut bytes = [0u8; 10];
    bytes[..8].copy_from_slice(&(n as u64).to_be_bytes());
    ApprovalId::from_random(bytes)
}

/// A registry of `n` activated (pending) entries, built in memory.
fn registry_of(n: usize) -> Registry {
    let mut registry = Registry::default();
    let owner = ClaimId::from_random([0xee; 16]);
    for i in 0..n {
        let claim = ClaimId::from_random([(i % 251) as u8; 16]);
        let new = NewApproval::new(
            id(i),
            "conversation-0123456789",
            T0 + 259_200_000,
            Some("File PINVOICE 12345 for 8,200 ILS? Please confirm the supplier and the amount."),
            Some("human-0123456789"),
        )
        .expect("valid");
        registry
            .record_creating(&new, &claim, &owner, T0)
            .expect("unique");
        registry.activate_created(id(i).as_str(), claim.as_str(), None, None, T0 + 1);
    }
    registry
}

fn durable_replace(dir: &Path, target: &Path, bytes: &[u8], counter: &mut u64) {
    *counter += 1;
    let temp: PathBuf = dir.join(format!(".floor.{counter}.tmp"));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
        .expect("create");
    file.write_all(bytes).expect("write");
    file.sync_all().expect("fsync");
    drop(file);
    fs::rename(&temp, target).expect("rename");
    File::open(dir)
        .and_then(|d| d.sync_all())
        .expect("dir fsync");
}

fn benches(c: &mut Criterion) {
    let mut floor = c.benchmark_group("floor");
    floor.sample_size(20);
    let dir = bench_dir();
    let target = dir.path().join("floor.json");
    let mut counter = 0;
    floor.throughput(Throughput::Elements(1));
    floor.bench_function("small", |b| {
        b.iter(|| durable_replace(dir.path(), &target, &[b'x'; 128], &mut counter))
    });
    for n in SIZES {
        let bytes = to_file_bytes(&registry_of(n)).expect("bytes");
        floor.bench_with_input(BenchmarkId::new("bytes", n), &bytes, |b, bytes| {
            b.iter(|| durable_replace(dir.path(), &target, bytes, &mut counter))
        });
    }
    floor.finish();

    let mut cpu = c.benchmark_group("cpu");
    cpu.sample_size(10);
    for n in SIZES {
        let registry = registry_of(n);
        let bytes = to_file_bytes(&registry).expect("bytes");
        cpu.bench_with_input(BenchmarkId::new("parse_validate", n), &bytes, |b, bytes| {
            b.iter(|| {
                let value: serde_json::Value = serde_json::from_slice(bytes).expect("json");
                Registry::from_json(value).expect("valid")
            })
        });
        cpu.bench_with_input(
            BenchmarkId::new("serialize", n),
            &registry,
            |b, registry| b.iter(|| to_file_bytes(registry).expect("bytes")),
        );
    }
    cpu.finish();

    let mut store_group = c.benchmark_group("store");
    store_group.sample_size(10);
    store_group.throughput(Throughput::Elements(1));
    for n in SIZES {
        let dir = bench_dir();
        let store = Store::new(dir.path()).expect("store");
        let bytes = to_file_bytes(&registry_of(n)).expect("bytes");
        fs::write(store.registry_path(), &bytes).expect("seed registry");
        let mut i = 0usize;
        store_group.bench_function(BenchmarkId::new("receipt", n), |b| {
            b.iter(|| {
                i += 1;
                store
                    .receipt(id(i % n).as_str(), T0 + 10 + i as u64)
                    .expect("receipt")
            })
        });
    }
    store_group.finish();
}

fn main() {
    // Hand-written instead of `criterion_group!`, whose generated `pub fn` has no docs.
    let mut criterion = Criterion::default().configure_from_args();
    benches(&mut criterion);
    criterion.final_summary();
}

//! The inbox's cost per handed-over message.
//!
//! `inbox/append_handled_message_fdatasync`: what the daemon's journal (canon-adapter's
//! `inbox.rs`) does for one message Hermes took: the `handled` record and the cursor that passes
//! it, formatted by this crate, appended to an `O_APPEND` file and `fdatasync`ed, on the disk of
//! the build directory (a Canon home is on a real disk too, not a tmpfs).
//! `inbox/tracker_arrive_and_settle`: the pure tracker's cost per stream frame.
//!
//! Run: `cargo bench -p canon-inbox --bench inbox`.

use std::fs::OpenOptions;
use std::io::Write;
use std::time::Duration;

use canon_inbox::format::{header_line, record_line};
use canon_inbox::{Record, Tracker};
use criterion::Criterion;

fn journal(c: &mut Criterion) {
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let scope = "0123456789abcdef0123456789abcdef";
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(home.path().join(format!("inbox-{scope}.jsonl")))
        .expect("journal file");
    file.write_all(header_line(scope).as_bytes())
        .expect("header");
    let mut n = 0u64;
    c.bench_function("inbox/append_handled_message_fdatasync", |b| {
        b.iter(|| {
            n += 1;
            let mut text = record_line(&Record::Handled {
                message_id: format!("msg-{n:012}"),
                at_ms: n,
            });
            text.push_str(&record_line(&Record::Cursor(format!("e-{n:08}"))));
            file.write_all(text.as_bytes()).expect("append");
            file.sync_data().expect("fdatasync");
        })
    });
    let mut tracker = Tracker::default();
    c.bench_function("inbox/tracker_arrive_and_settle", |b| {
        b.iter(|| {
            let ticket = tracker.arrived("e-00000001");
            tracker.settle(ticket, None)
        })
    });
}

fn main() {
    // Hand-written instead of `criterion_group!`, whose generated `pub fn` has no docs.
    let mut criterion = Criterion::default()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .configure_from_args();
    journal(&mut criterion);
    criterion.final_summary();
}

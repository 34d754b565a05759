//! Tests of the capture batch and registry (runtime-control.md §8.3 step 7,
//! runtime-control.md §8.4): the real bounds on a few cases, and proptests that compare the
//! registry with a plain model of the specification under small bounds.

use proptest::prelude::*;

use super::*;

const MIB: usize = 1024 * 1024;

fn item(index: usize, data: &Arc<[u8]>) -> CapturedMedia {
    CapturedMedia {
        index,
        mime_type: "image/png".into(),
        file_name: format!("photo-{index}.png"),
        data: Arc::clone(data),
    }
}

fn bytes(n: usize) -> Arc<[u8]> {
    vec![0x42u8; n].into()
}

#[test]
fn a_batch_is_stored_whole_with_normalized_metadata() {
    let mut registry = CaptureRegistry::default();
    let data = bytes(3);
    let raw = CapturedMedia {
        index: 2,
        mime_type: " Image/PNG; charset=binary ".into(),
        file_name: "C:\\Users\\ana\\photo\u{7}.png".into(),
        data: Arc::clone(&data),
    };
    assert!(registry.register(" conv-1 ", "m1", vec![raw], 0));
    let read = registry.read("conv-1", " m1", 1);
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].index, 2);
    assert_eq!(read[0].mime_type, "image/png");
    assert_eq!(read[0].file_name, "photo.png");
    assert_eq!(&*read[0].data, &*data);
    assert_eq!(registry.bytes(), 3);
    // Debug output never shows the bytes.
    assert!(!format!("{read:?}").contains("66, 66"), "{read:?}");
}

#[test]
fn invalid_keys_store_nothing() {
    let mut registry = CaptureRegistry::default();
    let data = bytes(1);
    let long = "x".repeat(MAX_KEY_CHARS + 1);
    for (conversation, message) in [("", "m"), ("c", "  "), (long.as_str(), "m"), ("c", &long)] {
        assert!(!registry.register(conversation, message, vec![item(0, &data)], 0));
    }
    assert!(registry.is_empty());
    let edge = "y".repeat(MAX_KEY_CHARS);
    assert!(registry.register(&edge, &edge, vec![item(0, &data)], 0));
    assert!(registry.read("", "m", 0).is_empty());
}

#[test]
fn the_real_per_message_and_per_attachment_bounds_overflow_the_batch() {
    let one = bytes(1);
    let ten = bytes(10 * MIB);
    let nine = bytes(9 * MIB);
    let cases: Vec<(&str, Vec<CapturedMedia>, bool)> = vec![
        (
            "16 attachments",
            (0..16).map(|i| item(i, &one)).collect(),
            true,
        ),
        (
            "17 attachments",
            (0..17).map(|i| item(i, &one)).collect(),
            false,
        ),
        ("10 MiB exactly", vec![item(0, &ten)], true),
        ("10 MiB + 1", vec![item(0, &bytes(10 * MIB + 1))], false),
        (
            "no bytes",
            vec![item(0, &bytes(1)), item(1, &bytes(0))],
            false,
        ),
        ("3 x 9 MiB", (0..3).map(|i| item(i, &nine)).collect(), true),
        ("4 x 9 MiB", (0..4).map(|i| item(i, &nine)).collect(), false),
    ];
    for (what, batch, stored) in cases {
        let mut registry = CaptureRegistry::default();
        assert_eq!(registry.register("c", "m", batch, 0), stored, "{what}");
        assert_eq!(registry.len(), usize::from(stored), "{what}");
    }
}

#[test]
fn bad_mime_types_overflow_the_batch() {
    let data = bytes(1);
    let long = format!("image/{}", "x".repeat(MAX_MIME_CHARS));
    for mime in [
        "",
        "  ",
        "png",
        "image/\u{1}png",
        "image/png\u{7f}",
        long.as_str(),
    ] {
        let mut registry = CaptureRegistry::default();
        let mut bad = item(1, &data);
        bad.mime_type = mime.into();
        assert!(
            !registry.register("c", "m", vec![item(0, &data), bad], 0),
            "{mime:?}"
        );
        assert!(registry.is_empty(), "{mime:?}");
    }
    assert_eq!(
        capture_mime("Application/PDF ;x=1").as_deref(),
        Some("application/pdf")
    );
}

#[test]
fn an_overflowing_registration_replaces_the_previous_batch_with_nothing() {
    let mut registry = CaptureRegistry::default();
    let data = bytes(2);
    assert!(registry.register("c", "m", vec![item(0, &data)], 0));
    assert!(!registry.register("c", "m", vec![item(0, &bytes(0))], 1));
    assert!(registry.read("c", "m", 2).is_empty());
    assert_eq!(registry.bytes(), 0);
}

#[test]
fn the_total_byte_bound_evicts_the_least_recently_used() {
    let mut registry = CaptureRegistry::default();
    let ten = bytes(10 * MIB);
    for n in 0..6 {
        assert!(registry.register("c", &format!("m{n}"), vec![item(0, &ten)], n));
    }
    // Reading m0 makes it the most recently used: m1 goes first.
    assert_eq!(registry.read("c", "m0", 10).len(), 1);
    assert!(registry.register("c", "m6", vec![item(0, &ten)], 11));
    let keys: Vec<String> = registry.keys().into_iter().map(|(_, m)| m).collect();
    assert_eq!(keys, ["m2", "m3", "m4", "m5", "m0", "m6"]);
    assert_eq!(registry.bytes(), 60 * MIB);
}

#[test]
fn the_message_bound_evicts_the_least_recently_used() {
    let mut registry = CaptureRegistry::default();
    let one = bytes(1);
    for n in 0..=MAX_MESSAGES {
        assert!(registry.register("c", &format!("m{n}"), vec![item(0, &one)], 0));
    }
    assert_eq!(registry.len(), MAX_MESSAGES);
    assert!(registry.read("c", "m0", 0).is_empty());
    assert_eq!(registry.read("c", "m1", 0).len(), 1);
}

#[test]
fn idle_entries_expire_after_an_hour_without_use() {
    let mut registry = CaptureRegistry::default();
    let data = bytes(1);
    assert!(registry.register("c", "m", vec![item(0, &data)], 1_000));
    // A read at exactly an hour keeps it and restarts its clock.
    assert_eq!(registry.read("c", "m", 1_000 + IDLE_EXPIRY_MS).len(), 1);
    assert_eq!(registry.read("c", "m", 1_000 + 2 * IDLE_EXPIRY_MS).len(), 1);
    assert!(registry
        .read("c", "m", 1_001 + 3 * IDLE_EXPIRY_MS)
        .is_empty());
    assert!(registry.is_empty());
}

#[test]
fn idle_expiry_stops_at_the_first_entry_still_in_use() {
    let mut registry = CaptureRegistry::default();
    let data = bytes(1);
    // The clock went back between the two registrations: the older entry
    // is the fresher one.
    assert!(registry.register("c", "late", vec![item(0, &data)], 5_000_000));
    assert!(registry.register("c", "early", vec![item(0, &data)], 0));
    assert!(registry.register("c", "x", vec![item(0, &data)], 3_700_000));
    let keys: Vec<String> = registry.keys().into_iter().map(|(_, m)| m).collect();
    assert_eq!(keys, ["late", "early", "x"]);
}

#[test]
fn discard_forgets_one_message() {
    let mut registry = CaptureRegistry::default();
    let data = bytes(4);
    assert!(registry.register("c", "a", vec![item(0, &data)], 0));
    assert!(registry.register("c", "b", vec![item(0, &data)], 0));
    assert!(registry.discard("c", "a"));
    assert!(!registry.discard("c", "a"));
    assert!(!registry.discard("", "b"));
    assert_eq!(registry.keys(), [("c".to_owned(), "b".to_owned())]);
    assert_eq!(registry.bytes(), 4);
}

#[test]
fn a_batch_overflows_past_sixteen_attachments_or_32_mebibytes() {
    let one = bytes(1);
    let mut batch = CaptureBatch::default();
    for i in 0..16 {
        batch.offer(item(i, &one));
    }
    assert!(!batch.overflowed());
    assert_eq!(batch.items().len(), 16);
    batch.offer(item(16, &one));
    assert!(batch.overflowed());
    assert!(batch.items().is_empty());
    // Nothing is taken after an overflow.
    batch.offer(item(17, &one));
    assert!(batch.items().is_empty());

    let ten = bytes(10 * MIB);
    let mut batch = CaptureBatch::default();
    for i in 0..3 {
        batch.offer(item(i, &ten));
    }
    assert_eq!(batch.bytes(), 30 * MIB);
    batch.offer(item(3, &bytes(2 * MIB + 1)));
    assert!(batch.overflowed() && batch.bytes() == 0);

    let mut batch = CaptureBatch::default();
    batch.offer(item(0, &one));
    batch.drop_all();
    assert!(!batch.overflowed());
    assert!(batch.into_items().is_empty());
}

// ----- model-based properties under small bounds -----

const SMALL: CaptureLimits = CaptureLimits {
    messages: 4,
    total_bytes: 24,
    message_attachments: 3,
    message_bytes: 12,
    attachment_bytes: 6,
    idle_ms: 100,
};

/// One operation on the registry.
#[derive(Debug, Clone)]
enum Op {
    /// Register a batch of these sizes (with one bad MIME type at an index).
    Register {
        message: u8,
        sizes: Vec<usize>,
        bad_mime: Option<usize>,
    },
    Read(u8),
    Discard(u8),
    /// Let time pass.
    Wait(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..6, proptest::collection::vec(0usize..8, 0..5), proptest::option::weighted(0.1, 0usize..5))
            .prop_map(|(message, sizes, bad_mime)| Op::Register { message, sizes, bad_mime }),
        2 => (0u8..6).prop_map(Op::Read),
        1 => (0u8..6).prop_map(Op::Discard),
        1 => (0u64..150).prop_map(Op::Wait),
    ]
}

/// The specification written out plainly: (message, bytes, last use),
/// least recently used first.
#[derive(Debug, Default)]
struct Model {
    entries: Vec<(u8, usize, u64)>,
}

impl Model {
    fn expire(&mut self, now: u64) {
        while self
            .entries
            .first()
            .is_some_and(|(_, _, last)| now.saturating_sub(*last) > SMALL.idle_ms)
        {
            self.entries.remove(0);
        }
    }

    fn total(&self) -> usize {
        self.entries.iter().map(|(_, b, _)| b).sum()
    }

    fn register(
        &mut self,
        message: u8,
        sizes: &[usize],
        bad_mime: Option<usize>,
        now: u64,
    ) -> bool {
        let mut running = 0;
        let mut valid = true;
        for (n, size) in sizes.iter().enumerate() {
            running += size;
            if n >= SMALL.message_attachments
                || *size == 0
                || *size > SMALL.attachment_bytes
                || running > SMALL.message_bytes
                || bad_mime == Some(n)
            {
                valid = false;
                break;
            }
        }
        let stored = if valid { running } else { 0 };
        self.expire(now);
        self.entries.retain(|(m, _, _)| *m != message);
        if valid && !sizes.is_empty() {
            self.entries.push((message, stored, now));
        }
        self.expire(now);
        while self.entries.len() > SMALL.messages || self.total() > SMALL.total_bytes {
            self.entries.remove(0);
        }
        self.entries.iter().any(|(m, _, _)| *m == message)
    }

    fn read(&mut self, message: u8, now: u64) -> Option<usize> {
        self.expire(now);
        let at = self.entries.iter().position(|(m, _, _)| *m == message)?;
        let (m, b, _) = self.entries.remove(at);
        self.entries.push((m, b, now));
        Some(b)
    }
}

fn sized_batch(sizes: &[usize], bad_mime: Option<usize>) -> Vec<CapturedMedia> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, size)| CapturedMedia {
            index: i,
            mime_type: if bad_mime == Some(i) {
                "nonsense".into()
            } else {
                "image/png".into()
            },
            file_name: "a.png".into(),
            data: bytes(*size),
        })
        .collect()
}

proptest! {
    /// Every operation gives the model's answer and leaves the model's
    /// entries in the model's order, with the byte count equal to the sum
    /// of the stored batches and within every bound.
    #[test]
    fn the_registry_behaves_like_the_specification(ops in proptest::collection::vec(op(), 0..40)) {
        let mut registry = CaptureRegistry::with_limits(SMALL);
        let mut model = Model::default();
        let mut now = 0u64;
        for op in ops {
            match op {
                Op::Register { message, sizes, bad_mime } => {
                    let got = registry.register("c", &message.to_string(), sized_batch(&sizes, bad_mime), now);
                    let want = model.register(message, &sizes, bad_mime, now);
                    prop_assert_eq!(got, want);
                    if got {
                        let stored = registry.entries.back().map(|e| e.items.len());
                        prop_assert_eq!(stored, Some(sizes.len()), "stored whole");
                    }
                }
                Op::Read(message) => {
                    let got: usize = registry.read("c", &message.to_string(), now).iter().map(|i| i.data.len()).sum();
                    prop_assert_eq!(got, model.read(message, now).unwrap_or(0));
                }
                Op::Discard(message) => {
                    let had = model.entries.iter().any(|(m, _, _)| *m == message);
                    model.entries.retain(|(m, _, _)| *m != message);
                    prop_assert_eq!(registry.discard("c", &message.to_string()), had);
                }
                Op::Wait(ms) => now += ms,
            }
            let keys: Vec<String> = registry.keys().into_iter().map(|(_, m)| m).collect();
            let want: Vec<String> = model.entries.iter().map(|(m, _, _)| m.to_string()).collect();
            prop_assert_eq!(keys, want);
            let sum: usize = registry.entries.iter().flat_map(|e| &e.items).map(|i| i.data.len()).sum();
            prop_assert_eq!(registry.bytes(), sum);
            prop_assert_eq!(registry.bytes(), model.total());
            prop_assert!(registry.len() <= SMALL.messages);
            prop_assert!(registry.bytes() <= SMALL.total_bytes);
        }
    }

    /// A batch is either every offered item within the per-message bounds,
    /// or overflowed and empty from the first item past them on.
    #[test]
    fn a_batch_is_all_or_nothing(sizes in proptest::collection::vec(0usize..8, 0..6)) {
        let mut batch = CaptureBatch::default();
        for (i, size) in sizes.iter().enumerate() {
            batch.offer_within(item(i, &bytes(*size)), &SMALL);
        }
        let fits = sizes.len() <= SMALL.message_attachments && sizes.iter().sum::<usize>() <= SMALL.message_bytes;
        prop_assert_eq!(batch.overflowed(), !fits);
        if fits {
            prop_assert_eq!(batch.items().len(), sizes.len());
            prop_assert_eq!(batch.bytes(), sizes.iter().sum::<usize>());
        } else {
            prop_assert!(batch.items().is_empty());
            prop_assert_eq!(batch.bytes(), 0);
        }
    }

    /// Registration never panics on any key or metadata, and what it
    /// stores is always sanitized.
    #[test]
    fn registration_sanitizes_whatever_it_is_given(
        conversation in ".{0,8}", message in ".{0,8}", mime in ".{0,12}", name in ".{0,12}", size in 0usize..8,
    ) {
        let mut registry = CaptureRegistry::with_limits(SMALL);
        let batch = vec![CapturedMedia { index: 0, mime_type: mime, file_name: name, data: bytes(size) }];
        if registry.register(&conversation, &message, batch, 0) {
            let read = registry.read(&conversation, &message, 0);
            prop_assert_eq!(read.len(), 1);
            prop_assert_eq!(Some(read[0].mime_type.clone()), capture_mime(&read[0].mime_type));
            prop_assert_eq!(read[0].file_name.clone(), sanitize_file_name(&read[0].file_name));
        } else {
            prop_assert!(registry.is_empty());
        }
    }
}

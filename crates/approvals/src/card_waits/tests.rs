//! Tests of the card waits: the reference vectors, the state machine, the document and the store.

use super::*;

#[test]
fn scope_and_fingerprint_match_the_reference_vectors() {
    assert_eq!(
        scope("https://api.canonmail.com/", "agent-1").unwrap(),
        "dee1be79c93cffeae144cfd5e93e71b93e35530fdd4e3b601f50dd9281273dc6"
    );
    assert_eq!(scope("", "agent-1"), Err(NO_SCOPE));
    let card = json!({"version": "canon.card.v1",
                      "blocks": [{"kind": "actions", "actions": [{"id": "ok", "label": "OK"}]}]});
    assert_eq!(
        fingerprint(&card, Some("human-1")),
        "38b9524110e5872e92e3fec76dbbca7cd460638faf22f97db96d663f3e0a7509"
    );
}

fn new<'a>(card: &'a Value, id: Option<&'a str>) -> NewCardWait<'a> {
    NewCardWait {
        conversation_id: "c1",
        card_id: id,
        card,
        responder: Some("h1"),
        expires_at: 10_000,
    }
}

#[test]
fn a_card_is_reserved_once_and_settles_once() {
    let card = json!({"title": "Deploy?"});
    let mut waits = CardWaits::default();
    let Reserved::New(row) = waits
        .reserve(&new(&card, None), "hermes-card-1", "l1", 0)
        .unwrap()
    else {
        panic!("new")
    };
    assert_eq!(row.status, CardStatus::Creating);
    // The same card again resumes the row instead of creating another.
    assert!(matches!(
        waits.reserve(&new(&card, None), "hermes-card-2", "l2", 1).unwrap(),
        Reserved::Existing(r) if r.card_id == "hermes-card-1"
    ));
    let other = json!({"title": "Other"});
    assert_eq!(
        waits.reserve(&new(&other, Some("hermes-card-1")), "x", "l3", 1),
        Err(OTHER_CARD)
    );
    assert_eq!(
        waits.created("c1", "hermes-card-1", Some("h2"), None, None),
        Err(OTHER_RESPONDER)
    );
    let pending = waits
        .created(
            "c1",
            "hermes-card-1",
            None,
            Some("hermes-card-1"),
            Some(20_000),
        )
        .unwrap();
    assert_eq!(
        (pending.status, pending.expires_at),
        (CardStatus::Pending, 20_000)
    );
    assert_eq!(pending.result()["note"], PENDING_NOTE);
    // A receipt while a tool waits does not wake; after the wait it does, once per lease.
    waits.begin_wait("c1", "hermes-card-1", 30_000, 100);
    assert!(waits.record_receipt("c1", "hermes-card-1").is_some());
    assert!(waits.claim_wake("c1", "hermes-card-1", "w1", 200).is_none());
    waits.end_wait("c1", "hermes-card-1");
    assert!(waits.claim_wake("c1", "hermes-card-1", "w1", 200).is_some());
    assert!(waits.claim_wake("c1", "hermes-card-1", "w2", 300).is_none());
    assert_eq!(waits.due_wakes(200 + WAKE_LEASE_MS).len(), 1);
    // One consume at a time; the answer settles it and ends the wake.
    let claimed = waits.claim("c1", "hermes-card-1", "k1", 400).unwrap();
    assert_eq!(claimed.status, CardStatus::Consuming);
    assert!(waits.claim("c1", "hermes-card-1", "k2", 500).is_none());
    assert!(waits
        .finish("c1", "hermes-card-1", "k2", "submitted")
        .is_none());
    let done = waits
        .finish("c1", "hermes-card-1", "k1", "submitted")
        .unwrap();
    assert_eq!(done.status, CardStatus::Consumed);
    assert_eq!(done.result()["note"], CLAIMED_NOTE);
    assert!(waits.due_wakes(u64::MAX / 2).is_empty());
    assert!(waits.claim("c1", "hermes-card-1", "k3", 600).is_none());
}

#[test]
fn a_document_round_trips_and_a_damaged_one_fails_closed() {
    let card = json!({"title": "Deploy?"});
    let mut waits = CardWaits::default();
    waits
        .reserve(&new(&card, Some("card-a")), "x", "l", 5)
        .unwrap();
    let again = CardWaits::from_json(waits.to_json()).unwrap();
    assert_eq!(again, waits);
    assert!(CardWaits::from_json(json!({"cardWaits": [{"cardId": "x"}]})).is_err());
    assert!(CardWaits::from_json(json!({"rows": []})).is_err());
    let mut doubled = waits.to_json();
    let row = doubled["cardWaits"][0].clone();
    doubled["cardWaits"].as_array_mut().unwrap().push(row);
    assert!(CardWaits::from_json(doubled).is_err());
}

#[test]
fn the_store_writes_a_private_file_and_refuses_a_corrupt_one() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let store = CardWaitStore::new(dir.path(), "s1");
    let card = json!({"title": "Deploy?"});
    store
        .mutate(5, |w| w.reserve(&new(&card, Some("card-a")), "x", "l", 5))
        .unwrap()
        .unwrap();
    let mode = std::fs::metadata(store.path())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(store.read(|w| w.rows().len()).unwrap(), 1);
    std::fs::write(store.path(), b"{not json").unwrap();
    let error = store.read(|w| w.rows().len()).unwrap_err();
    assert!(error.to_string().contains("unreadable"), "{error}");
    assert_eq!(std::fs::read(store.path()).unwrap(), b"{not json");
}

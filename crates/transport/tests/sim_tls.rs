//! The client against the local Canon over TLS (canon-wire.md §11.1 S3): `canon-sim` serves
//! HTTPS with the committed test identity, and `CanonClient` trusts `crates/sim/tls/ca.pem` only
//! through the test-only `trust_test_ca_pem` (the `testing` feature).

use canon_sim::{Sim, SimConfig, TlsIdentity};
use canon_transport::client::{CanonClient, ClientConfig, DurableRequest};
use canon_wire::types::SendMessage;
use canon_wire::ApiKey;

const CA: &[u8] = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../sim/tls/ca.pem"));

#[tokio::test]
async fn health_and_send_work_against_the_tls_sim() {
    let mut sim_config = SimConfig::for_tests();
    sim_config.tls = Some(TlsIdentity::TestFixture);
    let sim = Sim::start(sim_config).await.unwrap();
    assert!(sim.base_url().starts_with("https://"), "{}", sim.base_url());

    let mut config =
        ClientConfig::new(sim.base_url(), sim.stream_url(), ApiKey::new(sim.api_key()));
    assert_eq!(config.trust_test_ca_pem(CA).unwrap(), 1);
    let client = CanonClient::new(config).unwrap();

    // Environment verification (canon-wire.md §1.2) over https:
    // `/healthz/` on the API and `/health` on the stream origin.
    let project = client
        .verify_environment("canon-dev-v1", Some("canonmail-dev"))
        .await
        .unwrap();
    assert_eq!(project, "canonmail-dev");

    let send = SendMessage {
        conversation_id: "c-direct".into(),
        text: "hello over tls".into(),
        message_id: Some("hermes-final-tls".into()),
        ..SendMessage::default()
    };
    let sent = client
        .send_message(&DurableRequest::message(&send).unwrap())
        .await
        .unwrap();
    assert!(sent.message_id.is_some(), "{:?}", sent.raw);

    let journal = sim.journal(0, Some("/messages/send"));
    assert_eq!(journal.len(), 1, "{journal:?}");
    assert_eq!(journal[0].status, 200);
    assert_eq!(journal[0].body["text"], "hello over tls");
}

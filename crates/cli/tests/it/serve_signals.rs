//! Runtime control signals to the real `canon-hermes serve --stdio` binary against
//! canon-sim, through the fake shim of `shim_support.rs` (hermes-host.md §19): by doorbell and
//! by the poll, and the poll's end at disconnect.

use std::time::Duration;

use canon_sim::control::Signal;
use canon_sim::{SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION, DEFAULT_OWNER};
use serde_json::json;

use super::serve_support::{add_group, disconnect, journal, GROUP};
use super::shim_support::{sim, Shim, WAIT};

/// Raises a runtime control signal in `conversation`, with or without the doorbell.
fn raise_signal(
    sim: &SimHandle,
    conversation: &str,
    signal: &str,
    updated_by: Option<&str>,
    doorbell: bool,
) {
    sim.raise_signal(&Signal {
        conversation_id: conversation.to_owned(),
        signal: signal.to_owned(),
        updated_by: updated_by.map(str::to_owned),
        doorbell: Some(doorbell),
    })
    .expect("signal raised");
}

/// Waits until the daemon has polled at least `n` signals (any conversation).
async fn wait_for_consumes(sim: &SimHandle, n: usize) {
    sim.wait_for("signal consumed", WAIT, |s| {
        s.journal.count(Some("POST"), "/runtime/signal/consume") >= n
    })
    .await
    .expect("the daemon polls runtime signals");
}

#[tokio::test(flavor = "multi_thread")]
async fn doorbell_signal_reaches_the_shim_as_control_signal() {
    let sim = sim().await;
    add_group(&sim);
    // The default 15 s poll: within the 10 s wait only the doorbell can deliver.
    let mut shim = Shim::spawn(&sim);
    shim.connect(&sim).await;
    // The first pass at connect visits both conversations before the signal exists.
    wait_for_consumes(&sim, 2).await;

    raise_signal(
        &sim,
        DEFAULT_CONVERSATION,
        "interrupt",
        Some(DEFAULT_OWNER),
        true,
    );
    let request = shim.expect("control.signal").await;
    assert!(
        request["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("d:")),
        "{request}"
    );
    assert_eq!(
        request["body"],
        json!({"chat_id": DEFAULT_CONVERSATION, "chat_name": "Owner", "chat_type": "dm",
               "signal": "interrupt", "updated_by": DEFAULT_OWNER})
    );
    shim.answer(&request, json!({})).await;

    // A group signal without `updatedBy` names the agent itself.
    raise_signal(&sim, GROUP, "stop_and_drop", None, true);
    let request = shim.expect("control.signal").await;
    assert_eq!(
        request["body"],
        json!({"chat_id": GROUP, "chat_name": "Team", "chat_type": "group",
               "signal": "stop_and_drop", "updated_by": DEFAULT_AGENT})
    );
    shim.answer(&request, json!({})).await;
    assert!(sim.read_state(|s| s.signals.values().all(|q| q.is_empty())));
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn missed_doorbell_is_caught_by_the_poll() {
    let sim = sim().await;
    let mut shim = Shim::spawn_with(&sim, &[("CANON_HERMES_SIGNAL_POLL_MS", "200")]);
    shim.connect(&sim).await;
    raise_signal(
        &sim,
        DEFAULT_CONVERSATION,
        "new_session",
        Some(DEFAULT_OWNER),
        false,
    );
    let request = shim.expect("control.signal").await;
    assert_eq!(request["body"]["signal"], "new_session", "{request}");
    assert_eq!(request["body"]["chat_id"], DEFAULT_CONVERSATION);
    assert_eq!(request["body"]["updated_by"], DEFAULT_OWNER);
    shim.answer(&request, json!({})).await;
    let consumes = journal(&sim, "/runtime/signal/consume");
    assert!(consumes.iter().all(|(method, body)| method == "POST"
        && *body == json!({"conversationId": DEFAULT_CONVERSATION})));
    assert_eq!(shim.close().await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn disconnect_stops_the_signal_poll() {
    let sim = sim().await;
    let mut shim = Shim::spawn_with(&sim, &[("CANON_HERMES_SIGNAL_POLL_MS", "100")]);
    shim.connect(&sim).await;
    wait_for_consumes(&sim, 2).await;
    disconnect(&mut shim).await;
    raise_signal(&sim, DEFAULT_CONVERSATION, "interrupt", None, false);
    // The absence of a consume can only be observed over time: ten poll
    // intervals pass without the daemon taking the signal.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let pending = sim.read_state(|s| {
        s.signals
            .get(DEFAULT_CONVERSATION)
            .map_or(0, std::collections::VecDeque::len)
    });
    assert_eq!(pending, 1, "the signal is still waiting in Canon");
    assert!(shim
        .backlog()
        .all(|frame| frame["type"] != "control.signal"));
    assert_eq!(shim.close().await, Some(0));
}

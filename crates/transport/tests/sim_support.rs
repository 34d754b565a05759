//! Shared helpers for the tests that run canon-transport against the local
//! Canon simulator (`canon-sim`) over real loopback sockets: a started sim, a
//! client with short test timeouts, typed fault rules and journal queries.
//! Nothing here sleeps blindly: waits go through `SimHandle::wait_for` or a
//! bounded wait on the event stream.

use std::sync::Arc;
use std::time::Duration;

use canon_sim::faults::FaultRule;
use canon_sim::journal::JournalEntry;
use canon_sim::{Sim, SimConfig, SimHandle};
use canon_transport::client::{CanonClient, ClientConfig};
use canon_transport::http::Timeouts;
use canon_transport::stream::{EventStream, StreamConfig, StreamItem};
use canon_wire::ApiKey;
use serde_json::Value;

/// Upper bound for anything a test waits on (never a blind sleep).
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// A simulator with the test configuration (seed 1, frozen clock, no heartbeats).
pub(crate) async fn sim() -> SimHandle {
    sim_with(|_| {}).await
}

/// A simulator with a tweaked test configuration.
pub(crate) async fn sim_with(f: impl FnOnce(&mut SimConfig)) -> SimHandle {
    let mut config = SimConfig::for_tests();
    f(&mut config);
    Sim::start(config).await.expect("sim starts")
}

/// A client for the default agent with a fast durable backoff (1 ms, 2 ms)
/// and `read` as the read timeout.
pub(crate) fn client_with_read_timeout(sim: &SimHandle, read: Duration) -> CanonClient {
    let mut config =
        ClientConfig::new(sim.base_url(), sim.stream_url(), ApiKey::new(sim.api_key()));
    config.durable_backoff = [Duration::from_millis(1), Duration::from_millis(2)];
    config.timeouts = Timeouts {
        connect: Duration::from_secs(5),
        read,
    };
    CanonClient::new(config).expect("sim urls are valid")
}

/// [`client_with_read_timeout`] with a 10 s read timeout.
pub(crate) fn client(sim: &SimHandle) -> CanonClient {
    client_with_read_timeout(sim, Duration::from_secs(10))
}

/// Stream tunables for tests: short backoff without jitter, short timeouts.
pub(crate) fn fast_stream() -> StreamConfig {
    StreamConfig {
        connect_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(10),
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(4),
        random: Arc::new(|| 0.5),
        ..StreamConfig::default()
    }
}

/// A fault rule from its JSON form (the shape the `/__sim/faults` API takes).
pub(crate) fn rule(value: Value) -> FaultRule {
    serde_json::from_value(value).expect("valid fault rule")
}

/// The journal cursor (entries after it are new).
pub(crate) fn journal_cursor(sim: &SimHandle) -> u64 {
    sim.read_state(|s| s.journal.cursor())
}

/// Journal entries after `since` for exactly `path`.
pub(crate) fn journal_at(sim: &SimHandle, since: u64, path: &str) -> Vec<JournalEntry> {
    sim.journal(since, Some(path))
        .into_iter()
        .filter(|e| e.path == path)
        .collect()
}

/// A request header of a journal entry.
pub(crate) fn header<'a>(entry: &'a JournalEntry, name: &str) -> Option<&'a str> {
    entry
        .headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Stored messages carrying client id `client_id`.
pub(crate) fn stored_with_client_id(sim: &SimHandle, client_id: &str) -> Vec<Value> {
    sim.read_state(|s| {
        s.messages
            .iter()
            .filter(|m| m.client_id.as_deref() == Some(client_id))
            .map(|m| m.message.clone())
            .collect()
    })
}

/// The next stream item, within [`WAIT`].
pub(crate) async fn next_item(stream: &mut EventStream) -> StreamItem {
    tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("stream item within the wait bound")
        .expect("stream still running")
}

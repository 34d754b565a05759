//! Canon writes: the best-effort writes, in one ordered lane per
//! conversation (with the replies that must queue behind them), the
//! background disposition retries, and a durable delivery sent call by call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use canon_host::delivery;
use canon_host::turn::{Delivery, DeliveryFailure, Effect};
use canon_transport::{CanonClient, ClientConfig, DurableRequest, TransportError};
use canon_wire::types::{delivered_message_id, DurableCall, NoReplyRecord, StreamingUpdate};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::config::{
    DISPOSITION_RETRY_DELAYS, IDLE_LANES, JOURNAL_WAIT, MAX_DISPOSITION_RETRIES, MAX_LANE_WRITES,
    NO_REPLY_RECORD_BUDGET, PREVIEW_WRITE_BUDGET, TURN_PUBLISH_RETRY_DELAYS,
};
use crate::inbox::InboxSink;
use crate::Config;

/// Work for one conversation's lane, done in order.
enum LaneJob {
    /// A best-effort Canon write, and the journal records that follow it once it landed or
    /// Canon refused it for good (not after a failure a successor could still retry).
    Write {
        client: CanonClient,
        effect: Effect,
        then: Option<(InboxSink, Vec<canon_inbox::Record>)>,
        /// Resolves once the journal records this write must follow are on disk.
        after: Option<oneshot::Receiver<()>>,
    },
    /// A response line to the shim, written once every earlier write of
    /// the lane finished (the closing publish happens inside `turn.complete`).
    Respond(String),
    /// Signalled once every earlier write of the lane finished.
    Barrier(oneshot::Sender<()>),
}

/// One conversation's lane: its queue and how many jobs it holds (queued
/// or running).
struct Lane {
    jobs: mpsc::UnboundedSender<LaneJob>,
    held: Arc<AtomicUsize>,
}

/// The best-effort Canon writes, one ordered lane (and task) per
/// conversation, so a slow or hung endpoint in one conversation delays
/// only that conversation's writes and replies; nothing here ever waits, so
/// the select loop never blocks on a queue. A reply to a shim request
/// queues behind the writes the same input made before it, in their
/// conversations (the writes it follows); a reply that follows none goes
/// out at once. A lane holding [`MAX_LANE_WRITES`] drops further writes
/// (they are best effort) but never a reply. A live-preview write holds its
/// lane for at most [`PREVIEW_WRITE_BUDGET`]; once the daemon exits
/// ([`Writes::exit`]) previews are dropped, in flight or queued, so the
/// closing publishes and replies behind them go out within the exit grace.
pub(crate) struct Writes {
    out: mpsc::Sender<String>,
    lanes: HashMap<String, Lane>,
    tasks: JoinSet<()>,
    /// Disposition releases retrying in the background, of every lane.
    retrying: Arc<AtomicUsize>,
    /// The conversations the current input wrote to so far, in order.
    touched: Vec<String>,
    /// Set once the daemon exits: the lanes stop writing previews.
    exiting: watch::Sender<bool>,
    preview_budget: Duration,
}

impl Writes {
    /// No lanes yet; replies go to `out`.
    pub(crate) fn new(out: mpsc::Sender<String>) -> Writes {
        Writes::with_preview_budget(out, PREVIEW_WRITE_BUDGET)
    }

    /// [`Writes::new`] with another [`PREVIEW_WRITE_BUDGET`] (tests).
    pub(crate) fn with_preview_budget(out: mpsc::Sender<String>, budget: Duration) -> Writes {
        Writes {
            out,
            lanes: HashMap::new(),
            tasks: JoinSet::new(),
            retrying: Arc::new(AtomicUsize::new(0)),
            touched: Vec::new(),
            exiting: watch::channel(false).0,
            preview_budget: budget,
        }
    }

    /// The daemon exits: live previews are stale from now on, and none may keep a closing
    /// publish or a reply behind it past the exit grace.
    pub(crate) fn exit(&self) {
        self.exiting.send_replace(true);
    }

    /// A new input begins: its replies follow only its own writes.
    pub(crate) fn begin_input(&mut self) {
        self.touched.clear();
    }

    /// Queues a best-effort write in its conversation's lane.
    pub(crate) fn write(&mut self, client: CanonClient, effect: Effect) {
        self.write_then(client, effect, None, None);
    }

    /// [`Writes::write`], then `records` to the journal once the write landed or Canon
    /// refused it for good (a turn's closing publish, whose record tells a successor the turn
    /// needs no closing any more).
    pub(crate) fn write_journaled(
        &mut self,
        client: CanonClient,
        effect: Effect,
        sink: InboxSink,
        records: Vec<canon_inbox::Record>,
    ) {
        self.write_then(client, effect, Some((sink, records)), None);
    }

    /// [`Writes::write`] once `written` resolves (the journal holds the records the write must
    /// follow), waiting at most [`JOURNAL_WAIT`]: a slow disk delays the write, never drops it.
    pub(crate) fn write_after(
        &mut self,
        client: CanonClient,
        effect: Effect,
        written: oneshot::Receiver<()>,
    ) {
        self.write_then(client, effect, None, Some(written));
    }

    fn write_then(
        &mut self,
        client: CanonClient,
        effect: Effect,
        then: Option<(InboxSink, Vec<canon_inbox::Record>)>,
        after: Option<oneshot::Receiver<()>>,
    ) {
        let conversation = write_conversation(&effect).to_owned();
        if !self.touched.contains(&conversation) {
            self.touched.push(conversation.clone());
        }
        let lane = self.lane(&conversation);
        if lane.held.load(Ordering::Relaxed) >= MAX_LANE_WRITES {
            tracing::warn!(
                conversation_id = %conversation,
                "best-effort Canon write dropped: too many queued in its conversation"
            );
            return;
        }
        let (jobs, held) = (lane.jobs.clone(), Arc::clone(&lane.held));
        push(
            &jobs,
            &held,
            LaneJob::Write {
                client,
                effect,
                then,
                after,
            },
        );
    }

    /// Writes `line` once the writes this input made before it finished:
    /// `Some(line)` when it follows none and is the caller's to write now.
    pub(crate) fn reply(&mut self, line: String) -> Option<String> {
        match self.touched.as_slice() {
            [] => Some(line),
            [conversation] => {
                let conversation = conversation.clone();
                let lane = self.lane(&conversation);
                let (jobs, held) = (lane.jobs.clone(), Arc::clone(&lane.held));
                push(&jobs, &held, LaneJob::Respond(line));
                None
            }
            several => {
                let several = several.to_vec();
                let mut barriers = Vec::with_capacity(several.len());
                for conversation in &several {
                    let (done, waited) = oneshot::channel();
                    let lane = self.lane(conversation);
                    let (jobs, held) = (lane.jobs.clone(), Arc::clone(&lane.held));
                    push(&jobs, &held, LaneJob::Barrier(done));
                    barriers.push(waited);
                }
                let out = self.out.clone();
                self.tasks.spawn(async move {
                    for barrier in barriers {
                        // A lane that is gone has nothing left to wait for.
                        let _ = barrier.await;
                    }
                    send_out(&out, line).await;
                });
                None
            }
        }
    }

    /// Waits until every lane has done its queued work (the caller bounds
    /// the wait with the exit grace).
    pub(crate) async fn finish(mut self) {
        self.lanes.clear();
        while self.tasks.join_next().await.is_some() {}
    }

    /// The lane of `conversation`, started when it has none. Idle lanes are
    /// let go once there are more than [`IDLE_LANES`]: dropping an idle
    /// lane's sender ends its task, and a later write starts a new one.
    fn lane(&mut self, conversation: &str) -> &Lane {
        while self.tasks.try_join_next().is_some() {}
        if !self.lanes.contains_key(conversation) {
            if self.lanes.len() >= IDLE_LANES {
                self.lanes
                    .retain(|_, lane| lane.held.load(Ordering::Relaxed) > 0);
            }
            let (jobs, rx) = mpsc::unbounded_channel();
            let held = Arc::new(AtomicUsize::new(0));
            self.tasks.spawn(run_lane(
                rx,
                Arc::clone(&held),
                self.out.clone(),
                Arc::clone(&self.retrying),
                (self.exiting.subscribe(), self.preview_budget),
            ));
            self.lanes
                .insert(conversation.to_owned(), Lane { jobs, held });
        }
        &self.lanes[conversation]
    }
}

/// Queues `job`, counting it as held until its lane has done it.
fn push(jobs: &mpsc::UnboundedSender<LaneJob>, held: &AtomicUsize, job: LaneJob) {
    held.fetch_add(1, Ordering::Relaxed);
    if jobs.send(job).is_err() {
        held.fetch_sub(1, Ordering::Relaxed);
        tracing::warn!("Canon write lane is gone");
    }
}

async fn send_out(out: &mpsc::Sender<String>, line: String) {
    if out.send(line).await.is_err() {
        tracing::debug!("stdout writer is gone; frame dropped");
    }
}

/// The conversation a best-effort write goes to.
fn write_conversation(effect: &Effect) -> &str {
    match effect {
        Effect::PublishTurn(update) => &update.conversation_id,
        Effect::Streaming(
            StreamingUpdate::Set {
                conversation_id, ..
            }
            | StreamingUpdate::Blank {
                conversation_id, ..
            }
            | StreamingUpdate::Clear { conversation_id },
        ) => conversation_id,
        Effect::Typing(typing) => &typing.conversation_id,
        Effect::MarkRead { conversation_id }
        | Effect::AckDisposition {
            conversation_id, ..
        }
        | Effect::RecordNoReply {
            conversation_id, ..
        }
        | Effect::PauseTyping { conversation_id }
        | Effect::ResumeTyping { conversation_id } => conversation_id,
        Effect::Deliver(delivery) => &delivery.conversation_id,
        Effect::Reply { .. } | Effect::TurnClosed { .. } | Effect::FinalStored { .. } => "",
    }
}

/// Whether `effect` only refreshes the live preview of a turn (its text, the typing
/// indicator, a state that is neither the opening nor a closing one): a later write of the
/// same kind replaces it.
fn is_preview(effect: &Effect) -> bool {
    match effect {
        Effect::Streaming(_) | Effect::Typing(_) => true,
        Effect::PublishTurn(update) => !is_retried_publish(update),
        _ => false,
    }
}

/// Whether a turn-state publish is sent until it lands (within its retries): a closing one
/// (else the conversation shows the agent at work until Canon reads the turn stale), and the
/// opening one, whose `activeMessageIds` is what ties the turn, and so its answer, to every
/// message it answers beyond the one its final replies to (the messages a follow-up absorbed,
/// a cut-off turn's messages that the next turn of its session answers).
fn is_retried_publish(update: &canon_wire::types::TurnUpdate) -> bool {
    update.state.is_closing() || update.active_message_ids.is_some()
}

/// One conversation's lane: its jobs in order, one at a time. A preview write gets
/// `preview_budget` and is dropped once `exiting` is set.
async fn run_lane(
    mut jobs: mpsc::UnboundedReceiver<LaneJob>,
    held: Arc<AtomicUsize>,
    out: mpsc::Sender<String>,
    retrying: Arc<AtomicUsize>,
    (mut exiting, preview_budget): (watch::Receiver<bool>, Duration),
) {
    while let Some(mut job) = jobs.recv().await {
        if let LaneJob::Write { after, .. } = &mut job {
            if let Some(written) = after.take() {
                if tokio::time::timeout(JOURNAL_WAIT, written).await.is_err() {
                    tracing::warn!("the inbox journal is slow; writing to Canon without waiting");
                }
            }
        }
        match job {
            LaneJob::Write { client, effect, .. } if is_preview(&effect) => {
                if !*exiting.borrow() {
                    let write =
                        tokio::time::timeout(preview_budget, write_one(client, effect, &retrying));
                    tokio::select! {
                        done = write => if done.is_err() {
                            tracing::warn!(
                                budget_ms = preview_budget.as_millis() as u64,
                                "live-preview Canon write abandoned: over its budget"
                            );
                        },
                        _ = exiting.wait_for(|exiting| *exiting) => {
                            tracing::debug!("live-preview Canon write abandoned: exiting");
                        }
                    }
                }
            }
            LaneJob::Write {
                client,
                effect,
                then,
                ..
            } => {
                let settled = write_one(client, effect, &retrying).await;
                if let (true, Some((sink, records))) = (settled, then) {
                    sink.write(records);
                }
            }
            LaneJob::Respond(line) => send_out(&out, line).await,
            LaneJob::Barrier(done) => {
                let _ = done.send(());
            }
        }
        held.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Performs one best-effort write; a failure is logged. Whether it is settled: it landed, or
/// Canon refused it for good (a transient failure, once the retries are spent, is not).
async fn write_one(client: CanonClient, effect: Effect, retrying: &Arc<AtomicUsize>) -> bool {
    let (what, result) = match &effect {
        Effect::PublishTurn(update) if update.state.is_closing() => (
            "closing runtime turn",
            publish_retried(&client, update).await,
        ),
        Effect::PublishTurn(update) if is_retried_publish(update) => {
            let published = publish_retried(&client, update).await;
            if published.is_ok() {
                crate::faults::crash_point("turn.published");
            }
            ("opening runtime turn", published)
        }
        Effect::PublishTurn(update) => {
            let published = client.publish_turn(update).await;
            if published.is_ok() {
                crate::faults::crash_point("turn.published");
            }
            ("runtime turn", published)
        }
        Effect::Streaming(update) => ("streaming", client.streaming(update).await),
        Effect::Typing(typing) => ("typing", client.set_typing(typing).await),
        Effect::MarkRead { conversation_id } => ("read", client.mark_read(conversation_id).await),
        Effect::AckDisposition {
            conversation_id,
            message_id,
        } => {
            let Err(error) = client.accept_disposition(conversation_id, message_id).await else {
                return true;
            };
            // The retries sleep for up to 40 s; they run beside the lane
            // so later writes keep their pace and order.
            if retrying.fetch_add(1, Ordering::Relaxed) < MAX_DISPOSITION_RETRIES {
                tracing::debug!(
                    conversation_id,
                    message_id,
                    %error,
                    "disposition release failed; retrying in the background"
                );
                let retrying = Arc::clone(retrying);
                let (conversation_id, message_id) = (conversation_id.clone(), message_id.clone());
                tokio::spawn(async move {
                    retry_disposition(&client, &conversation_id, &message_id).await;
                    retrying.fetch_sub(1, Ordering::Relaxed);
                });
            } else {
                retrying.fetch_sub(1, Ordering::Relaxed);
                tracing::warn!(
                    conversation_id,
                    message_id,
                    %error,
                    "disposition release failed; too many retries pending"
                );
            }
            return false;
        }
        Effect::RecordNoReply {
            conversation_id,
            message_id,
            reason_given,
        } => {
            let (envelope, value) = NoReplyRecord {
                conversation_id: conversation_id.clone(),
                message_id: message_id.clone(),
                reason_given: *reason_given,
            }
            .envelope_and_value();
            let call = client.execute_verb("no_reply", envelope, value);
            match tokio::time::timeout(NO_REPLY_RECORD_BUDGET, call).await {
                Ok(result) => ("no_reply record", result.map(drop)),
                Err(_) => {
                    tracing::debug!("no_reply record exceeded its budget");
                    return false;
                }
            }
        }
        _ => return true,
    };
    match result {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(what, %error, "best-effort Canon write failed");
            !canon_wire::retry::is_retryable_idempotent_write(error.kind())
        }
    }
}

/// Publishes a turn's opening or closing state, trying again after each of
/// [`TURN_PUBLISH_RETRY_DELAYS`] while the failure is transient. It runs
/// inside its conversation's lane, so the writes after it in that conversation
/// (the turn's previews, the next turn's first publish) still come after it.
async fn publish_retried(
    client: &CanonClient,
    update: &canon_wire::types::TurnUpdate,
) -> Result<(), TransportError> {
    let mut delays = TURN_PUBLISH_RETRY_DELAYS.iter();
    loop {
        let error = match client.publish_turn(update).await {
            Ok(()) => return Ok(()),
            Err(error) => error,
        };
        match delays.next() {
            // The state is an idempotent upsert: any transient failure may be retried.
            Some(delay) if canon_wire::retry::is_retryable_idempotent_write(error.kind()) => {
                tracing::debug!(%error, "runtime turn publish failed; retrying");
                tokio::time::sleep(*delay).await;
            }
            _ => return Err(error),
        }
    }
}

/// Re-sends a failed `accepted_now` release after each of
/// [`DISPOSITION_RETRY_DELAYS`], then gives up with a warning
/// (canon-wire.md §4.10; the PATCH is idempotent on the server).
pub(crate) async fn retry_disposition(
    client: &CanonClient,
    conversation_id: &str,
    message_id: &str,
) {
    let mut last = None;
    for (attempt, delay) in DISPOSITION_RETRY_DELAYS.iter().enumerate() {
        tokio::time::sleep(*delay).await;
        match client.accept_disposition(conversation_id, message_id).await {
            Ok(()) => {
                tracing::debug!(
                    conversation_id,
                    message_id,
                    attempt = attempt + 2,
                    "disposition released"
                );
                return;
            }
            Err(error) => last = Some(error),
        }
    }
    if let Some(error) = last {
        tracing::warn!(
            conversation_id,
            message_id,
            %error,
            "disposition release failed after every retry"
        );
    }
}

/// The Canon client of a configuration: its URLs, its key and, when set, its durable backoff.
/// The daemon builds its one client with it, and so does a standalone send.
pub(crate) fn client_for(config: &Config) -> Result<CanonClient, TransportError> {
    let mut client = ClientConfig::new(
        config.base_url.clone(),
        config.stream_url.clone(),
        config.api_key.clone(),
    );
    if let Some(backoff) = config.durable_backoff {
        client.durable_backoff = backoff;
    }
    CanonClient::new(client)
}

pub(crate) type DeliveryResult = Result<Option<String>, DeliveryFailure>;

/// Sends every part of a delivery in order; Canon's id of the last part.
pub(crate) async fn deliver(client: CanonClient, delivery: Delivery) -> DeliveryResult {
    let mut last = None;
    for call in delivery::durable_calls(&delivery) {
        let request = match &call {
            DurableCall::Message(message) => DurableRequest::message(message),
            DurableCall::SendTo(send) => {
                let (envelope, value) = send.envelope_and_value();
                DurableRequest::verb("send_to", envelope, value)
            }
        };
        let request = request.map_err(|error| failure(&error))?;
        let reply = client
            .send_durable(&request)
            .await
            .map_err(|error| failure(&error))?;
        last = delivered_message_id(&reply);
    }
    Ok(last)
}

/// The ledger's view of a transport failure (`canon_host::delivery`).
pub(crate) fn failure(error: &TransportError) -> DeliveryFailure {
    let code = error.http().and_then(|http| http.code.as_deref());
    delivery::classify_failure(error.kind(), code, error.to_string(), error.is_retryable())
}

#[cfg(test)]
mod tests {
    use super::*;
    use canon_wire::secret::ApiKey;

    /// A Canon that accepts connections and never answers.
    fn hung_canon() -> CanonClient {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        std::thread::spawn(move || {
            let held: Vec<_> = listener.incoming().collect();
            drop(held);
        });
        CanonClient::new(ClientConfig::new(&url, &url, ApiKey::new("k"))).expect("a client")
    }

    /// A Canon that answers every request `200 {}` and records its path, except `/streaming`
    /// requests, which it reads and never answers.
    fn canon_hanging_previews() -> (CanonClient, Arc<std::sync::Mutex<Vec<String>>>) {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        let answered = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&answered);
        std::thread::spawn(move || {
            let mut hung = Vec::new();
            for stream in listener.incoming().flatten() {
                let mut reader = BufReader::new(stream);
                let (mut head, mut line) = (Vec::new(), String::new());
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    head.push(std::mem::take(&mut line));
                }
                let length = head
                    .iter()
                    .find_map(|h| {
                        h.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                    })
                    .unwrap_or(0);
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                let path = head
                    .first()
                    .and_then(|l| l.split(' ').nth(1))
                    .unwrap_or_default()
                    .to_owned();
                let mut stream = reader.into_inner();
                if path == "/streaming" {
                    hung.push(stream);
                    continue;
                }
                seen.lock().expect("lock").push(path);
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
                );
            }
        });
        let client =
            CanonClient::new(ClientConfig::new(&url, &url, ApiKey::new("k"))).expect("a client");
        (client, answered)
    }

    fn preview(conversation: &str) -> Effect {
        Effect::Streaming(StreamingUpdate::Blank {
            conversation_id: conversation.to_owned(),
            turn_id: Some("hermes-1".to_owned()),
        })
    }

    fn closing(conversation: &str) -> Effect {
        Effect::PublishTurn(canon_wire::types::TurnUpdate {
            conversation_id: conversation.to_owned(),
            state: canon_wire::types::TurnState::Completed,
            turn_id: Some("hermes-1".to_owned()),
            queue_depth: 0,
            active_message_ids: None,
            capabilities: canon_wire::types::TurnCapabilities::for_state(
                canon_wire::types::TurnState::Completed,
                true,
            ),
            opened_at: Some(1),
            turn_updated_at: 2,
        })
    }

    /// Found by the fault harness: a preview write that Canon never answers held its
    /// conversation's lane for the client's 30 s read timeout, and a gateway restart meanwhile
    /// ended the daemon with the turn's closing publish (and the reply releasing Hermes' final
    /// send) still queued behind it: the turn stayed open in Canon. A hung preview now gives
    /// way after its budget, and at once when the daemon exits.
    #[tokio::test(flavor = "current_thread")]
    async fn a_hung_preview_gives_way_to_the_closing_publish_after_its_budget_or_at_exit() {
        let (client, answered) = canon_hanging_previews();
        // Within the budget: the lane moves on by itself.
        let (out, mut lines) = mpsc::channel(8);
        let mut writes = Writes::with_preview_budget(out, Duration::from_millis(300));
        writes.begin_input();
        writes.write(client.clone(), preview("c1"));
        writes.write(client.clone(), closing("c1"));
        assert_eq!(writes.reply("turn.complete answered".to_owned()), None);
        let line = tokio::time::timeout(Duration::from_secs(10), lines.recv()).await;
        assert_eq!(
            line.ok().flatten().as_deref(),
            Some("turn.complete answered")
        );
        assert_eq!(*answered.lock().expect("lock"), ["/runtime/turn"]);

        // At exit: an in-flight preview is dropped at once, and so is a queued one.
        let (out, mut lines) = mpsc::channel(8);
        let mut writes = Writes::with_preview_budget(out, Duration::from_secs(3_600));
        writes.begin_input();
        writes.write(client.clone(), preview("c2"));
        writes.write(client.clone(), preview("c2"));
        writes.write(client.clone(), closing("c2"));
        assert_eq!(writes.reply("second answered".to_owned()), None);
        tokio::time::sleep(Duration::from_millis(200)).await;
        writes.exit();
        let finished = tokio::time::timeout(Duration::from_secs(10), writes.finish()).await;
        assert!(finished.is_ok(), "the lane finished within the wait");
        assert_eq!(lines.recv().await.as_deref(), Some("second answered"));
        assert_eq!(
            *answered.lock().expect("lock"),
            ["/runtime/turn", "/runtime/turn"]
        );
    }

    fn read(conversation: &str) -> Effect {
        Effect::MarkRead {
            conversation_id: conversation.to_owned(),
        }
    }

    /// Each conversation's write lane: queuing never waits, a hung conversation holds at most
    /// [`MAX_LANE_WRITES`] writes (later ones are dropped, a reply never is), its reply waits
    /// behind its writes, and a reply that follows no write of its input goes out at once.
    #[tokio::test(flavor = "current_thread")]
    async fn a_hung_lane_is_capped_and_holds_only_its_own_replies() {
        let client = hung_canon();
        let (out, mut lines) = mpsc::channel(8);
        let mut writes = Writes::new(out);
        writes.begin_input();
        for _ in 0..MAX_LANE_WRITES + 10 {
            writes.write(client.clone(), read("hung"));
        }
        let held = |writes: &Writes| writes.lanes["hung"].held.load(Ordering::Relaxed);
        assert_eq!(held(&writes), MAX_LANE_WRITES);
        assert_eq!(writes.reply("after the hung writes".to_owned()), None);
        assert_eq!(
            held(&writes),
            MAX_LANE_WRITES + 1,
            "the reply is never dropped"
        );
        writes.begin_input();
        assert_eq!(
            writes.reply("follows nothing".to_owned()).as_deref(),
            Some("follows nothing")
        );
        // A reply following writes of two conversations waits for both lanes.
        writes.write(client.clone(), read("other"));
        writes.write(client, read("hung"));
        assert_eq!(writes.reply("after both".to_owned()), None);
        assert!(
            lines.try_recv().is_err(),
            "nothing behind the hung lane went out"
        );
    }
}

//! The select loop of `canon-hermes serve --stdio`: it reads shim lines,
//! stream items and task reports, hands each to the session as a
//! [`SessionInput`], and performs the [`SessionEffect`]s it returns, in
//! order. Every decision is the session's (`canon_host::session`); this
//! module and its children only run I/O and report results back.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use canon_host::session::{Session, SessionConfig, SessionEffect, SessionInput};
use canon_host::turn::{Delivery, Effect, OpId};
use canon_transport::media::{MediaDownloader, MediaOptions};
use canon_transport::net::AddressPolicy;
use canon_transport::stream::{ConnectionState, StreamItem};
use canon_transport::{CanonClient, EventStream, TransportError};
use tokio::io::{AsyncBufRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use crate::canon::{client_for, deliver, failure, DeliveryResult, Writes};
use crate::config::{
    CHANNEL_FRAMES, EXIT_GRACE, HANDOFF_DIR, MEDIA_CONCURRENCY, PARENT_CHECK, SIGNAL_FRAMES,
};
use crate::detached;
use crate::env::{now_ms, random_u128};
use crate::inbound_media::sweep_handoff_dir;
use crate::outbound;
use crate::stdio::{read_lines, write_lines, Line};
use crate::tasks::{
    process_exists, tick, ConsumedSignal, HitlEvent, MediaDone, Refetched, Uploaded,
};
use crate::Config;

mod approval_tasks;
mod card_tasks;
mod communicate_tasks;
mod connection;
mod credentials;
mod hitl_tasks;
mod media_tasks;
mod probe;

pub(crate) use connection::verify_environment;

/// Runs the daemon until `input` reaches EOF, the process
/// [`Config::parent_pid`] is gone or `shutdown` resolves (the binary's
/// SIGTERM or SIGINT, with its name as the reason logged); each ends it the
/// same way, in-flight Canon writes getting [`EXIT_GRACE`]. Returns the
/// process exit code (0, or [`EXIT_UNSUPPORTED_PROTOCOL`] after a failed
/// version negotiation).
pub async fn run<R, W, S>(config: Config, input: R, output: W, shutdown: S) -> i32
where
    R: AsyncBufRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
    S: std::future::Future<Output = &'static str>,
{
    crate::env::set_clock_offset_ms(config.clock_offset_ms);
    crate::faults::arm(config.crash_point.as_deref(), config.canon_home.as_deref());
    let mut shutdown = std::pin::pin!(shutdown);
    let (line_tx, mut line_rx) = mpsc::channel::<Line>(CHANNEL_FRAMES);
    let reader = tokio::spawn(read_lines(input, line_tx));
    let (out_tx, out_rx) = mpsc::channel::<String>(CHANNEL_FRAMES);
    let writer = tokio::spawn(write_lines(output, out_rx));
    let (done_tx, mut done_rx) = mpsc::channel::<(OpId, DeliveryResult)>(64);
    let (signal_tx, mut signal_rx) = mpsc::channel::<ConsumedSignal>(SIGNAL_FRAMES);
    let (signal_ids, _) = watch::channel(Vec::new());
    let (refetch_tx, mut refetch_rx) = mpsc::channel::<Refetched>(4);
    let (media_tx, mut media_rx) = mpsc::channel::<MediaDone>(64);
    let (hitl_tx, mut hitl_rx) = mpsc::channel::<HitlEvent>(64);
    let (upload_tx, mut upload_rx) = mpsc::channel::<Uploaded>(64);
    let (approval_tx, mut approval_rx) = mpsc::channel::<detached::Report>(64);
    let (card_tx, mut card_rx) = mpsc::channel::<card_tasks::CardDone>(64);
    let (card_wake_tx, mut card_wake_rx) = mpsc::channel::<canon_host::card_waits::CardWake>(64);
    let (communicate_tx, mut communicate_rx) = mpsc::channel::<SessionInput>(64);
    let approvals = config.canon_home.as_deref().and_then(|home| {
        match canon_approvals::store::Store::new(home) {
            Ok(store) => Some(Arc::new(store)),
            Err(error) => {
                tracing::error!(%error, "detached approvals are unavailable");
                None
            }
        }
    });
    let media_dir = config.canon_home.as_deref().map(|home| {
        let dir = home.join(HANDOFF_DIR);
        std::path::absolute(&dir).unwrap_or(dir)
    });
    if let Some(dir) = media_dir.clone() {
        let swept = tokio::task::spawn_blocking(move || sweep_handoff_dir(&dir, SystemTime::now()))
            .await
            .unwrap_or(0);
        if swept > 0 {
            tracing::info!(files = swept, "deleted stale inbound media hand-off files");
        }
    }
    // Stale hand-off files go at start and then every `handoff_sweep`.
    let mut handoff_sweep = media_dir.as_ref().map(|_| {
        let every = config.handoff_sweep.max(Duration::from_millis(10));
        let mut sweep = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        sweep.set_missed_tick_behavior(MissedTickBehavior::Delay);
        sweep
    });
    let mut parent_check = config.parent_pid.map(|_| {
        let mut check = tokio::time::interval(PARENT_CHECK);
        check.set_missed_tick_behavior(MissedTickBehavior::Delay);
        check
    });

    let mut driver = Driver {
        session: Session::new(session_config(&config)),
        config,
        writes: Writes::new(out_tx.clone()),
        out: out_tx,
        done: done_tx,
        deliveries: JoinSet::new(),
        client: None,
        stream: None,
        signal_tx,
        signal_ids,
        signal_tasks: JoinSet::new(),
        status_tasks: JoinSet::new(),
        refetch_tx,
        refetch: None,
        media_dir,
        downloader: None,
        media_done: media_tx,
        media_tasks: JoinSet::new(),
        media_permits: Arc::new(Semaphore::new(MEDIA_CONCURRENCY)),
        hitl_tx,
        hitl_cancels: HashMap::new(),
        hitl_tasks: JoinSet::new(),
        upload_tx,
        upload_permits: Arc::new(Semaphore::new(outbound::UPLOAD_CONCURRENCY)),
        upload_tasks: JoinSet::new(),
        approvals,
        approval_tx,
        approval_tasks: JoinSet::new(),
        recovery: detached::RecoverySet::default(),
        wake_jobs: HashMap::new(),
        agent_id: None,
        card_tx,
        card_wake_tx,
        communicate_tx,
        inbox: None,
    };

    let mut exit_reason = "stdin closed";
    loop {
        let deadline = driver.session.next_deadline();
        // Back-pressure: no new inbound events while too many wait in lanes.
        let inbound_open = driver.session.accepts_events();
        let sleep = async move {
            match deadline {
                Some(at) => {
                    tokio::time::sleep(Duration::from_millis(at.saturating_sub(now_ms()))).await
                }
                None => std::future::pending::<()>().await,
            }
        };
        let stream_item = async {
            match driver.stream.as_mut() {
                Some(stream) => stream.next().await,
                None => std::future::pending().await,
            }
        };
        let input = tokio::select! {
            line = line_rx.recv() => match line {
                Some(Line::Frame(bytes)) => {
                    // The crash tests' "killed while Hermes completes a turn" (the shim must
                    // hand the turn and its answer to the respawned daemon).
                    // Only when armed: the scan is no work for a running daemon's frames.
                    if crate::faults::armed("turn.complete")
                        && contains(&bytes, br#""type":"turn.complete""#)
                    {
                        crate::faults::crash_point("turn.complete");
                    }
                    SessionInput::Line(bytes)
                }
                Some(Line::TooLarge) => SessionInput::LineTooLarge,
                None => break,
            },
            item = stream_item, if inbound_open => match item {
                Some(StreamItem::Event(event)) => match event.id {
                    Some(id) => SessionInput::StreamFrame { id, kind: event.kind },
                    None => SessionInput::StreamEvent(event.kind),
                },
                Some(StreamItem::State(ConnectionState::Failed(error))) => {
                    SessionInput::StreamFailed(error.to_string())
                }
                Some(StreamItem::State(ConnectionState::Connected)) => SessionInput::StreamConnected,
                Some(StreamItem::State(state)) => {
                    tracing::debug!(?state, "event stream state");
                    continue;
                }
                None => SessionInput::StreamEnded,
            },
            Some((op, result)) = done_rx.recv() => SessionInput::Delivered { op, result },
            Some(consumed) = signal_rx.recv() => SessionInput::Signal {
                conversation_id: consumed.conversation_id,
                signal: consumed.signal,
            },
            Some(refetched) = refetch_rx.recv() => SessionInput::Refetched {
                generation: refetched.id,
                result: refetched.result.map_err(|error| error.to_string()),
            },
            Some(done) = media_rx.recv() => {
                while driver.media_tasks.try_join_next().is_some() {}
                SessionInput::MediaDone {
                    conversation_id: done.conversation_id,
                    job: done.job,
                    message: done.message,
                    materialized: done.materialized,
                }
            }
            Some(event) = hitl_rx.recv() => match event {
                HitlEvent::Created { key, shim_id, re, result } => {
                    SessionInput::HitlCreated { key, shim_id, re, result }
                }
                HitlEvent::Finished { key, outcome } => SessionInput::HitlFinished { key, outcome },
            },
            Some(done) = card_rx.recv() => Driver::card_done(done),
            Some(wake) = card_wake_rx.recv() => SessionInput::CardWake(Box::new(wake)),
            Some(report) = approval_rx.recv() => match driver.approval_report(report) {
                Some(input) => input,
                None => continue,
            },
            Some(done) = communicate_rx.recv() => done,
            Some(uploaded) = upload_rx.recv() => {
                while driver.upload_tasks.try_join_next().is_some() {}
                SessionInput::Uploaded { request: uploaded.request, result: uploaded.result }
            }
            () = tick(handoff_sweep.as_mut()) => {
                if let Some(dir) = driver.media_dir.clone() {
                    driver.spawn_background(async move {
                        let swept = tokio::task::spawn_blocking(move || {
                            sweep_handoff_dir(&dir, SystemTime::now())
                        })
                        .await
                        .unwrap_or(0);
                        if swept > 0 {
                            tracing::info!(files = swept, "deleted stale inbound media hand-off files");
                        }
                    });
                }
                continue;
            }
            () = tick(parent_check.as_mut()) => {
                if let Some(pid) = driver.config.parent_pid.filter(|pid| !process_exists(*pid)) {
                    tracing::info!(pid, "parent process is gone");
                    exit_reason = "parent process gone";
                    break;
                }
                continue;
            }
            () = sleep => SessionInput::Timeout,
            reason = &mut shutdown => {
                exit_reason = reason;
                break;
            }
        };
        driver.handle(input).await;
        if driver.session.exit_code.is_some() {
            break;
        }
    }

    tracing::info!(reason = exit_reason, "shutting down");
    reader.abort();
    driver.writes.exit();
    let grace_end = tokio::time::Instant::now() + EXIT_GRACE;
    // Finals still in flight: their outcomes tell the turn machine which
    // turns are stored. Those, and the turns waiting out their handoff,
    // close now, so their closing publishes go out within the exit grace.
    loop {
        while let Ok((op, result)) = done_rx.try_recv() {
            driver.handle(SessionInput::Delivered { op, result }).await;
        }
        if driver.deliveries.is_empty() {
            break;
        }
        let outcome = tokio::select! {
            delivered = done_rx.recv() => delivered,
            _ = driver.deliveries.join_next() => None,
            () = tokio::time::sleep_until(grace_end) => break,
        };
        if let Some((op, result)) = outcome {
            driver.handle(SessionInput::Delivered { op, result }).await;
        }
    }
    driver.handle(SessionInput::Exiting).await;
    let exit_code = driver.session.exit_code.unwrap_or(0);
    driver.stop_loops();
    // Nothing more reaches the shim; files a stopped task wrote are swept at
    // the next start.
    driver.media_tasks.abort_all();
    driver.hitl_tasks.abort_all();
    driver.upload_tasks.abort_all();
    driver.stop_approvals();
    let Driver {
        out,
        writes,
        stream,
        mut deliveries,
        ..
    } = driver;
    drop(stream);
    let finish = async {
        while deliveries.join_next().await.is_some() {}
        writes.finish().await;
    };
    if tokio::time::timeout_at(grace_end, finish).await.is_err() {
        tracing::warn!("in-flight Canon writes did not finish within the exit grace");
    }
    // What is still running is abandoned: none of it may hold the writer open.
    drop(deliveries);
    drop(out);
    let _ = writer.await;
    exit_code
}

struct Driver {
    /// The pure state and decisions (canon-host).
    session: Session,
    config: Config,
    out: mpsc::Sender<String>,
    /// The best-effort Canon writes, one ordered lane per conversation,
    /// and the replies that follow them.
    writes: Writes,
    done: mpsc::Sender<(OpId, DeliveryResult)>,
    deliveries: JoinSet<()>,
    client: Option<CanonClient>,
    stream: Option<EventStream>,
    /// Where the signal tasks report consumed signals.
    signal_tx: mpsc::Sender<ConsumedSignal>,
    /// The conversations the signal poll visits: the cache's key set
    /// (canon-wire.md §4.2), republished when it changes.
    signal_ids: watch::Sender<Vec<String>>,
    /// The poll loop and doorbell consumes of the current connection.
    signal_tasks: JoinSet<()>,
    /// The runtime status loop of the current connection.
    status_tasks: JoinSet<()>,
    /// Where a conversation re-fetch reports (after `replay.expired`).
    refetch_tx: mpsc::Sender<Refetched>,
    /// The re-fetch in flight, aborted when a newer one starts.
    refetch: Option<tokio::task::AbortHandle>,
    /// `<CANON_HOME>/tmp`, absolute; `None` without a Canon home.
    media_dir: Option<PathBuf>,
    /// The guarded media downloader, built at the first connect.
    downloader: Option<MediaDownloader>,
    /// Where media tasks report finished messages.
    media_done: mpsc::Sender<MediaDone>,
    /// Media tasks in flight (aborted at exit).
    media_tasks: JoinSet<()>,
    /// Bounds the media tasks downloading at once.
    media_permits: Arc<Semaphore>,
    /// Where HITL tasks report.
    hitl_tx: mpsc::Sender<HitlEvent>,
    /// Stops a HITL task's poll and cancels its interaction, by task key.
    hitl_cancels: HashMap<u64, oneshot::Sender<()>>,
    /// The HITL tasks (aborted at exit).
    hitl_tasks: JoinSet<()>,
    /// Where outbound media uploads report.
    upload_tx: mpsc::Sender<Uploaded>,
    /// Bounds the outbound uploads running at once (hermes-host.md §19.9).
    upload_permits: Arc<Semaphore>,
    /// Outbound upload tasks (aborted at exit).
    upload_tasks: JoinSet<()>,
    /// The detached-approval registry of the Canon home; `None` without one.
    approvals: Option<Arc<canon_approvals::store::Store>>,
    /// Where approvals tasks report.
    approval_tx: mpsc::Sender<detached::Report>,
    /// Receipt handling, the reconcile and the scan of the current connection.
    approval_tasks: JoinSet<()>,
    /// The approvals a recovery task runs for.
    recovery: detached::RecoverySet,
    /// Claimed wakes handed to the session and not yet answered by the shim.
    wake_jobs: HashMap<String, canon_approvals::state::WakeJob>,
    /// The connected agent's id (`GET /agents/me`): the card waits' scope.
    agent_id: Option<String>,
    /// Where card-wait tool calls report.
    card_tx: mpsc::Sender<card_tasks::CardDone>,
    /// Where claimed card wakes go.
    card_wake_tx: mpsc::Sender<canon_host::card_waits::CardWake>,
    /// Where `canon_communicate` calls report their Canon call's result.
    communicate_tx: mpsc::Sender<SessionInput>,
    /// The durable inbox's writer, once a connect opened it (with a Canon home).
    inbox: Option<crate::inbox::InboxWriter>,
}

/// What the session needs to know of the daemon's configuration (never
/// the API key itself).
fn session_config(config: &Config) -> SessionConfig {
    SessionConfig {
        daemon_version: env!("CARGO_PKG_VERSION").to_owned(),
        manifest_sha256: config.manifest_sha256.clone(),
        home_channel: config.home_channel.clone(),
        home_channel_name: config.home_channel_name.clone(),
        inbound_image_delivery: config.inbound_image_delivery.clone(),
        inbound_visual_media_delivery: config.inbound_visual_media_delivery.clone(),
        turn_verbosity: config.turn_verbosity.clone(),
        credentials: config.credentials().facts(),
        clarify_timeout: config.clarify_timeout,
        approval_timeout: config.approval_timeout,
        instance: format!("{:08x}", random_u128() & 0xffff_ffff),
    }
}

impl Driver {
    pub(super) async fn send_line(&self, line: String) {
        if self.out.send(line).await.is_err() {
            tracing::debug!("stdout writer is gone; frame dropped");
        }
    }

    pub(super) fn client(&mut self) -> Result<CanonClient, TransportError> {
        if let Some(client) = &self.client {
            return Ok(client.clone());
        }
        let client = client_for(&self.config)?;
        self.client = Some(client.clone());
        Ok(client)
    }

    /// Spawns a task that must finish (or use up the exit grace) before the
    /// daemon exits, reaping the ones already done.
    pub(super) fn spawn_background<F>(&mut self, task: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        while self.deliveries.try_join_next().is_some() {}
        self.deliveries.spawn(task);
    }

    /// Hands one input to the session and performs what it returns. An
    /// effect whose I/O ends at once (a connect, a failed client) reports
    /// back here, and the effects of that report are performed before the
    /// rest, as if the I/O had been inline.
    ///
    /// A durable delivery with a connection starts after the input's other effects: its task
    /// and the conversation's lane run on the same thread, and the one polled first writes
    /// first. At a follow-up's turn boundary the running turn's final goes out with the
    /// follow-up's opening publish and first live text behind it in the lane; started first,
    /// the final's request (the whole answer and its trail) held that text back by a few
    /// tenths of a millisecond. The two were never ordered on the wire (separate connections).
    pub(super) async fn handle(&mut self, input: SessionInput) {
        self.writes.begin_input();
        let mut queue: VecDeque<SessionEffect> =
            self.session.handle(input, now_ms(), random_u128()).into();
        let mut deliveries = Vec::new();
        while let Some(effect) = queue.pop_front() {
            let effect = match (effect, &self.client) {
                (SessionEffect::Canon(Effect::Deliver(delivery)), Some(client)) => {
                    // With the client of this moment: a later effect may stop the connection.
                    deliveries.push((client.clone(), delivery));
                    continue;
                }
                (effect, _) => effect,
            };
            if let Some(report) = self.perform(effect).await {
                let effects = self.session.handle(report, now_ms(), random_u128());
                for effect in effects.into_iter().rev() {
                    queue.push_front(effect);
                }
            }
        }
        for (client, delivery) in deliveries {
            self.start_delivery(client, delivery);
        }
    }

    /// Sends a durable delivery in the background; its result comes back as
    /// `SessionInput::Delivered`.
    fn start_delivery(&mut self, client: CanonClient, delivery: Delivery) {
        let op = delivery.op;
        let done = self.done.clone();
        self.spawn_background(async move {
            let result = deliver(client, delivery).await;
            let _ = done.send((op, result)).await;
        });
    }

    /// Performs one effect; `Some` is a report to hand the session now.
    async fn perform(&mut self, effect: SessionEffect) -> Option<SessionInput> {
        match effect {
            SessionEffect::Frame(line) => self.send_line(line).await,
            SessionEffect::Inbox(records) => {
                if let Some(inbox) = &self.inbox {
                    inbox.write(records);
                }
            }
            SessionEffect::Reply(line) => {
                // Behind the Canon writes this input queued before it: a
                // reply must not overtake the writes it follows.
                if let Some(line) = self.writes.reply(line) {
                    self.send_line(line).await;
                }
            }
            SessionEffect::Canon(Effect::Deliver(delivery)) => {
                let op = delivery.op;
                match self.client() {
                    Ok(client) => self.start_delivery(client, delivery),
                    Err(error) => {
                        return Some(SessionInput::Delivered {
                            op,
                            result: Err(failure(&error)),
                        })
                    }
                }
            }
            // Best-effort writes never open the first connection (no
            // network I/O before `adapter.connect` or a durable send,
            // hermes-host.md §19.3).
            SessionEffect::Canon(effect) => match self.client.clone() {
                Some(client) => self.writes.write(client, effect),
                None => tracing::debug!("best-effort write skipped: not connected"),
            },
            SessionEffect::CanonJournaled { effect, records } => {
                match (self.client.clone(), &self.inbox) {
                    (Some(client), Some(inbox)) => {
                        self.writes
                            .write_journaled(client, effect, inbox.sink(), records)
                    }
                    (Some(client), None) => self.writes.write(client, effect),
                    (None, _) => tracing::debug!("best-effort write skipped: not connected"),
                }
            }
            SessionEffect::StreamGap(gap) => {
                if let (Some(home), Some(inbox)) = (self.config.canon_home.clone(), &self.inbox) {
                    let scope = inbox.scope().to_owned();
                    let last = match gap.to_json() {
                        serde_json::Value::Object(last) => last,
                        _ => serde_json::Map::new(),
                    };
                    self.spawn_background(async move {
                        let _ = tokio::task::spawn_blocking(move || {
                            crate::inbox::record_gap(&home, &scope, last)
                        })
                        .await;
                    });
                }
            }
            SessionEffect::JournalThenCanon { records, effect } => {
                match (self.client.clone(), &self.inbox) {
                    (Some(client), Some(inbox)) => {
                        let written = inbox.write_acked(records);
                        self.writes.write_after(client, effect, written);
                    }
                    (Some(client), None) => self.writes.write(client, effect),
                    (None, inbox) => {
                        if let Some(inbox) = inbox {
                            inbox.write(records);
                        }
                        tracing::debug!("best-effort write skipped: not connected");
                    }
                }
            }
            SessionEffect::CancelHitl(keys) => self.cancel_hitl(keys),
            SessionEffect::ForgetHitl(key) => {
                self.hitl_cancels.remove(&key);
            }
            SessionEffect::StartHitl { id, re, start } => {
                return self.start_hitl(id, re, *start).await
            }
            SessionEffect::ResolveCredentials(call) => {
                let resolved = self.resolve(&call.platform).await;
                let facts = resolved.facts();
                if call.adopt {
                    self.config.adopt(resolved);
                    // The client holds the old key and URLs.
                    self.client = None;
                }
                return Some(SessionInput::CredentialsResolved { call, facts });
            }
            SessionEffect::VerifyProbe {
                id,
                re,
                result,
                platform,
            } => {
                self.verify_probe(id, re, *result, platform.as_deref())
                    .await
            }
            SessionEffect::Connect(call) => {
                let result = self.connect_calls().await;
                if let Ok((me, _)) = &result {
                    self.agent_id = me.agent_id.clone();
                }
                return Some(SessionInput::ConnectDone { call, result });
            }
            SessionEffect::OpenConnection => self.open_connection(),
            SessionEffect::StopConnection => {
                self.stop_loops();
                self.stream = None;
            }
            SessionEffect::CloseStream => self.stream = None,
            SessionEffect::ReconnectStream => {
                if let Some(stream) = &self.stream {
                    stream.reconnect();
                }
            }
            SessionEffect::PublishConversations(ids) => {
                self.signal_ids.send_replace(ids);
            }
            SessionEffect::Ring(conversation_id) => self.ring(conversation_id),
            SessionEffect::Refetch(generation) => self.refetch_conversations(generation),
            SessionEffect::RefetchSettled => self.refetch = None,
            SessionEffect::Materialize(job) => self.spawn_media(*job),
            SessionEffect::ServeInboundMedia {
                id,
                re,
                message_id,
                media,
            } => self.serve_inbound_media(id, re, message_id, media),
            SessionEffect::UploadMedia { request, media } => {
                return self.upload_media(request, *media)
            }
            SessionEffect::UploadApiMedia {
                request,
                conversation_id,
                path,
                mime_type,
                file_name,
            } => self.upload_api_media(request, conversation_id, path, mime_type, file_name),
            SessionEffect::Detached { id, re, api, call } => {
                return self.run_detached(id, re, api, *call)
            }
            SessionEffect::Communicate { id, re, call } => {
                return self.run_communicate(id, re, call)
            }
            SessionEffect::ApprovalReceipt(receipt) => self.approval_receipt(*receipt),
            SessionEffect::CardWait {
                id,
                re,
                call,
                waiting,
            } => return self.run_card_wait(id, re, *call, waiting),
            SessionEffect::CardReceipt(receipt) => self.card_receipt(receipt),
            SessionEffect::CardWakeAnswered { wake, delivered } => {
                self.card_wake_answered(*wake, delivered)
            }
            SessionEffect::ApprovalWakeAnswered {
                approval_id,
                delivered,
            } => self.approval_wake_answered(&approval_id, delivered),
            SessionEffect::UploadStandalone {
                request,
                target,
                files,
                force_document,
            } => self.upload_standalone(request, target, files, force_document),
        }
        None
    }
}

/// Whether `haystack` contains `needle` (a crash-point check on a raw frame).
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

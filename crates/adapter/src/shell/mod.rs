//! The select loop of `canon-hermes serve --stdio`: it reads shim frames,
//! stream items and task reports, feeds them to the session and the turn
//! machine, and performs the effects they return, in order.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use canon_dispatch::protocol::DeliveryIntent;
use canon_host::connect::{self, ConnectFailure};
use canon_host::hitl;
use canon_host::inbound::finish_inbound;
use canon_host::media::{self};
use canon_host::protocol::{
    self, AdapterSendClarify, AdapterSendExecApproval, AdapterStatus, ConnectResult,
    DaemonNotification, DaemonRequest, ErrorBody, ErrorCode, Frame, InboundMessage, Probe,
    ShimNotification, ShimRequest,
};
use canon_host::requests;
use canon_host::session::interactions::HitlStart;
use canon_host::session::{
    ConnectFacts, Handled, InboundStep, RefetchStep, RequestFacts, Session, SessionEffect,
    StreamStep, UNSUPPORTED_SUFFIX,
};
use canon_host::turn::{
    Effect, HostMedia, HostReply, Input, MediaPayload, OpId, RequestId, StandaloneSend, TurnState,
};
use canon_transport::media::{MediaDownloader, MediaOptions};
use canon_transport::net::AddressPolicy;
use canon_transport::stream::{ConnectionState, StreamConfig, StreamItem};
use canon_transport::{CanonClient, ClientConfig, EventStream, TransportError};
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use crate::canon::{deliver, failure, run_jobs, DeliveryResult, Job};
use crate::config::{
    CHANNEL_FRAMES, EXIT_GRACE, HANDOFF_DIR, MAX_PENDING_INBOUND, MEDIA_CONCURRENCY, PARENT_CHECK,
    SIGNAL_FRAMES,
};
use crate::env::{empty, now_ms};
use crate::inbound_media::sweep_handoff_dir;
use crate::outbound;
use crate::stdio::{read_lines, write_lines, Line};
use crate::tasks::{
    process_exists, tick, ConsumedSignal, HitlEvent, MediaDone, Refetched, Uploaded,
};
use crate::Config;

mod connection;
mod hitl_tasks;
mod media_tasks;
mod shim;

/// Runs the daemon until `input` reaches EOF or the process
/// [`Config::parent_pid`] is gone; returns the process exit code (0,
/// or [`EXIT_UNSUPPORTED_PROTOCOL`] after a failed version negotiation).
pub async fn run<R, W>(config: Config, input: R, output: W) -> i32
where
    R: AsyncBufRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (line_tx, mut line_rx) = mpsc::channel::<Line>(CHANNEL_FRAMES);
    let reader = tokio::spawn(read_lines(input, line_tx));
    let (out_tx, out_rx) = mpsc::channel::<String>(CHANNEL_FRAMES);
    let writer = tokio::spawn(write_lines(output, out_rx));
    let (job_tx, job_rx) = mpsc::channel::<Job>(1_024);
    let worker = tokio::spawn(run_jobs(job_rx));
    let (done_tx, mut done_rx) = mpsc::channel::<(OpId, DeliveryResult)>(64);
    let (signal_tx, mut signal_rx) = mpsc::channel::<ConsumedSignal>(SIGNAL_FRAMES);
    let (signal_ids, _) = watch::channel(Vec::new());
    let (refetch_tx, mut refetch_rx) = mpsc::channel::<Refetched>(4);
    let (media_tx, mut media_rx) = mpsc::channel::<MediaDone>(64);
    let (hitl_tx, mut hitl_rx) = mpsc::channel::<HitlEvent>(64);
    let (upload_tx, mut upload_rx) = mpsc::channel::<Uploaded>(64);
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
    let mut parent_check = config.parent_pid.map(|_| {
        let mut check = tokio::time::interval(PARENT_CHECK);
        check.set_missed_tick_behavior(MissedTickBehavior::Delay);
        check
    });

    let mut driver = Driver {
        session: Session::default(),
        config,
        out: out_tx,
        jobs: job_tx,
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
    };

    let mut exit_reason = "stdin closed";
    loop {
        let deadline = driver.session.machine.next_deadline();
        // Back-pressure: no new inbound events while too many wait in lanes.
        let inbound_open = driver.session.lanes.items() < MAX_PENDING_INBOUND;
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
        tokio::select! {
            line = line_rx.recv() => match line {
                Some(Line::Frame(bytes)) => driver.on_line(&bytes).await,
                Some(Line::TooLarge) => tracing::warn!("dropped a frame above the size limit"),
                None => break,
            },
            item = stream_item, if inbound_open => match item {
                Some(item) => driver.on_stream(item).await,
                None => {
                    tracing::warn!("event stream ended");
                    driver.stream = None;
                }
            },
            Some((op, result)) = done_rx.recv() => {
                driver.feed(Input::DeliveryOutcome { op, result }).await;
            }
            Some(consumed) = signal_rx.recv() => driver.on_signal(consumed).await,
            Some(refetched) = refetch_rx.recv() => driver.on_refetched(refetched),
            Some(done) = media_rx.recv() => driver.on_media_done(done).await,
            Some(event) = hitl_rx.recv() => driver.on_hitl(event).await,
            Some(uploaded) = upload_rx.recv() => driver.on_uploaded(uploaded).await,
            () = tick(parent_check.as_mut()) => {
                if let Some(pid) = driver.config.parent_pid.filter(|pid| !process_exists(*pid)) {
                    tracing::info!(pid, "parent process is gone");
                    exit_reason = "parent process gone";
                    break;
                }
            }
            () = sleep => driver.feed(Input::Timeout).await,
        }
        if driver.session.exit_code.is_some() {
            break;
        }
    }

    tracing::info!(reason = exit_reason, "shutting down");
    reader.abort();
    let exit_code = driver.session.exit_code.unwrap_or(0);
    driver.stop_loops();
    // Nothing more reaches the shim; files a stopped task wrote are swept at
    // the next start.
    driver.media_tasks.abort_all();
    driver.hitl_tasks.abort_all();
    driver.upload_tasks.abort_all();
    let Driver {
        out,
        jobs,
        stream,
        mut deliveries,
        ..
    } = driver;
    drop(stream);
    drop(jobs);
    let finish = async {
        while deliveries.join_next().await.is_some() {}
        let _ = worker.await;
    };
    if tokio::time::timeout(EXIT_GRACE, finish).await.is_err() {
        tracing::warn!("in-flight Canon writes did not finish within the exit grace");
    }
    drop(out);
    let _ = writer.await;
    exit_code
}

struct Driver {
    /// The pure state and decisions (canon-host).
    session: Session,
    config: Config,
    out: mpsc::Sender<String>,
    jobs: mpsc::Sender<Job>,
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
}

impl Driver {
    pub(super) async fn send_line(&self, line: String) {
        if self.out.send(line).await.is_err() {
            tracing::debug!("stdout writer is gone; frame dropped");
        }
    }

    pub(super) async fn respond(&self, id: &str, re: &str, result: Result<Value, ErrorBody>) {
        let line = match &result {
            Ok(body) => protocol::encode_response(id, re, Ok(body.clone())),
            Err(error) => protocol::encode_response(id, re, Err(error)),
        };
        self.send_line(line).await;
    }

    pub(super) async fn respond_error(&self, id: &str, re: &str, code: ErrorCode, message: String) {
        let error = ErrorBody {
            code,
            message,
            retryable: false,
        };
        self.send_line(protocol::encode_response(id, re, Err(&error)))
            .await;
    }

    pub(super) async fn notify(&self, note: DaemonNotification) {
        self.send_line(protocol::encode_notification(
            note.type_name(),
            note.to_body(),
        ))
        .await;
    }

    pub(super) fn client(&mut self) -> Result<CanonClient, TransportError> {
        if let Some(client) = &self.client {
            return Ok(client.clone());
        }
        let mut config = ClientConfig::new(
            self.config.base_url.clone(),
            self.config.stream_url.clone(),
            self.config.api_key.clone(),
        );
        if let Some(backoff) = self.config.durable_backoff {
            config.durable_backoff = backoff;
        }
        let client = CanonClient::new(config)?;
        self.client = Some(client.clone());
        Ok(client)
    }

    pub(super) async fn on_line(&mut self, bytes: &[u8]) {
        let frame = match protocol::decode_frame(bytes) {
            Ok(frame) => frame,
            Err(error) => {
                // Recover an id when the line is JSON with one, to answer.
                let id = serde_json::from_slice::<Value>(bytes).ok().and_then(|v| {
                    let id = v.get("id")?.as_str()?.to_owned();
                    let kind = v.get("type")?.as_str()?.to_owned();
                    Some((id, kind))
                });
                match id {
                    Some((id, kind)) => {
                        self.respond_error(&id, &kind, error.code(), error.to_string())
                            .await
                    }
                    None => tracing::warn!(%error, "dropped an unusable frame"),
                }
                return;
            }
        };
        match frame {
            Frame::Request { id, kind, body } => self.on_request(id, kind, body).await,
            Frame::Notification { kind, body } => self.on_notification(&kind, body).await,
            Frame::Response { id, re, result } => {
                // Daemon requests are fire-and-log: `inbound.message` and
                // `control.signal` need nothing from the answer.
                let re = re.as_deref().unwrap_or("");
                match result {
                    Ok(_) => tracing::debug!(id, re, ok = true, "shim answered"),
                    Err(error) => tracing::debug!(
                        id,
                        re,
                        ok = false,
                        code = ?error.code,
                        retryable = error.retryable,
                        "shim answered"
                    ),
                }
            }
        }
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

    /// Runs the machine on one input and carries out its effects.
    pub(super) async fn feed(&mut self, input: Input) {
        let effects = self.session.feed(input, now_ms());
        self.perform(effects).await;
    }

    /// Answers a registered request outside the turn machine, behind the
    /// queued Canon writes like the machine's own answers.
    pub(super) async fn reply(&mut self, request: RequestId, reply: HostReply) {
        if let Some(line) = self.session.reply_line(request, reply) {
            self.perform(vec![SessionEffect::Reply(line)]).await;
        }
    }

    /// Performs the session's effects in order.
    pub(super) async fn perform(&mut self, effects: Vec<SessionEffect>) {
        for effect in effects {
            self.perform_one(effect).await;
        }
    }

    async fn perform_one(&mut self, effect: SessionEffect) {
        match effect {
            SessionEffect::Frame(line) => self.send_line(line).await,
            SessionEffect::Reply(line) => {
                let job = Job::Respond {
                    out: self.out.clone(),
                    line,
                };
                if let Err(mpsc::error::SendError(Job::Respond { line, .. })) =
                    self.jobs.send(job).await
                {
                    self.send_line(line).await;
                }
            }
            SessionEffect::CancelHitl(session_key) => self.cancel_hitl(session_key.as_deref()),
            SessionEffect::Canon(Effect::Deliver(delivery)) => {
                let op = delivery.op;
                match self.client() {
                    Ok(client) => {
                        let done = self.done.clone();
                        self.spawn_background(async move {
                            let result = deliver(client, delivery).await;
                            let _ = done.send((op, result)).await;
                        });
                    }
                    Err(error) => {
                        let result = Err(failure(&error));
                        Box::pin(self.feed(Input::DeliveryOutcome { op, result })).await;
                    }
                }
            }
            // Best-effort writes never open the first connection (no
            // network I/O before `adapter.connect` or a durable send,
            // hermes-host.md §19.3).
            SessionEffect::Canon(effect) => match self.client.clone() {
                Some(client) => {
                    if self.jobs.send(Job::Write { client, effect }).await.is_err() {
                        tracing::warn!("Canon write worker is gone");
                    }
                }
                None => tracing::debug!("best-effort write skipped: not connected"),
            },
        }
    }

    /// Sends a daemon-originated request (`d:<n>`); the shim's answer is
    /// only logged ([`Frame::Response`] in `on_line`).
    pub(super) async fn send_request(&mut self, request: DaemonRequest) {
        let line = self.session.request_line(request);
        self.send_line(line).await;
    }

    /// Answers a blocking HITL request of the shim with a `SendResult`.
    pub(super) async fn respond_send(&self, id: &str, re: &str, result: protocol::SendResult) {
        let body = serde_json::to_value(result).unwrap_or_else(|_| empty());
        self.respond(id, re, Ok(body)).await;
    }

    /// Answers a request this daemon does not serve yet (`internal`, not
    /// retryable, `"<what> is not supported …"`).
    pub(super) async fn unsupported(&self, id: &str, re: &str, what: &str) {
        tracing::warn!(kind = re, what, "answered an unsupported request");
        self.respond_error(
            id,
            re,
            ErrorCode::Internal,
            format!("{what} {UNSUPPORTED_SUFFIX}"),
        )
        .await;
    }
}

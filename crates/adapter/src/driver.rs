//! The tokio driver behind `canon-hermes serve --stdio` (hermes-host.md
//! §19.3–§19.11): JSON lines in from the shim, JSON lines out through one
//! writer task, the [`canon_host::turn::TurnMachine`] in the middle, Canon through
//! `canon_transport`, and the SSE stream through the inbound pipeline of
//! `canon_dispatch`.
//!
//! # Shape
//!
//! One task owns all state and reacts, in a single `select!` loop, to: a
//! line from the stdin reader task, an SSE item, the result of a durable
//! delivery, a consumed runtime signal, the parent-process check
//! (hermes-host.md §19.3) and the turn machine's next deadline. Canon writes
//! that the machine treats as best effort (turn publishes, streaming, typing,
//! read marks, dispositions) run in order on one worker task, so the live bubble
//! never sees its writes reordered; durable deliveries run on their own
//! tasks and report back as [`Input::DeliveryOutcome`]. Frames to the shim
//! go through one bounded channel to the writer task, so stdout carries
//! protocol frames only and in order.
//!
//! Runtime control signals (canon-wire.md §4.9, §5.6) are consumed off the
//! loop: one task per connection polls every cached conversation, one after
//! another, right after connect and then every [`DriverConfig::signal_poll`];
//! a `runtime.control` doorbell spawns an immediate consume for its
//! conversation. Both report consumed signals over a channel, and the loop
//! turns each into a `control.signal` request to the shim. A `probe` with
//! `verify` and disposition retries (hermes-host.md §12.3) also run on
//! their own tasks, so a slow Canon never stalls the loop.
//!
//! The runtime status (T10, canon-wire.md §8.1) is published once at
//! connect and then every [`DriverConfig::status_interval`] by a status
//! loop task of that connection. `replay.expired` on the stream (§5.3; the
//! transport has already moved its cursor) re-fetches `GET /conversations`
//! on a task of its own; the list replaces the conversation cache that
//! `adapter.chat_info`, `control.signal` and the signal pass read, as the
//! list of connect did, and a failure is logged and reconnects the stream.
//! `adapter.disconnect`, `shutdown`, a new connect and exit stop the signal
//! pass, the status loop and a re-fetch in flight.
//!
//! `typing` notifications become `POST /typing` through the turn machine,
//! which coalesces `on` for a chat to at most one write per
//! [`canon_host::turn::TYPING_COALESCE_MS`] (hermes-host.md §19.9); `off` always
//! passes and re-arms the chat. `turn.steered` becomes
//! [`Input::SteerAccepted`]: the steered turn's `no_reply` silence is lifted
//! (hermes-host.md §12.3 step 5), so its final is delivered after all.
//!
//! # Inbound media
//!
//! A waking `message.created` with attachments (runtime-control.md §8.2,
//! canon-wire.md §5.4.2 step 9) is materialized off the loop: a task
//! downloads each attachment in array order through the SSRF-guarded
//! [`MediaDownloader`], classifies it with `canon_host::media`, writes every
//! attachment that is not hidden to a new 0600 file under
//! `<CANON_HOME>/tmp/` (hermes-host.md Q8) and lists it in the
//! `inbound.message` `media`; hidden ones are never written and only show as
//! the §8.5 markers. At most [`MEDIA_CONCURRENCY`] messages download at
//! once. Order per conversation is kept by a lane: while a message of a
//! conversation is being materialized, later messages of that conversation
//! (with or without media) wait behind it, and the lane is flushed front to
//! back as tasks report; other conversations are not held up. When
//! [`MAX_PENDING_INBOUND`] messages wait, the loop stops reading the event
//! stream until one is sent (back-pressure instead of an unbounded buffer).
//! Files of previous runs older than [`HANDOFF_MAX_AGE`] are deleted at
//! start. The §8.4 capture registry does not exist: hidden media are
//! reported to the model as withheld ([`canon_host::media::available_count`]).
//!
//! # Blocking clarify and exec approval
//!
//! `adapter.send_clarify` and `adapter.send_exec_approval`
//! (runtime-control.md §6.1–§6.5, hermes-host.md §13, Q2, Q10) run on a
//! task of their own: it creates the Canon runtime interaction ([`hitl`]
//! builds the request: responder from the turn, `sudo` to the owner,
//! session rules, normalized choices) and reports back; the loop answers
//! the shim's request with the interaction message id (within
//! [`HITL_CREATE_BUDGET`], well inside the shim's 14 s), publishes
//! `waiting_input` through the machine ([`Input::WaitingInput`], which
//! pauses typing) and the task polls every [`DriverConfig::hitl_poll`]
//! until the interaction leaves `pending` or its deadline passes (then it
//! cancels it). The loop then sends `approval.resolve` or `clarify.resolve`
//! to the shim and feeds [`Input::InputResolved`] (`tool`, turns.md OQ-3).
//! An approval's Canon deadline is the smaller of `HERMES_APPROVAL_TIMEOUT`
//! and Hermes' own `approvals.timeout` (Q10), so Canon gives up when Hermes
//! stops waiting; `turn.complete`, `adapter.disconnect` and `shutdown`
//! cancel the interactions still open for their turn.
//!
//! # Outbound media
//!
//! `adapter.send_media` and `standalone.send` with `media_files`
//! ([`outbound`], canon-wire.md §7.4): a task reads the file Hermes names
//! (refused above 10 MiB before reading) or downloads a remote image through
//! the same SSRF-guarded [`MediaDownloader`], uploads it (T5; at most
//! [`outbound::UPLOAD_CONCURRENCY`] at once) and reports back; the machine
//! then sends the message ([`Input::Media`]: in an open turn its own durable
//! `turn_complete` under the turn's next ordinal id, turns.md OQ-6; out of
//! turn a fresh standalone id group, the media on the final part). A
//! silenced turn answers success before anything is uploaded.
//!
//! # Not wired yet
//!
//! Every `tool.call` except `canon_runtime_control` with `action:
//! "no_reply"` are answered with an `internal` error whose message says the
//! request is unsupported ([`UNSUPPORTED_SUFFIX`]), never silently dropped.
//! The daemon does not yet send `host.queue_depth`, does not keep inbound media for trusted tools (the
//! §8.4 capture registry of runtime-control.md), and its status loop
//! publishes T10 only (the detached receipts §8.1 step 7 resumes first do
//! not exist here yet).
//!
//! # Invariants
//!
//! * Only the writer task writes to the output; logs go through `tracing`.
//! * Never panics on shim input or on anything Canon sends.
//! * The API key and reply-authority tokens never reach a log line.
//! * No network I/O before `adapter.connect`, a `probe` with `verify`, or
//!   `standalone.send` (§19.3); `probe` without `verify` and
//!   `adapter.chat_info` are answered from memory.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use canon_dispatch::protocol::DeliveryIntent;
use canon_transport::client::{PollErrors, PollOutcome};
use canon_transport::media::{safe_url, MediaDownloader, MediaOptions};
use canon_transport::net::AddressPolicy;
use canon_transport::stream::{ConnectionState, StreamConfig, StreamItem};
use canon_transport::{CanonClient, ClientConfig, DurableRequest, EventStream, TransportError};
use canon_wire::types::{
    delivered_message_id, ConsumeInteraction, DurableCall, InteractionCreated, InteractionKind,
    InteractionRequest, NoReplyRecord, RuntimeSignal,
};
use canon_wire::EventKind;
use serde_json::{Map, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{Interval, MissedTickBehavior};

use canon_host::media::{self, MediaCounts, MediaSettings, TrustedScope};
use canon_host::protocol::{
    self, AdapterSendClarify, AdapterSendExecApproval, AdapterStatus, ChatRef, ConnectResult,
    DaemonNotification, DaemonRequest, ErrorBody, ErrorCode, EventSummary, Frame, HandshakePolicy,
    InboundMedia, InboundMessage, Probe, ProbeResult, ShimNotification, ShimRequest,
    EXIT_UNSUPPORTED_PROTOCOL, MAX_FRAME_BYTES,
};
use canon_host::turn::{
    ActivityEvent, Delivery, DeliveryFailure, Effect, HostEdit, HostMedia, HostReply, HostSend,
    Input, MediaPayload, OpId, ProcessingStart, RequestId, SendOutcome, StandaloneSend, TurnConfig,
    TurnMachine, TurnState,
};
use canon_wire::secret::{ApiKey, Opaque};

/// The `CANON_HOME` rule (cli.md §6, approvals.md §3.1), re-exported so the
/// binary resolves [`DriverConfig::canon_home`] exactly as the approvals
/// store does without depending on `canon-approvals`.
pub use canon_approvals::store::resolve_canon_home;

use canon_host::connect::{self, ConnectFailure};
use canon_host::conversations::canon_chat;
use canon_host::delivery;
use canon_host::hitl;
use canon_host::hitl::table::{HitlEntry, HitlKind, HitlOutcome};
use canon_host::inbound::finish_inbound;
use canon_host::protocol::{AUDITED_HERMES, AUDITED_PYTHON};
use canon_host::requests;
use canon_host::session::{InboundStep, Session};
pub mod outbound;

/// Frames buffered between the stdin reader and the loop, and between the
/// loop and the stdout writer (hermes-host.md §19.9).
pub const CHANNEL_FRAMES: usize = 256;

/// How long in-flight Canon writes may finish after stdin EOF
/// (hermes-host.md §19.3).
pub const EXIT_GRACE: Duration = Duration::from_secs(5);

/// Budget of the `no_reply` silence record (turns.md §8.4).
pub const NO_REPLY_RECORD_BUDGET: Duration = Duration::from_secs(3);

/// How often every cached conversation is polled for a runtime signal
/// (canon-wire.md §4.9); the default of [`DriverConfig::signal_poll`].
pub const SIGNAL_POLL: Duration = Duration::from_secs(15);

/// How often the runtime status is published again after the one at
/// connect (canon-wire.md §8.1 step 7, T10); the default of
/// [`DriverConfig::status_interval`].
pub const STATUS_INTERVAL: Duration = Duration::from_secs(30);

/// The shortest signal poll or status interval accepted (our number): a
/// zero interval would spin, and `tokio::time::interval` refuses it.
const MIN_LOOP_INTERVAL: Duration = Duration::from_millis(50);

/// The longest signal poll or status interval accepted (our number), far
/// from the clock arithmetic's overflow.
const MAX_LOOP_INTERVAL: Duration = Duration::from_secs(3_600);

/// How often `CANON_HERMES_PARENT_PID` is checked (hermes-host.md §19.3).
pub const PARENT_CHECK: Duration = Duration::from_secs(5);

/// Sleeps before the retries of a failed disposition release
/// (hermes-host.md §12.3, canon-wire.md §4.10).
pub const DISPOSITION_RETRY_DELAYS: [Duration; 3] = [
    Duration::from_secs(2),
    Duration::from_secs(8),
    Duration::from_secs(30),
];

/// Disposition releases retrying at once (our number); beyond it a failed
/// release is only logged, so a Canon outage cannot pile up tasks.
const MAX_DISPOSITION_RETRIES: usize = 256;

/// Budget of a `probe` with `verify: true`, inside the shim's 5 s timeout
/// (hermes-host.md §19.6).
pub const PROBE_VERIFY_BUDGET: Duration = Duration::from_secs(4);

/// Consumed signals buffered between the signal tasks and the loop.
const SIGNAL_FRAMES: usize = 64;

/// Inbound messages materializing their media at once (our number; the
/// others wait for a permit in their own task).
pub const MEDIA_CONCURRENCY: usize = 4;

/// Inbound messages waiting in conversation lanes at most (our number);
/// at the cap the loop stops reading the event stream until one is sent.
pub const MAX_PENDING_INBOUND: usize = 256;

/// Hand-off files older than this are deleted at start (hermes-host.md Q8).
pub const HANDOFF_MAX_AGE: Duration = Duration::from_secs(3_600);

/// The hand-off directory under `CANON_HOME` (hermes-host.md Q8, cli.md §6).
pub const HANDOFF_DIR: &str = "tmp";

/// How often a blocking clarify or approval is polled (canon-wire.md
/// How often a blocking clarify or approval is polled (canon-wire.md
/// §9.1); the default of [`DriverConfig::hitl_poll`].
pub const HITL_POLL: Duration = Duration::from_secs(1);

/// How long creating a blocking clarify or approval may take before the
/// shim's request is answered as failed (inside its 14 s timeout,
/// hermes-host.md §19.6).
pub const HITL_CREATE_BUDGET: Duration = Duration::from_secs(10);

/// The end of the message of a request this daemon does not serve yet.
pub const UNSUPPORTED_SUFFIX: &str = "is not supported by this canon-hermes daemon yet";

/// What the driver needs; read from the environment by the binary.
#[derive(Clone)]
pub struct DriverConfig {
    /// `CANON_BASE_URL`.
    pub base_url: String,
    /// `CANON_STREAM_URL`.
    pub stream_url: String,
    /// `CANON_API_KEY` (redacted in `Debug`).
    pub api_key: ApiKey,
    /// `CANON_ENVIRONMENT_ID`; when set, `adapter.connect` verifies both
    /// services belong to it (canon-wire.md §1.2).
    pub environment_id: Option<String>,
    /// `HERMES_ALLOW_PRIVATE_URLS`: inbound media downloads may reach
    /// private addresses (the cloud-metadata floor stays blocked).
    pub allow_private_urls: bool,
    /// `CANON_INBOUND_IMAGE_DELIVERY` (`None` when unset or blank); wins over
    /// the platform extra (runtime-control.md §8.1).
    pub inbound_image_delivery: Option<String>,
    /// `CANON_INBOUND_VISUAL_MEDIA_DELIVERY` (`None` when unset or blank).
    pub inbound_visual_media_delivery: Option<String>,
    /// The Canon home ([`resolve_canon_home`]); inbound media are handed to
    /// the shim as files under its `tmp/`. `None` (no home directory): no
    /// attachment can be handed off, each counts as failed.
    pub canon_home: Option<PathBuf>,
    /// `CANON_HOME_CHANNEL`, the standalone fallback target.
    pub home_channel: Option<String>,
    /// SHA-256 of the manifest this binary would install; `None` accepts the
    /// shim's (the install command that generates it does not exist yet).
    pub manifest_sha256: Option<String>,
    /// Sleeps of the durable loop; `None` keeps the transport's defaults.
    pub durable_backoff: Option<[Duration; 2]>,
    /// `CANON_HERMES_PARENT_PID`: the daemon exits, as on stdin EOF, once
    /// this process no longer exists (checked every [`PARENT_CHECK`]).
    pub parent_pid: Option<u32>,
    /// Interval of the runtime signal poll ([`SIGNAL_POLL`] in production;
    /// tests shorten it), kept between 50 ms and one hour.
    pub signal_poll: Duration,
    /// Interval of the runtime status loop ([`STATUS_INTERVAL`] in
    /// production; tests shorten it), kept between 50 ms and one hour.
    pub status_interval: Duration,
    /// `HERMES_CLARIFY_TIMEOUT` ([`hitl::timeout_from_env`]): the Canon
    /// deadline of a blocking clarify (runtime-control.md §6.4).
    pub clarify_timeout: Duration,
    /// `HERMES_APPROVAL_TIMEOUT` ([`hitl::timeout_from_env`]): the Canon
    /// deadline of an exec approval before the minimum with Hermes' own
    /// `approvals.timeout` (runtime-control.md §6.5, hermes-host.md Q10).
    pub approval_timeout: Duration,
    /// Poll interval of blocking clarifies and approvals ([`HITL_POLL`] in
    /// production; tests shorten it), kept between 50 ms and one hour.
    pub hitl_poll: Duration,
}

impl std::fmt::Debug for DriverConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverConfig")
            .field("base_url", &self.base_url)
            .field("stream_url", &self.stream_url)
            .field("api_key", &self.api_key)
            .field("environment_id", &self.environment_id)
            .field("allow_private_urls", &self.allow_private_urls)
            .field("inbound_image_delivery", &self.inbound_image_delivery)
            .field(
                "inbound_visual_media_delivery",
                &self.inbound_visual_media_delivery,
            )
            .field("canon_home", &self.canon_home)
            .field("home_channel", &self.home_channel)
            .field("parent_pid", &self.parent_pid)
            .field("signal_poll", &self.signal_poll)
            .field("status_interval", &self.status_interval)
            .field("clarify_timeout", &self.clarify_timeout)
            .field("approval_timeout", &self.approval_timeout)
            .field("hitl_poll", &self.hitl_poll)
            .finish_non_exhaustive()
    }
}

/// Runs the daemon until `input` reaches EOF or the process
/// [`DriverConfig::parent_pid`] is gone; returns the process exit code (0,
/// or [`EXIT_UNSUPPORTED_PROTOCOL`] after a failed version negotiation).
pub async fn run<R, W>(config: DriverConfig, input: R, output: W) -> i32
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
        refetch_id: 0,
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
        exit_code: None,
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
        if driver.exit_code.is_some() {
            break;
        }
    }

    tracing::info!(reason = exit_reason, "shutting down");
    reader.abort();
    let exit_code = driver.exit_code.unwrap_or(0);
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

/// Waits for the next tick of an optional interval; never, without one.
async fn tick(interval: Option<&mut Interval>) {
    match interval {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Whether a process with this id exists (`kill(pid, 0)`): only "no such
/// process" counts as gone; a process we may not signal still exists.
fn process_exists(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        // Not a pid a process can have: nothing to watch.
        return true;
    };
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

/// One line from the reader task.
enum Line {
    Frame(Vec<u8>),
    TooLarge,
}

async fn read_lines<R: AsyncBufRead + Unpin>(mut input: R, tx: mpsc::Sender<Line>) {
    let mut buf = Vec::new();
    loop {
        match read_bounded_line(&mut input, &mut buf).await {
            Ok(None) => return,
            Ok(Some(too_large)) => {
                let line = if too_large {
                    Line::TooLarge
                } else {
                    Line::Frame(std::mem::take(&mut buf))
                };
                if tx.send(line).await.is_err() {
                    return;
                }
            }
            Err(error) => {
                tracing::warn!(%error, "reading stdin failed");
                return;
            }
        }
    }
}

/// Reads one LF-terminated line of at most [`MAX_FRAME_BYTES`]; a longer
/// line is consumed and reported as too large. `None` at EOF.
async fn read_bounded_line<R: AsyncBufRead + Unpin>(
    input: &mut R,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<bool>> {
    buf.clear();
    let mut too_large = false;
    let mut any = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(any.then_some(too_large));
        }
        any = true;
        let (take, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        if !too_large {
            if buf.len() + take > MAX_FRAME_BYTES {
                too_large = true;
                buf.clear();
            } else {
                buf.extend_from_slice(&available[..take]);
            }
        }
        input.consume(take);
        if done {
            return Ok(Some(too_large));
        }
    }
}

async fn write_lines<W: AsyncWrite + Unpin>(mut output: W, mut rx: mpsc::Receiver<String>) {
    while let Some(mut line) = rx.recv().await {
        line.push('\n');
        let written = async {
            output.write_all(line.as_bytes()).await?;
            output.flush().await
        };
        if let Err(error) = written.await {
            tracing::warn!(%error, "writing stdout failed; dropping further frames");
            while rx.recv().await.is_some() {}
            return;
        }
    }
    let _ = output.shutdown().await;
}

/// Work for the in-order worker.
enum Job {
    /// A best-effort Canon write.
    Write { client: CanonClient, effect: Effect },
    /// A response line to the shim, written only after every earlier write
    /// finished (the closing publish happens inside `turn.complete`).
    Respond {
        out: mpsc::Sender<String>,
        line: String,
    },
}

async fn run_jobs(mut rx: mpsc::Receiver<Job>) {
    let retrying = Arc::new(AtomicUsize::new(0));
    while let Some(job) = rx.recv().await {
        let (client, effect) = match job {
            Job::Write { client, effect } => (client, effect),
            Job::Respond { out, line } => {
                if out.send(line).await.is_err() {
                    tracing::debug!("stdout writer is gone; frame dropped");
                }
                continue;
            }
        };
        let (what, result) = match &effect {
            Effect::PublishTurn(update) => ("runtime turn", client.publish_turn(update).await),
            Effect::Streaming(update) => ("streaming", client.streaming(update).await),
            Effect::Typing(typing) => ("typing", client.set_typing(typing).await),
            Effect::MarkRead { conversation_id } => {
                ("read", client.mark_read(conversation_id).await)
            }
            Effect::AckDisposition {
                conversation_id,
                message_id,
            } => {
                let Err(error) = client.accept_disposition(conversation_id, message_id).await
                else {
                    continue;
                };
                // The retries sleep for up to 40 s; they run beside the
                // worker so later writes keep their pace and order.
                if retrying.fetch_add(1, Ordering::Relaxed) < MAX_DISPOSITION_RETRIES {
                    tracing::debug!(
                        conversation_id,
                        message_id,
                        %error,
                        "disposition release failed; retrying in the background"
                    );
                    let retrying = Arc::clone(&retrying);
                    let (conversation_id, message_id) =
                        (conversation_id.clone(), message_id.clone());
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
                continue;
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
                        continue;
                    }
                }
            }
            _ => continue,
        };
        if let Err(error) = result {
            tracing::warn!(what, %error, "best-effort Canon write failed");
        }
    }
}

/// Re-sends a failed `accepted_now` release after each of
/// [`DISPOSITION_RETRY_DELAYS`], then gives up with a warning
/// (canon-wire.md §4.10; the PATCH is idempotent on the server).
async fn retry_disposition(client: &CanonClient, conversation_id: &str, message_id: &str) {
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

type DeliveryResult = Result<Option<String>, DeliveryFailure>;

/// Sends every part of a delivery in order; Canon's id of the last part.
async fn deliver(client: CanonClient, delivery: Delivery) -> DeliveryResult {
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
fn failure(error: &TransportError) -> DeliveryFailure {
    delivery::classify_failure(error.kind(), error.to_string(), error.is_retryable())
}

struct Driver {
    /// The pure state and decisions (canon-host).
    session: Session,
    config: DriverConfig,
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
    /// The number of the latest re-fetch; a result carrying another number
    /// is stale (superseded, or from a stopped connection) and dropped.
    refetch_id: u64,
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
    exit_code: Option<i32>,
}

/// A finished outbound upload: the machine input to feed, or the error to
/// answer the registered request with.
struct Uploaded {
    request: RequestId,
    standalone: bool,
    result: Result<Input, String>,
}

/// What a HITL task reports.
enum HitlEvent {
    /// The create call ended; the shim's request waits for this.
    Created {
        key: u64,
        shim_id: String,
        re: &'static str,
        /// The created interaction, or a safe error text and whether it is
        /// retryable.
        result: Result<InteractionCreated, (String, bool)>,
    },
    /// The interaction left `pending`, its deadline passed, or the driver
    /// cancelled it.
    Finished { key: u64, outcome: HitlOutcome },
}

/// A HITL task: creates the interaction, reports, then polls until it
/// leaves `pending`, its deadline passes (a cancel is sent) or `cancel`
/// fires (a cancel is sent too).
#[allow(clippy::too_many_arguments)]
async fn run_hitl(
    client: CanonClient,
    key: u64,
    shim_id: String,
    re: &'static str,
    request: InteractionRequest,
    consume: ConsumeInteraction,
    timeout: Duration,
    poll: Duration,
    mut cancel: oneshot::Receiver<()>,
    tx: mpsc::Sender<HitlEvent>,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    let result = match tokio::time::timeout(
        HITL_CREATE_BUDGET,
        client.request_interaction(&request),
    )
    .await
    {
        Ok(result) => result.map_err(|error| (error.to_string(), error.is_retryable())),
        Err(_) => Err((
            "Canon did not answer the runtime interaction request in time".to_owned(),
            false,
        )),
    };
    let created = result.is_ok();
    let report = HitlEvent::Created {
        key,
        shim_id,
        re,
        result,
    };
    if tx.send(report).await.is_err() || !created {
        return;
    }
    let outcome = tokio::select! {
        polled = client.poll_interaction(&consume, deadline, poll, PollErrors::AsPending) => {
            match polled {
                Ok(PollOutcome::Answered(result)) => HitlOutcome::Answered(result),
                _ => HitlOutcome::TimedOut,
            }
        }
        _ = &mut cancel => {
            let cancel = ConsumeInteraction { cancel: true, ..consume };
            if let Err(error) = client.consume_interaction(&cancel).await {
                tracing::debug!(%error, "interaction cancel failed");
            }
            HitlOutcome::Cancelled
        }
    };
    let _ = tx.send(HitlEvent::Finished { key, outcome }).await;
}

/// A media task's finished `inbound.message`.
struct MediaDone {
    conversation_id: String,
    job: u64,
    message: Box<InboundMessage>,
}

/// Aborts a task when dropped (the media work task, if its reporter is
/// aborted at exit).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The result of a `GET /conversations` re-fetch task.
struct Refetched {
    /// [`Driver::refetch_id`] when the task started.
    id: u64,
    result: Result<Vec<canon_wire::types::Conversation>, TransportError>,
}

/// The status loop (canon-wire.md §8.1 step 7): T10 every `every`, the
/// first one `every` after connect (connect publishes its own). A failure
/// is logged and the loop goes on; it ends when aborted.
async fn publish_status(client: CanonClient, every: Duration) {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    // A publish slower than the interval delays the next one instead of
    // sending them back to back.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        match client.publish_runtime_status().await {
            Ok(()) => tracing::trace!("runtime status published"),
            Err(error) => tracing::warn!(%error, "runtime status publish failed"),
        }
    }
}

/// A runtime signal a signal task consumed from Canon.
struct ConsumedSignal {
    conversation_id: String,
    signal: RuntimeSignal,
}

/// The signal pass: every conversation in `ids`, one after another, at once
/// and then every `every` (canon-wire.md §4.9, §8.1 step 7). Ends when the
/// loop stops listening.
async fn poll_signals(
    client: CanonClient,
    ids: watch::Receiver<Vec<String>>,
    every: Duration,
    tx: mpsc::Sender<ConsumedSignal>,
) {
    let mut ticker = tokio::time::interval(every);
    // A pass longer than the interval delays the next one instead of
    // starting passes back to back.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let pass = ids.borrow().clone();
        tracing::trace!(conversations = pass.len(), "signal pass");
        for conversation_id in pass {
            if !consume_signal(&client, conversation_id, &tx).await {
                return;
            }
        }
    }
}

/// Consumes the pending signal of one conversation and reports it; `false`
/// once nobody listens any more.
async fn consume_signal(
    client: &CanonClient,
    conversation_id: String,
    tx: &mpsc::Sender<ConsumedSignal>,
) -> bool {
    match client.consume_signal(&conversation_id).await {
        Ok(Some(signal)) => tx
            .send(ConsumedSignal {
                conversation_id,
                signal,
            })
            .await
            .is_ok(),
        Ok(None) => !tx.is_closed(),
        Err(error) => {
            tracing::debug!(conversation_id, %error, "signal consume failed");
            !tx.is_closed()
        }
    }
}

impl Driver {
    async fn send_line(&self, line: String) {
        if self.out.send(line).await.is_err() {
            tracing::debug!("stdout writer is gone; frame dropped");
        }
    }

    async fn respond(&self, id: &str, re: &str, result: Result<Value, ErrorBody>) {
        let line = match &result {
            Ok(body) => protocol::encode_response(id, re, Ok(body.clone())),
            Err(error) => protocol::encode_response(id, re, Err(error)),
        };
        self.send_line(line).await;
    }

    async fn respond_error(&self, id: &str, re: &str, code: ErrorCode, message: String) {
        let error = ErrorBody {
            code,
            message,
            retryable: false,
        };
        self.send_line(protocol::encode_response(id, re, Err(&error)))
            .await;
    }

    async fn notify(&self, note: DaemonNotification) {
        self.send_line(protocol::encode_notification(
            note.type_name(),
            note.to_body(),
        ))
        .await;
    }

    fn client(&mut self) -> Result<CanonClient, TransportError> {
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

    async fn on_line(&mut self, bytes: &[u8]) {
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

    async fn on_request(&mut self, id: String, kind: String, body: Value) {
        let request = match ShimRequest::from_parts(&kind, body) {
            Ok(request) => request,
            Err(error) => {
                self.respond_error(&id, &kind, error.code(), error.to_string())
                    .await;
                return;
            }
        };
        let re = request.type_name();
        if !self.session.handshake_done && !matches!(request, ShimRequest::Hello(_)) {
            self.respond_error(
                &id,
                re,
                ErrorCode::HandshakeRequired,
                "hello must come first".into(),
            )
            .await;
            return;
        }
        tracing::debug!(id, kind = re, "shim request");
        match request {
            ShimRequest::Hello(hello) => {
                let manifest = self
                    .config
                    .manifest_sha256
                    .clone()
                    .unwrap_or_else(|| hello.manifest_sha256.clone());
                let policy = HandshakePolicy {
                    daemon_version: env!("CARGO_PKG_VERSION"),
                    manifest_sha256: &manifest,
                    audited_hermes: AUDITED_HERMES,
                    audited_python: AUDITED_PYTHON,
                };
                let epoch = format!("{:016x}", random_u128() as u64);
                match protocol::negotiate(&hello, &policy, &epoch) {
                    Ok(ok) => {
                        self.session.handshake_done = true;
                        let body = protocol::ShimResponse::Hello(ok).to_body();
                        self.respond(&id, re, Ok(body)).await;
                        tracing::info!(epoch, "handshake done");
                    }
                    Err(error) => {
                        self.send_line(protocol::encode_response(&id, re, Err(&error)))
                            .await;
                        if error.code == ErrorCode::UnsupportedProtocol {
                            self.exit_code = Some(EXIT_UNSUPPORTED_PROTOCOL);
                        }
                    }
                }
            }
            ShimRequest::Probe(probe) => self.probe(id, re, &probe).await,
            ShimRequest::AdapterChatInfo(chat) => {
                let info = requests::chat_info(chat.chat_id, &self.session.conversations);
                let body = protocol::ShimResponse::AdapterChatInfo(info).to_body();
                self.respond(&id, re, Ok(body)).await;
            }
            ShimRequest::AdapterConnect(connect) => {
                self.session.host_approvals_timeout = connect.host.approvals_timeout_s;
                let result = self
                    .connect(connect.seams.busy_handler, &connect.config.extra.0)
                    .await;
                self.session.connected = result.connected;
                let body = protocol::ShimResponse::AdapterConnect(result).to_body();
                self.respond(&id, re, Ok(body)).await;
            }
            ShimRequest::AdapterDisconnect(_) => {
                // canon-wire.md §8.1: no wire call, the loops just stop.
                self.stop_loops();
                self.stream = None;
                self.session.connected = false;
                self.cancel_hitl(None);
                self.feed(Input::Disconnect).await;
                self.respond(&id, re, Ok(empty())).await;
            }
            ShimRequest::Shutdown(_) => {
                self.stop_loops();
                self.stream = None;
                self.session.connected = false;
                self.cancel_hitl(None);
                self.respond(&id, re, Ok(empty())).await;
            }
            ShimRequest::AdapterSend(send) => {
                let request = self.session.register(id, re);
                self.feed(Input::Send(HostSend {
                    request,
                    session_key: send.ctx.session_key,
                    conversation_id: send.chat_id,
                    content: send.content,
                    reply_to: send.reply_to,
                    metadata: send.metadata.unwrap_or_default(),
                    random: random_u128(),
                }))
                .await;
            }
            ShimRequest::AdapterEdit(edit) => {
                let request = self.session.register(id, re);
                self.feed(Input::Edit(HostEdit {
                    request,
                    session_key: edit.ctx.session_key,
                    conversation_id: edit.chat_id,
                    content: edit.content,
                    finalize: edit.finalize,
                    metadata: edit.metadata.unwrap_or_default(),
                    random: random_u128(),
                }))
                .await;
            }
            ShimRequest::TurnStart(start) => {
                let request = self.session.register(id, re);
                let input = self.processing_start(
                    request,
                    &start.event_ref,
                    start.session_key,
                    &start.event,
                    start.queue_depth,
                    Vec::new(),
                );
                self.feed(Input::ProcessingStart(input)).await;
            }
            ShimRequest::TurnAccepted(accepted) => {
                let request = self.session.register(id, re);
                let start = self.processing_start(
                    request,
                    &accepted.event_ref,
                    accepted.session_key,
                    &accepted.event,
                    accepted.queue_depth,
                    accepted.absorbed_refs,
                );
                self.feed(Input::QueueDequeued {
                    start,
                    interrupted: accepted.interrupted,
                })
                .await;
            }
            ShimRequest::TurnComplete(complete) => {
                let request = self.session.register(id, re);
                let conversation_id = self
                    .session
                    .complete(&complete.session_key, &complete.event_ref);
                self.cancel_hitl(Some(&complete.session_key));
                self.feed(Input::ProcessingComplete {
                    request,
                    session_key: complete.session_key,
                    conversation_id,
                    outcome: complete.outcome.into(),
                    queue_depth: complete.queue_depth,
                })
                .await;
            }
            ShimRequest::ToolCall(call) => {
                if requests::is_no_reply(&call) {
                    let request = self.session.register(id, re);
                    self.feed(Input::NoReply(requests::no_reply(&call, request)))
                        .await;
                } else {
                    self.unsupported(&id, re, re).await;
                }
            }
            ShimRequest::StandaloneSend(send) => {
                let home_channel_config =
                    requests::home_channel_config(send.pconfig.home_channel.as_ref());
                let request = self.session.register(id, re);
                let standalone = StandaloneSend {
                    request,
                    chat_id: send.chat_id,
                    home_channel_env: self.config.home_channel.clone(),
                    home_channel_config,
                    text: send.message,
                    media: None,
                    random: random_u128(),
                };
                let target = canon_host::turn::standalone_target(&standalone).map(str::to_owned);
                match target {
                    Some(target) if !send.media_files.is_empty() => {
                        self.upload_standalone(
                            standalone,
                            target,
                            send.media_files,
                            send.force_document,
                        );
                    }
                    _ => self.feed(Input::Standalone(standalone)).await,
                }
            }
            ShimRequest::AdapterSendMedia(media) => self.send_media(id, re, media).await,
            ShimRequest::AdapterSendClarify(clarify) => self.send_clarify(id, re, clarify).await,
            ShimRequest::AdapterSendExecApproval(approval) => {
                self.send_exec_approval(id, re, approval).await
            }
            ShimRequest::Resync(resync) => {
                let request = self.session.register(id, re);
                self.session.resync_sessions(&resync.open_turns);
                let open_turns = requests::resync_turns(resync.open_turns);
                self.feed(Input::Resync {
                    request,
                    open_turns,
                })
                .await;
            }
        }
    }

    /// `adapter.send_media` (hermes-host.md §19.6): a silenced turn is
    /// answered at once with success and nothing uploaded; otherwise the
    /// file is uploaded on a task (at most [`outbound::UPLOAD_CONCURRENCY`]
    /// at once) and the message is then the machine's
    /// ([`Input::Media`]).
    async fn send_media(
        &mut self,
        id: String,
        re: &'static str,
        media: protocol::AdapterSendMedia,
    ) {
        let request = self.session.register(id, re);
        let session_key = media.ctx.session_key.clone();
        if self
            .session
            .machine
            .is_silenced(session_key.as_deref(), &media.chat_id)
        {
            let turn_id = session_key
                .as_deref()
                .and_then(|k| self.session.machine.open_turn(k))
                .unwrap_or_default()
                .to_owned();
            self.perform(Effect::Reply {
                request,
                reply: HostReply::Send(SendOutcome::Silenced { turn_id }),
            })
            .await;
            return;
        }
        let client = match self.client() {
            Ok(client) => client,
            Err(error) => {
                self.answer_upload_error(request, false, error.to_string())
                    .await;
                return;
            }
        };
        let downloader = self.media_downloader();
        let permits = self.upload_permits.clone();
        let done = self.upload_tx.clone();
        let item = outbound::MediaItem {
            op: media.op,
            url: media.url,
            path: media.path,
            file_name: media.file_name,
            mime_type: media.mime_type,
            duration_ms: media.duration_ms,
        };
        let random = random_u128();
        self.upload_tasks.spawn(async move {
            let _permit = permits.acquire_owned().await;
            let result = outbound::upload_item(&client, &downloader, &media.chat_id, &item)
                .await
                .map(|payload| {
                    Input::Media(HostMedia {
                        request,
                        session_key,
                        conversation_id: media.chat_id,
                        caption: media.caption.unwrap_or_default(),
                        reply_to: media.reply_to,
                        metadata: media.metadata.unwrap_or_default(),
                        media: payload,
                        random,
                    })
                });
            let _ = done
                .send(Uploaded {
                    request,
                    standalone: false,
                    result,
                })
                .await;
        });
    }

    /// `standalone.send` with `media_files` (hermes-host.md §15): every
    /// file is uploaded first, then the text goes out as one standalone id
    /// group with the media on the final part.
    fn upload_standalone(
        &mut self,
        mut send: StandaloneSend,
        target: String,
        files: Vec<String>,
        force_document: bool,
    ) {
        let request = send.request;
        let done = self.upload_tx.clone();
        let permits = self.upload_permits.clone();
        let client = self.client();
        self.upload_tasks.spawn(async move {
            let result = match client {
                Ok(client) => {
                    let _permit = permits.acquire_owned().await;
                    outbound::upload_files(&client, &target, &files, force_document).await
                }
                Err(error) => Err(error.to_string()),
            };
            let result = result.map(|payload: MediaPayload| {
                send.media = Some(payload);
                Input::Standalone(send)
            });
            let _ = done
                .send(Uploaded {
                    request,
                    standalone: true,
                    result,
                })
                .await;
        });
    }

    /// An upload finished: feed its input, or answer its error.
    async fn on_uploaded(&mut self, uploaded: Uploaded) {
        while self.upload_tasks.try_join_next().is_some() {}
        match uploaded.result {
            Ok(input) => self.feed(input).await,
            Err(error) => {
                self.answer_upload_error(uploaded.request, uploaded.standalone, error)
                    .await
            }
        }
    }

    async fn answer_upload_error(&mut self, request: RequestId, standalone: bool, error: String) {
        tracing::warn!(%error, "outbound media not sent");
        let reply = if standalone {
            HostReply::Standalone(Err(format!(
                "{}{error}",
                canon_host::turn::STANDALONE_ERROR_PREFIX
            )))
        } else {
            HostReply::Send(SendOutcome::Failed {
                error,
                retryable: false,
            })
        };
        self.perform(Effect::Reply { request, reply }).await;
    }

    /// The guarded media downloader (built here when no connect did yet).
    fn media_downloader(&mut self) -> MediaDownloader {
        self.downloader
            .get_or_insert_with(|| {
                MediaDownloader::new(MediaOptions {
                    policy: AddressPolicy {
                        allow_private: self.config.allow_private_urls,
                        allow_loopback: false,
                    },
                    ..MediaOptions::default()
                })
            })
            .clone()
    }

    /// Answers a request this daemon does not serve yet (`internal`, not
    /// retryable, `"<what> is not supported …"`).
    async fn unsupported(&self, id: &str, re: &str, what: &str) {
        tracing::warn!(kind = re, what, "answered an unsupported request");
        self.respond_error(
            id,
            re,
            ErrorCode::Internal,
            format!("{what} {UNSUPPORTED_SUFFIX}"),
        )
        .await;
    }

    /// Answers a blocking HITL request of the shim with a `SendResult`.
    async fn respond_send(&self, id: &str, re: &str, result: protocol::SendResult) {
        let body = serde_json::to_value(result).unwrap_or_else(|_| empty());
        self.respond(id, re, Ok(body)).await;
    }

    /// The responder of a blocking HITL request (runtime-control.md §6.1):
    /// the turn's recorded responder, else the trusted user of the call's
    /// Canon context; when both exist and differ, the recorded one.
    fn responder_for(&self, session_key: &str, ctx: &protocol::TurnContext) -> Option<String> {
        hitl::table::responder(self.session.machine.responder(session_key), ctx)
    }

    /// `adapter.send_clarify` (runtime-control.md §6.4).
    async fn send_clarify(&mut self, id: String, re: &'static str, clarify: AdapterSendClarify) {
        let Some(client) = self.hitl_client() else {
            self.respond_send(&id, re, hitl::table::failure(hitl::NOT_CONNECTED, false))
                .await;
            return;
        };
        let timeout = self.config.clarify_timeout;
        let responder = self.responder_for(&clarify.session_key, &clarify.ctx);
        let request = hitl::clarify_request(&hitl::ClarifyAsk {
            conversation_id: &clarify.chat_id,
            clarify_id: &clarify.clarify_id,
            question: &clarify.question,
            choices: clarify.choices.as_deref().unwrap_or_default(),
            responder,
            session_key: &clarify.session_key,
            expires_at: expires_at(timeout),
        });
        let consume = ConsumeInteraction {
            kind: InteractionKind::Input,
            conversation_id: clarify.chat_id.clone(),
            id: clarify.clarify_id.clone(),
            cancel: false,
        };
        let entry = HitlEntry::new(
            clarify.session_key,
            clarify.chat_id,
            HitlKind::Clarify {
                clarify_id: clarify.clarify_id,
            },
        );
        let request = InteractionRequest::Input(request);
        self.start_hitl(client, id, re, entry, request, consume, timeout)
            .await;
    }

    /// `adapter.send_exec_approval` (runtime-control.md §6.2, §6.3, §6.5,
    /// hermes-host.md Q2, Q10).
    async fn send_exec_approval(
        &mut self,
        id: String,
        re: &'static str,
        approval: AdapterSendExecApproval,
    ) {
        let Some(client) = self.hitl_client() else {
            self.respond_send(&id, re, hitl::table::failure(hitl::NOT_CONNECTED, false))
                .await;
            return;
        };
        let timeout = hitl::approval_timeout(
            self.config.approval_timeout,
            self.session.host_approvals_timeout,
        );
        let approval_id = format!("hermes-{:020x}", random_u128() & ((1u128 << 80) - 1));
        let responder = self.responder_for(&approval.session_key, &approval.ctx);
        let request = hitl::approval_request(&hitl::ApprovalAsk {
            conversation_id: &approval.chat_id,
            approval_id: &approval_id,
            command: approval.command.expose(),
            description: approval.description.as_deref(),
            responder,
            owner_id: self.session.agent.owner_id.as_deref(),
            allow_session: approval.allow_session.unwrap_or(true),
            smart_denied: approval.smart_denied,
            session_key: &approval.session_key,
            expires_at: expires_at(timeout),
        });
        let consume = ConsumeInteraction {
            kind: InteractionKind::Approval,
            conversation_id: approval.chat_id.clone(),
            id: approval_id,
            cancel: false,
        };
        let entry = HitlEntry::new(
            approval.session_key,
            approval.chat_id,
            HitlKind::Approval {
                expected: request.response_user_id.clone(),
                allow_session: request.allow_session_rule,
            },
        );
        let request = InteractionRequest::Approval(request);
        self.start_hitl(client, id, re, entry, request, consume, timeout)
            .await;
    }

    /// The Canon client for a blocking HITL request: `None` unless
    /// connected.
    fn hitl_client(&self) -> Option<CanonClient> {
        self.client.clone().filter(|_| self.session.connected)
    }

    /// Opens a HITL entry and spawns its task.
    #[allow(clippy::too_many_arguments)]
    async fn start_hitl(
        &mut self,
        client: CanonClient,
        id: String,
        re: &'static str,
        entry: HitlEntry,
        request: InteractionRequest,
        consume: ConsumeInteraction,
        timeout: Duration,
    ) {
        let conversation_id = entry.conversation_id.clone();
        let Some(key) = self.session.hitl.open(entry) else {
            self.respond_send(&id, re, hitl::table::too_many()).await;
            return;
        };
        while self.hitl_tasks.try_join_next().is_some() {}
        let (cancel_tx, cancel_rx) = oneshot::channel();
        self.hitl_cancels.insert(key, cancel_tx);
        tracing::info!(
            conversation_id,
            kind = re,
            timeout_s = timeout.as_secs(),
            "requesting a Canon interaction"
        );
        self.hitl_tasks.spawn(run_hitl(
            client,
            key,
            id,
            re,
            request,
            consume,
            timeout,
            self.config
                .hitl_poll
                .clamp(MIN_LOOP_INTERVAL, MAX_LOOP_INTERVAL),
            cancel_rx,
            self.hitl_tx.clone(),
        ));
    }

    /// Carries out what a HITL task reported.
    async fn on_hitl(&mut self, event: HitlEvent) {
        match event {
            HitlEvent::Created {
                key,
                shim_id,
                re,
                result,
            } => {
                if let Err((error, _)) = &result {
                    self.hitl_cancels.remove(&key);
                    tracing::warn!(kind = re, %error, "Canon interaction request failed");
                }
                let created =
                    self.session
                        .hitl
                        .created(key, result, self.session.agent.owner_id.as_deref());
                if let Some((session_key, conversation_id)) = created.waiting {
                    self.feed(Input::WaitingInput {
                        session_key: Some(session_key),
                        conversation_id,
                    })
                    .await;
                }
                self.respond_send(&shim_id, re, created.reply).await;
            }
            HitlEvent::Finished { key, outcome } => {
                self.hitl_cancels.remove(&key);
                let Some(finished) = self.session.hitl.finished(key, outcome) else {
                    return;
                };
                // `tool` after every resolution while the turn waits
                // (turns.md OQ-3).
                if self.session.machine.turn_state(&finished.session_key)
                    == Some(TurnState::WaitingInput)
                {
                    self.feed(Input::InputResolved {
                        session_key: Some(finished.session_key.clone()),
                        conversation_id: finished.conversation_id.clone(),
                    })
                    .await;
                }
                self.send_request(finished.request).await;
            }
        }
    }

    /// Cancels the open HITL interactions of a session (all of them with
    /// `None`): their tasks stop polling and cancel them on Canon.
    fn cancel_hitl(&mut self, session_key: Option<&str>) {
        for key in self.session.hitl.cancel_session(session_key) {
            if let Some(cancel) = self.hitl_cancels.remove(&key) {
                let _ = cancel.send(());
            }
        }
    }

    fn processing_start(
        &mut self,
        request: RequestId,
        event_ref: &str,
        session_key: String,
        event: &EventSummary,
        queue_depth: u32,
        absorbed_refs: Vec<String>,
    ) -> ProcessingStart {
        self.session.processing_start(
            request,
            event_ref,
            session_key,
            event,
            queue_depth,
            &absorbed_refs,
            random_u128(),
        )
    }

    async fn on_notification(&mut self, kind: &str, body: Value) {
        let note = match ShimNotification::from_parts(kind, body) {
            Ok(note) => note,
            Err(error) => {
                tracing::debug!(kind, %error, "ignored a notification");
                return;
            }
        };
        let input = match note {
            ShimNotification::Typing(t) => Input::Typing {
                status: t
                    .metadata
                    .as_ref()
                    .and_then(|m| m.get("status"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                conversation_id: t.chat_id,
                on: t.on,
            },
            ShimNotification::PreToolCall(p) => {
                let Some(chat) = canon_chat(&p.ctx) else {
                    return;
                };
                Input::Activity {
                    session_key: p.ctx.session_key,
                    conversation_id: chat,
                    event: ActivityEvent::ToolStarted {
                        tool_call_id: p.tool_call_id,
                        tool_name: p.tool_name,
                        args: opaque(p.args),
                    },
                }
            }
            ShimNotification::PostToolCall(p) => {
                let Some(chat) = canon_chat(&p.ctx) else {
                    return;
                };
                Input::Activity {
                    session_key: p.ctx.session_key,
                    conversation_id: chat,
                    event: ActivityEvent::ToolFinished {
                        tool_call_id: p.tool_call_id,
                        tool_name: p.tool_name,
                        args: opaque(p.args),
                        result: opaque(p.result),
                        status: p.status,
                        duration_ms: p.duration_ms,
                    },
                }
            }
            ShimNotification::SubagentStop(s) => {
                let Some(chat) = canon_chat(&s.ctx) else {
                    return;
                };
                Input::Activity {
                    session_key: s.ctx.session_key,
                    conversation_id: chat,
                    event: ActivityEvent::SubagentStopped {
                        child_session_id: s.child_session_id,
                        child_role: s.child_role,
                        child_summary: opaque(s.child_summary),
                        child_status: s.child_status,
                        duration_ms: s.duration_ms,
                    },
                }
            }
            ShimNotification::QueueDepth(q) => Input::QueueDepth {
                session_key: q.session_key,
                depth: q.depth,
            },
            ShimNotification::TurnSteered(t) => Input::SteerAccepted {
                session_key: Some(t.session_key),
                conversation_id: t.chat_id,
            },
        };
        self.feed(input).await;
    }

    async fn connect(&mut self, busy_handler: bool, extra: &Value) -> ConnectResult {
        let call_failed = |error: &TransportError| ConnectFailure::Call {
            status: error.status(),
            message: error.to_string(),
            retryable: error.is_retryable(),
        };
        // An invalid delivery setting refuses the adapter before anything
        // else (runtime-control.md §8.1; 0.14.1 raises in the constructor).
        let settings = match MediaSettings::resolve(
            self.config.inbound_image_delivery.as_deref(),
            self.config.inbound_visual_media_delivery.as_deref(),
            extra,
        ) {
            Ok(settings) => settings,
            Err(error) => {
                tracing::error!(%error, "inbound media delivery setting refused");
                return connect::refusal(ConnectFailure::InvalidConfig(error.to_string()));
            }
        };
        self.session.media_scope = settings.scope();
        if self.config.api_key.expose().is_empty() || self.config.base_url.is_empty() {
            return connect::refusal(ConnectFailure::MissingCredentials);
        }
        let client = match self.client() {
            Ok(client) => client,
            Err(error) => return connect::refusal(ConnectFailure::Client(error.to_string())),
        };
        if let Some(environment) = self.config.environment_id.clone() {
            if let Err(error) = client.verify_environment(&environment, None).await {
                return connect::refusal(ConnectFailure::Environment(error.to_string()));
            }
        }
        let me = match client.get_me().await {
            Ok(me) => me,
            Err(error) => return connect::refusal(call_failed(&error)),
        };
        let conversations = match client.list_conversations().await {
            Ok(conversations) => conversations,
            Err(error) => return connect::refusal(call_failed(&error)),
        };
        self.replace_conversations(conversations);
        self.session.agent.agent_id = me.agent_id.clone();
        self.session.agent.agent_name = me.display_name.clone();
        self.session.agent.owner_id = me.owner_id.clone();
        self.session.machine = TurnMachine::new(TurnConfig {
            supports_interleave: busy_handler,
            ..TurnConfig::default()
        });
        if self.downloader.is_none() {
            self.downloader = Some(MediaDownloader::new(MediaOptions {
                policy: AddressPolicy {
                    allow_private: self.config.allow_private_urls,
                    allow_loopback: false,
                },
                ..MediaOptions::default()
            }));
        }
        self.stream = Some(EventStream::open(&client, StreamConfig::default()));
        let status_client = client.clone();
        self.start_loops(client.clone());
        self.spawn_background(async move {
            if let Err(error) = status_client.publish_runtime_status().await {
                tracing::warn!(%error, "runtime status publish failed");
            }
        });
        tracing::info!(
            agent_id = me.agent_id.as_deref().unwrap_or(""),
            media_scope = ?self.session.media_scope,
            "adapter connected"
        );
        connect::connected(me.agent_id, me.display_name)
    }

    async fn on_stream(&mut self, item: StreamItem) {
        let event = match item {
            StreamItem::Event(event) => event,
            StreamItem::State(ConnectionState::Failed(error)) => {
                tracing::error!(%error, "event stream stopped");
                self.stream = None;
                self.notify(DaemonNotification::AdapterFatal(connect::stream_stopped(
                    error.to_string(),
                )))
                .await;
                return;
            }
            StreamItem::State(state) => {
                tracing::debug!(?state, "event stream state");
                if matches!(state, ConnectionState::Connected) {
                    self.notify(DaemonNotification::AdapterStatus(AdapterStatus {
                        connected: true,
                    }))
                    .await;
                }
                return;
            }
        };
        match event.kind {
            EventKind::MessageCreated(created) => self.on_message_created(*created).await,
            EventKind::RuntimeControl {
                conversation_id,
                kind,
            } if kind == "signal" => self.ring(conversation_id),
            EventKind::ConversationUpdated {
                conversation_id,
                changes,
            } => {
                if self
                    .session
                    .conversations
                    .apply_update(&conversation_id, changes)
                {
                    self.publish_signal_ids();
                }
            }
            EventKind::AgentContext {
                agent_id: Some(agent_id),
                ..
            } => self.session.agent.agent_id = Some(agent_id),
            EventKind::ReplayExpired { last_available_id } => {
                // canon-wire.md §5.3: the transport already moved the cursor.
                tracing::info!(
                    last_available_id = last_available_id.as_deref().unwrap_or(""),
                    "event replay expired; re-fetching the conversations"
                );
                self.refetch_conversations();
            }
            other => tracing::trace!(?other, "stream event not handled"),
        }
    }

    async fn on_message_created(&mut self, created: canon_wire::events::MessageCreated) {
        let (step, keys_changed) = self.session.message_created(created);
        if keys_changed {
            self.publish_signal_ids();
        }
        match step {
            InboundStep::Nothing => {}
            InboundStep::Send(message) => {
                self.send_request(DaemonRequest::InboundMessage(*message))
                    .await
            }
            InboundStep::Materialize {
                job,
                conversation_id,
                message,
                source,
                attachments,
                intent,
            } => self.spawn_media(job, conversation_id, *message, source, attachments, intent),
        }
    }

    /// Materializes a waking message's attachments on a task of its own
    /// (runtime-control.md §8.2–§8.3); the message takes its place in the
    /// conversation's lane now and is sent from [`Driver::on_media_done`].
    fn spawn_media(
        &mut self,
        job: u64,
        conversation_id: String,
        message: InboundMessage,
        source: Value,
        attachments: Vec<Value>,
        intent: DeliveryIntent,
    ) {
        let scope = self.session.media_scope;
        let downloader = self.downloader.clone();
        let dir = self.media_dir.clone();
        let permits = Arc::clone(&self.media_permits);
        let done = self.media_done.clone();
        // If the work task dies, the message still goes out: no media, and
        // every attachment that needs it counted unavailable (fail closed).
        let fallback = finish_inbound(
            message.clone(),
            &source,
            scope,
            Vec::new(),
            media::all_unavailable(scope, &attachments),
            intent,
        );
        while self.media_tasks.try_join_next().is_some() {}
        self.media_tasks.spawn(async move {
            let work = tokio::spawn(async move {
                // A closed semaphore cannot happen (never closed); go on.
                let _permit = permits.acquire_owned().await.ok();
                let (listed, counts) =
                    materialize(downloader.as_ref(), dir.as_deref(), scope, &attachments).await;
                finish_inbound(message, &source, scope, listed, counts, intent)
            });
            let _abort = AbortOnDrop(work.abort_handle());
            let message = match work.await {
                Ok(message) => message,
                Err(error) => {
                    tracing::error!(%error, "inbound media task failed; sending without media");
                    fallback
                }
            };
            let _ = done
                .send(MediaDone {
                    conversation_id,
                    job,
                    message: Box::new(message),
                })
                .await;
        });
    }

    /// A media task finished: its message becomes ready, and the front of
    /// its lane is sent in order.
    async fn on_media_done(&mut self, done: MediaDone) {
        let MediaDone {
            conversation_id,
            job,
            message,
        } = done;
        let Some(ready) = self.session.lanes.finished(&conversation_id, job, *message) else {
            tracing::error!(conversation_id, job, "media result for no pending message");
            debug_assert!(false, "media result for no pending message");
            return;
        };
        for message in ready {
            self.send_request(DaemonRequest::InboundMessage(message))
                .await;
        }
    }

    /// Sends a daemon-originated request (`d:<n>`); the shim's answer is
    /// only logged ([`Frame::Response`] in `on_line`).
    async fn send_request(&mut self, request: DaemonRequest) {
        let line = self.session.request_line(request);
        self.send_line(line).await;
    }

    /// Hands a consumed runtime signal to the shim as `control.signal`
    /// (hermes-host.md §12.3, §19.7).
    async fn on_signal(&mut self, consumed: ConsumedSignal) {
        let ConsumedSignal {
            conversation_id,
            signal,
        } = consumed;
        let control = requests::control_signal(
            conversation_id,
            signal,
            self.session.agent.agent_id.as_deref(),
            &self.session.conversations,
        );
        tracing::info!(conversation_id = control.chat_id, signal = ?control.signal, "runtime control signal");
        self.send_request(DaemonRequest::ControlSignal(control))
            .await;
    }

    /// Starts the signal pass and the status loop of a new connection
    /// (canon-wire.md §8.1 step 7), stopping those of the previous one.
    fn start_loops(&mut self, client: CanonClient) {
        self.stop_loops();
        self.signal_tasks.spawn(poll_signals(
            client.clone(),
            self.signal_ids.subscribe(),
            self.config
                .signal_poll
                .clamp(MIN_LOOP_INTERVAL, MAX_LOOP_INTERVAL),
            self.signal_tx.clone(),
        ));
        self.status_tasks.spawn(publish_status(
            client,
            self.config
                .status_interval
                .clamp(MIN_LOOP_INTERVAL, MAX_LOOP_INTERVAL),
        ));
    }

    /// Stops the signal pass, any doorbell consume, the status loop and a
    /// conversation re-fetch in flight (connect, disconnect, shutdown, exit).
    fn stop_loops(&mut self) {
        self.signal_tasks.abort_all();
        self.signal_tasks.detach_all();
        self.status_tasks.abort_all();
        self.status_tasks.detach_all();
        if let Some(refetch) = self.refetch.take() {
            refetch.abort();
        }
        // A result already on its way is stale from now on.
        self.refetch_id += 1;
    }

    /// Re-fetches `GET /conversations` on a task of its own after
    /// `replay.expired` (canon-wire.md §5.3); the result comes back as a
    /// [`Refetched`] to [`Driver::on_refetched`]. A re-fetch still in flight
    /// is superseded.
    fn refetch_conversations(&mut self) {
        let Some(client) = self.client.clone() else {
            return;
        };
        if let Some(previous) = self.refetch.take() {
            previous.abort();
        }
        self.refetch_id += 1;
        let id = self.refetch_id;
        let tx = self.refetch_tx.clone();
        let task = tokio::spawn(async move {
            let result = client.list_conversations().await;
            let _ = tx.send(Refetched { id, result }).await;
        });
        self.refetch = Some(task.abort_handle());
    }

    /// A re-fetch finished: the list replaces the cache (as at connect);
    /// a failure is logged and the stream reconnects with its new cursor
    /// (canon-wire.md §5.3). Stale results are dropped.
    fn on_refetched(&mut self, refetched: Refetched) {
        if refetched.id != self.refetch_id {
            tracing::debug!("dropped a stale conversation re-fetch");
            return;
        }
        self.refetch = None;
        match refetched.result {
            Ok(conversations) => {
                tracing::debug!(
                    conversations = conversations.len(),
                    "conversations re-fetched"
                );
                self.replace_conversations(conversations);
            }
            Err(error) => {
                tracing::warn!(%error, "conversation re-fetch failed; reconnecting the event stream");
                if let Some(stream) = &self.stream {
                    stream.reconnect();
                }
            }
        }
    }

    /// Replaces the conversation cache with a fresh `GET /conversations`
    /// list and republishes the signal pass's key set (canon-wire.md §4.2).
    fn replace_conversations(&mut self, conversations: Vec<canon_wire::types::Conversation>) {
        self.session.conversations.replace(conversations);
        self.publish_signal_ids();
    }

    /// A `runtime.control` doorbell: consume that conversation's signal now,
    /// beside the loop (canon-wire.md §5.6).
    fn ring(&mut self, conversation_id: String) {
        let Some(client) = self.client.clone() else {
            return;
        };
        while self.signal_tasks.try_join_next().is_some() {}
        let tx = self.signal_tx.clone();
        self.signal_tasks.spawn(async move {
            consume_signal(&client, conversation_id, &tx).await;
        });
    }

    /// Republishes the set of conversations the signal pass visits.
    fn publish_signal_ids(&self) {
        self.signal_ids
            .send_replace(self.session.conversations.ids());
    }

    /// `probe` (hermes-host.md §19.6): without `verify` from the
    /// configuration alone, with no network I/O; with it, one health or
    /// `GET /agents/me` call on a task of its own. Never carries the key.
    async fn probe(&mut self, id: String, re: &'static str, probe: &Probe) {
        let configured =
            !self.config.api_key.expose().is_empty() && !self.config.base_url.is_empty();
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        let mut result = ProbeResult {
            configured,
            profile: None,
            environment_id: self.config.environment_id.clone(),
            base_url: non_empty(&self.config.base_url),
            stream_url: non_empty(&self.config.stream_url),
            seed: None,
            error: None,
        };
        if probe.verify && !configured {
            result.error = Some("CANON_API_KEY and CANON_BASE_URL must be set".to_owned());
        }
        if !probe.verify || !configured {
            let body = protocol::ShimResponse::Probe(result).to_body();
            self.respond(&id, re, Ok(body)).await;
            return;
        }
        let client = match self.client() {
            Ok(client) => client,
            Err(error) => {
                result.error = Some(error.to_string());
                let body = protocol::ShimResponse::Probe(result).to_body();
                self.respond(&id, re, Ok(body)).await;
                return;
            }
        };
        let environment = self.config.environment_id.clone();
        let out = self.out.clone();
        self.spawn_background(async move {
            let check = async {
                match environment {
                    Some(environment) => client
                        .verify_environment(&environment, None)
                        .await
                        .map(drop),
                    None => client.get_me().await.map(drop),
                }
            };
            result.error = match tokio::time::timeout(PROBE_VERIFY_BUDGET, check).await {
                Ok(Ok(())) => None,
                Ok(Err(error)) => Some(error.to_string()),
                Err(_) => Some("Canon did not answer in time".to_owned()),
            };
            let body = protocol::ShimResponse::Probe(result).to_body();
            if out
                .send(protocol::encode_response(&id, re, Ok(body)))
                .await
                .is_err()
            {
                tracing::debug!("stdout writer is gone; probe answer dropped");
            }
        });
    }

    /// Spawns a task that must finish (or use up the exit grace) before the
    /// daemon exits, reaping the ones already done.
    fn spawn_background<F>(&mut self, task: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        while self.deliveries.try_join_next().is_some() {}
        self.deliveries.spawn(task);
    }

    /// Runs the machine on one input and carries out its effects.
    async fn feed(&mut self, input: Input) {
        let effects = self.session.machine.handle(input, now_ms());
        for effect in effects {
            self.perform(effect).await;
        }
    }

    async fn perform(&mut self, effect: Effect) {
        match effect {
            Effect::Reply { request, reply } => {
                let Some(line) = self.session.reply_line(request, reply) else {
                    return;
                };
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
            Effect::PauseTyping { conversation_id } => {
                self.notify(DaemonNotification::TypingPause(ChatRef {
                    chat_id: conversation_id,
                }))
                .await;
            }
            Effect::ResumeTyping { conversation_id } => {
                self.notify(DaemonNotification::TypingResume(ChatRef {
                    chat_id: conversation_id,
                }))
                .await;
            }
            Effect::Deliver(delivery) => {
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
            // Best-effort writes never open the first connection (§19.3: no
            // network I/O before `adapter.connect` or a durable send).
            effect => match self.client.clone() {
                Some(client) => {
                    if self.jobs.send(Job::Write { client, effect }).await.is_err() {
                        tracing::warn!("Canon write worker is gone");
                    }
                }
                None => tracing::debug!("best-effort write skipped: not connected"),
            },
        }
    }
}

/// Downloads, classifies and hands off a message's attachments in array
/// order (runtime-control.md §8.3): the listed media and the §8.5 counts.
/// Nothing here fails the message: a failed attachment is skipped and
/// counted unavailable when the scope says so.
async fn materialize(
    downloader: Option<&MediaDownloader>,
    dir: Option<&Path>,
    scope: TrustedScope,
    attachments: &[Value],
) -> (Vec<InboundMedia>, MediaCounts) {
    // §8.3: without a live Canon client nothing is downloaded.
    let Some(downloader) = downloader else {
        tracing::warn!("inbound attachments skipped: no media downloader");
        return (Vec::new(), media::all_unavailable(scope, attachments));
    };
    let mut listed = Vec::new();
    let mut counts = MediaCounts::default();
    for (index, attachment) in attachments.iter().enumerate() {
        let failed = |counts: &mut MediaCounts| {
            if media::requires_trusted_failure(scope, attachment) {
                counts.unavailable += 1;
            }
        };
        if index >= media::MAX_ATTACHMENTS_PER_MESSAGE {
            tracing::warn!(index, "inbound attachment skipped: too many in one message");
            failed(&mut counts);
            continue;
        }
        let Some(url) = media::attachment_url(attachment).filter(|_| attachment.is_object()) else {
            tracing::debug!(index, "inbound attachment skipped: no url");
            failed(&mut counts);
            continue;
        };
        let downloaded = match downloader.download(url).await {
            Ok(downloaded) => downloaded,
            Err(error) => {
                // An HTTP failure is logged by status only: its body is the
                // media server's, not ours to copy into logs.
                let error = match error.status() {
                    Some(status) => format!("HTTP {status}"),
                    None => error.to_string(),
                };
                let url = safe_url(url);
                tracing::warn!(index, %url, %error, "inbound attachment download failed");
                failed(&mut counts);
                continue;
            }
        };
        let classified = media::classify(
            scope,
            attachment,
            downloaded.content_type.as_deref(),
            &downloaded.bytes,
        );
        if classified.hidden {
            // Trusted-only: never written, never listed (§8.3 step 4).
            tracing::debug!(index, ?scope, "inbound attachment hidden from the model");
            counts.hidden += 1;
            continue;
        }
        let Some(dir) = dir else {
            tracing::warn!(
                index,
                "inbound attachment skipped: no CANON_HOME to hand it off in"
            );
            failed(&mut counts);
            continue;
        };
        let name = media::disk_file_name(&format!("{:032x}", random_u128()), &classified.file_name);
        let dir = dir.to_path_buf();
        let bytes = downloaded.bytes;
        let written =
            tokio::task::spawn_blocking(move || write_handoff_file(&dir, &name, &bytes)).await;
        match written {
            Ok(Ok(path)) => listed.push(InboundMedia {
                path,
                mime_type: classified.mime_type,
                kind: classified.kind,
                file_name: Some(classified.file_name),
            }),
            Ok(Err(error)) => {
                tracing::warn!(index, %error, "writing an inbound attachment failed");
                failed(&mut counts);
            }
            Err(error) => {
                tracing::warn!(index, %error, "writing an inbound attachment failed");
                failed(&mut counts);
            }
        }
    }
    (listed, counts)
}

/// Completes an `inbound.message` after materialization: the §8.5 markers,
/// the listed media, the `message_type` by media priority (canon-wire.md
/// §7.3 step 4) and the §8.6 demotion of `interleave`.
/// Writes one hand-off file (hermes-host.md Q8): the directory is created
/// 0700 when missing, the file is new (`create_new`, never following or
/// replacing anything) and 0600. Returns its path as a string; a partial
/// file is removed.
fn write_handoff_file(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let path = dir.join(name);
    let Some(text) = path.to_str().map(str::to_owned) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "hand-off path is not UTF-8",
        ));
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    let written = file
        .set_permissions(std::fs::Permissions::from_mode(0o600))
        .and_then(|()| file.write_all(bytes))
        .and_then(|()| file.flush());
    if let Err(error) = written {
        drop(file);
        let _ = std::fs::remove_file(&path);
        return Err(error);
    }
    Ok(text)
}

/// Deletes this daemon's hand-off files (named with
/// [`media::DISK_NAME_PREFIX`]) older than [`HANDOFF_MAX_AGE`] in `dir`
/// (hermes-host.md Q8); returns how many. Symlinks and directories are left
/// alone; a missing directory is fine.
fn sweep_handoff_dir(dir: &Path, now: SystemTime) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name
            .to_str()
            .is_some_and(|n| n.starts_with(media::DISK_NAME_PREFIX))
        {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let stale = meta
            .modified()
            .ok()
            .and_then(|modified| now.duration_since(modified).ok())
            .is_some_and(|age| age > HANDOFF_MAX_AGE);
        if meta.is_file() && stale && std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// A failed `SendResult` of a blocking HITL request.
/// The epoch-ms deadline `timeout` from now.
fn expires_at(timeout: Duration) -> u64 {
    now_ms().saturating_add(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX))
}

fn empty() -> Value {
    Value::Object(Map::new())
}

fn opaque(value: Opaque) -> Option<Value> {
    (!value.0.is_null()).then_some(value.0)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Fresh randomness for turn ids and epochs, from the standard library's
/// per-process random hasher keys, a counter and the clock.
fn random_u128() -> u128 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let half = || {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        hasher.write_u64(now_ms());
        hasher.finish()
    };
    (u128::from(half()) << 64) | u128::from(half())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bounded_reader_splits_lines_and_flags_oversized_ones() {
        let mut big = vec![b'x'; MAX_FRAME_BYTES + 10];
        big.push(b'\n');
        let mut input = Vec::new();
        input.extend_from_slice(b"{\"a\":1}\n");
        input.extend_from_slice(&big);
        input.extend_from_slice(b"tail");
        let mut reader = tokio::io::BufReader::new(&input[..]);
        let mut buf = Vec::new();
        assert_eq!(
            read_bounded_line(&mut reader, &mut buf).await.ok(),
            Some(Some(false))
        );
        assert_eq!(buf, b"{\"a\":1}\n");
        assert_eq!(
            read_bounded_line(&mut reader, &mut buf).await.ok(),
            Some(Some(true))
        );
        assert_eq!(
            read_bounded_line(&mut reader, &mut buf).await.ok(),
            Some(Some(false))
        );
        assert_eq!(buf, b"tail");
        assert_eq!(
            read_bounded_line(&mut reader, &mut buf).await.ok(),
            Some(None)
        );
    }

    #[test]
    fn a_reaped_process_no_longer_exists() {
        assert!(process_exists(std::process::id()));
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("`true` runs");
        let pid = child.id();
        child.wait().expect("`true` exits and is reaped");
        assert!(!process_exists(pid));
        // Ids no process can have are not watched.
        assert!(process_exists(0));
        assert!(process_exists(u32::MAX));
    }

    #[test]
    fn handoff_files_are_new_private_and_never_replace_anything() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().expect("temp dir");
        let dir = home.path().join("tmp");
        let path = write_handoff_file(&dir, "canon-inbound-1-a.png", b"\x89PNG").expect("written");
        assert_eq!(std::fs::read(&path).expect("readable"), b"\x89PNG");
        let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode(Path::new(&path)), 0o600);
        assert_eq!(mode(&dir), 0o700);
        let again = write_handoff_file(&dir, "canon-inbound-1-a.png", b"other");
        assert_eq!(
            again.map_err(|e| e.kind()),
            Err(io::ErrorKind::AlreadyExists)
        );
        assert_eq!(std::fs::read(&path).expect("readable"), b"\x89PNG");
    }

    #[test]
    fn sweep_deletes_only_stale_handoff_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        let touch = |name: &str, age: Duration| {
            let path = dir.path().join(name);
            let file = std::fs::File::create(&path).expect("created");
            file.set_modified(SystemTime::now() - age)
                .expect("mtime set");
            path
        };
        let stale = touch("canon-inbound-1-a.png", Duration::from_secs(7_200));
        let fresh = touch("canon-inbound-2-b.png", Duration::from_secs(60));
        let foreign = touch("someone-else.png", Duration::from_secs(7_200));
        let stale_dir = dir.path().join("canon-inbound-dir");
        std::fs::create_dir(&stale_dir).expect("dir");
        assert_eq!(sweep_handoff_dir(dir.path(), SystemTime::now()), 1);
        assert!(!stale.exists());
        assert!(fresh.exists() && foreign.exists() && stale_dir.exists());
        assert_eq!(
            sweep_handoff_dir(&dir.path().join("missing"), SystemTime::now()),
            0
        );
    }
}

//! The daemon's configuration (read from the environment by the binary)
//! and the timing and size constants of the shell: channel capacities,
//! loop intervals, budgets inside the shim's timeouts, concurrency bounds.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use canon_host::credentials::CredentialFacts;
use canon_profiles::{Connection, PlatformConfig};
use canon_wire::secret::ApiKey;

/// Frames buffered between the stdin reader and the loop, and between the
/// loop and the stdout writer (hermes-host.md §19.9).
pub const CHANNEL_FRAMES: usize = 256;

/// How long in-flight Canon writes may finish after stdin EOF
/// (hermes-host.md §19.3).
pub const EXIT_GRACE: Duration = Duration::from_secs(5);

/// How long one live-preview write (`/streaming`, `/typing`, a `/runtime/turn` state that is
/// not a closing one) may hold its conversation's lane. A preview older than this is stale, and
/// everything behind it in the lane (the turn's closing publish, the replies that release
/// Hermes' final send) waits for it; Canon's 30 s read timeout would make one hung preview
/// delay an answer by half a minute.
pub const PREVIEW_WRITE_BUDGET: Duration = Duration::from_secs(5);

/// How long a Canon write that must follow journal records (a turn's first open state) waits
/// for them to reach the disk before it goes anyway: an `fdatasync` takes milliseconds, and a
/// stuck disk must not freeze the conversation's writes.
pub const JOURNAL_WAIT: Duration = Duration::from_secs(2);

/// Budget of the `no_reply` silence record (turns.md §8.4).
pub const NO_REPLY_RECORD_BUDGET: Duration = Duration::from_secs(3);

/// How often every cached conversation is polled for a runtime signal
/// (canon-wire.md §4.9); the default of [`Config::signal_poll`].
pub const SIGNAL_POLL: Duration = Duration::from_secs(15);

/// How often the runtime status is published again after the one at
/// connect (canon-wire.md §8.1 step 7, T10); the default of
/// [`Config::status_interval`].
pub const STATUS_INTERVAL: Duration = Duration::from_secs(30);

/// The shortest signal poll or status interval accepted (our number): a
/// zero interval would spin, and `tokio::time::interval` refuses it.
pub(crate) const MIN_LOOP_INTERVAL: Duration = Duration::from_millis(50);

/// The longest signal poll or status interval accepted (our number), far
/// from the clock arithmetic's overflow.
pub(crate) const MAX_LOOP_INTERVAL: Duration = Duration::from_secs(3_600);

/// How often `CANON_HERMES_PARENT_PID` is checked (hermes-host.md §19.3).
pub const PARENT_CHECK: Duration = Duration::from_secs(5);

/// Sleeps before the second and third attempt of a turn's opening publish (`thinking` with
/// `activeMessageIds`) and of its closing one (`completed` or `interrupted` on
/// `POST /runtime/turn`), the same pace as a durable send's retries (turns.md §4.5). The other
/// publishes stay best effort (turns.md §7.2: a failed publish is logged and ignored; the next
/// state replaces it). A lost closing one would leave the conversation showing the agent at work
/// until Canon reads the turn as stale (30 min); a lost opening one leaves the messages the turn
/// answers beyond its final's `replyTo` looking unanswered. The state is an idempotent upsert,
/// so sending it again after an ambiguous failure is harmless.
pub const TURN_PUBLISH_RETRY_DELAYS: [Duration; 2] =
    [Duration::from_millis(400), Duration::from_millis(800)];

/// Sleeps before the retries of a failed disposition release
/// (hermes-host.md §12.3, canon-wire.md §4.10).
pub const DISPOSITION_RETRY_DELAYS: [Duration; 3] = [
    Duration::from_secs(2),
    Duration::from_secs(8),
    Duration::from_secs(30),
];

/// Best-effort writes one conversation's lane holds at most (our number);
/// beyond it further writes of that conversation are dropped with a
/// warning (replies never are), so a hung endpoint cannot pile up memory.
pub(crate) const MAX_LANE_WRITES: usize = 256;

/// Conversation lanes kept while idle (our number); beyond it the idle ones
/// are let go when a new one starts.
pub(crate) const IDLE_LANES: usize = 64;

/// Disposition releases retrying at once (our number); beyond it a failed
/// release is only logged, so a Canon outage cannot pile up tasks.
pub(crate) const MAX_DISPOSITION_RETRIES: usize = 256;

/// Budget of a `probe` with `verify: true`, inside the shim's 5 s timeout
/// (hermes-host.md §19.6).
pub const PROBE_VERIFY_BUDGET: Duration = Duration::from_secs(4);

/// Doorbell consumes in flight at most (our number); the signal poll picks up what a
/// dropped doorbell would have consumed.
pub(crate) const MAX_DOORBELLS: usize = 16;

/// Consumed signals buffered between the signal tasks and the loop.
pub(crate) const SIGNAL_FRAMES: usize = 64;

/// Inbound messages materializing their media at once (our number; the
/// others wait for a permit in their own task).
pub const MEDIA_CONCURRENCY: usize = 4;

/// How long one inbound attachment may take to download in total
/// (canon-wire.md §2.2 [target]); the default of
/// [`Config::media_download_budget`]. The transport bounds each read of the
/// body, not the whole of it: without this a server that drips one byte
/// before every read timeout would hold a download permit, and its
/// conversation's lane, for good. A download past it counts as failed.
pub const MEDIA_DOWNLOAD_BUDGET: Duration = Duration::from_secs(90);

/// Inbound messages waiting in conversation lanes at most (our number);
/// at the cap the loop stops reading the event stream until one is sent.
pub const MAX_PENDING_INBOUND: usize = 256;

/// Hand-off files older than this are deleted at start (hermes-host.md Q8).
pub const HANDOFF_MAX_AGE: Duration = Duration::from_secs(3_600);

/// How often a running daemon deletes its stale hand-off files by default (older than
/// [`HANDOFF_MAX_AGE`]): files of messages the shim refused or never read, and of
/// `api.inbound_media` batches nobody took, would otherwise pile up for the daemon's lifetime.
pub const HANDOFF_SWEEP: Duration = Duration::from_secs(600);

/// The hand-off directory under `CANON_HOME` (hermes-host.md Q8, cli.md §6).
pub const HANDOFF_DIR: &str = "tmp";

/// How often a blocking clarify or approval is polled
/// (canon-wire.md §9.1); the default of [`Config::hitl_poll`].
pub const HITL_POLL: Duration = Duration::from_secs(1);

/// How long creating a blocking clarify or approval may take before the
/// shim's request is answered as failed (inside its 14 s timeout,
/// hermes-host.md §19.6).
pub const HITL_CREATE_BUDGET: Duration = Duration::from_secs(10);

/// How long a `request_card` waits for its human before it answers `pending` with the card id
/// to resume (durable-endpoint.md §10.5 step 5).
pub const CARD_WAIT: Duration = Duration::from_secs(30);

/// How long a starting daemon waits for a predecessor (a gateway still stopping: its daemon's
/// exit wait plus the kill wait) to let go of the durable inbox.
pub const INBOX_LOCK_WAIT: Duration = Duration::from_secs(10);

/// The credentials and connection the daemon uses (cli.md §5.1, §5.2),
/// as the binary resolved them; all empty when nothing resolved.
#[derive(Clone, Debug)]
pub struct ResolvedCredentials {
    /// The REST base URL.
    pub base_url: String,
    /// The event stream URL.
    pub stream_url: String,
    /// The agent API key (redacted in `Debug`).
    pub api_key: ApiKey,
    /// The environment id, when the credentials name one.
    pub environment_id: Option<String>,
    /// The resolved connection, when there is one (see [`Config::connection`]).
    pub connection: Option<Connection>,
    /// The `agents.json` profile, when the credentials came from one.
    pub profile: Option<String>,
    /// Why nothing resolved (a cli.md §5.1 message; no secret).
    pub error: Option<String>,
}

impl Default for ResolvedCredentials {
    fn default() -> ResolvedCredentials {
        ResolvedCredentials {
            base_url: String::new(),
            stream_url: String::new(),
            api_key: ApiKey::new(""),
            environment_id: None,
            connection: None,
            profile: None,
            error: None,
        }
    }
}

impl ResolvedCredentials {
    /// What the session may know of them (never the key).
    pub fn facts(&self) -> CredentialFacts {
        CredentialFacts {
            api_key_set: !self.api_key.expose().is_empty(),
            base_url: self.base_url.clone(),
            stream_url: self.stream_url.clone(),
            environment_id: self.environment_id.clone(),
            profile: self.profile.clone(),
            error: self.error.clone(),
        }
    }
}

/// Resolves the daemon's credentials with a platform config (cli.md §5.1:
/// the config's `api_key`, `token` and `extra` after the environment's
/// variables). The binary builds it over the environment it read at start;
/// it may read `agents.json`, so the shell calls it off the event loop.
pub type CredentialResolver = Arc<dyn Fn(&PlatformConfig) -> ResolvedCredentials + Send + Sync>;

/// What the driver needs; read from the environment by the binary.
#[derive(Clone)]
pub struct Config {
    /// `CANON_BASE_URL`.
    pub base_url: String,
    /// `CANON_STREAM_URL`.
    pub stream_url: String,
    /// `CANON_API_KEY` (redacted in `Debug`).
    pub api_key: ApiKey,
    /// `CANON_ENVIRONMENT_ID`; when set, `adapter.connect` verifies both
    /// services belong to it (canon-wire.md §1.2).
    pub environment_id: Option<String>,
    /// The resolved connection (`canon_profiles`), when the credentials
    /// resolved to one; its environment is `environment_id`. A packaged
    /// environment's health bodies must name its project; a non-packaged
    /// one's project is learned from them and its RTDB binding checked before
    /// the adapter connects (canon-wire.md §1.1–§1.2). `None` in the direct
    /// test mode (explicit URLs, no environment).
    pub connection: Option<Connection>,
    /// The `agents.json` profile the credentials came from, for `probe`.
    pub profile: Option<String>,
    /// Why the credentials did not resolve at start, for `probe` (the
    /// fields above are then empty).
    pub credential_error: Option<String>,
    /// Resolves the credentials again with the platform config of an
    /// `adapter.connect` (adopted) or of a `probe` (answered from);
    /// `None` keeps the fields above whatever the config says.
    pub resolver: Option<CredentialResolver>,
    /// `CANON_TURN_VERBOSITY` as set; checked at `adapter.connect`, where it
    /// wins over the platform extra (turns.md §6.1).
    pub turn_verbosity: Option<String>,
    /// `HERMES_ALLOW_PRIVATE_URLS`: inbound media downloads may reach
    /// private addresses (the cloud-metadata floor stays blocked).
    pub allow_private_urls: bool,
    /// `CANON_INBOUND_IMAGE_DELIVERY` (`None` when unset or blank); wins over
    /// the platform extra (runtime-control.md §8.1).
    pub inbound_image_delivery: Option<String>,
    /// `CANON_INBOUND_VISUAL_MEDIA_DELIVERY` (`None` when unset or blank).
    pub inbound_visual_media_delivery: Option<String>,
    /// The Canon home (`canon_approvals::store::resolve_canon_home`); inbound media are handed to
    /// the shim as files under its `tmp/`. `None` (no home directory): no
    /// attachment can be handed off, each counts as failed.
    pub canon_home: Option<PathBuf>,
    /// `CANON_HOME_CHANNEL`, the standalone fallback target and the home
    /// channel the probe reports to Hermes.
    pub home_channel: Option<String>,
    /// `CANON_HOME_CHANNEL_NAME`, that home channel's label (default
    /// `Canon Home`, cli.md §8.2).
    pub home_channel_name: Option<String>,
    /// SHA-256 of the shim code this binary installs (`canon-hermes install`
    /// records it; the shim sends the hash of its installed files in
    /// `hello`); `None` accepts the shim's own.
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
    /// `HERMES_CLARIFY_TIMEOUT` (`canon_host::hitl::timeout_from_env`): the Canon
    /// deadline of a blocking clarify (runtime-control.md §6.4).
    pub clarify_timeout: Duration,
    /// `HERMES_APPROVAL_TIMEOUT` (`canon_host::hitl::timeout_from_env`): the Canon
    /// deadline of an exec approval before the minimum with Hermes' own
    /// `approvals.timeout` (runtime-control.md §6.5, hermes-host.md Q10).
    pub approval_timeout: Duration,
    /// Poll interval of blocking clarifies and approvals ([`HITL_POLL`] in
    /// production; tests shorten it), kept between 50 ms and one hour.
    pub hitl_poll: Duration,
    /// The bounded wait of a `request_card` before it answers `pending`
    /// (durable-endpoint.md §10.5: [`CARD_WAIT`] in production; tests shorten it).
    pub card_wait: Duration,
    /// How long a connect waits for the durable inbox's lock ([`INBOX_LOCK_WAIT`] in production;
    /// `CANON_HERMES_INBOX_LOCK_WAIT_MS`, tests that run two daemons on one home shorten it).
    pub inbox_lock_wait: Duration,
    /// Fault injection for the crash tests (`CANON_HERMES_CRASH_POINT`, never set in
    /// production): the daemon kills itself with SIGKILL the first time it reaches this named
    /// step of a detached approval, or `turn.complete` when the shim completes a turn
    /// (`crate::faults`).
    pub crash_point: Option<String>,
    /// Fault injection for the crash tests (`CANON_HERMES_CLOCK_OFFSET_MS`, never set in
    /// production): added to every clock read, so a successor daemon starts "later" and the
    /// leases its killed predecessor held have run out.
    pub clock_offset_ms: u64,
    /// The total deadline of one inbound attachment's download
    /// ([`MEDIA_DOWNLOAD_BUDGET`] in production; tests shorten it).
    pub media_download_budget: Duration,
    /// How often stale hand-off files are deleted while the daemon runs ([`HANDOFF_SWEEP`] in
    /// production; `CANON_HERMES_HANDOFF_SWEEP_MS`, tests shorten it).
    pub handoff_sweep: Duration,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("base_url", &self.base_url)
            .field("stream_url", &self.stream_url)
            .field("api_key", &self.api_key)
            .field("environment_id", &self.environment_id)
            .field("connection", &self.connection)
            .field("profile", &self.profile)
            .field("credential_error", &self.credential_error)
            .field("resolver", &self.resolver.as_ref().map(|_| "Fn"))
            .field("turn_verbosity", &self.turn_verbosity)
            .field("allow_private_urls", &self.allow_private_urls)
            .field("inbound_image_delivery", &self.inbound_image_delivery)
            .field(
                "inbound_visual_media_delivery",
                &self.inbound_visual_media_delivery,
            )
            .field("canon_home", &self.canon_home)
            .field("home_channel", &self.home_channel)
            .field("home_channel_name", &self.home_channel_name)
            .field("parent_pid", &self.parent_pid)
            .field("signal_poll", &self.signal_poll)
            .field("status_interval", &self.status_interval)
            .field("clarify_timeout", &self.clarify_timeout)
            .field("approval_timeout", &self.approval_timeout)
            .field("hitl_poll", &self.hitl_poll)
            .field("card_wait", &self.card_wait)
            .field("inbox_lock_wait", &self.inbox_lock_wait)
            .field("crash_point", &self.crash_point)
            .field("clock_offset_ms", &self.clock_offset_ms)
            .field("media_download_budget", &self.media_download_budget)
            .field("handoff_sweep", &self.handoff_sweep)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// The credentials the daemon connects with now.
    pub fn credentials(&self) -> ResolvedCredentials {
        ResolvedCredentials {
            base_url: self.base_url.clone(),
            stream_url: self.stream_url.clone(),
            api_key: self.api_key.clone(),
            environment_id: self.environment_id.clone(),
            connection: self.connection.clone(),
            profile: self.profile.clone(),
            error: self.credential_error.clone(),
        }
    }

    /// Connects with `credentials` from now on.
    pub fn adopt(&mut self, credentials: ResolvedCredentials) {
        self.base_url = credentials.base_url;
        self.stream_url = credentials.stream_url;
        self.api_key = credentials.api_key;
        self.environment_id = credentials.environment_id;
        self.connection = credentials.connection;
        self.profile = credentials.profile;
        self.credential_error = credentials.error;
    }
}

//! The daemon's event loop: startup (coms-bridge.md §5.2), the socket server, effects, the
//! answer poller, heartbeat and shutdown (coms-bridge.md §5.3).
//!
//! The loop runs on one thread, so nothing on it may block: scans of the questions directory
//! run on the blocking pool (one at a time), and connections, `hermes send` runs and response
//! deliveries are tasks of their own.

use std::io;
use std::os::unix::fs::{DirBuilderExt as _, FileTypeExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::MissedTickBehavior;

use crate::core::bridge::{Bridge, BridgeConfig, DirEntry, Effect, Input, COLOR, MODEL, PURPOSE};
use crate::core::log::LogRecord;
use crate::core::text::js_trim;
use crate::daemon::poller::Poller;
use crate::daemon::{diagnostic, log_file, Config, HermesSend};
use crate::wire::envelope::{Reply, INVALID_JSON, LINE_TOO_LARGE};
use crate::wire::ids::new_ulid;
use crate::wire::iso;
use crate::wire::registry::{Coms, RegistryEntry};
use crate::wire::socket::{bind_endpoint, exchange, BindError, Line, LineReader};

/// The longest Unix socket path, in bytes (`sun_path` less its terminating NUL).
#[cfg(target_os = "macos")]
pub(crate) const SOCKET_PATH_LIMIT: usize = 103;
/// The longest Unix socket path, in bytes (`sun_path` less its terminating NUL).
#[cfg(not(target_os = "macos"))]
pub(crate) const SOCKET_PATH_LIMIT: usize = 107;

/// Why the daemon could not start or keep running.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DaemonError {
    /// A directory could not be created.
    #[error("could not create {}", path.display())]
    Directory {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The endpoint path does not fit a Unix socket address.
    #[error("socket path is {len} bytes, more than the {SOCKET_PATH_LIMIT} a Unix socket allows: {}; use a shorter PI_COMS_DIR", path.display())]
    SocketPathTooLong {
        /// The path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
    },
    /// The endpoint could not be bound.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// A signal handler could not be installed.
    #[error("could not install signal handlers")]
    Signals(#[source] io::Error),
    /// The registry entry could not be written.
    #[error("could not write the registry entry {}", path.display())]
    Registry {
        /// The entry's path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn private_dir(path: &Path) -> Result<(), DaemonError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|source| DaemonError::Directory {
            path: path.to_owned(),
            source,
        })
}

type LineRequest = (Value, oneshot::Sender<Reply>);

/// Runs the daemon until SIGTERM or SIGINT.
pub async fn run(config: Config) -> Result<(), DaemonError> {
    // Directories (coms-bridge.md §5.2 step 2); ours are created 0700 (coms-bridge.md §3).
    let coms = config.coms.clone();
    let project = config.project.clone();
    coms.ensure_dirs(&project)
        .map_err(|source| DaemonError::Directory {
            path: coms.agents_dir(&project),
            source,
        })?;
    private_dir(&config.questions_dir)?;
    if let Some(parent) = config.log_path.parent() {
        private_dir(parent)?;
    }

    // Identity (step 3).
    let session_id = new_ulid();
    let started = now_ms();
    let name = coms.unique_name(&project, &config.name, started);
    if name != config.name {
        diagnostic(&format!(
            "warning: {} is taken in project {project}; registered as {name} (ask-user-remote only finds {})",
            config.name, config.name
        ));
    }
    let endpoint = coms.endpoint(&session_id);
    let len = endpoint.as_os_str().len();
    if len > SOCKET_PATH_LIMIT {
        return Err(DaemonError::SocketPathTooLong {
            path: endpoint,
            len,
        });
    }

    // Bind and serve (step 4); timers (step 5); signal handlers (step 6).
    let listener = bind_endpoint(&endpoint).await?;
    let mut poll = tokio::time::interval(Duration::from_millis(config.poll_ms));
    poll.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let every = Duration::from_millis(config.heartbeat_ms);
    let mut heartbeat = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    heartbeat.set_missed_tick_behavior(MissedTickBehavior::Skip);
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate()).map_err(DaemonError::Signals)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(DaemonError::Signals)?;

    let endpoint_text = endpoint.to_string_lossy().into_owned();
    let mut entry = RegistryEntry {
        session_id: session_id.clone(),
        name: name.clone(),
        purpose: PURPOSE.into(),
        model: MODEL.into(),
        color: COLOR.into(),
        pid: std::process::id(),
        endpoint: endpoint_text.clone(),
        cwd: config.cwd.to_string_lossy().into_owned(),
        started_at: iso::format_ms(started),
        explicit: false,
        version: 1,
        context_used_pct: 0,
        queue_depth: 0,
        heartbeat_at: iso::format_ms(started),
    };
    let mut bridge = Bridge::new(BridgeConfig {
        name: name.clone(),
        project: project.clone(),
        target: config.target.clone(),
        timeout_ms: config.timeout_ms,
        poll_ms: config.poll_ms,
        foreign_grace_ms: config.foreign_grace_ms,
        session_id,
        endpoint: endpoint_text,
        pane_id: config.pane_id.clone(),
    });
    let hermes = HermesSend {
        program: "hermes".into(),
        profile: config.hermes_profile.clone(),
        target: config.target.clone(),
        limit: Duration::from_millis(config.hermes_timeout_ms),
    };

    // The registry entry is the readiness signal (step 7), then the listening line (step 8).
    let cleanup = Cleanup {
        socket: endpoint.clone(),
        entry: coms.entry_path(&project, &name),
    };
    coms.write_entry(&project, &entry, started)
        .map_err(|source| DaemonError::Registry {
            path: cleanup.entry.clone(),
            source,
        })?;
    diagnostic(&format!("{name}@{project} listening ({})", config.target));
    tracing::info!(%name, %project, target = %config.target, "bridge ready");

    let (lines_tx, mut lines) = mpsc::channel::<LineRequest>(64);
    let (done_tx, mut done) = mpsc::unbounded_channel::<(u64, Result<(), String>)>();
    let (scan_tx, mut scans) = mpsc::channel::<Option<(Poller, Vec<DirEntry>)>>(1);
    // `None` while a scan runs: the spec wants no scan to overlap the previous one.
    let mut poller = Some(Poller::new(config.questions_dir.clone()));
    let shell = Shell {
        questions_dir: config.questions_dir.clone(),
        log_path: config.log_path.clone(),
        coms: coms.clone(),
        hermes,
        done: done_tx,
    };
    loop {
        let deadline = bridge.next_deadline();
        let due = async {
            match deadline {
                Some(at) => {
                    tokio::time::sleep(Duration::from_millis(at.saturating_sub(now_ms()))).await
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    tokio::spawn(serve_connection(stream, lines_tx.clone()));
                }
            }
            Some((value, reply)) = lines.recv() => {
                let effects = bridge.handle(Input::Line(value), now_ms());
                shell.perform(effects, Some(reply));
            }
            Some((job, result)) = done.recv() => {
                let effects = bridge.handle(Input::HermesDone { job, result }, now_ms());
                shell.perform(effects, None);
            }
            _ = poll.tick(), if poller.is_some() => {
                if let Some(mut idle) = poller.take() {
                    let awaited = bridge.awaited_qids();
                    let scanned = scan_tx.clone();
                    tokio::spawn(async move {
                        let scan = tokio::task::spawn_blocking(move || {
                            let entries = idle.scan(&awaited);
                            (idle, entries)
                        });
                        let _ = scanned.send(scan.await.ok()).await;
                    });
                }
            }
            Some(scanned) = scans.recv() => match scanned {
                Some((idle, entries)) => {
                    poller = Some(idle);
                    let effects = bridge.handle(Input::Scan(entries), now_ms());
                    shell.perform(effects, None);
                }
                None => {
                    debug_assert!(false, "a scan of the questions directory panicked");
                    tracing::error!("a scan of the questions directory failed; starting afresh");
                    poller = Some(Poller::new(config.questions_dir.clone()));
                }
            },
            _ = heartbeat.tick() => {
                let now = now_ms();
                entry.queue_depth = bridge.queue_depth();
                entry.heartbeat_at = iso::format_ms(now);
                if let Err(error) = coms.write_entry(&project, &entry, now) {
                    tracing::warn!(%error, "heartbeat: could not rewrite the registry entry");
                }
            }
            () = due => {
                let effects = bridge.handle(Input::Tick, now_ms());
                shell.perform(effects, None);
            }
        }
    }
    // Shutdown (coms-bridge.md §5.3): stop accepting, remove the socket and the entry; pending
    // questions are abandoned silently.
    drop(listener);
    drop(cleanup);
    tracing::info!("bridge stopped");
    Ok(())
}

/// Removes the socket file and the registry entry when the daemon ends, however it ends.
struct Cleanup {
    socket: PathBuf,
    entry: PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.entry);
    }
}

struct Shell {
    questions_dir: PathBuf,
    log_path: PathBuf,
    coms: Coms,
    hermes: HermesSend,
    done: mpsc::UnboundedSender<(u64, Result<(), String>)>,
}

impl Shell {
    /// Performs effects in order; the reply goes first to the connection that asked.
    fn perform(&self, effects: Vec<Effect>, mut reply: Option<oneshot::Sender<Reply>>) {
        for effect in effects {
            match effect {
                Effect::Reply(line) => {
                    if let Some(reply) = reply.take() {
                        let _ = reply.send(line);
                    }
                }
                Effect::RunHermes { job, text } => {
                    let hermes = self.hermes.clone();
                    let done = self.done.clone();
                    tokio::spawn(async move {
                        let result = hermes.send(&text).await;
                        let _ = done.send((job, result));
                    });
                }
                Effect::Respond {
                    endpoint,
                    qid,
                    purpose,
                    envelope,
                } => {
                    let coms = self.coms.clone();
                    tokio::spawn(async move {
                        let path = Path::new(&endpoint);
                        if let Err(reason) = deliverable(&coms, path) {
                            tracing::warn!(
                                qid = ?qid,
                                endpoint = ?endpoint,
                                purpose = purpose.as_str(),
                                reason,
                                "refusing to deliver a response to an endpoint that is not a coms peer socket"
                            );
                            return;
                        }
                        if let Err(error) = exchange(path, &envelope).await {
                            diagnostic(&format!(
                                "could not deliver {} for {qid}: {error}",
                                purpose.as_str()
                            ));
                        }
                    });
                }
                Effect::Log(record) => append_log(&self.log_path, &record),
                Effect::Delete { file } => {
                    if let Err(error) = std::fs::remove_file(self.questions_dir.join(&file)) {
                        if error.kind() != io::ErrorKind::NotFound {
                            tracing::warn!(%file, %error, "could not delete an answer file");
                        }
                    }
                }
            }
        }
    }
}

/// Whether a response may go to `endpoint`, the `sender_endpoint` a prompt named.
///
/// A prompt can name any path, and delivering to it would let any local peer point the bridge
/// at any Unix socket the user can reach. The registry cannot vouch for senders: ask-user-remote
/// binds a socket per question and never registers it. What every coms client does share is the
/// place (coms-bridge.md §4.4): a peer's endpoint is `COMS_DIR/sockets/<session ULID>.sock`. So
/// a response goes only to a socket of that name in our own pool's sockets directory, and never
/// through a symbolic link placed there.
fn deliverable(coms: &Coms, endpoint: &Path) -> Result<(), &'static str> {
    if !coms.is_pool_endpoint(endpoint) {
        return Err("not COMS_DIR/sockets/<session>.sock");
    }
    match std::fs::symlink_metadata(endpoint) {
        Ok(meta) if meta.file_type().is_socket() => Ok(()),
        Ok(_) => Err("not a socket"),
        // Gone: the exchange fails and says so, as for any peer that went away.
        Err(_) => Ok(()),
    }
}

/// Appends one record; a failure is a warning, never the end of the daemon.
fn append_log(path: &Path, record: &LogRecord) {
    if let Err(error) = log_file::append(path, record.render().as_bytes(), log_file::ROTATE_AT) {
        tracing::warn!(path = %path.display(), %error, "could not append to the log");
    }
}

/// Serves one connection: the first non-blank line gets exactly one reply line.
async fn serve_connection(mut stream: UnixStream, lines: mpsc::Sender<LineRequest>) {
    use tokio::io::AsyncWriteExt as _;
    let mut reader = LineReader::default();
    let reply = loop {
        match reader.next_line(&mut stream).await {
            Ok(Line::Text(text)) if js_trim(&text).is_empty() => continue,
            Ok(Line::Text(text)) => match serde_json::from_str::<Value>(&text) {
                Ok(value) => {
                    let (tx, rx) = oneshot::channel();
                    if lines.send((value, tx)).await.is_err() {
                        return;
                    }
                    match rx.await {
                        Ok(reply) => break reply,
                        Err(_) => return,
                    }
                }
                Err(_) => {
                    break Reply::Nack {
                        msg_id: String::new(),
                        error: INVALID_JSON.into(),
                    }
                }
            },
            Ok(Line::TooLarge) => {
                break Reply::Nack {
                    msg_id: String::new(),
                    error: LINE_TOO_LARGE.into(),
                }
            }
            Ok(Line::Closed) | Err(_) => return,
        }
    };
    let _ = stream.write_all(reply.to_line().as_bytes()).await;
    let _ = stream.shutdown().await;
}

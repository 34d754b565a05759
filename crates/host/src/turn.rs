//! The sans-I/O turn state machine (turns.md §7, with §4.4 ledger, §5
//! trail, turns.md §6 verbosity, §8 `no_reply`, §10.3 dequeue boundary).
//!
//! The driver turns every host call, hook and Canon result into one closed
//! [`Input`], calls [`TurnMachine::handle`] with the current time, performs
//! the returned [`Effect`]s in order, and calls `handle(Input::Timeout, now)`
//! when [`TurnMachine::next_deadline`] passes. The machine reads no clock,
//! does no I/O and draws no randomness: time is `now_ms`, randomness comes in
//! the inputs (`random: u128`).
//!
//! # Model
//!
//! * State is keyed by Hermes **session key**; each session holds at most one turn.
//!   A *lifecycle* turn is opened by `on_processing_start` (turns.md §7.3 E1) or a
//!   dequeue (turns.md OQ-18) and ends with exactly one closing publish. A *loose*
//!   turn id is allocated for sends outside any lifecycle turn (turns.md §7.6).
//! * All answer text of a lifecycle turn is staged (turns.md §7.4); the
//!   only durable write of a lifecycle turn is the flush at processing
//!   complete (turns.md §7.5), so a turn has at most one `turn_complete`.
//!   When processing completes the turn leaves its session (a new turn may
//!   open at once) and finishes closing on its own: final delivery, 750 ms
//!   handoff, clear, closing publish, then the answer to `turn.complete`.
//! * A dequeue (`turn.accepted`, turns.md OQ-18) is answered at once with
//!   the follow-up's new turn id (its disposition acknowledgements and read
//!   mark go out then too, turns.md §10.3), but Hermes dequeues before the previous
//!   answer's stream consumer has sent its final edits, so the boundary
//!   waits: until then the session's sends, edits and hooks stay with the
//!   running turn. The boundary closes the running turn exactly as a
//!   processing complete would (success, or cancelled when the input says
//!   this adapter interrupted it; no host request waits on that close), then
//!   opens the follow-up's turn under the answered id. It happens at the
//!   first of: a send replying to the follow-up's message (`reply_to` or
//!   `metadata.reply_to_message_id`; with no reply at all, a previewing send
//!   once the running answer is finalized), which then belongs to the new
//!   turn; a hook of the session; the session's next dequeue; processing
//!   complete (whose outcome then closes the follow-up's turn); a second
//!   processing start.
//! * `pre_tool_call` discards the candidate (turns.md §7.4), but Hermes'
//!   stream consumer closes the pre-tool message on its next tick, usually
//!   after the hook. Until the next previewing `send` (a new segment always
//!   starts with one), edits of that message revise the sealed speech block
//!   and never re-enter the answer.
//! * Durable operations go through the per-turn ledger (turns.md §4.4):
//!   ordinals, deterministic ids, reuse of an unsettled plan with identical
//!   texts, and release only when nothing can have been stored.
//! * A turn resumed after a daemon restart (`resync`) starts its ledger again
//!   at ordinal 1, though the daemon before the restart may have used some of
//!   its ordinals. In that turn only, a 409 `MESSAGE_ID_EXISTS`
//!   ([`FailureClass::IdConflict`]) on a flush or a media send means the
//!   ordinal is taken by another payload, so none of the operation's parts was
//!   stored under it (parts go out in order, and an earlier part that succeeded
//!   replayed the old operation's identical part): the whole plan is sent again
//!   under the next free ordinal, at most [`MAX_RESUMED_ORDINAL_SKIPS`] times
//!   (turns.md §4.4 "Resumed turn"). An identical replay still lands on its old
//!   id, since Canon returns the stored message for it; elsewhere a 409 keeps
//!   its reservation as before.
//! * A durable `send` that resolves to **no turn id** (turns.md §7.6 "any
//!   other send … without a turn id": Hermes' in-process cron delivery,
//!   `send_message` through the live adapter, ledger redelivery) follows
//!   turns.md §4.6 exactly like `standalone.send`. Lead decision, replacing
//!   turns.md §7.6's "no client id, conservative retries", which cannot retry
//!   a read timeout safely: each invocation mints a fresh adapter-owned token
//!   `standalone:<32 hex>` from the input's `random`, so its parts get
//!   deterministic ids, `messageChunk.groupId` and the turns.md §3.6
//!   leading-part metadata; the final part is `turn_complete` with no `turnId`
//!   and no trail; the Hermes metadata (cron's `job_id`) stays. The parts go
//!   through `send_to` ([`Route::SendTo`]) with `idempotencyKey` = the part
//!   id, so the transport retries them with the with-id policy (turns.md §4.5)
//!   and an ambiguous failure replays the same ids: never a duplicate, never a
//!   loss. Two invocations never share ids. Sends with a turn id (and `notify`
//!   sends, which allocate one) keep the turns.md §4.4 ledger.
//! * A retry of a turn-less send is a new invocation with new ids, so when
//!   every attempt of one failed ambiguously (it may have been stored) the
//!   reply says [`UNCONFIRMED_SEND`] with `retryable: false`: its text
//!   contains `timed out`, and Hermes then neither retries nor sends a
//!   fallback copy (hermes-host.md §8.4).
//!
//! # Recommended decisions applied
//!
//! From the open questions of turns.md and hermes-host.md:
//!
//! * `tool` after every HITL resolution (turns.md OQ-3);
//! * tool activity published when the tool starts and when the last one
//!   finishes, coalesced to one write per 250 ms per turn (turns.md OQ-4);
//! * the open state republished after 10 min of silence, except in
//!   `waiting_input` (turns.md OQ-5);
//! * verbosity frozen at turn open (turns.md OQ-8);
//! * a dequeued follow-up is its own turn (turns.md OQ-18);
//! * a resynced turn that completes with nothing staged closes as
//!   `interrupted` (hermes-host.md Q4).
//!
//! # Invariants
//!
//! * Never panics, whatever the input sequence (proptest).
//! * At most one `turn_complete` operation per lifecycle turn (proptest).
//! * Memory is bounded: at most [`MAX_SESSIONS`] sessions, bounded activity
//!   per turn, bounded typing memory.
//!
//! # Example
//!
//! ```
//! use canon_host::turn::{
//!     Effect, HostReply, Input, Outcome, ProcessingStart, RequestId, TurnConfig, TurnMachine,
//!     TurnState,
//! };
//! use canon_dispatch::verbosity::ConversationType;
//!
//! let mut machine = TurnMachine::new(TurnConfig::default());
//! let effects = machine.handle(
//!     Input::ProcessingStart(ProcessingStart {
//!         request: RequestId(1),
//!         session_key: "agent:main:canon:dm:conv-1".into(),
//!         conversation_id: "conv-1".into(),
//!         message_id: Some("m1".into()),
//!         disposition_queued: false,
//!         absorbed_message_ids: Vec::new(),
//!         absorbed_queued_ids: Vec::new(),
//!         responder: Some("u1".into()),
//!         reply_authority: None,
//!         conversation_type: ConversationType::Direct,
//!         queue_depth: 0,
//!         random: 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef,
//!     }),
//!     1_000,
//! );
//! // Read mark, `thinking`, then the answer to `turn.start`.
//! assert!(matches!(&effects[1], Effect::PublishTurn(p) if p.state == TurnState::Thinking));
//! assert_eq!(
//!     effects.last(),
//!     Some(&Effect::Reply {
//!         request: RequestId(1),
//!         reply: HostReply::TurnStarted { turn_id: "hermes-0123456789abcdef0123".into() },
//!     })
//! );
//!
//! // Nothing was staged, so completion only clears and closes.
//! let effects = machine.handle(
//!     Input::ProcessingComplete {
//!         request: RequestId(2),
//!         session_key: "agent:main:canon:dm:conv-1".into(),
//!         conversation_id: "conv-1".into(),
//!         outcome: Outcome::Success,
//!         queue_depth: 0,
//!     },
//!     2_000,
//! );
//! assert!(matches!(&effects[1], Effect::PublishTurn(p) if p.state == TurnState::Completed));
//! assert_eq!(machine.next_deadline(), None);
//! ```

mod activity;
mod types;

use std::collections::{BTreeMap, HashMap};

use canon_chunking::ids::{stable_final_message_id, turn_id_from_random, Ordinal, StandaloneGroup};
use canon_chunking::limits::METADATA_MAX_U16;
use canon_chunking::metadata::json_u16_len;
use canon_chunking::plan::{plan_answer, AnswerSpec, PartRole};
use canon_dispatch::json::is_truthy;
use canon_dispatch::trail::{final_turn_trail, live_blocks, TrailBlock};
use canon_dispatch::verbosity::{
    resolve_turn_verbosity, should_publish_turn_trail, ConversationType, Verbosity, VerbosityConfig,
};
use serde_json::{Map, Value};

use activity::{Activity, SubagentStop, ToolFinish};
pub use types::*;

/// Final-to-clear handoff delay in ms (turns.md §1, §7.5 step 5).
pub const FINAL_HANDOFF_MS: u64 = 750;

/// Republish an open state after this much silence, in ms (turns.md OQ-5).
pub const HEARTBEAT_MS: u64 = 600_000;

/// Minimum spacing of tool-activity writes per turn, in ms (turns.md OQ-4:
/// at most 4 per second).
pub const TOOL_ACTIVITY_MIN_INTERVAL_MS: u64 = 250;

/// Typing-on calls for one chat closer than this are coalesced, in ms
/// (hermes-host.md §19.9).
pub const TYPING_COALESCE_MS: u64 = 1_500;

/// Cap on sessions with a turn (our number); beyond it no loose turn id is
/// allocated.
pub const MAX_SESSIONS: usize = 4_096;

/// Cap on chats remembered for typing coalescing (our number).
const MAX_TYPING_CHATS: usize = 1_024;

/// How many ordinals one durable operation of a resumed turn may skip
/// because the daemon before the restart had used them (turns.md §4.4
/// "Resumed turn"; our number). Past it the delivery fails.
pub const MAX_RESUMED_ORDINAL_SKIPS: u32 = 32;

/// The error when a pending plan would be replaced by different content
/// (turns.md §4.4; exact).
pub const REFUSED_REPLACEMENT: &str =
    "Canon refused to replace an unsettled durable delivery with different content";

/// `no_reply` outside a Canon turn (turns.md §8.1; exact).
pub const NO_REPLY_NOT_CANON: &str = "no_reply applies to the Canon turn that is running, and this turn is not one. Nothing was silenced.";

/// `no_reply` with no open turn (turns.md §8.1; exact).
pub const NO_REPLY_NO_TURN: &str =
    "No open Canon turn to silence. Reply normally, or simply say nothing further.";

/// Message-id prefix of the synthetic `/stop` and `/new` events the shim
/// builds from Canon runtime signals (hermes-host.md §12.3).
pub const CONTROL_EVENT_PREFIX: &str = "canon-control:";

/// `standalone.send` without a target (turns.md §4.6; exact).
pub const STANDALONE_NO_TARGET: &str = "Canon standalone send failed: no conversation ID provided";

/// Prefix of every standalone error (hermes-host.md §15).
pub const STANDALONE_ERROR_PREFIX: &str = "Canon standalone send failed: ";

/// The error of a turn-less send whose every attempt failed ambiguously: it
/// may have been stored. Hermes reads `timed out` as "maybe delivered" and,
/// with `retryable: false`, neither retries nor re-sends it as a fallback
/// (hermes-host.md §8.4); no transport text is added, since one such as
/// "broken pipe" or "network" would make Hermes retry after all.
pub const UNCONFIRMED_SEND: &str =
    "Canon send timed out unconfirmed; it may have been delivered, so it is not retried";

/// Keys of the gateway's `canon_options` bag that may reach Canon
/// (canon-wire.md §4.3 [target]).
const ALLOWED_OPTION_KEYS: [&str; 2] = ["mentions", "replyToPosition"];

/// Metadata keys the turn owns; removed from `canon_metadata`.
const RESERVED_METADATA_KEYS: [&str; 2] = ["turnTrail", "messageChunk"];

/// Machine configuration, fixed at connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TurnConfig {
    /// The configured verbosity (turns.md §6.1).
    pub verbosity: VerbosityConfig,
    /// Whether busy routing is active (`supportsInterleave`).
    pub supports_interleave: bool,
}

/// The staged answer of a turn (turns.md §7.4).
#[derive(Debug, Clone, PartialEq, Default)]
struct Candidate {
    sealed_parts: Vec<String>,
    text: String,
    finalized: bool,
    reply_to: Option<String>,
    metadata: Map<String, Value>,
    options: Map<String, Value>,
}

impl Candidate {
    fn durable_text(&self) -> String {
        if self.sealed_parts.is_empty() {
            return self.text.clone();
        }
        let mut out = self.sealed_parts.join("\n");
        out.push('\n');
        out.push_str(&self.text);
        out
    }
}

/// What a settled operation means for its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    /// The flush at processing complete.
    Flush,
    /// `edit_message(finalize=true)` outside a lifecycle turn.
    FinalizeEdit,
    /// A durable `send` outside a lifecycle turn.
    Send { notify: bool },
}

/// The unsettled operation of a turn.
#[derive(Debug, Clone, PartialEq)]
struct PendingOp {
    delivery: Delivery,
    ordinal: Option<Ordinal>,
    kind: OpKind,
    in_flight: bool,
    replan: Replan,
}

/// What a durable operation of a turn is planned from, kept so that in a
/// resumed turn it can be planned again under the next ordinal when its own
/// was used before the daemon restarted (turns.md §4.4 "Resumed turn").
#[derive(Debug, Clone, PartialEq)]
struct Replan {
    text: String,
    reply_to: Option<String>,
    metadata: Map<String, Value>,
    options: Map<String, Value>,
    /// The trail snapshot taken at the first reservation.
    trail: Vec<TrailBlock>,
    media: Option<MediaPayload>,
    /// How many ordinals the operation has skipped so far.
    skips: u32,
}

/// A media operation of an open turn in flight (turns.md OQ-6).
#[derive(Debug, Clone, PartialEq)]
struct MediaOp {
    /// The session of its turn.
    session: String,
    /// Its turn.
    turn_id: String,
    replan: Replan,
}

#[derive(Debug, Clone, PartialEq, Default)]
struct Ledger {
    settled: u64,
    pending: Option<PendingOp>,
}

/// Why a turn is closing, and how far it got.
#[derive(Debug, Clone, PartialEq)]
struct Closing {
    state: TurnState,
    request: Option<RequestId>,
    /// The session the turn ran in, for [`Effect::TurnClosed`].
    session_key: String,
    /// [`Effect::TurnClosed`] went out already (at the final's delivery).
    reported: bool,
    /// The adapter disconnected while the final was in flight: its request
    /// is answered, and the final's outcome closes the turn at once.
    disconnected: bool,
    awaiting: Option<OpId>,
    handoff_at: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
struct Turn {
    id: String,
    conversation_id: String,
    opened_at: u64,
    lifecycle: bool,
    resumed: bool,
    /// Resumed, and the shim saw a durable send of it before the respawn:
    /// its ordinals may be taken by other payloads.
    resumed_durable_sent: bool,
    state: TurnState,
    verbosity: Verbosity,
    trigger_message_id: Option<String>,
    responder: Option<String>,
    reply_authority: Option<ReplyAuthority>,
    queue_depth: u32,
    activity: Activity,
    candidate: Option<Candidate>,
    ledger: Ledger,
    final_committed: bool,
    silenced: bool,
    /// Hermes answered a Canon stop for this turn (see [`stop_signal_reply`]).
    stopped: bool,
    typing_paused: bool,
    last_publish_ms: u64,
    last_tool_write_ms: Option<u64>,
    tool_write_pending: bool,
    /// Loose turns: clear `/streaming` at this time (after a finalize).
    clear_at: Option<u64>,
    closing: Option<Closing>,
    /// Set by `pre_tool_call`, cleared by the next previewing `send`: until
    /// then the host's stream consumer is still closing the message it had
    /// open before the tool (its segment-break finalize runs on the consumer's
    /// next tick, usually after the hook; a new segment always starts with a
    /// `send`). That late text is pre-tool speech: it revises the sealed
    /// speech block and never re-enters the candidate (turns.md §7.4).
    closing_pre_tool_segment: bool,
    /// A follow-up dequeued inside this turn's run whose boundary waits for
    /// its first output (turns.md §10.3; see [`TurnMachine::boundary`]).
    follow_up: Option<Box<FollowUp>>,
}

/// A dequeued follow-up whose turn id was answered but whose turn is not
/// open yet.
#[derive(Debug, Clone, PartialEq)]
struct FollowUp {
    start: ProcessingStart,
    turn_id: String,
    interrupted: bool,
}

/// Who is waiting for an operation's result.
#[derive(Debug, Clone, PartialEq)]
enum Waiter {
    Send {
        request: RequestId,
        turn_message_id: Option<String>,
    },
    Standalone {
        request: RequestId,
    },
    /// A send with no turn id, under a fresh standalone id group: a retry
    /// would be a new invocation with new ids, so an ambiguous failure is
    /// answered as [`UNCONFIRMED_SEND`], not retryable.
    Turnless {
        request: RequestId,
    },
}

/// The turn state machine of one adapter connection.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnMachine {
    config: TurnConfig,
    sessions: BTreeMap<String, Turn>,
    closing: Vec<Turn>,
    waiters: BTreeMap<OpId, Vec<Waiter>>,
    next_op: u64,
    typing: HashMap<String, u64>,
    /// Media operations in flight, with the session of their open turn.
    media_ops: BTreeMap<OpId, MediaOp>,
    /// Per conversation, the turn whose `/streaming` write last reached its
    /// live node (see [`TurnMachine::guard_clears`]).
    node_owners: HashMap<String, String>,
    /// The clears pushed by the call being handled: their index in its
    /// effects and the turn that asked for them.
    clears: Vec<(usize, String)>,
}

impl TurnMachine {
    /// A machine with no turns.
    pub fn new(config: TurnConfig) -> TurnMachine {
        TurnMachine {
            config,
            sessions: BTreeMap::new(),
            closing: Vec::new(),
            waiters: BTreeMap::new(),
            next_op: 1,
            typing: HashMap::new(),
            media_ops: BTreeMap::new(),
            node_owners: HashMap::new(),
            clears: Vec::new(),
        }
    }

    /// The open lifecycle turn id of a session, if any.
    pub fn open_turn(&self, session_key: &str) -> Option<&str> {
        self.sessions
            .get(session_key)
            .filter(|t| t.lifecycle)
            .map(|t| t.id.as_str())
    }

    /// The last published state of a session's open lifecycle turn.
    pub fn turn_state(&self, session_key: &str) -> Option<TurnState> {
        self.sessions
            .get(session_key)
            .filter(|t| t.lifecycle)
            .map(|t| t.state)
    }

    /// The trusted human responder of a session's open lifecycle turn (HITL
    /// routing, turns.md §7.8).
    pub fn responder(&self, session_key: &str) -> Option<&str> {
        self.sessions
            .get(session_key)
            .filter(|t| t.lifecycle)
            .and_then(|t| t.responder.as_deref())
    }

    /// Whether a lifecycle turn is open in `conversation_id` (the authority of
    /// `canon_communicate` inside a Canon turn, runtime-control.md §5.1).
    pub fn has_open_turn_in(&self, conversation_id: &str) -> bool {
        self.sessions
            .values()
            .any(|t| t.lifecycle && t.conversation_id == conversation_id)
    }

    /// Whether the open turn an outbound call resolves to chose `no_reply`
    /// (turns.md §8.2; OQ-9: the driver also refuses `send_card` and
    /// `request_card` for a silenced turn).
    pub fn is_silenced(&self, session_key: Option<&str>, conversation_id: &str) -> bool {
        self.open_turn_key(session_key, conversation_id)
            .and_then(|key| self.sessions.get(&key))
            .is_some_and(|t| t.silenced)
    }

    /// The earliest time at which [`Input::Timeout`] has work to do.
    pub fn next_deadline(&self) -> Option<u64> {
        let mut deadline: Option<u64> = None;
        let mut consider = |at: Option<u64>| {
            if let Some(at) = at {
                deadline = Some(deadline.map_or(at, |d| d.min(at)));
            }
        };
        for turn in self.sessions.values() {
            consider(turn.heartbeat_at());
            consider(turn.tool_write_at());
            consider(turn.clear_at);
        }
        for turn in &self.closing {
            consider(turn.closing.as_ref().and_then(|c| c.handoff_at));
        }
        deadline
    }

    /// Feeds one input; returns the effects to perform, in order.
    pub fn handle(&mut self, input: Input, now_ms: u64) -> Vec<Effect> {
        let mut out = Vec::new();
        match input {
            Input::ProcessingStart(start) => self.on_start(start, now_ms, &mut out),
            Input::QueueDequeued {
                start,
                interrupted,
                turn_id,
            } => self.on_dequeue(start, interrupted, turn_id, now_ms, &mut out),
            Input::ProcessingComplete {
                request,
                session_key,
                conversation_id,
                outcome,
                queue_depth,
            } => {
                // The boundary of a follow-up still waiting comes first; the
                // outcome is then the follow-up's.
                self.boundary(&session_key, now_ms, &mut out);
                self.on_complete(
                    Some(request),
                    &session_key,
                    &conversation_id,
                    outcome,
                    queue_depth,
                    now_ms,
                    &mut out,
                )
            }
            Input::Send(send) => self.on_send(send, now_ms, &mut out),
            Input::Edit(edit) => self.on_edit(edit, now_ms, &mut out),
            Input::Activity {
                session_key,
                conversation_id,
                event,
            } => self.on_activity(
                session_key.as_deref(),
                &conversation_id,
                event,
                now_ms,
                &mut out,
            ),
            Input::WaitingInput {
                session_key,
                conversation_id,
            } => {
                let config = self.config;
                if let Some(turn) = self.open_turn_mut(session_key.as_deref(), &conversation_id) {
                    turn.publish(TurnState::WaitingInput, None, config, now_ms, &mut out);
                }
            }
            Input::InputResolved {
                session_key,
                conversation_id,
            } => {
                let config = self.config;
                if let Some(turn) = self.open_turn_mut(session_key.as_deref(), &conversation_id) {
                    turn.publish(TurnState::Tool, None, config, now_ms, &mut out);
                }
            }
            Input::NoReply(request) => self.on_no_reply(request, &mut out),
            Input::SteerAccepted {
                session_key,
                conversation_id,
            } => {
                if let Some(turn) = self.open_turn_mut(session_key.as_deref(), &conversation_id) {
                    turn.silenced = false;
                }
            }
            Input::Typing {
                conversation_id,
                on,
                status,
            } => self.on_typing(conversation_id, on, status.as_deref(), now_ms, &mut out),
            Input::QueueDepth { session_key, depth } => {
                if let Some(turn) = self.sessions.get_mut(&session_key) {
                    turn.queue_depth = depth;
                }
            }
            Input::DeliveryOutcome { op, result } => self.on_outcome(op, result, now_ms, &mut out),
            Input::Standalone(send) => self.on_standalone(send, &mut out),
            Input::Media(media) => self.on_media(media, &mut out),
            Input::Resync {
                request,
                open_turns,
                delivered_turns,
            } => {
                self.on_resync(open_turns);
                self.close_delivered(delivered_turns, now_ms, &mut out);
                out.push(reply(request, HostReply::Done));
            }
            Input::CloseAbandoned(turns) => self.close_abandoned(turns, now_ms, &mut out),
            Input::Timeout => self.on_timeout(now_ms, &mut out),
            Input::Exiting => self.on_exiting(now_ms, &mut out),
            Input::Disconnect => self.on_disconnect(now_ms, &mut out),
        }
        self.guard_clears(out)
    }

    /// A conversation has one live node, which every turn of it writes: a
    /// follow-up may start streaming while the turn before it still waits
    /// out its 750 ms handoff (or its final is slow to land), and that
    /// turn's clear would then wipe the follow-up's live answer, which the
    /// server salvages into a durable `progress` copy beside the follow-up's
    /// own final. So a turn's clear goes out only while the node is its own
    /// (no other turn wrote to it since); the turn that wrote last clears
    /// it. Walks the effects in order, so a write and a clear of one call
    /// are judged as Canon will see them.
    fn guard_clears(&mut self, out: Vec<Effect>) -> Vec<Effect> {
        let clears = std::mem::take(&mut self.clears);
        if clears.is_empty() && !out.iter().any(is_node_write) {
            return out;
        }
        let mut kept = Vec::with_capacity(out.len());
        for (index, effect) in out.into_iter().enumerate() {
            match &effect {
                Effect::Streaming(
                    StreamingUpdate::Set {
                        conversation_id,
                        turn_id: Some(turn),
                        ..
                    }
                    | StreamingUpdate::Blank {
                        conversation_id,
                        turn_id: Some(turn),
                    },
                ) if self.node_owners.len() < MAX_SESSIONS
                    || self.node_owners.contains_key(conversation_id) =>
                {
                    self.node_owners
                        .insert(conversation_id.clone(), turn.clone());
                }
                Effect::Streaming(StreamingUpdate::Clear { conversation_id }) => {
                    if let Some((_, turn)) = clears.iter().find(|(i, _)| *i == index) {
                        match self.node_owners.get(conversation_id) {
                            Some(owner) if owner != turn => {
                                tracing::debug!(
                                    turn_id = %turn,
                                    owner = %owner,
                                    "clear skipped: a later turn writes the live node"
                                );
                                continue;
                            }
                            _ => {
                                self.node_owners.remove(conversation_id);
                            }
                        }
                    }
                }
                _ => {}
            }
            kept.push(effect);
        }
        kept
    }

    fn allocate_op(&mut self) -> OpId {
        let op = OpId(self.next_op);
        self.next_op = self.next_op.saturating_add(1);
        op
    }

    // ----- processing start and the dequeue boundary (turns.md §7.3 E1, §10.3) -----

    fn on_start(&mut self, start: ProcessingStart, now: u64, out: &mut Vec<Effect>) {
        // A lifecycle turn still open in this session ends here, as its own
        // turn: a second start (startup restore, hermes-host.md §9.5).
        self.boundary(&start.session_key, now, out);
        self.close_running(
            &start.session_key,
            Outcome::Success,
            start.queue_depth,
            now,
            out,
        );
        let id = turn_id_from_random(start.random);
        let request = start.request;
        acknowledge(&start, out);
        self.open(start, id.clone(), now, out);
        // The shim keeps the id to hand the turn over in a `resync`
        // (hermes-host.md §19.10); `turn.accepted` answers its id too.
        out.push(reply(request, HostReply::TurnStarted { turn_id: id }));
    }

    /// A follow-up dequeued inside a run (turns.md §10.3, OQ-18). Hermes
    /// dequeues it before the previous answer's stream consumer has sent its
    /// final edits, so the id is answered now and the boundary waits: until
    /// then the session's sends, edits and hooks stay with the running turn.
    /// With no running lifecycle turn the boundary is immediate.
    fn on_dequeue(
        &mut self,
        start: ProcessingStart,
        interrupted: bool,
        turn_id: Option<String>,
        now: u64,
        out: &mut Vec<Effect>,
    ) {
        // An earlier follow-up still waiting takes its boundary first.
        self.boundary(&start.session_key, now, out);
        let id = turn_id
            .filter(|id| canon_chunking::ids::is_turn_id(id))
            .unwrap_or_else(|| turn_id_from_random(start.random));
        let request = start.request;
        // Its disposition acknowledgements and read mark (steps a–b of processing start,
        // turns.md §7.3 E1) go out now, when Hermes took the message, as turns.md §10.3 has
        // it, and not at a later boundary: there they would be two more Canon round trips
        // ahead of the follow-up's first live text. The other steps of processing start (c–f)
        // open the turn, now or at the boundary.
        acknowledge(&start, out);
        match self
            .sessions
            .get_mut(&start.session_key)
            .filter(|t| t.lifecycle)
        {
            Some(running) => {
                running.follow_up = Some(Box::new(FollowUp {
                    start,
                    turn_id: id.clone(),
                    interrupted,
                }));
            }
            None => self.open(start, id.clone(), now, out),
        }
        out.push(reply(request, HostReply::TurnStarted { turn_id: id }));
    }

    /// Performs the pending dequeue boundary of `session_key`, if any: the
    /// running turn closes as a processing complete would (success, or
    /// cancelled when this adapter interrupted it; no host request waits on
    /// that close), then the follow-up's turn opens under its answered id.
    fn boundary(&mut self, session_key: &str, now: u64, out: &mut Vec<Effect>) {
        let Some(follow_up) = self
            .sessions
            .get_mut(session_key)
            .and_then(|t| t.follow_up.take())
        else {
            return;
        };
        let FollowUp {
            start,
            turn_id,
            interrupted,
        } = *follow_up;
        let outcome = if interrupted {
            Outcome::Cancelled
        } else {
            Outcome::Success
        };
        self.close_running(session_key, outcome, start.queue_depth, now, out);
        self.open(start, turn_id, now, out);
    }

    /// Closes the lifecycle turn running in `session_key`, if any, with no
    /// host request to answer.
    fn close_running(
        &mut self,
        session_key: &str,
        outcome: Outcome,
        queue_depth: u32,
        now: u64,
        out: &mut Vec<Effect>,
    ) {
        let running = self
            .sessions
            .get(session_key)
            .filter(|t| t.lifecycle)
            .map(|t| t.conversation_id.clone());
        if let Some(conversation) = running {
            self.on_complete(
                None,
                session_key,
                &conversation,
                outcome,
                queue_depth,
                now,
                out,
            );
        }
    }

    /// Opens a lifecycle turn with id `id` (turns.md §7.3 E1 steps c–f, after the caller's
    /// [`acknowledge`]); no reply.
    fn open(&mut self, start: ProcessingStart, id: String, now: u64, out: &mut Vec<Effect>) {
        // A loose turn of the session is replaced; its pending state goes.
        self.sessions.remove(&start.session_key);

        // (c)–(f): responder, turn id, `thinking`, reply authority, verbosity.
        let verbosity = resolve_turn_verbosity(self.config.verbosity, start.conversation_type);
        let mut turn = Turn::new(&id, &start.conversation_id, now, true, verbosity);
        turn.trigger_message_id = start.message_id.clone();
        turn.responder = start.responder;
        turn.reply_authority = start.reply_authority;
        turn.queue_depth = start.queue_depth;
        let mut active: Vec<String> = start.message_id.into_iter().collect();
        for id in start.absorbed_message_ids {
            if !id.is_empty() && !active.contains(&id) {
                active.push(id);
            }
        }
        turn.publish(TurnState::Thinking, Some(active), self.config, now, out);
        if verbosity == Verbosity::Quiet {
            out.push(Effect::Streaming(StreamingUpdate::Blank {
                conversation_id: turn.conversation_id.clone(),
                turn_id: Some(id.clone()),
            }));
        }
        self.sessions.insert(start.session_key, turn);
    }

    // ----- processing complete, cancel and failure (turns.md §7.3 E12–E14) -----

    #[allow(clippy::too_many_arguments)]
    fn on_complete(
        &mut self,
        request: Option<RequestId>,
        session_key: &str,
        conversation_id: &str,
        outcome: Outcome,
        queue_depth: u32,
        now: u64,
        out: &mut Vec<Effect>,
    ) {
        let is_ours = self
            .sessions
            .get(session_key)
            .is_some_and(|t| t.lifecycle && t.conversation_id == conversation_id);
        if !is_ours {
            tracing::debug!(session_key, "processing complete without an open turn");
            if let Some(request) = request {
                out.push(reply(request, HostReply::Done));
            }
            return;
        }
        let Some(mut turn) = self.sessions.remove(session_key) else {
            return;
        };
        turn.queue_depth = queue_depth;
        turn.tool_write_pending = false;
        // Hermes answers a stop command and only then cancels the running
        // task; when the interrupted agent returns first, Hermes discards its
        // result and reports success. The human stopped the turn, so it
        // closes as cancelled whichever finished first, and nothing it staged
        // is posted.
        let outcome = if turn.stopped && outcome == Outcome::Success {
            Outcome::Cancelled
        } else {
            outcome
        };
        let conversation = turn.conversation_id.clone();
        let turn_id = turn.id.clone();
        let mut closing = Closing {
            state: TurnState::Completed,
            request,
            session_key: session_key.to_owned(),
            reported: false,
            disconnected: false,
            awaiting: None,
            handoff_at: None,
        };
        match outcome {
            Outcome::Cancelled | Outcome::Failure => {
                turn.candidate = None;
                push_clear(&mut self.clears, out, &turn_id, &conversation);
                if outcome == Outcome::Cancelled {
                    closing.state = TurnState::Interrupted;
                }
            }
            Outcome::Success if turn.silenced => {
                // turns.md §8.3: blank, discard, clear.
                out.push(Effect::Streaming(StreamingUpdate::Blank {
                    conversation_id: conversation.clone(),
                    turn_id: Some(turn.id.clone()),
                }));
                turn.candidate = None;
                push_clear(&mut self.clears, out, &turn_id, &conversation);
            }
            Outcome::Success => {
                let answer = turn
                    .candidate
                    .take()
                    .filter(|c| c.finalized && !c.durable_text().trim().is_empty());
                match answer {
                    None => {
                        push_clear(&mut self.clears, out, &turn_id, &conversation);
                        if turn.resumed {
                            closing.state = TurnState::Interrupted;
                        }
                    }
                    Some(candidate) => {
                        let op = self.allocate_op();
                        let text = candidate.durable_text();
                        // A turn resumed after a daemon restart may have lost the stream's
                        // first send, which carried the reply target (the shim sends the
                        // answer it kept again, not always that send): the final replies to
                        // the message the turn was started for.
                        let reply_to = candidate.reply_to.clone().or_else(|| {
                            turn.resumed
                                .then(|| turn.trigger_message_id.clone())
                                .flatten()
                        });
                        match turn.reserve(
                            op,
                            OpKind::Flush,
                            &text,
                            reply_to.as_deref(),
                            candidate.metadata,
                            candidate.options,
                        ) {
                            Reservation::Send(delivery) => {
                                closing.awaiting = Some(delivery.op);
                                out.push(Effect::Deliver(delivery));
                            }
                            Reservation::Silenced | Reservation::DuplicateFinal => {
                                push_clear(&mut self.clears, out, &turn_id, &conversation)
                            }
                            Reservation::InFlight(awaited) => closing.awaiting = Some(awaited),
                            Reservation::Refused(error) => {
                                tracing::warn!(turn_id = %turn.id, %error, "final not sent");
                                push_clear(&mut self.clears, out, &turn_id, &conversation);
                            }
                        }
                    }
                }
            }
        }
        turn.closing = Some(closing);
        let done = turn
            .closing
            .as_ref()
            .is_some_and(|c| c.awaiting.is_none() && c.handoff_at.is_none());
        if done {
            finish_close(turn, self.config, now, out);
        } else {
            self.closing.push(turn);
        }
    }

    // ----- sends and edits, in a turn or with none open (turns.md §7.3 E2–E4, §7.6) -----

    fn on_send(&mut self, send: HostSend, now: u64, out: &mut Vec<Effect>) {
        let expect_edits = is_truthy(send.metadata.get("expect_edits"));
        let notify = is_truthy(send.metadata.get("notify"));
        if let Some(key) = self.open_turn_key(send.session_key.as_deref(), &send.conversation_id) {
            if self.starts_follow_up(&key, &send, notify || expect_edits) {
                self.boundary(&key, now, out);
            }
        }
        let config = self.config;
        if send.stop_notice {
            // A stopping gateway's refusal of the message ("⏳ Gateway is shutting down and is
            // not accepting new work right now."): Hermes ran nothing, and the durable inbox
            // hands the message to the restarted gateway. Posting the refusal would tell the
            // person their message was dropped, make it the turn's `turn_complete`, and spend
            // the message's reply authority, which the real answer after the restart needs.
            let turn_id = self
                .open_turn_mut(send.session_key.as_deref(), &send.conversation_id)
                .map(|t| t.id.clone())
                .unwrap_or_default();
            out.push(reply(
                send.request,
                HostReply::Send(SendOutcome::SuppressedAuxiliary { turn_id }),
            ));
            return;
        }
        if replies_to_control_event(&send) {
            // Hermes answers a Canon stop/new signal with a command reply
            // ("⚡ Stopped…"). The human pressed the control in Canon, which
            // shows the turn's state; posting the reply would make it the
            // stopped turn's `turn_complete` (or a message replying to an id
            // Canon never issued), so it is acknowledged and not written.
            let stop = stop_signal_reply(&send);
            let turn_id = self
                .open_turn_mut(send.session_key.as_deref(), &send.conversation_id)
                .map(|t| {
                    t.stopped |= stop;
                    t.id.clone()
                })
                .unwrap_or_default();
            out.push(reply(
                send.request,
                HostReply::Send(SendOutcome::SuppressedAuxiliary { turn_id }),
            ));
            return;
        }
        if let Some(turn) = self.open_turn_mut(send.session_key.as_deref(), &send.conversation_id) {
            let turn_id = turn.id.clone();
            let previewing = notify || expect_edits;
            if notify
                && expect_edits
                && turn.closing_pre_tool_segment
                && turn.activity.running_tools() > 0
            {
                // The pre-tool text was never previewed and arrives as the
                // consumer's segment-break send (a first send that is already
                // final): post-tool text cannot exist while the tool runs.
                turn.revise_pre_tool_speech(&send.content, out);
                out.push(reply(
                    send.request,
                    HostReply::Send(SendOutcome::Preview { turn_id }),
                ));
                return;
            }
            if previewing {
                turn.closing_pre_tool_segment = false;
            }
            let outcome = if notify {
                turn.stage(
                    &send.content,
                    true,
                    !expect_edits,
                    send.reply_to,
                    &send.metadata,
                );
                turn.stream_and_publish(config, now, out);
                SendOutcome::Preview { turn_id }
            } else if expect_edits {
                turn.stage(&send.content, false, false, send.reply_to, &send.metadata);
                turn.stream_and_publish(config, now, out);
                SendOutcome::Preview { turn_id }
            } else {
                SendOutcome::SuppressedAuxiliary { turn_id }
            };
            out.push(reply(send.request, HostReply::Send(outcome)));
            return;
        }
        // turns.md §7.6: no lifecycle turn.
        if expect_edits && !notify {
            let call = LooseCall {
                request: send.request,
                session_key: send.session_key.as_deref(),
                conversation_id: &send.conversation_id,
                content: &send.content,
                random: send.random,
            };
            self.loose_preview(&call, now, out);
            return;
        }
        let session = loose_session_key(send.session_key.as_deref(), &send.conversation_id);
        let has_turn = self.sessions.contains_key(&session);
        if !has_turn && notify {
            self.allocate_loose(&session, &send.conversation_id, send.random, now);
        }
        let op = self.allocate_op();
        let (metadata, options) = durable_fields(&send.metadata);
        let kind = OpKind::Send { notify };
        match self.sessions.get_mut(&session) {
            Some(turn) => {
                let turn_id = turn.id.clone();
                let reservation = turn.reserve(
                    op,
                    kind,
                    &send.content,
                    send.reply_to.as_deref(),
                    metadata,
                    options,
                );
                let turn_message_id = notify.then(|| turn_id.clone());
                self.dispatch_reservation(reservation, send.request, turn_id, turn_message_id, out);
            }
            None => {
                // No turn id: a fresh standalone id group per invocation
                // (turns.md §4.6; lead decision, see the module doc), sent
                // through `send_to` and retried with the with-id policy.
                let delivery = standalone_delivery(
                    op,
                    &send.conversation_id,
                    send.random,
                    StandaloneContent {
                        text: &send.content,
                        reply_to: send.reply_to.as_deref(),
                        metadata,
                        options,
                        media: None,
                    },
                );
                match delivery {
                    Some(delivery) => {
                        self.waiters.entry(op).or_default().push(Waiter::Turnless {
                            request: send.request,
                        });
                        out.push(Effect::Deliver(delivery));
                    }
                    None => out.push(reply(
                        send.request,
                        HostReply::Send(SendOutcome::Failed {
                            error: "Canon could not plan the message".to_owned(),
                            retryable: false,
                        }),
                    )),
                }
            }
        }
    }

    /// Whether `send` is the first output of the follow-up waiting in
    /// `key`: it replies to the follow-up's message (`reply_to`, else
    /// `metadata.reply_to_message_id`). A previewing send that replies to
    /// nothing counts too once the running answer is finalized (Hermes
    /// without reply threading): the previous stream consumer is done then,
    /// and its own continuations reply to its own message.
    fn starts_follow_up(&self, key: &str, send: &HostSend, previewing: bool) -> bool {
        let Some(turn) = self.sessions.get(key) else {
            return false;
        };
        let Some(follow_up) = turn.follow_up.as_deref() else {
            return false;
        };
        let reply_to = send
            .reply_to
            .as_deref()
            .or_else(|| {
                send.metadata
                    .get("reply_to_message_id")
                    .and_then(Value::as_str)
            })
            .filter(|r| !r.is_empty());
        match reply_to {
            Some(reply_to) => follow_up.start.message_id.as_deref() == Some(reply_to),
            None => previewing && turn.candidate.as_ref().is_some_and(|c| c.finalized),
        }
    }

    fn on_edit(&mut self, edit: HostEdit, now: u64, out: &mut Vec<Effect>) {
        let config = self.config;
        if let Some(turn) = self.open_turn_mut(edit.session_key.as_deref(), &edit.conversation_id) {
            let turn_id = turn.id.clone();
            if turn.closing_pre_tool_segment {
                // An edit targets the consumer's current message, which is
                // still the pre-tool one.
                turn.revise_pre_tool_speech(&edit.content, out);
            } else {
                turn.stage(&edit.content, edit.finalize, false, None, &edit.metadata);
                turn.stream_and_publish(config, now, out);
            }
            out.push(reply(
                edit.request,
                HostReply::Send(SendOutcome::Preview { turn_id }),
            ));
            return;
        }
        if !edit.finalize {
            let call = LooseCall {
                request: edit.request,
                session_key: edit.session_key.as_deref(),
                conversation_id: &edit.conversation_id,
                content: &edit.content,
                random: edit.random,
            };
            self.loose_preview(&call, now, out);
            return;
        }
        let session = loose_session_key(edit.session_key.as_deref(), &edit.conversation_id);
        if !self.sessions.contains_key(&session) {
            self.allocate_loose(&session, &edit.conversation_id, edit.random, now);
        }
        let op = self.allocate_op();
        let (metadata, options) = durable_fields(&edit.metadata);
        match self.sessions.get_mut(&session) {
            Some(turn) => {
                let turn_id = turn.id.clone();
                let reservation = turn.reserve(
                    op,
                    OpKind::FinalizeEdit,
                    &edit.content,
                    None,
                    metadata,
                    options,
                );
                let message_id = Some(turn_id.clone());
                self.dispatch_reservation(reservation, edit.request, turn_id, message_id, out);
            }
            None => out.push(reply(
                edit.request,
                HostReply::Send(SendOutcome::Failed {
                    error: "Canon adapter is tracking too many sessions".to_owned(),
                    retryable: true,
                }),
            )),
        }
    }

    fn dispatch_reservation(
        &mut self,
        reservation: Reservation,
        request: RequestId,
        turn_id: String,
        turn_message_id: Option<String>,
        out: &mut Vec<Effect>,
    ) {
        let waiter = Waiter::Send {
            request,
            turn_message_id,
        };
        match reservation {
            Reservation::Send(delivery) => {
                self.waiters.entry(delivery.op).or_default().push(waiter);
                out.push(Effect::Deliver(delivery));
            }
            Reservation::InFlight(op) => self.waiters.entry(op).or_default().push(waiter),
            Reservation::Silenced => out.push(reply(
                request,
                HostReply::Send(SendOutcome::Silenced { turn_id }),
            )),
            Reservation::DuplicateFinal => out.push(reply(
                request,
                HostReply::Send(SendOutcome::DuplicateFinal { turn_id }),
            )),
            Reservation::Refused(error) => out.push(reply(
                request,
                HostReply::Send(SendOutcome::Failed {
                    error,
                    retryable: false,
                }),
            )),
        }
    }

    /// A streaming preview with no lifecycle turn (turns.md §7.6): under the
    /// session's turn id, allocated if needed; it clears the committed flag.
    fn loose_preview(&mut self, call: &LooseCall<'_>, now: u64, out: &mut Vec<Effect>) {
        let LooseCall {
            request,
            session_key,
            conversation_id,
            content,
            random,
        } = *call;
        let session = loose_session_key(session_key, conversation_id);
        if !self.sessions.contains_key(&session) {
            self.allocate_loose(&session, conversation_id, random, now);
        }
        let Some(turn) = self.sessions.get_mut(&session) else {
            // At the session cap: report success and write nothing.
            out.push(reply(
                request,
                HostReply::Send(SendOutcome::SuppressedAuxiliary {
                    turn_id: String::new(),
                }),
            ));
            return;
        };
        turn.final_committed = false;
        turn.clear_at = None;
        if turn.verbosity == Verbosity::Verbose {
            out.push(Effect::Streaming(StreamingUpdate::Set {
                conversation_id: turn.conversation_id.clone(),
                turn_id: Some(turn.id.clone()),
                text: Some(content.to_owned()),
                blocks: None,
            }));
        }
        out.push(reply(
            request,
            HostReply::Send(SendOutcome::Preview {
                turn_id: turn.id.clone(),
            }),
        ));
    }

    fn allocate_loose(&mut self, session: &str, conversation_id: &str, random: u128, now: u64) {
        if self.sessions.len() >= MAX_SESSIONS {
            // Evict the oldest idle loose turn: nothing pending, nothing
            // scheduled. Lifecycle turns are never evicted.
            let idle = self
                .sessions
                .iter()
                .filter(|(_, t)| !t.lifecycle && t.ledger.pending.is_none() && t.clear_at.is_none())
                .min_by_key(|(_, t)| t.opened_at)
                .map(|(key, _)| key.clone());
            let Some(key) = idle else {
                tracing::warn!("session cap reached; sending without a turn id");
                return;
            };
            self.sessions.remove(&key);
        }
        let verbosity = resolve_turn_verbosity(self.config.verbosity, ConversationType::Unknown);
        let id = turn_id_from_random(random);
        let turn = Turn::new(&id, conversation_id, now, false, verbosity);
        self.sessions.insert(session.to_owned(), turn);
    }

    // ----- tool and subagent hooks (turns.md §7.3 E5, E6) -----

    fn on_activity(
        &mut self,
        session_key: Option<&str>,
        conversation_id: &str,
        event: ActivityEvent,
        now: u64,
        out: &mut Vec<Effect>,
    ) {
        // Hooks only fire inside a run: with a follow-up waiting, they are
        // the follow-up's, so its turn starts here.
        if let Some(key) = self.open_turn_key(session_key, conversation_id) {
            self.boundary(&key, now, out);
        }
        let config = self.config;
        let Some(turn) = self.open_turn_mut(session_key, conversation_id) else {
            return;
        };
        match &event {
            ActivityEvent::ToolStarted {
                tool_call_id,
                tool_name,
                args,
            } => {
                turn.activity.close_text_segment();
                turn.candidate = None;
                turn.closing_pre_tool_segment = true;
                turn.activity.tool_started(
                    tool_call_id.as_deref(),
                    tool_name.as_deref(),
                    args.as_ref(),
                );
                turn.tool_activity(config, now, out);
            }
            ActivityEvent::ToolFinished {
                tool_call_id,
                tool_name,
                args,
                result,
                status,
                duration_ms,
            } => {
                turn.activity.tool_finished(&ToolFinish {
                    tool_call_id: tool_call_id.as_deref(),
                    tool_name: tool_name.as_deref(),
                    args: args.as_ref(),
                    result: result.as_ref(),
                    status: status.as_deref(),
                    duration_ms: duration_ms.as_ref(),
                });
                if turn.activity.running_tools() == 0 {
                    turn.tool_activity(config, now, out);
                }
            }
            ActivityEvent::SubagentStopped {
                child_session_id,
                child_role,
                child_summary,
                child_status,
                duration_ms,
            } => turn.activity.subagent_stopped(&SubagentStop {
                child_session_id: child_session_id.as_deref(),
                child_role: child_role.as_deref(),
                child_summary: child_summary.as_ref(),
                child_status: child_status.as_deref(),
                duration_ms: duration_ms.as_ref(),
            }),
        }
    }

    // ----- no_reply (turns.md §7.3 E10, §8) -----

    fn on_no_reply(&mut self, request: NoReplyRequest, out: &mut Vec<Effect>) {
        let refuse = |error: String| {
            reply(
                request.request,
                HostReply::NoReply(NoReplyOutcome::Refused { error }),
            )
        };
        let conversation = request.conversation_id.as_deref().filter(|c| !c.is_empty());
        let Some(conversation) = conversation.filter(|_| request.in_canon_context) else {
            out.push(refuse(NO_REPLY_NOT_CANON.to_owned()));
            return;
        };
        if let Some(target) = request.target.as_deref() {
            let target = target.trim();
            let target = target.strip_prefix("canon:").unwrap_or(target).trim();
            if !target.is_empty() && target != conversation {
                out.push(refuse(format!(
                    "no_reply silences the turn that is running; it cannot target another conversation (this turn is in {conversation})."
                )));
                return;
            }
        }
        let conversation = conversation.to_owned();
        let Some(turn) = self.open_turn_mut(request.session_key.as_deref(), &conversation) else {
            out.push(refuse(NO_REPLY_NO_TURN.to_owned()));
            return;
        };
        turn.silenced = true;
        tracing::info!(
            turn_id = %turn.id,
            reason = if request.reason_given { "given" } else { "none" },
            "turn silenced by no_reply"
        );
        out.push(Effect::RecordNoReply {
            conversation_id: conversation.clone(),
            message_id: turn.trigger_message_id.clone(),
            reason_given: request.reason_given,
        });
        out.push(reply(
            request.request,
            HostReply::NoReply(NoReplyOutcome::Acknowledged {
                conversation_id: conversation,
            }),
        ));
    }

    // ----- typing (turns.md §7.3 E15, §7.7) -----

    fn on_typing(
        &mut self,
        conversation_id: String,
        on: bool,
        status: Option<&str>,
        now: u64,
        out: &mut Vec<Effect>,
    ) {
        if !on {
            self.typing.remove(&conversation_id);
            out.push(Effect::Typing(Typing {
                conversation_id,
                typing: false,
                status: None,
            }));
            return;
        }
        if let Some(last) = self.typing.get(&conversation_id) {
            if now >= *last && now - last < TYPING_COALESCE_MS {
                return;
            }
        }
        if self.typing.len() >= MAX_TYPING_CHATS && !self.typing.contains_key(&conversation_id) {
            self.typing.clear();
        }
        self.typing.insert(conversation_id.clone(), now);
        let status = match status {
            Some("typing") => TypingStatus::Typing,
            _ => TypingStatus::Thinking,
        };
        out.push(Effect::Typing(Typing {
            conversation_id,
            typing: true,
            status: Some(status),
        }));
    }

    // ----- Durable results -----

    fn on_outcome(
        &mut self,
        op: OpId,
        result: Result<Option<String>, DeliveryFailure>,
        now: u64,
        out: &mut Vec<Effect>,
    ) {
        // Closing turns first: the flush.
        if let Some(position) = self
            .closing
            .iter()
            .position(|t| t.closing.as_ref().and_then(|c| c.awaiting) == Some(op))
        {
            let mut turn = self.closing.remove(position);
            let result = turn.own_final_already_stored(result);
            if let Some(delivery) = turn.skip_taken_ordinal(op, &result) {
                out.push(Effect::Deliver(delivery));
                self.closing.push(turn);
                return;
            }
            let conversation = turn.conversation_id.clone();
            match &result {
                Ok(_) => {
                    turn.settle();
                    turn.final_committed = true;
                    turn.activity.consume();
                    if let Some(closing) = turn.closing.as_mut() {
                        out.push(Effect::FinalStored {
                            session_key: closing.session_key.clone(),
                            trigger_message_id: turn.trigger_message_id.clone(),
                        });
                        closing.awaiting = None;
                        closing.handoff_at = Some(now.saturating_add(FINAL_HANDOFF_MS));
                        // The answer is stored: a turn a boundary closed is reported
                        // now, not after the handoff wait, so a daemon killed during
                        // that wait is not handed the turn again.
                        if closing.request.is_none() && !closing.reported {
                            closing.reported = true;
                            out.push(Effect::TurnClosed {
                                session_key: closing.session_key.clone(),
                                turn_id: turn.id.clone(),
                            });
                        }
                    }
                    if turn.closing.as_ref().is_some_and(|c| c.disconnected) {
                        // Nobody waits out a handoff any more: close it now. Its final is
                        // in Canon, so its clear salvages nothing (and is dropped when a
                        // later turn wrote the node).
                        push_clear(&mut self.clears, out, &turn.id, &turn.conversation_id);
                        finish_close(turn, self.config, now, out);
                    } else {
                        self.closing.push(turn);
                    }
                }
                Err(failure) => {
                    tracing::warn!(turn_id = %turn.id, error = %failure.error, "final delivery failed");
                    push_clear(&mut self.clears, out, &turn.id, &conversation);
                    finish_close(turn, self.config, now, out);
                }
            }
            self.reply_waiters(op, &result, out);
            return;
        }
        if let Some(mut media) = self.media_ops.remove(&op) {
            if let Some(delivery) = self.skip_taken_media_ordinal(op, &mut media, &result) {
                self.media_ops.insert(op, media);
                out.push(Effect::Deliver(delivery));
                return;
            }
            if let (Ok(_), Some(turn)) = (&result, self.sessions.get_mut(&media.session)) {
                turn.activity.consume();
            }
            self.reply_waiters(op, &result, out);
            return;
        }
        if let Some(turn) = self.sessions.values_mut().find(|t| {
            t.ledger
                .pending
                .as_ref()
                .is_some_and(|p| p.delivery.op == op)
        }) {
            if let Some(delivery) = turn.skip_taken_ordinal(op, &result) {
                out.push(Effect::Deliver(delivery));
                return;
            }
            match &result {
                Ok(_) => {
                    let kind = turn.ledger.pending.as_ref().map(|p| p.kind);
                    turn.settle();
                    match kind {
                        Some(OpKind::FinalizeEdit) => {
                            turn.final_committed = true;
                            turn.activity.consume();
                            turn.clear_at = Some(now.saturating_add(FINAL_HANDOFF_MS));
                        }
                        Some(OpKind::Send { notify: true }) => {
                            turn.final_committed = true;
                            turn.activity.consume();
                        }
                        _ => turn.activity.consume(),
                    }
                }
                Err(failure) => turn.release_or_keep(failure.class),
            }
        }
        self.reply_waiters(op, &result, out);
    }

    fn reply_waiters(
        &mut self,
        op: OpId,
        result: &Result<Option<String>, DeliveryFailure>,
        out: &mut Vec<Effect>,
    ) {
        for waiter in self.waiters.remove(&op).unwrap_or_default() {
            let effect = match waiter {
                Waiter::Send {
                    request,
                    turn_message_id,
                } => {
                    let outcome = match result {
                        Ok(canon_id) => SendOutcome::Delivered {
                            message_id: turn_message_id.or_else(|| canon_id.clone()),
                        },
                        Err(failure) => SendOutcome::Failed {
                            error: failure.error.clone(),
                            retryable: failure.retryable,
                        },
                    };
                    reply(request, HostReply::Send(outcome))
                }
                Waiter::Turnless { request } => {
                    let outcome = match result {
                        Ok(canon_id) => SendOutcome::Delivered {
                            message_id: canon_id.clone(),
                        },
                        Err(failure) if failure.class.may_have_landed() => {
                            tracing::warn!(error = %failure.error, "turn-less send unconfirmed");
                            SendOutcome::Failed {
                                error: UNCONFIRMED_SEND.to_owned(),
                                retryable: false,
                            }
                        }
                        Err(failure) => SendOutcome::Failed {
                            error: failure.error.clone(),
                            retryable: failure.retryable,
                        },
                    };
                    reply(request, HostReply::Send(outcome))
                }
                Waiter::Standalone { request } => {
                    let answer = match result {
                        Ok(id) => Ok(id.clone()),
                        Err(failure) => Err(format!("{STANDALONE_ERROR_PREFIX}{}", failure.error)),
                    };
                    reply(request, HostReply::Standalone(answer))
                }
            };
            out.push(effect);
        }
    }

    // ----- media (turns.md §7.6 media row, OQ-6) -----

    /// `adapter.send_media` after its upload. In an open turn: the turn's
    /// own media `turn_complete` ([`Turn::reserve_media`]), suppressed with
    /// success when the turn is silenced; its success consumes the turn's
    /// activity. Out of turn: a fresh standalone id group like any turn-less
    /// send (turns.md §4.6), the media on the final part.
    fn on_media(&mut self, media: HostMedia, out: &mut Vec<Effect>) {
        let op = self.allocate_op();
        let (metadata, options) = durable_fields(&media.metadata);
        let key = self.open_turn_key(media.session_key.as_deref(), &media.conversation_id);
        if let Some(turn) = key.as_ref().and_then(|k| self.sessions.get_mut(k)) {
            let turn_id = turn.id.clone();
            let (reservation, replan) = turn.reserve_media(op, &media, metadata, options);
            if let (Some(replan), Some(session)) = (replan, key) {
                self.media_ops.insert(
                    op,
                    MediaOp {
                        session,
                        turn_id: turn_id.clone(),
                        replan,
                    },
                );
            }
            self.dispatch_reservation(reservation, media.request, turn_id, None, out);
            return;
        }
        let delivery = standalone_delivery(
            op,
            &media.conversation_id,
            media.random,
            StandaloneContent {
                text: &media.caption,
                reply_to: media.reply_to.as_deref(),
                metadata,
                options,
                media: Some(&media.media),
            },
        );
        match delivery {
            Some(delivery) => {
                self.waiters.entry(op).or_default().push(Waiter::Turnless {
                    request: media.request,
                });
                out.push(Effect::Deliver(delivery));
            }
            None => out.push(reply(
                media.request,
                HostReply::Send(SendOutcome::Failed {
                    error: "Canon could not plan the message".to_owned(),
                    retryable: false,
                }),
            )),
        }
    }

    /// turns.md §4.4 "Resumed turn" for a media operation: the delivery of
    /// `media` under its turn's next free ordinal, which it uses up at once as
    /// [`Turn::reserve_media`] does; `None` when it does not move on (see
    /// [`Turn::skips_taken_ordinal`]) or its turn is gone.
    fn skip_taken_media_ordinal(
        &mut self,
        op: OpId,
        media: &mut MediaOp,
        result: &Result<Option<String>, DeliveryFailure>,
    ) -> Option<Delivery> {
        let Err(failure) = result else {
            return None;
        };
        let open = self
            .sessions
            .get(&media.session)
            .is_some_and(|t| t.id == media.turn_id);
        let turn = if open {
            self.sessions.get_mut(&media.session)?
        } else {
            self.closing.iter_mut().find(|t| t.id == media.turn_id)?
        };
        if !turn.skips_taken_ordinal(failure, media.replan.skips) {
            return None;
        }
        let ordinal = turn.next_free_ordinal();
        let delivery = plan_ordinal(op, turn, ordinal, &media.replan)?;
        turn.ledger.settled = ordinal.get();
        media.replan.skips += 1;
        tracing::warn!(turn_id = %turn.id, ordinal = ordinal.get(), error = %failure.error,
            "media id taken before the daemon restarted; sending under the next ordinal");
        Some(delivery)
    }

    // ----- standalone sends (turns.md §4.6) -----

    fn on_standalone(&mut self, send: StandaloneSend, out: &mut Vec<Effect>) {
        let Some(target) = standalone_target(&send) else {
            out.push(reply(
                send.request,
                HostReply::Standalone(Err(STANDALONE_NO_TARGET.to_owned())),
            ));
            return;
        };
        let op = self.allocate_op();
        let delivery = standalone_delivery(
            op,
            target,
            send.random,
            StandaloneContent {
                text: &send.text,
                reply_to: None,
                metadata: Map::new(),
                options: Map::new(),
                media: send.media.as_ref(),
            },
        );
        match delivery {
            Some(delivery) => {
                self.waiters
                    .entry(op)
                    .or_default()
                    .push(Waiter::Standalone {
                        request: send.request,
                    });
                out.push(Effect::Deliver(delivery));
            }
            None => out.push(reply(
                send.request,
                HostReply::Standalone(Err(format!("{STANDALONE_ERROR_PREFIX}could not plan"))),
            )),
        }
    }

    // ----- resync after a daemon respawn (hermes-host.md §19.10) -----

    fn on_resync(&mut self, open_turns: Vec<ResyncTurn>) {
        for resync in open_turns {
            if self
                .sessions
                .get(&resync.session_key)
                .is_some_and(|t| t.lifecycle)
                || resync.turn_id.is_empty()
                || self.sessions.len() >= MAX_SESSIONS
            {
                continue;
            }
            let verbosity = resolve_turn_verbosity(self.config.verbosity, resync.conversation_type);
            let mut turn = Turn::new(
                &resync.turn_id,
                &resync.conversation_id,
                resync.started_at_ms,
                true,
                verbosity,
            );
            turn.resumed = true;
            turn.resumed_durable_sent = resync.durable_sent;
            turn.trigger_message_id = resync.message_id;
            turn.reply_authority = resync.reply_authority;
            self.sessions.insert(resync.session_key, turn);
        }
    }

    /// Publishes `completed` for turns whose final the previous daemon
    /// stored but which it may have died before closing (it waits out the
    /// 750 ms handoff first). The publish names the delivered turn's own id,
    /// so a follow-up open in the same conversation keeps its state (its
    /// next write republishes it). A turn the shim also handed over as open
    /// is skipped. No clear is sent: the conversation's live node belongs to
    /// whichever turn writes it next.
    fn close_delivered(&mut self, delivered: Vec<ResyncTurn>, now: u64, out: &mut Vec<Effect>) {
        let config = self.config;
        for resync in delivered {
            if resync.turn_id.is_empty()
                || self
                    .sessions
                    .get(&resync.session_key)
                    .is_some_and(|t| t.id == resync.turn_id)
            {
                continue;
            }
            let verbosity = resolve_turn_verbosity(config.verbosity, resync.conversation_type);
            let turn = Turn::new(
                &resync.turn_id,
                &resync.conversation_id,
                resync.started_at_ms,
                true,
                verbosity,
            );
            out.push(Effect::PublishTurn(turn.body(
                TurnState::Completed,
                None,
                config,
                now,
            )));
        }
    }

    /// Closes Canon turns an earlier gateway run left open (its daemon was killed, then the
    /// gateway stopped before a respawned daemon could close them): each conversation's live
    /// node is cleared once (a preview left there would read as the agent still typing) and
    /// each turn gets `completed`, the state any ending other than a cancellation gets
    /// (turns.md §7.5). A turn this machine runs is left alone.
    fn close_abandoned(&mut self, turns: Vec<AbandonedTurn>, now: u64, out: &mut Vec<Effect>) {
        let config = self.config;
        let mut cleared: Vec<String> = Vec::new();
        for abandoned in turns {
            if abandoned.turn_id.is_empty()
                || self.sessions.values().any(|t| t.id == abandoned.turn_id)
                || self.closing.iter().any(|t| t.id == abandoned.turn_id)
            {
                continue;
            }
            tracing::info!(
                turn_id = %abandoned.turn_id,
                conversation_id = %abandoned.conversation_id,
                "closing a Canon turn an earlier run left open"
            );
            let turn = Turn::new(
                &abandoned.turn_id,
                &abandoned.conversation_id,
                abandoned.opened_at_ms,
                true,
                resolve_turn_verbosity(config.verbosity, ConversationType::Unknown),
            );
            // The live node of a conversation where a turn of this run goes on is that turn's.
            let live = |t: &Turn| t.conversation_id == abandoned.conversation_id;
            if !cleared.contains(&abandoned.conversation_id)
                && !self.sessions.values().any(live)
                && !self.closing.iter().any(live)
            {
                cleared.push(abandoned.conversation_id.clone());
                out.push(Effect::Streaming(StreamingUpdate::Clear {
                    conversation_id: abandoned.conversation_id.clone(),
                }));
            }
            out.push(Effect::PublishTurn(turn.body(
                TurnState::Completed,
                None,
                config,
                now,
            )));
        }
    }

    // ----- Timers -----

    fn on_timeout(&mut self, now: u64, out: &mut Vec<Effect>) {
        let config = self.config;
        for turn in self.sessions.values_mut() {
            if turn.tool_write_at().is_some_and(|at| at <= now) {
                turn.write_tool_activity(config, now, out);
            }
            if turn.heartbeat_at().is_some_and(|at| at <= now) {
                let state = turn.state;
                turn.publish(state, None, config, now, out);
            }
            if turn.clear_at.is_some_and(|at| at <= now) {
                turn.clear_at = None;
                push_clear(&mut self.clears, out, &turn.id, &turn.conversation_id);
            }
        }
        self.finish_closings(now, out, |c| c.handoff_at.is_some_and(|at| at <= now));
    }

    fn on_exiting(&mut self, now: u64, out: &mut Vec<Effect>) {
        self.finish_closings(now, out, |c| c.awaiting.is_none());
    }

    /// Clears and closes every closing turn `due` picks; the others keep
    /// closing.
    fn finish_closings(&mut self, now: u64, out: &mut Vec<Effect>, due: impl Fn(&Closing) -> bool) {
        let config = self.config;
        let (done, waiting): (Vec<Turn>, Vec<Turn>) = std::mem::take(&mut self.closing)
            .into_iter()
            .partition(|t| t.closing.as_ref().is_some_and(&due));
        self.closing = waiting;
        for turn in done {
            push_clear(&mut self.clears, out, &turn.id, &turn.conversation_id);
            finish_close(turn, config, now, out);
        }
    }

    fn on_disconnect(&mut self, now: u64, out: &mut Vec<Effect>) {
        // A turn that is closing and whose final is stored (or that had none)
        // is done deciding: its clear and closing publish go out now, so a
        // gateway stop does not leave Canon showing the agent at work. One
        // whose final is still in flight (a retry after an ambiguous failure)
        // is answered now but kept: the final's outcome, which the daemon's
        // exit grace still waits for, publishes its closing state and tells
        // the durable inbox the answer is stored (the fault harness found
        // that dropping it left the turn working in Canon and open in the
        // inbox, and the restarted gateway's resume answered it again).
        self.finish_closings(now, out, |c| c.awaiting.is_none());
        for turn in &mut self.closing {
            if let Some(closing) = turn.closing.as_mut() {
                if let Some(request) = closing.request.take() {
                    out.push(reply(request, HostReply::Done));
                }
                closing.reported = true;
                closing.disconnected = true;
            }
        }
        let failure = DeliveryFailure {
            class: FailureClass::Ambiguous,
            error: "Canon adapter disconnected".to_owned(),
            retryable: false,
        };
        let ops: Vec<OpId> = self.waiters.keys().copied().collect();
        for op in ops {
            self.reply_waiters(op, &Err(failure.clone()), out);
        }
        self.sessions.clear();
        self.typing.clear();
        self.media_ops.clear();
        // `node_owners` stays: it says which turn wrote each live node last, which holds
        // across a disconnect. Clearing it here let this call's own clears (judged after it
        // returns) and those of finals stored later wipe a follow-up's live answer (fault
        // harness seed 1: Canon salvaged it into a second copy beside its final).
    }

    /// The open lifecycle turn an outbound call belongs to (turns.md §7.1):
    /// the task-local session when it is bound to the same conversation,
    /// else the unique open session of that conversation; several and none
    /// task-local means no turn.
    fn open_turn_mut(
        &mut self,
        session_key: Option<&str>,
        conversation_id: &str,
    ) -> Option<&mut Turn> {
        let key = self.open_turn_key(session_key, conversation_id)?;
        self.sessions.get_mut(&key)
    }

    /// The session key of the open lifecycle turn an outbound call belongs
    /// to (see `open_turn_mut`).
    fn open_turn_key(&self, session_key: Option<&str>, conversation_id: &str) -> Option<String> {
        let own = session_key.filter(|key| {
            self.sessions
                .get(*key)
                .is_some_and(|t| t.lifecycle && t.conversation_id == conversation_id)
        });
        if let Some(key) = own {
            return Some(key.to_owned());
        }
        let mut open = self
            .sessions
            .iter()
            .filter(|(_, t)| t.lifecycle && t.conversation_id == conversation_id);
        let first = open.next()?;
        if open.next().is_some() {
            tracing::debug!(conversation_id, "several open turns; refusing to guess");
            return None;
        }
        Some(first.0.clone())
    }
}

/// A preview call outside any lifecycle turn.
#[derive(Debug, Clone, Copy)]
struct LooseCall<'a> {
    request: RequestId,
    session_key: Option<&'a str>,
    conversation_id: &'a str,
    content: &'a str,
    random: u128,
}

/// Result of asking the ledger to reserve an operation.
#[derive(Debug)]
enum Reservation {
    Send(Delivery),
    InFlight(OpId),
    Silenced,
    DuplicateFinal,
    Refused(String),
}

impl Turn {
    fn new(
        id: &str,
        conversation_id: &str,
        now: u64,
        lifecycle: bool,
        verbosity: Verbosity,
    ) -> Turn {
        Turn {
            id: id.to_owned(),
            conversation_id: conversation_id.to_owned(),
            opened_at: now,
            lifecycle,
            resumed: false,
            resumed_durable_sent: false,
            state: TurnState::Thinking,
            verbosity,
            trigger_message_id: None,
            responder: None,
            reply_authority: None,
            queue_depth: 0,
            activity: Activity::new(id),
            candidate: None,
            ledger: Ledger::default(),
            final_committed: false,
            silenced: false,
            stopped: false,
            typing_paused: false,
            last_publish_ms: now,
            last_tool_write_ms: None,
            tool_write_pending: false,
            clear_at: None,
            closing: None,
            closing_pre_tool_segment: false,
            follow_up: None,
        }
    }

    fn heartbeat_at(&self) -> Option<u64> {
        (self.lifecycle && self.closing.is_none() && self.state != TurnState::WaitingInput)
            .then(|| self.last_publish_ms.saturating_add(HEARTBEAT_MS))
    }

    fn tool_write_at(&self) -> Option<u64> {
        if !self.tool_write_pending {
            return None;
        }
        Some(
            self.last_tool_write_ms
                .map_or(0, |last| last.saturating_add(TOOL_ACTIVITY_MIN_INTERVAL_MS)),
        )
    }

    /// `POST /runtime/turn` for an open state, steering typing.
    fn publish(
        &mut self,
        state: TurnState,
        active: Option<Vec<String>>,
        config: TurnConfig,
        now: u64,
        out: &mut Vec<Effect>,
    ) {
        self.state = state;
        self.last_publish_ms = now;
        out.push(Effect::PublishTurn(self.body(state, active, config, now)));
        if state == TurnState::WaitingInput {
            if !self.typing_paused {
                self.typing_paused = true;
                out.push(Effect::PauseTyping {
                    conversation_id: self.conversation_id.clone(),
                });
            }
        } else if self.typing_paused {
            self.typing_paused = false;
            out.push(Effect::ResumeTyping {
                conversation_id: self.conversation_id.clone(),
            });
        }
    }

    fn body(
        &self,
        state: TurnState,
        active: Option<Vec<String>>,
        config: TurnConfig,
        now: u64,
    ) -> TurnUpdate {
        TurnUpdate {
            conversation_id: self.conversation_id.clone(),
            state,
            turn_id: Some(self.id.clone()),
            queue_depth: self.queue_depth,
            active_message_ids: active,
            capabilities: TurnCapabilities::for_state(state, config.supports_interleave),
            opened_at: Some(self.opened_at),
            turn_updated_at: now,
        }
    }

    /// Stages content (turns.md §7.4) and mirrors it into the speech block.
    fn stage(
        &mut self,
        content: &str,
        finalized: bool,
        append_final: bool,
        reply_to: Option<String>,
        hermes_metadata: &Map<String, Value>,
    ) {
        let mut candidate = self.candidate.take().unwrap_or_default();
        // A whole send of the finished segment's text again (Hermes re-sends an answer whose
        // streamed delivery it could not confirm, without the stream's leading blank lines)
        // replaces that segment; only a different text is a new segment.
        let same_text = candidate.text.trim() == content.trim();
        if candidate.finalized && !same_text && (!finalized || append_final) {
            let sealed = std::mem::take(&mut candidate.text);
            candidate.sealed_parts.push(sealed);
        }
        let (metadata, options) = durable_fields(hermes_metadata);
        candidate.metadata.extend(metadata);
        candidate.options.extend(options);
        // The first reply target staged in a turn stays: it is the stream's
        // first send, which replies to the message the turn answers. A later
        // send naming another message is Hermes re-sending an answer it
        // already streamed, anchored to the first message of its run (its
        // recursion cap over queued follow-ups does that).
        if candidate.reply_to.is_none() {
            candidate.reply_to = reply_to;
        }
        content.clone_into(&mut candidate.text);
        candidate.finalized = finalized;
        let durable = candidate.durable_text();
        self.activity.replace_text_segment(&durable, finalized);
        self.candidate = Some(candidate);
    }

    /// The writes of a staged send or edit (turns.md §7.3 E2/E3):
    /// verbose `/streaming` set, then `streaming`.
    fn stream_and_publish(&mut self, config: TurnConfig, now: u64, out: &mut Vec<Effect>) {
        self.tool_write_pending = false;
        out.extend(self.verbose_set());
        self.publish(TurnState::Streaming, None, config, now, out);
    }

    /// The late close of the speech a tool call sealed: the sealed block
    /// takes the text and, when verbose, the live blocks are rewritten. No
    /// state is published: the turn is still in its tool phase.
    fn revise_pre_tool_speech(&mut self, content: &str, out: &mut Vec<Effect>) {
        self.activity.revise_sealed_speech(content);
        out.extend(self.verbose_set());
    }

    /// In a verbose turn, the live bubble's `/streaming` set: the staged
    /// text and the live activity blocks.
    fn verbose_set(&self) -> Option<Effect> {
        (self.verbosity == Verbosity::Verbose).then(|| {
            let text = self
                .candidate
                .as_ref()
                .map(Candidate::durable_text)
                .unwrap_or_default();
            Effect::Streaming(StreamingUpdate::Set {
                conversation_id: self.conversation_id.clone(),
                turn_id: Some(self.id.clone()),
                text: Some(text),
                blocks: self.live_blocks(),
            })
        })
    }

    fn live_blocks(&self) -> Option<Vec<Value>> {
        let blocks = live_blocks(self.activity.blocks());
        (!blocks.is_empty()).then_some(blocks)
    }

    /// Publishes tool activity (turns.md OQ-4): a tool started, or the last running tool finished.
    fn tool_activity(&mut self, config: TurnConfig, now: u64, out: &mut Vec<Effect>) {
        let due = self
            .last_tool_write_ms
            .is_none_or(|last| now >= last.saturating_add(TOOL_ACTIVITY_MIN_INTERVAL_MS));
        if due {
            self.write_tool_activity(config, now, out);
        } else {
            self.tool_write_pending = true;
        }
    }

    fn write_tool_activity(&mut self, config: TurnConfig, now: u64, out: &mut Vec<Effect>) {
        self.tool_write_pending = false;
        self.last_tool_write_ms = Some(now);
        out.extend(self.verbose_set());
        if self.state != TurnState::WaitingInput {
            let state = if self.activity.running_tools() > 0 {
                TurnState::Tool
            } else {
                TurnState::Thinking
            };
            self.publish(state, None, config, now, out);
        }
    }

    /// The ledger's reserve step (turns.md §4.4).
    fn reserve(
        &mut self,
        op: OpId,
        kind: OpKind,
        text: &str,
        reply_to: Option<&str>,
        metadata: Map<String, Value>,
        options: Map<String, Value>,
    ) -> Reservation {
        if self.silenced {
            return Reservation::Silenced;
        }
        if matches!(kind, OpKind::Flush | OpKind::FinalizeEdit) && self.final_committed {
            return Reservation::DuplicateFinal;
        }
        let trail = if should_publish_turn_trail(self.verbosity) {
            final_turn_trail(self.activity.blocks())
        } else {
            Vec::new()
        };
        if let Some(pending) = self.ledger.pending.as_mut() {
            let texts = split_texts(text);
            let same = texts.len() == pending.delivery.parts.len()
                && texts
                    .iter()
                    .zip(&pending.delivery.parts)
                    .all(|(a, b)| *a == b.text);
            if !same {
                return Reservation::Refused(REFUSED_REPLACEMENT.to_owned());
            }
            if pending.in_flight {
                return Reservation::InFlight(pending.delivery.op);
            }
            pending.in_flight = true;
            return Reservation::Send(pending.delivery.clone());
        }
        let ordinal = Ordinal::after_settled(self.ledger.settled);
        let replan = Replan {
            text: text.to_owned(),
            reply_to: reply_to.map(str::to_owned),
            metadata,
            options,
            trail,
            media: None,
            skips: 0,
        };
        let Some(delivery) = plan_ordinal(op, self, ordinal, &replan) else {
            return Reservation::Refused("Canon could not plan the message".to_owned());
        };
        self.ledger.pending = Some(PendingOp {
            delivery: delivery.clone(),
            ordinal: Some(ordinal),
            kind,
            in_flight: true,
            replan,
        });
        Reservation::Send(delivery)
    }

    /// The ordinal after the settled one and after the pending operation's.
    fn next_free_ordinal(&self) -> Ordinal {
        let floor = self
            .ledger
            .pending
            .as_ref()
            .and_then(|p| p.ordinal)
            .map_or(self.ledger.settled, |o| o.get().max(self.ledger.settled));
        Ordinal::after_settled(floor)
    }

    /// The final of a turn resumed after a daemon restart that made no
    /// durable send before it: a 409 `MESSAGE_ID_EXISTS` on its flush means
    /// the daemon before stored this final under the same id (nothing else
    /// of the turn took an ordinal), with metadata the replay could not
    /// rebuild exactly (the stream's first send carried some). It counts as
    /// delivered; sending it under the next ordinal would store it twice.
    fn own_final_already_stored(
        &self,
        result: Result<Option<String>, DeliveryFailure>,
    ) -> Result<Option<String>, DeliveryFailure> {
        match result {
            Err(failure)
                if self.resumed
                    && !self.resumed_durable_sent
                    && failure.class == FailureClass::IdConflict =>
            {
                tracing::info!(turn_id = %self.id,
                    "the final was stored before the daemon restarted; not sent again");
                Ok(None)
            }
            other => other,
        }
    }

    /// Whether an operation of this turn that failed with `failure` after
    /// `skips` skips moves on to the next ordinal (turns.md §4.4 "Resumed
    /// turn"): only in a turn resumed after a daemon restart, only for an id
    /// conflict (the daemon before the restart stored another payload under
    /// the id), and at most [`MAX_RESUMED_ORDINAL_SKIPS`] times.
    fn skips_taken_ordinal(&self, failure: &DeliveryFailure, skips: u32) -> bool {
        if !self.resumed || failure.class != FailureClass::IdConflict {
            return false;
        }
        if skips >= MAX_RESUMED_ORDINAL_SKIPS {
            tracing::error!(turn_id = %self.id, skips, error = %failure.error,
                "every ordinal tried was taken before the daemon restarted; delivery given up");
            return false;
        }
        true
    }

    /// turns.md §4.4 "Resumed turn" for the pending operation `op`: when it
    /// moves on (see [`Turn::skips_taken_ordinal`]), its whole plan again,
    /// every part under the next free ordinal's ids, as the pending operation.
    fn skip_taken_ordinal(
        &mut self,
        op: OpId,
        result: &Result<Option<String>, DeliveryFailure>,
    ) -> Option<Delivery> {
        let Err(failure) = result else {
            return None;
        };
        let pending = self.ledger.pending.as_ref()?;
        if pending.delivery.op != op || !self.skips_taken_ordinal(failure, pending.replan.skips) {
            return None;
        }
        let ordinal = self.next_free_ordinal();
        let delivery = plan_ordinal(op, self, ordinal, &pending.replan)?;
        let pending = self.ledger.pending.as_mut()?;
        pending.delivery = delivery.clone();
        pending.ordinal = Some(ordinal);
        pending.in_flight = true;
        pending.replan.skips += 1;
        tracing::warn!(turn_id = %self.id, ordinal = ordinal.get(), error = %failure.error,
            "message id taken before the daemon restarted; sending under the next ordinal");
        Some(delivery)
    }

    /// Plans a media message of this open turn (turns.md §7.6 media row and
    /// turns.md OQ-6): its own `turn_complete` with the turn id, the reply
    /// authority and the peeked trail, under the id of the next ordinal
    /// (turns.md §4.4). The ordinal is used up at once, past any pending operation,
    /// so the media never waits for, replaces or collides with another operation of
    /// the turn; the transport's with-id retry replays its exact bytes.
    /// Returns the reservation and, with a delivery, what it was planned from.
    fn reserve_media(
        &mut self,
        op: OpId,
        media: &HostMedia,
        metadata: Map<String, Value>,
        options: Map<String, Value>,
    ) -> (Reservation, Option<Replan>) {
        if self.silenced {
            return (Reservation::Silenced, None);
        }
        let trail = if should_publish_turn_trail(self.verbosity) {
            final_turn_trail(self.activity.blocks())
        } else {
            Vec::new()
        };
        let ordinal = self.next_free_ordinal();
        let replan = Replan {
            text: media.caption.clone(),
            reply_to: media.reply_to.clone(),
            metadata,
            options,
            trail,
            media: Some(media.media.clone()),
            skips: 0,
        };
        let Some(delivery) = plan_ordinal(op, self, ordinal, &replan) else {
            let refused = Reservation::Refused("Canon could not plan the message".to_owned());
            return (refused, None);
        };
        self.ledger.settled = ordinal.get();
        (Reservation::Send(delivery), Some(replan))
    }

    /// The pending operation succeeded: advance the ordinal.
    fn settle(&mut self) {
        if let Some(pending) = self.ledger.pending.take() {
            if let Some(ordinal) = pending.ordinal {
                self.ledger.settled = self.ledger.settled.max(ordinal.get());
            }
        }
    }

    /// The pending operation failed: drop it only when nothing can have been
    /// stored, else keep it for an exact replay (turns.md §4.4).
    fn release_or_keep(&mut self, class: FailureClass) {
        let Some(pending) = self.ledger.pending.as_mut() else {
            return;
        };
        let single = pending.delivery.parts.len() == 1;
        if single && matches!(class, FailureClass::PreHandler | FailureClass::Rejected) {
            self.ledger.pending = None;
        } else {
            pending.in_flight = false;
        }
    }
}

/// The closing publish (turns.md §7.3 "Closing publish"), typing resume and
/// the answer to `turn.complete`.
fn finish_close(mut turn: Turn, config: TurnConfig, now: u64, out: &mut Vec<Effect>) {
    let Some(closing) = turn.closing.take() else {
        return;
    };
    out.push(Effect::PublishTurn(turn.body(
        closing.state,
        None,
        config,
        now,
    )));
    out.push(Effect::ResumeTyping {
        conversation_id: turn.conversation_id.clone(),
    });
    match closing.request {
        Some(request) => out.push(reply(request, HostReply::Done)),
        // Closed at a dequeue boundary, with no request waiting: the shim
        // holds the turn and its answer until it hears the close happened
        // (when it had a final, at that final's delivery).
        None if closing.reported => {}
        None => out.push(Effect::TurnClosed {
            session_key: closing.session_key,
            turn_id: turn.id.clone(),
        }),
    }
}

/// The conversation of a `standalone.send` (hermes-host.md §15): the
/// explicit chat id, else `CANON_HOME_CHANNEL`, else the platform's home
/// channel; blank values skipped.
pub fn standalone_target(send: &StandaloneSend) -> Option<&str> {
    [
        send.chat_id.as_deref(),
        send.home_channel_env.as_deref(),
        send.home_channel_config.as_deref(),
    ]
    .into_iter()
    .flatten()
    .map(str::trim)
    .find(|t| !t.is_empty())
}

/// turns.md §7.3 E1 steps a–b for the message `start` names: the disposition
/// acknowledgements of a queued message and of the queued ones merged into it, then the read
/// mark.
fn acknowledge(start: &ProcessingStart, out: &mut Vec<Effect>) {
    if start.disposition_queued {
        if let Some(id) = start.message_id.as_deref().filter(|id| !id.is_empty()) {
            out.push(Effect::AckDisposition {
                conversation_id: start.conversation_id.clone(),
                message_id: id.to_owned(),
            });
        }
    }
    for id in start.absorbed_queued_ids.iter().filter(|id| !id.is_empty()) {
        out.push(Effect::AckDisposition {
            conversation_id: start.conversation_id.clone(),
            message_id: id.clone(),
        });
    }
    out.push(Effect::MarkRead {
        conversation_id: start.conversation_id.clone(),
    });
}

/// Pushes turn `turn_id`'s clear of `conversation`'s live node;
/// [`TurnMachine::guard_clears`] drops it when a later turn wrote there.
fn push_clear(
    clears: &mut Vec<(usize, String)>,
    out: &mut Vec<Effect>,
    turn_id: &str,
    conversation: &str,
) {
    clears.push((out.len(), turn_id.to_owned()));
    out.push(Effect::Streaming(StreamingUpdate::Clear {
        conversation_id: conversation.to_owned(),
    }));
}

/// A `/streaming` write that makes its turn the owner of the live node.
fn is_node_write(effect: &Effect) -> bool {
    matches!(
        effect,
        Effect::Streaming(
            StreamingUpdate::Set {
                turn_id: Some(_),
                ..
            } | StreamingUpdate::Blank {
                turn_id: Some(_),
                ..
            }
        )
    )
}

fn reply(request: RequestId, reply: HostReply) -> Effect {
    Effect::Reply { request, reply }
}

/// Whether a send answers a Canon `interrupt` or `stop_and_drop` signal
/// (the shim's synthetic `/stop`), as opposed to `new_session`.
fn stop_signal_reply(send: &HostSend) -> bool {
    let stop = |id: Option<&str>| {
        id.and_then(|id| id.strip_prefix(CONTROL_EVENT_PREFIX))
            .is_some_and(|rest| {
                rest.starts_with("interrupt:") || rest.starts_with("stop_and_drop:")
            })
    };
    stop(send.reply_to.as_deref())
        || stop(
            send.metadata
                .get("reply_to_message_id")
                .and_then(Value::as_str),
        )
}

/// Whether a host send answers a synthetic control event
/// ([`CONTROL_EVENT_PREFIX`]), by `reply_to` or Hermes' reply metadata.
fn replies_to_control_event(send: &HostSend) -> bool {
    let control = |id: Option<&str>| id.is_some_and(|id| id.starts_with(CONTROL_EVENT_PREFIX));
    control(send.reply_to.as_deref())
        || control(
            send.metadata
                .get("reply_to_message_id")
                .and_then(Value::as_str),
        )
}

/// The session a send without a lifecycle turn is filed under: the
/// task-local session, else one per chat.
fn loose_session_key(session_key: Option<&str>, conversation_id: &str) -> String {
    match session_key.filter(|k| !k.is_empty()) {
        Some(key) => key.to_owned(),
        None => format!("chat:{conversation_id}"),
    }
}

/// The metadata and options of a durable send from the Hermes metadata
/// (turns.md §7.4 "Metadata from Hermes").
fn durable_fields(hermes: &Map<String, Value>) -> (Map<String, Value>, Map<String, Value>) {
    let options: Map<String, Value> = hermes
        .get("canon_options")
        .and_then(Value::as_object)
        .map(|bag| {
            bag.iter()
                .filter(|(k, _)| ALLOWED_OPTION_KEYS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    let metadata = match hermes.get("canon_metadata").and_then(Value::as_object) {
        Some(canon) => canon
            .iter()
            .filter(|(k, _)| !RESERVED_METADATA_KEYS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        None => {
            let rest: Map<String, Value> = hermes
                .iter()
                // canon-wire.md Q10: JSON scalars only, never the bags.
                .filter(|(k, v)| {
                    !matches!(
                        k.as_str(),
                        "expect_edits" | "notify" | "canon_options" | "canon_metadata"
                    ) && !v.is_object()
                        && !v.is_array()
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let mut metadata = Map::new();
            if !rest.is_empty() {
                metadata.insert("hermes".to_owned(), Value::Object(rest));
            }
            metadata
        }
    };
    (metadata, options)
}

/// The part texts an answer splits into (production defaults).
fn split_texts(text: &str) -> Vec<String> {
    plan_answer(AnswerSpec::new(text))
        .map(|plan| plan.parts().iter().map(|p| p.text().to_owned()).collect())
        .unwrap_or_default()
}

struct DeliverySpec<'a> {
    op: OpId,
    route: Route,
    conversation_id: &'a str,
    turn_id: Option<&'a str>,
    base_id: Option<&'a str>,
    text: &'a str,
    reply_to: Option<&'a str>,
    metadata: Map<String, Value>,
    options: Map<String, Value>,
    reply_authority: Option<ReplyAuthority>,
    trail: Vec<TrailBlock>,
    /// Media on the final part (canon-wire.md §7.4).
    media: Option<&'a MediaPayload>,
}

/// What a standalone delivery carries besides its ids.
struct StandaloneContent<'a> {
    text: &'a str,
    reply_to: Option<&'a str>,
    metadata: Map<String, Value>,
    options: Map<String, Value>,
    /// Media on the final part (canon-wire.md §7.4).
    media: Option<&'a MediaPayload>,
}

/// A delivery under a fresh standalone id group (turns.md §4.6) minted from
/// `random`, through [`Route::SendTo`]. The group's token only derives the
/// ids: it never reaches the wire, so the parts carry no `turnId` and the
/// delivery names no turn.
fn standalone_delivery(
    op: OpId,
    conversation_id: &str,
    random: u128,
    content: StandaloneContent<'_>,
) -> Option<Delivery> {
    let group = StandaloneGroup::new(conversation_id, random);
    build_delivery(&DeliverySpec {
        op,
        route: Route::SendTo,
        conversation_id,
        turn_id: Some(group.token()),
        base_id: Some(group.base_id()),
        text: content.text,
        reply_to: content.reply_to,
        metadata: content.metadata,
        options: content.options,
        reply_authority: None,
        trail: Vec::new(),
        media: content.media,
    })
    .map(|mut delivery| {
        delivery.turn_id = None;
        delivery
    })
}

/// The delivery of `replan` under `ordinal` of `turn`: every part's id derives
/// from (conversation, turn, ordinal) (turns.md §4.2, §4.3), and every part
/// carries the turn's reply authority.
fn plan_ordinal(op: OpId, turn: &Turn, ordinal: Ordinal, replan: &Replan) -> Option<Delivery> {
    let base = stable_final_message_id(&turn.conversation_id, Some(&turn.id), ordinal);
    build_delivery(&DeliverySpec {
        op,
        route: Route::Messages,
        conversation_id: &turn.conversation_id,
        turn_id: Some(&turn.id),
        base_id: base.as_deref(),
        text: &replan.text,
        reply_to: replan.reply_to.as_deref(),
        metadata: replan.metadata.clone(),
        options: replan.options.clone(),
        reply_authority: turn.reply_authority.clone(),
        trail: replan.trail.clone(),
        media: replan.media.as_ref(),
    })
}

/// Plans an answer with `canon_chunking` and turns it into owned messages.
///
/// canon-wire.md Q10: when the final metadata would exceed 4,096 UTF-16
/// units, or the trail had to be dropped, `metadata.hermes` goes first and
/// the plan is made again.
fn build_delivery(spec: &DeliverySpec<'_>) -> Option<Delivery> {
    let plan_with = |metadata: Map<String, Value>| {
        let mut answer = AnswerSpec::new(spec.text);
        answer.base_id = spec.base_id;
        answer.turn_id = spec.turn_id.filter(|_| spec.route == Route::Messages);
        answer.metadata = metadata;
        answer.turn_trail = spec.trail.iter().map(TrailBlock::to_json).collect();
        plan_answer(answer).ok()
    };
    let mut plan = plan_with(spec.metadata.clone())?;
    let oversized =
        plan.trail_dropped() || json_u16_len(plan.final_part().metadata()) > METADATA_MAX_U16;
    if oversized && spec.metadata.contains_key("hermes") {
        let mut lean = spec.metadata.clone();
        lean.retain(|key, _| key != "hermes");
        plan = plan_with(lean)?;
    }
    let parts = plan
        .parts()
        .iter()
        .map(|part| {
            let last = part.role() == PartRole::Final;
            let media = spec.media.filter(|_| last);
            OutboundMessage {
                message_id: part.message_id().map(str::to_owned),
                text: part.text().to_owned(),
                reply_to: spec.reply_to.map(str::to_owned),
                metadata: part.metadata().clone(),
                options: if last {
                    spec.options.clone()
                } else {
                    Map::new()
                },
                reply_authority: spec.reply_authority.clone(),
                content_type: media.map(|m| m.content_type.clone()),
                attachments: media.map(|m| m.attachments.clone()).unwrap_or_default(),
            }
        })
        .collect();
    Some(Delivery {
        op: spec.op,
        route: spec.route,
        conversation_id: spec.conversation_id.to_owned(),
        turn_id: spec.turn_id.map(str::to_owned),
        parts,
    })
}

#[cfg(test)]
mod tests;

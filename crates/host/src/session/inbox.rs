//! The session's side of the durable inbox (crate `canon-inbox`): every stream frame with an id
//! gets a ticket; a frame is settled when its handling is over, which for a message that wakes
//! a turn is when the shim answered its `inbound.message` (Hermes' `handle_message` returned).
//! What must survive a crash comes out as [`SessionEffect::Inbox`] records, which the shell
//! appends to the journal. A message the inbox already knows as handled (a replay after a
//! restart) is dropped before the wake pipeline sees it.

use std::collections::{HashMap, HashSet};

use canon_inbox::{HandledSet, OpenTurns, Record, RuntimeTurns, Ticket, Tracker};
use canon_wire::events::EventKind;
use canon_wire::types::{TurnState, TurnUpdate};

use super::{Session, SessionEffect};
use crate::protocol::InboundMessage;
use crate::turn::{AbandonedTurn, Effect, Input, ProcessingStart};

/// Messages on their way to the shim (waiting for media or for an earlier message of their
/// conversation) whose frames wait to settle; beyond this many something is wrong and the oldest
/// holds are dropped (their frames are then replayed by the next stream, never lost).
const MAX_HOLDS: usize = 4096;

/// How long a message Hermes' queue no longer held when its session's turn closed waits for a
/// turn of its own before it counts as let go (handled). Hermes pops the next queued message
/// just before the closing turn reports its queue, so an empty queue usually means that
/// message's turn is about to start; when a gateway stop cancels that start, the message must
/// still be replayed after the restart, so it may not be settled at the close.
pub(crate) const LET_GO_GRACE_MS: u64 = 5_000;

/// When a message the shim refused for now (the adapter is not connected) is offered again,
/// after its first refusal: doubling from here up to [`REOFFER_MAX_MS`].
pub(crate) const REOFFER_FIRST_MS: u64 = 5_000;
/// The longest wait between two offers of one message.
pub(crate) const REOFFER_MAX_MS: u64 = 60_000;
/// How many times a message is offered in all. A gateway that stops refuses every offer until
/// the daemon exits (the frame stays unsettled, and the next daemon's stream replays it); an
/// adapter that refused for a moment takes a later offer, and the cursor moves on. Past the
/// last offer the frame stays unsettled for the rest of the connection, said at ERROR.
pub(crate) const MAX_OFFERS: u32 = 8;
/// How long the shim may take to answer an `inbound.message` before the offer counts as
/// refused for now: Hermes' `handle_message` queues the message and returns, so an answer this
/// late means it is stuck, and the message is offered again (the shim drops a repeat of a
/// message Hermes took).
pub(crate) const INBOUND_ANSWER_MS: u64 = 120_000;

/// A message on its way to Hermes that may be offered again: what the shim was sent, how many
/// times, and when the offer pending now was sent.
#[derive(Debug, Clone)]
struct Offer {
    message: InboundMessage,
    offers: u32,
    sent_at: u64,
}

/// What settles when the shim answers a handed-over message.
#[derive(Debug, Clone)]
struct Hold {
    ticket: Option<Ticket>,
    message_id: Option<String>,
    event_ref: String,
}

/// The session's inbox state.
#[derive(Debug, Default)]
pub(crate) struct InboxState {
    tracker: Tracker,
    /// The ticket of the frame being handled right now, until a wake takes it.
    current: Option<Ticket>,
    /// Event reference → hold, for messages not yet sent to the shim.
    by_event: HashMap<String, Hold>,
    /// Daemon request id → hold, for messages the shim has not answered yet.
    by_request: HashMap<String, Hold>,
    /// Daemon request id → the offer, beside `by_request`.
    offered: HashMap<String, Offer>,
    /// Messages the shim refused for now, with the time of their next offer.
    reoffers: Vec<(Hold, Offer, u64)>,
    /// Event reference → (Hermes session key, hold), for messages Hermes queued behind a
    /// running turn: they settle when their turn starts.
    queued: HashMap<String, (String, Hold)>,
    /// Event reference → (Hermes session key, hold, when it settles), for queued messages
    /// whose session's turn closed with an empty queue: they settle when their turn starts,
    /// when the session runs a turn without them, or after [`LET_GO_GRACE_MS`]; a gateway stop
    /// before any of these leaves them unsettled (replayed after the restart).
    let_go: HashMap<String, (String, Hold, u64)>,
    /// The turns the daemon before this one opened and never closed, by Hermes session key:
    /// their conversation and Canon messages.
    inherited: HashMap<String, (String, Vec<String>)>,
    /// Inherited turns a message-less turn took as Hermes' resume, until that turn closes.
    resuming: HashMap<String, (String, Vec<String>)>,
    /// The turn the journal holds open for each session of this daemon (its Canon messages,
    /// the one that started it first), from its `TurnOpened` record until its `TurnClosed`.
    open: HashMap<String, Vec<String>>,
    /// The Canon turns this daemon told Canon were open and has not yet closed (each gets one
    /// `RuntimeTurnOpened` record).
    told_open: HashSet<String>,
    /// The Canon turns a predecessor told Canon were open and never closed, until a fresh
    /// connect closes them.
    abandoned: Vec<AbandonedTurn>,
}

impl InboxState {
    /// Whether Canon message `message_id` is one of a turn the journal holds open: a turn of
    /// this daemon, or one a predecessor left open.
    fn in_open_turn(&self, message_id: &str) -> bool {
        let named = |ids: &Vec<String>| ids.iter().any(|id| id == message_id);
        self.open.values().any(named)
            || self.inherited.values().any(|(_, ids)| named(ids))
            || self.resuming.values().any(|(_, ids)| named(ids))
    }

    /// The hold of Canon message `message_id` if it is still on its way to Hermes: waiting to
    /// be sent to the shim, waiting for the shim's answer, or queued behind a running turn.
    fn pending_hold(&mut self, message_id: &str) -> Option<&mut Hold> {
        let is = |hold: &&mut Hold| hold.message_id.as_deref() == Some(message_id);
        if let Some(hold) = self.by_event.values_mut().find(is) {
            return Some(hold);
        }
        if let Some(hold) = self.by_request.values_mut().find(is) {
            return Some(hold);
        }
        if let Some(hold) = self.let_go.values_mut().map(|(_, hold, _)| hold).find(is) {
            return Some(hold);
        }
        self.queued.values_mut().map(|(_, hold)| hold).find(is)
    }
}

impl Session {
    /// Replaces the inbox state with one loaded from the journal at connect: the cursor, the
    /// handled ids, the turns a predecessor left open and the Canon turns it never closed.
    pub fn inbox_resume(
        &mut self,
        cursor: Option<String>,
        handled: HandledSet,
        open_turns: &OpenTurns,
        runtime_turns: &RuntimeTurns,
    ) {
        tracing::info!(
            cursor = cursor.as_deref().unwrap_or(""),
            handled = handled.len(),
            open_turns = open_turns.len(),
            runtime_turns = runtime_turns.len(),
            "resuming the inbound stream from the inbox"
        );
        self.inbox = InboxState {
            tracker: Tracker::resume(cursor, handled),
            inherited: open_turns
                .iter()
                .map(|t| {
                    (
                        t.session_key.clone(),
                        (t.conversation_id.clone(), t.message_ids.clone()),
                    )
                })
                .collect(),
            abandoned: runtime_turns
                .iter()
                .map(|t| AbandonedTurn {
                    turn_id: t.turn_id.clone(),
                    conversation_id: t.conversation_id.clone(),
                    opened_at_ms: t.opened_at_ms,
                })
                .collect(),
            ..InboxState::default()
        };
    }

    /// The Canon turns a predecessor left open and no turn of this run took over are closed:
    /// at a first connect of the gateway (no turn of an earlier run goes on), and after a
    /// respawned daemon's resync (the shim handed over every turn that still runs). A
    /// reconnect alone closes nothing: the resync that follows it decides.
    pub(super) fn inbox_close_abandoned(&mut self, now_ms: u64) -> Vec<SessionEffect> {
        let abandoned = std::mem::take(&mut self.inbox.abandoned);
        if abandoned.is_empty() {
            return Vec::new();
        }
        self.feed(Input::CloseAbandoned(abandoned), now_ms)
    }

    /// A turn-state publish of the turn machine, journaled: the first open state of a turn is
    /// sent once its record is on disk ([`SessionEffect::JournalThenCanon`]: a crash right after
    /// the send still leaves the record), a closing state recorded after it landed
    /// ([`SessionEffect::CanonJournaled`]).
    pub(super) fn inbox_turn_published(
        &mut self,
        update: TurnUpdate,
        now_ms: u64,
    ) -> Vec<SessionEffect> {
        let Some(turn_id) = update.turn_id.clone() else {
            return vec![SessionEffect::Canon(Effect::PublishTurn(update))];
        };
        if update.state.is_closing() {
            self.inbox.told_open.remove(&turn_id);
            return vec![SessionEffect::CanonJournaled {
                effect: Effect::PublishTurn(update),
                records: vec![Record::RuntimeTurnClosed { turn_id }],
            }];
        }
        if self.inbox.told_open.insert(turn_id.clone()) {
            return vec![SessionEffect::JournalThenCanon {
                records: vec![Record::RuntimeTurnOpened {
                    turn_id,
                    conversation_id: update.conversation_id.clone(),
                    opened_at_ms: update.opened_at.unwrap_or(now_ms),
                }],
                effect: Effect::PublishTurn(update),
            }];
        }
        vec![SessionEffect::Canon(Effect::PublishTurn(update))]
    }

    /// A turn starts (`turn.start` or a dequeue). A gateway stopped mid-turn resumes that
    /// session by itself when it starts again, with an event that names no Canon message; the
    /// first turn of a session whose turn a predecessor left open, when its event names no
    /// message, is that resume and answers the cut-off turn's messages (without this, the
    /// answer would reply to nothing and its messages would look unanswered). When the
    /// session's first turn is a new message instead (Hermes resumed nothing, or the new
    /// message came first), that turn runs on the transcript that holds the cut-off messages,
    /// so it answers them too: they join its messages. Any turn of the session ends the
    /// inheritance. The turn's messages are journaled until it closes.
    pub(super) fn inbox_turn_opened(
        &mut self,
        start: &mut ProcessingStart,
        event_ref: &str,
        absorbed_refs: &[String],
        now_ms: u64,
    ) -> Vec<SessionEffect> {
        let mut effects = Vec::new();
        let refs: Vec<&str> = std::iter::once(event_ref)
            .chain(absorbed_refs.iter().map(String::as_str))
            .collect();
        self.settle_started(&refs, now_ms, &mut effects);
        // The session runs a turn without its other let-go messages: Hermes dropped or merged
        // them, so they are handled.
        self.settle_let_go(
            |session, _| session == start.session_key,
            now_ms,
            &mut effects,
        );
        effects.extend(self.wakes.started(&refs));
        self.inbox.resuming.remove(&start.session_key);
        if let Some((conversation, mut ids)) = self.inbox.inherited.remove(&start.session_key) {
            if start.message_id.is_none()
                && start.absorbed_message_ids.is_empty()
                && !ids.is_empty()
            {
                tracing::info!(
                    session_key = %start.session_key,
                    messages = ids.len(),
                    "the session's resume answers its interrupted turn's messages"
                );
                self.inbox
                    .resuming
                    .insert(start.session_key.clone(), (conversation, ids.clone()));
                start.message_id = Some(ids.remove(0));
                start.absorbed_message_ids = ids;
            } else {
                ids.retain(|id| {
                    start.message_id.as_ref() != Some(id)
                        && !start.absorbed_message_ids.contains(id)
                });
                if !ids.is_empty() {
                    tracing::info!(
                        session_key = %start.session_key,
                        messages = ids.len(),
                        "the session's next turn answers its interrupted turn's messages too"
                    );
                    start.absorbed_message_ids.extend(ids);
                }
            }
        }
        let mut message_ids: Vec<String> = start.message_id.iter().cloned().collect();
        message_ids.extend(start.absorbed_message_ids.iter().cloned());
        if !message_ids.is_empty() {
            self.inbox
                .open
                .insert(start.session_key.clone(), message_ids.clone());
            // A message a turn started with is handed over, even while the shim's answer to its
            // hand-over is still on its way (Hermes can start the turn first): a daemon killed
            // before that answer must not have its successor hand the message over again.
            let mut records: Vec<Record> = message_ids
                .iter()
                .filter_map(|id| self.inbox.tracker.record_handled(id, now_ms))
                .collect();
            records.push(Record::TurnOpened {
                session_key: start.session_key.clone(),
                conversation_id: start.conversation_id.clone(),
                message_ids,
            });
            effects.push(SessionEffect::Inbox(records));
        }
        effects
    }

    /// A turn started after the gateway had begun its stop (`turn.start` with `draining`). A
    /// stopping Hermes runs no new message: it answers "not accepting new work" or its stop
    /// cancels the cycle at once. So the turn settles nothing (its messages and wakes stay
    /// unsettled and are replayed after the restart), and it is not journaled as the session's
    /// open turn, which would put it in place of a turn the stop cut off mid-answer (Hermes
    /// resumes that one after the restart, and its messages must still be the ones it answers).
    ///
    /// A message whose turn this is may have been let go a moment before (its session's turn
    /// closed with an empty queue because Hermes had just popped it for this start): it is
    /// taken back, unsettled, so the restart replays it.
    pub(super) fn inbox_turn_opened_while_stopping(
        &mut self,
        start: &ProcessingStart,
    ) -> Vec<SessionEffect> {
        tracing::debug!(
            session_key = %start.session_key,
            message_id = start.message_id.as_deref().unwrap_or(""),
            "a turn started while the gateway stops; its messages wait for the restart"
        );
        self.inbox
            .let_go
            .retain(|_, (session, _, _)| *session != start.session_key);
        Vec::new()
    }

    /// The session's turn completed. While the gateway drains for a stop, the messages still
    /// queued were discarded (their frames stay unsettled, so they are replayed), and the turn
    /// stays open in the journal until a stored final answers its messages
    /// ([`Session::inbox_final_stored`]): a turn the stop cut off is answered after the restart
    /// by Hermes' resume of the session, or by Hermes' redelivery of a final the stop kept from
    /// Canon, and a successor can give either one the turn's messages only while the journal
    /// holds them open. (Whether the turn got as far as streaming says nothing here: Hermes'
    /// own shutdown notice streams into the chat, and a streamed answer whose final never
    /// reached Canon is still unanswered.) Else the turn is closed, and with an empty queue
    /// every message still held for the session left Hermes' queue: each is let go, and
    /// settles as handled when its turn starts, when the session runs a turn without it, or
    /// after [`LET_GO_GRACE_MS`] (a stop cancelling the start of the one Hermes popped takes it
    /// back unsettled).
    ///
    /// `last_state` is the turn's last published state; past `thinking`, it got somewhere (it
    /// streamed, ran a tool or waited for a human). A restarted Hermes runs its resume of a
    /// session in two passes, the first of which returns at once (the runner had pre-claimed
    /// the session's slot, so the event is queued behind itself) and answers nothing. When the turn that took the inherited messages as
    /// that resume closes unanswered, the messages stay inherited (and open in the journal) for
    /// the next message-less turn of the session, the real resume.
    pub(super) fn inbox_turn_closed(
        &mut self,
        session_key: &str,
        queue_depth: u32,
        draining: bool,
        last_state: Option<TurnState>,
        now_ms: u64,
    ) -> Vec<SessionEffect> {
        self.inbox.inherited.remove(session_key);
        let resumed = self.inbox.resuming.remove(session_key);
        let answered = !matches!(last_state, None | Some(TurnState::Thinking));
        tracing::debug!(
            session_key,
            queue_depth,
            draining,
            ?last_state,
            "inbox: the session's turn closed"
        );
        if draining {
            // The queue was discarded: its messages stay unsettled (replayed) and its wakes are
            // put back (handed over again after the restart).
            self.inbox
                .let_go
                .retain(|_, (session, _, _)| session != session_key);
            return self.wakes.let_go(session_key, false);
        }
        if let Some(resumed) = resumed.filter(|_| !answered) {
            tracing::info!(
                session_key,
                "the session's resume pass answered nothing; its interrupted turn's messages wait \
                 for the next pass"
            );
            self.inbox.inherited.insert(session_key.to_owned(), resumed);
            return Vec::new();
        }
        self.inbox.open.remove(session_key);
        let mut effects = vec![SessionEffect::Inbox(vec![Record::TurnClosed {
            session_key: session_key.to_owned(),
        }])];
        if queue_depth == 0 {
            // Hermes holds none of the session's messages any more. The one it popped for the
            // next turn settles when that turn starts; the rest were dropped or merged. They
            // settle after a grace unless a turn settles them sooner or a stop takes them back.
            let refs: Vec<String> = self
                .inbox
                .queued
                .iter()
                .filter(|(_, (session, _))| session == session_key)
                .map(|(event_ref, _)| event_ref.clone())
                .collect();
            for event_ref in refs {
                if let Some((session, hold)) = self.inbox.queued.remove(&event_ref) {
                    self.inbox
                        .let_go
                        .insert(event_ref, (session, hold, now_ms + LET_GO_GRACE_MS));
                }
            }
            effects.extend(self.wakes.let_go(session_key, true));
        }
        effects
    }

    /// Settles the let-go messages whose grace is over.
    pub(super) fn inbox_let_go_expired(&mut self, now_ms: u64) -> Vec<SessionEffect> {
        let mut effects = Vec::new();
        self.settle_let_go(|_, at| at <= now_ms, now_ms, &mut effects);
        effects
    }

    /// When the next let-go message settles by itself, a refused message is offered again, or
    /// an unanswered offer counts as refused.
    pub(super) fn inbox_next_deadline(&self) -> Option<u64> {
        let let_go = self.inbox.let_go.values().map(|(_, _, at)| *at);
        let reoffers = self.inbox.reoffers.iter().map(|(_, _, at)| *at);
        let unanswered = self
            .inbox
            .offered
            .values()
            .map(|offer| offer.sent_at.saturating_add(INBOUND_ANSWER_MS));
        let_go.chain(reoffers).chain(unanswered).min()
    }

    fn settle_let_go(
        &mut self,
        due: impl Fn(&str, u64) -> bool,
        now_ms: u64,
        effects: &mut Vec<SessionEffect>,
    ) {
        let refs: Vec<String> = self
            .inbox
            .let_go
            .iter()
            .filter(|(_, (session, _, at))| due(session, *at))
            .map(|(event_ref, _)| event_ref.clone())
            .collect();
        for event_ref in refs {
            if let Some((_, hold, _)) = self.inbox.let_go.remove(&event_ref) {
                self.settle_hold(hold, now_ms, effects);
            }
        }
    }

    /// A turn's final is stored in Canon. When it is the answer to the turn the journal holds
    /// open for the session (the turn started with `trigger_message_id`), that turn is closed
    /// there: a turn the gateway's stop closed is answered now, and a successor must not hand
    /// its messages to Hermes' resume as well.
    pub(super) fn inbox_final_stored(
        &mut self,
        session_key: &str,
        trigger_message_id: Option<String>,
    ) -> Vec<SessionEffect> {
        let answers_open = trigger_message_id.is_some_and(|trigger| {
            self.inbox
                .open
                .get(session_key)
                .is_some_and(|ids| ids.first() == Some(&trigger))
        });
        if !answers_open {
            return Vec::new();
        }
        self.inbox.open.remove(session_key);
        tracing::debug!(session_key, "inbox: the open turn's final is stored");
        vec![SessionEffect::Inbox(vec![Record::TurnClosed {
            session_key: session_key.to_owned(),
        }])]
    }

    /// A gateway that stopped before it could deliver a turn's answer sends it again after its
    /// restart, outside any session and replying to nothing (Hermes' recovered-final
    /// redelivery). Such a send in `conversation`, where a predecessor left a turn open, is that
    /// turn's answer: the message it replies to, and the record that closes that turn in the
    /// journal (the inheritance ends). The turn is closed as the answer is claimed: the send
    /// itself survives a daemon crash (the shim sends a turn-less send again to the respawned
    /// daemon, under the same ids), while a turn left open would have the next daemon hand the
    /// message to Hermes' resume, which answers it a second time.
    pub(super) fn inbox_redelivery_reply(
        &mut self,
        conversation: &str,
    ) -> Option<(String, SessionEffect)> {
        let session = self
            .inbox
            .inherited
            .iter()
            .filter(|(_, (c, ids))| c == conversation && !ids.is_empty())
            .map(|(session, _)| session.clone())
            .min()?;
        let (_, ids) = self.inbox.inherited.remove(&session)?;
        tracing::info!(
            session_key = %session,
            "a redelivered answer replies to its interrupted turn's message"
        );
        let reply_to = ids.into_iter().next()?;
        let closed = SessionEffect::Inbox(vec![Record::TurnClosed {
            session_key: session,
        }]);
        Some((reply_to, closed))
    }

    /// What a send of session `session_key` that names no message replies to: while the
    /// session's turn is Hermes' resume of a turn a predecessor left open, the interrupted
    /// turn's first message. Hermes' resume replies to nothing, and Canon ties an answer to its
    /// message only by `replyTo` or by the turn's opening `activeMessageIds`, which is a
    /// best-effort write: without this, an answer whose opening publish failed answers nothing.
    pub(super) fn inbox_resume_reply(&self, session_key: &str) -> Option<String> {
        let (_, ids) = self.inbox.resuming.get(session_key)?;
        ids.first().cloned()
    }

    /// A respawned daemon's shim handed these sessions' running turns over: they go on as
    /// themselves, not as resumes.
    pub(super) fn inbox_resynced<'a>(&mut self, sessions: impl Iterator<Item = &'a str>) {
        for session in sessions {
            // The journal still holds the turn open, and this daemon now runs it.
            if let Some((_, ids)) = self.inbox.inherited.remove(session) {
                self.inbox.open.insert(session.to_owned(), ids);
            }
            self.inbox.resuming.remove(session);
        }
    }

    /// A new event stream opens: the cursor to resume it from. Frames of the old stream that
    /// never settled are replayed by the new one.
    pub fn inbox_new_stream(&mut self) -> Option<String> {
        self.inbox.tracker.new_stream();
        self.inbox.current = None;
        self.inbox.tracker.cursor().map(str::to_owned)
    }

    /// The safe cursor (tests and health).
    pub fn inbox_cursor(&self) -> Option<&str> {
        self.inbox.tracker.cursor()
    }

    /// Whether `kind` is a message already handed to Hermes (a replayed frame, with or without
    /// an id the tracker can follow).
    pub(super) fn inbox_already_handled(&self, kind: &EventKind) -> bool {
        let EventKind::MessageCreated(created) = kind else {
            return false;
        };
        let message_id = created.message.get("id").and_then(|v| v.as_str());
        let handled = message_id.is_some_and(|id| self.inbox.tracker.is_handled(id));
        if handled {
            tracing::debug!(message_id, "replayed message already handled");
        }
        handled
    }

    /// A stream frame with an id arrived and is about to be handled. `None` when the frame is a
    /// replayed message already handed to Hermes: it is settled here and must not be handled.
    ///
    /// A message a turn started with is in Hermes' transcript, whatever the journal's handled
    /// set says (a journal written before turns recorded their messages as handled, or a daemon
    /// killed between the turn's start and the shim's answer to the hand-over): a replay of a
    /// message that a turn the journal holds open names is settled as handled too. Handing it
    /// over again would have Hermes answer it twice: once in its resume of the interrupted turn,
    /// once as a new message.
    pub(super) fn inbox_arrived(
        &mut self,
        event_id: &str,
        kind: &EventKind,
        now_ms: u64,
        effects: &mut Vec<SessionEffect>,
    ) -> Option<()> {
        let ticket = self.inbox.tracker.arrived(event_id);
        if let EventKind::MessageCreated(created) = kind {
            let message_id = created.message.get("id").and_then(|v| v.as_str());
            if self.inbox_already_handled(kind) {
                push_records(effects, self.inbox.tracker.settle(ticket, None));
                return None;
            }
            if let Some(id) = message_id.filter(|id| self.inbox.in_open_turn(id)) {
                tracing::info!(
                    message_id = id,
                    "replayed message belongs to a turn Hermes started; not handed over again"
                );
                push_records(
                    effects,
                    self.inbox.tracker.settle(ticket, Some((id, now_ms))),
                );
                return None;
            }
            if let Some(hold) = message_id.and_then(|id| self.inbox.pending_hold(id)) {
                // A new stream replays the frame of a message still on its way to Hermes (its
                // hand-over unanswered, or queued behind a running turn). The old stream's ticket
                // no longer counts, so the hold takes this one: the frame settles when the
                // message does, and until then the cursor stays before it. Handling the replay
                // again would only be dropped as a repeat, and settling it now would let a
                // daemon killed before the shim's answer lose the message.
                tracing::debug!(
                    message_id = message_id.unwrap_or(""),
                    event_id,
                    "replayed message still on its way to Hermes"
                );
                hold.ticket = Some(ticket);
                return None;
            }
        }
        self.inbox.current = Some(ticket);
        Some(())
    }

    /// The frame's handling is over: settles its ticket unless a wake took it.
    pub(super) fn inbox_frame_done(&mut self, effects: &mut Vec<SessionEffect>) {
        if let Some(ticket) = self.inbox.current.take() {
            push_records(effects, self.inbox.tracker.settle(ticket, None));
        }
    }

    /// A wake was made of the current frame under `event_ref`: its frame settles when the shim
    /// answers. Messages without a frame id (no ticket) are still recorded as handled.
    pub(super) fn inbox_hold(&mut self, event_ref: &str, message_id: Option<String>) {
        if self.inbox.by_event.len() >= MAX_HOLDS {
            tracing::error!(
                holds = self.inbox.by_event.len(),
                "too many inbound messages waiting for the shim; their frames will be replayed"
            );
            self.inbox.by_event.clear();
        }
        let ticket = self.inbox.current.take();
        self.inbox.by_event.insert(
            event_ref.to_owned(),
            Hold {
                ticket,
                message_id,
                event_ref: event_ref.to_owned(),
            },
        );
    }

    /// The line of an `inbound.message`; a held message now waits for the shim's answer.
    pub(super) fn inbound_line(&mut self, message: InboundMessage, now_ms: u64) -> String {
        self.offer_line(message, 1, now_ms)
    }

    /// [`Session::inbound_line`] for the `offers`-th offer of `message`.
    fn offer_line(&mut self, message: InboundMessage, offers: u32, now_ms: u64) -> String {
        let hold = self.inbox.by_event.remove(&message.event_ref);
        let offer = hold.as_ref().map(|_| Offer {
            message: message.clone(),
            offers,
            sent_at: now_ms,
        });
        let line = self.request_line(crate::protocol::DaemonRequest::InboundMessage(message));
        if let (Some(hold), Some(offer)) = (hold, offer) {
            if self.inbox.by_request.len() >= MAX_HOLDS {
                self.inbox.by_request.clear();
                self.inbox.offered.clear();
            }
            let request_id = format!("d:{}", self.next_daemon_id);
            self.inbox.by_request.insert(request_id.clone(), hold);
            self.inbox.offered.insert(request_id, offer);
        }
        line
    }

    /// The messages due for another offer at `now_ms` (refused for now, or unanswered past
    /// [`INBOUND_ANSWER_MS`]): their lines.
    pub(super) fn inbox_reoffers_due(&mut self, now_ms: u64) -> Vec<SessionEffect> {
        let stuck: Vec<String> = self
            .inbox
            .offered
            .iter()
            .filter(|(_, offer)| now_ms.saturating_sub(offer.sent_at) >= INBOUND_ANSWER_MS)
            .map(|(id, _)| id.clone())
            .collect();
        for request_id in stuck {
            tracing::warn!(
                request_id,
                "the shim did not answer an inbound message in time; it is offered again"
            );
            self.inbox_refused(&request_id, now_ms);
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.inbox.reoffers)
            .into_iter()
            .partition(|(_, _, at)| *at <= now_ms);
        self.inbox.reoffers = later;
        let mut effects = Vec::with_capacity(due.len());
        for (hold, offer, _) in due {
            tracing::info!(
                message_id = hold.message_id.as_deref().unwrap_or(""),
                offer = offer.offers + 1,
                "offering an inbound message to Hermes again"
            );
            self.inbox.by_event.insert(hold.event_ref.clone(), hold);
            let line = self.offer_line(offer.message, offer.offers + 1, now_ms);
            effects.push(SessionEffect::Frame(line));
        }
        effects
    }

    /// The shim answered daemon request `request_id`: a held message is handled now (whether
    /// Hermes accepted it or the shim reported an error, the daemon handed it over once),
    /// unless Hermes queued it behind a running turn of session `queued_in`: a gateway stop
    /// discards that queue, so its frame settles only when its turn starts.
    pub(super) fn inbox_answered(
        &mut self,
        request_id: &str,
        queued_in: Option<&str>,
        now_ms: u64,
    ) -> Vec<SessionEffect> {
        self.inbox.offered.remove(request_id);
        let Some(hold) = self.inbox.by_request.remove(request_id) else {
            return Vec::new();
        };
        if let Some(session) = queued_in {
            if self.inbox.queued.len() >= MAX_HOLDS {
                tracing::error!("too many queued inbound messages; their frames will be replayed");
                self.inbox.queued.clear();
            }
            tracing::debug!(
                message_id = hold.message_id.as_deref().unwrap_or(""),
                session_key = session,
                "inbound message queued in Hermes; it settles when its turn starts"
            );
            self.inbox
                .queued
                .insert(hold.event_ref.clone(), (session.to_owned(), hold));
            return Vec::new();
        }
        let mut effects = Vec::new();
        self.settle_hold(hold, now_ms, &mut effects);
        effects
    }

    /// The shim could not hand the message of daemon request `request_id` to Hermes (a
    /// retryable error: the adapter is not connected), or did not answer in time: its frame
    /// stays unsettled, and the message is offered again later (up to [`MAX_OFFERS`] times), so
    /// an adapter that refused for a moment still gets it and the cursor moves on; a gateway
    /// that is stopping refuses every offer, and a successor's stream replays it.
    pub(super) fn inbox_refused(&mut self, request_id: &str, now_ms: u64) {
        let offer = self.inbox.offered.remove(request_id);
        let Some(hold) = self.inbox.by_request.remove(request_id) else {
            return;
        };
        match offer {
            Some(offer) if offer.offers < MAX_OFFERS => {
                let wait = REOFFER_FIRST_MS
                    .saturating_mul(1 << (offer.offers - 1).min(16))
                    .min(REOFFER_MAX_MS);
                tracing::warn!(
                    message_id = hold.message_id.as_deref().unwrap_or(""),
                    wait_ms = wait,
                    "Hermes did not take an inbound message; it is offered again"
                );
                self.inbox.reoffers.push((hold, offer, now_ms + wait));
            }
            _ => tracing::error!(
                message_id = hold.message_id.as_deref().unwrap_or(""),
                "Hermes did not take an inbound message after every offer; the stream's durable \
                 cursor stays before it until the daemon restarts, and it is replayed then"
            ),
        }
    }

    fn settle_hold(&mut self, hold: Hold, now_ms: u64, effects: &mut Vec<SessionEffect>) {
        tracing::debug!(
            message_id = hold.message_id.as_deref().unwrap_or(""),
            event_ref = %hold.event_ref,
            "inbound message handled"
        );
        let handled = hold.message_id.as_deref().map(|id| (id, now_ms));
        let records = match hold.ticket {
            Some(ticket) => self.inbox.tracker.settle(ticket, handled),
            // No frame to settle (an event without an id): only the handled record.
            None => handled
                .and_then(|(id, at_ms)| self.inbox.tracker.record_handled(id, at_ms))
                .into_iter()
                .collect(),
        };
        push_records(effects, records);
    }

    /// Turns of `refs` started: their queued (or let-go) messages are handled now.
    fn settle_started(&mut self, refs: &[&str], now_ms: u64, effects: &mut Vec<SessionEffect>) {
        for event_ref in refs {
            if let Some((_, hold)) = self.inbox.queued.remove(*event_ref) {
                self.settle_hold(hold, now_ms, effects);
            } else if let Some((_, hold, _)) = self.inbox.let_go.remove(*event_ref) {
                self.settle_hold(hold, now_ms, effects);
            }
        }
    }
}

fn push_records(effects: &mut Vec<SessionEffect>, records: Vec<Record>) {
    if !records.is_empty() {
        effects.push(SessionEffect::Inbox(records));
    }
}

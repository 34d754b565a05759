//! The session's side of the durable inbox (crate `canon-inbox`): every stream frame with an id
//! gets a ticket; a frame is settled when its handling is over, which for a message that wakes
//! a turn is when the shim answered its `inbound.message` (Hermes' `handle_message` returned).
//! What must survive a crash comes out as [`SessionEffect::Inbox`] records, which the shell
//! appends to the journal. A message the inbox already knows as handled (a replay after a
//! restart) is dropped before the wake pipeline sees it.

use std::collections::HashMap;

use canon_inbox::{HandledSet, Record, Ticket, Tracker};
use canon_wire::events::EventKind;

use super::{Session, SessionEffect};
use crate::protocol::InboundMessage;

/// Messages on their way to the shim (waiting for media or for an earlier message of their
/// conversation) whose frames wait to settle; beyond this many something is wrong and the oldest
/// holds are dropped (their frames are then replayed by the next stream, never lost).
const MAX_HOLDS: usize = 4096;

/// What settles when the shim answers a handed-over message.
#[derive(Debug, Clone)]
struct Hold {
    ticket: Option<Ticket>,
    message_id: Option<String>,
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
}

impl Session {
    /// Replaces the inbox state with one loaded from the journal at connect.
    pub fn inbox_resume(&mut self, cursor: Option<String>, handled: HandledSet) {
        tracing::info!(
            cursor = cursor.as_deref().unwrap_or(""),
            handled = handled.len(),
            "resuming the inbound stream from the inbox"
        );
        self.inbox = InboxState {
            tracker: Tracker::resume(cursor, handled),
            ..InboxState::default()
        };
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

    /// A stream frame with an id arrived and is about to be handled. `None` when the frame is a
    /// replayed message already handed to Hermes: it is settled here and must not be handled.
    pub(super) fn inbox_arrived(
        &mut self,
        event_id: &str,
        kind: &EventKind,
        effects: &mut Vec<SessionEffect>,
    ) -> Option<()> {
        let ticket = self.inbox.tracker.arrived(event_id);
        if let EventKind::MessageCreated(created) = kind {
            let message_id = created.message.get("id").and_then(|v| v.as_str());
            if let Some(message_id) = message_id.filter(|id| self.inbox.tracker.is_handled(id)) {
                tracing::debug!(message_id, event_id, "replayed message already handled");
                push_records(effects, self.inbox.tracker.settle(ticket, None));
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
        self.inbox
            .by_event
            .insert(event_ref.to_owned(), Hold { ticket, message_id });
    }

    /// The line of an `inbound.message`; a held message now waits for the shim's answer.
    pub(super) fn inbound_line(&mut self, message: InboundMessage) -> String {
        let hold = self.inbox.by_event.remove(&message.event_ref);
        let line = self.request_line(crate::protocol::DaemonRequest::InboundMessage(message));
        if let Some(hold) = hold {
            if self.inbox.by_request.len() >= MAX_HOLDS {
                self.inbox.by_request.clear();
            }
            self.inbox
                .by_request
                .insert(format!("d:{}", self.next_daemon_id), hold);
        }
        line
    }

    /// The shim answered daemon request `request_id`: a held message is handled now (whether
    /// Hermes accepted it or the shim reported an error, the daemon handed it over once).
    pub(super) fn inbox_answered(&mut self, request_id: &str, now_ms: u64) -> Vec<SessionEffect> {
        let Some(hold) = self.inbox.by_request.remove(request_id) else {
            return Vec::new();
        };
        let mut effects = Vec::new();
        let handled = hold.message_id.as_deref().map(|id| (id, now_ms));
        let records = match hold.ticket {
            Some(ticket) => self.inbox.tracker.settle(ticket, handled),
            // No frame to settle (an event without an id): only the handled record.
            None => handled
                .and_then(|(id, at_ms)| self.inbox.tracker.record_handled(id, at_ms))
                .into_iter()
                .collect(),
        };
        push_records(&mut effects, records);
        effects
    }
}

fn push_records(effects: &mut Vec<SessionEffect>, records: Vec<Record>) {
    if !records.is_empty() {
        effects.push(SessionEffect::Inbox(records));
    }
}

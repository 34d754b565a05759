//! The pure half of the inbox: which stream frames are settled, how far the persisted cursor
//! may move, and which Canon messages were already handed to Hermes.
//!
//! The rule that makes a persisted cursor safe: the cursor written to disk never passes a frame
//! whose handling is unfinished. Every frame with an id gets a [`Ticket`] when it arrives; a
//! frame is settled when its handling is over (at once for most events; for a message that
//! wakes a turn, when the shim answered the `inbound.message` request, that is when Hermes'
//! `handle_message` returned). The safe cursor is the id of the last frame of the settled
//! prefix, so a successor that reconnects with it is replayed every unsettled frame, and the
//! handled-message set drops the replayed messages that did get their turn.

use std::collections::{HashMap, VecDeque};

/// Handled message ids kept for deduplication. Canon replays at most its stream buffer after a
/// `Last-Event-ID`, far fewer messages than this; older ids are forgotten first.
pub const MAX_HANDLED: usize = 8192;

/// Frames waiting to settle before the tracker stops moving the cursor forward and logs. Far
/// above what the daemon's back-pressure lets in (it stops reading the stream while many
/// messages wait); a bound so a bug cannot grow memory without limit.
pub const MAX_PENDING: usize = 65_536;

/// One frame's place in the arrival order of one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket {
    generation: u64,
    seq: u64,
}

/// What must be written for the tracker's state to survive a crash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A Canon message was handed to Hermes at `at_ms` (Unix milliseconds).
    Handled {
        /// The Canon message id.
        message_id: String,
        /// When.
        at_ms: u64,
    },
    /// Every frame up to and including this id is settled.
    Cursor(String),
    /// A turn of Hermes session `session_key` started for these Canon messages. A successor
    /// that finds it not closed knows the turn was cut off (a gateway restart), and Hermes'
    /// own resume of that session answers these messages.
    TurnOpened {
        /// The Hermes session key.
        session_key: String,
        /// The Canon conversation.
        conversation_id: String,
        /// The turn's Canon messages (at most [`MAX_TURN_MESSAGES`]).
        message_ids: Vec<String>,
    },
    /// The session's turn ended.
    TurnClosed {
        /// The Hermes session key.
        session_key: String,
    },
    /// Canon was (about to be) told that turn `turn_id` is open in `conversation_id`: its
    /// first open state was published. Written before that publish, so a crash right after it
    /// still leaves the record; a successor that finds it not closed publishes the closing
    /// state the turn never got (otherwise Canon shows the agent working there until it reads
    /// the turn stale, 30 minutes later).
    RuntimeTurnOpened {
        /// The Canon turn id.
        turn_id: String,
        /// The Canon conversation.
        conversation_id: String,
        /// When the turn opened (Unix milliseconds), republished with its close.
        opened_at_ms: u64,
    },
    /// The closing state of turn `turn_id` was published (or given up on after its retries).
    /// Written only after that publish, so a crash before it leaves the turn for a successor
    /// to close.
    RuntimeTurnClosed {
        /// The Canon turn id.
        turn_id: String,
    },
}

/// Sessions whose open turn the journal keeps; the oldest is forgotten first.
pub const MAX_OPEN_TURNS: usize = 1024;

/// Canon turns whose open state the journal keeps; the oldest is forgotten first.
pub const MAX_RUNTIME_TURNS: usize = 1024;

/// Canon messages kept per open turn.
pub const MAX_TURN_MESSAGES: usize = 64;

/// A turn that opened and did not close.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenTurn {
    /// The Hermes session key.
    pub session_key: String,
    /// The Canon conversation.
    pub conversation_id: String,
    /// Its Canon messages.
    pub message_ids: Vec<String>,
}

/// The open turns, by session, oldest first, bounded by [`MAX_OPEN_TURNS`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenTurns {
    turns: VecDeque<OpenTurn>,
}

impl OpenTurns {
    /// A turn of `session_key` in `conversation_id` opened for `message_ids` (replacing the
    /// session's earlier one).
    pub fn open(&mut self, session_key: &str, conversation_id: &str, message_ids: &[String]) {
        self.close(session_key);
        while self.turns.len() >= MAX_OPEN_TURNS {
            self.turns.pop_front();
        }
        self.turns.push_back(OpenTurn {
            session_key: session_key.to_owned(),
            conversation_id: conversation_id.to_owned(),
            message_ids: message_ids
                .iter()
                .take(MAX_TURN_MESSAGES)
                .cloned()
                .collect(),
        });
    }

    /// The session's turn ended; the turn, if it was open.
    pub fn close(&mut self, session_key: &str) -> Option<OpenTurn> {
        let index = self
            .turns
            .iter()
            .position(|t| t.session_key == session_key)?;
        self.turns.remove(index)
    }

    /// The open turns, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &OpenTurn> + '_ {
        self.turns.iter()
    }

    /// How many sessions have an open turn.
    pub fn len(&self) -> usize {
        self.turns.len()
    }

    /// Whether no turn is open.
    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }
}

/// A Canon turn whose open state was published and whose closing state was not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeTurn {
    /// The Canon turn id.
    pub turn_id: String,
    /// The Canon conversation.
    pub conversation_id: String,
    /// When it opened (Unix milliseconds).
    pub opened_at_ms: u64,
}

/// The Canon turns left open, oldest first, bounded by [`MAX_RUNTIME_TURNS`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeTurns {
    turns: VecDeque<RuntimeTurn>,
}

impl RuntimeTurns {
    /// Turn `turn_id` opened in `conversation_id` at `opened_at_ms` (a second open of the same
    /// turn keeps the first).
    pub fn open(&mut self, turn_id: &str, conversation_id: &str, opened_at_ms: u64) {
        if self.turns.iter().any(|t| t.turn_id == turn_id) {
            return;
        }
        while self.turns.len() >= MAX_RUNTIME_TURNS {
            self.turns.pop_front();
        }
        self.turns.push_back(RuntimeTurn {
            turn_id: turn_id.to_owned(),
            conversation_id: conversation_id.to_owned(),
            opened_at_ms,
        });
    }

    /// Turn `turn_id` got its closing state; the turn, if it was open.
    pub fn close(&mut self, turn_id: &str) -> Option<RuntimeTurn> {
        let index = self.turns.iter().position(|t| t.turn_id == turn_id)?;
        self.turns.remove(index)
    }

    /// The open turns, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &RuntimeTurn> + '_ {
        self.turns.iter()
    }

    /// How many turns are open.
    pub fn len(&self) -> usize {
        self.turns.len()
    }

    /// Whether no turn is open.
    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }
}

#[derive(Debug, Clone)]
struct Slot {
    seq: u64,
    event_id: String,
    settled: bool,
}

/// The handled-message ids, oldest first, bounded by [`MAX_HANDLED`].
#[derive(Debug, Clone, Default)]
pub struct HandledSet {
    at: HashMap<String, u64>,
    order: VecDeque<String>,
}

impl HandledSet {
    /// Whether `message_id` was handled.
    pub fn contains(&self, message_id: &str) -> bool {
        self.at.contains_key(message_id)
    }

    /// Records `message_id` as handled at `at_ms`; false when it already was. The oldest id goes
    /// when the set is full.
    pub fn insert(&mut self, message_id: &str, at_ms: u64) -> bool {
        if self.at.contains_key(message_id) {
            return false;
        }
        while self.order.len() >= MAX_HANDLED {
            if let Some(old) = self.order.pop_front() {
                self.at.remove(&old);
            }
        }
        self.order.push_back(message_id.to_owned());
        self.at.insert(message_id.to_owned(), at_ms);
        true
    }

    /// The ids with their times, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.order
            .iter()
            .map(move |id| (id.as_str(), self.at.get(id).copied().unwrap_or(0)))
    }

    /// How many ids are kept.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether no id is kept.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

/// The settled-prefix tracker of the current stream plus the handled set.
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    generation: u64,
    next_seq: u64,
    pending: VecDeque<Slot>,
    cursor: Option<String>,
    handled: HandledSet,
    overflowed: bool,
}

impl Tracker {
    /// A tracker resuming from a loaded state: the safe cursor and the handled ids, oldest first.
    pub fn resume(cursor: Option<String>, handled: HandledSet) -> Tracker {
        Tracker {
            cursor,
            handled,
            ..Tracker::default()
        }
    }

    /// The safe cursor: a stream opened with it as `Last-Event-ID` misses nothing unsettled.
    pub fn cursor(&self) -> Option<&str> {
        self.cursor.as_deref()
    }

    /// The handled ids.
    pub fn handled(&self) -> &HandledSet {
        &self.handled
    }

    /// A new stream starts (from [`Tracker::cursor`]): frames of the old one that never settled
    /// will be replayed, so they are forgotten, and a ticket of the old stream no longer counts.
    pub fn new_stream(&mut self) {
        self.generation += 1;
        self.pending.clear();
        self.overflowed = false;
    }

    /// A frame with an id arrived.
    pub fn arrived(&mut self, event_id: &str) -> Ticket {
        let seq = self.next_seq;
        self.next_seq += 1;
        if self.pending.len() < MAX_PENDING {
            self.pending.push_back(Slot {
                seq,
                event_id: event_id.to_owned(),
                settled: false,
            });
        } else {
            // Not tracked: the cursor stays where it is until the stream is reopened, which
            // costs a longer replay (deduplicated) but never a lost frame.
            self.overflowed = true;
        }
        Ticket {
            generation: self.generation,
            seq,
        }
    }

    /// Whether more frames arrived unsettled than the tracker keeps (the cursor then waits
    /// for the next stream).
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Whether `message_id` was already handed to Hermes.
    pub fn is_handled(&self, message_id: &str) -> bool {
        self.handled.contains(message_id)
    }

    /// Records `message_id` as handed to Hermes at `at_ms` outside any frame; the record to
    /// persist, or `None` when it was already known.
    pub fn record_handled(&mut self, message_id: &str, at_ms: u64) -> Option<Record> {
        self.handled
            .insert(message_id, at_ms)
            .then(|| Record::Handled {
                message_id: message_id.to_owned(),
                at_ms,
            })
    }

    /// The frame of `ticket` is settled; `handled` names the message handed to Hermes with it,
    /// if any. Returns what to persist, in order (the handled id before the cursor that passes
    /// it); empty when nothing changed.
    pub fn settle(&mut self, ticket: Ticket, handled: Option<(&str, u64)>) -> Vec<Record> {
        let mut records = Vec::new();
        if let Some((message_id, at_ms)) = handled {
            if self.handled.insert(message_id, at_ms) {
                records.push(Record::Handled {
                    message_id: message_id.to_owned(),
                    at_ms,
                });
            }
        }
        if ticket.generation != self.generation || self.overflowed {
            return records;
        }
        let Some(front) = self.pending.front().map(|s| s.seq) else {
            return records;
        };
        let Some(index) = ticket.seq.checked_sub(front) else {
            return records;
        };
        if let Some(slot) = usize::try_from(index)
            .ok()
            .and_then(|i| self.pending.get_mut(i))
        {
            slot.settled = true;
        }
        let mut moved = None;
        while self.pending.front().is_some_and(|s| s.settled) {
            moved = self.pending.pop_front().map(|s| s.event_id);
        }
        if let Some(cursor) = moved {
            self.cursor = Some(cursor.clone());
            records.push(Record::Cursor(cursor));
        }
        records
    }

    /// Frames of the current stream still unsettled.
    pub fn unsettled(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_cursor_waits_for_the_oldest_unsettled_frame() {
        let mut tracker = Tracker::default();
        let a = tracker.arrived("e-1");
        let b = tracker.arrived("e-2");
        let c = tracker.arrived("e-3");
        assert_eq!(tracker.settle(b, None), vec![]);
        assert_eq!(tracker.settle(c, None), vec![]);
        assert_eq!(tracker.cursor(), None);
        assert_eq!(
            tracker.settle(a, Some(("m-1", 7))),
            vec![
                Record::Handled {
                    message_id: "m-1".into(),
                    at_ms: 7
                },
                Record::Cursor("e-3".into())
            ]
        );
        assert_eq!(tracker.cursor(), Some("e-3"));
        assert!(tracker.is_handled("m-1"));
    }

    #[test]
    fn a_ticket_of_an_old_stream_records_its_message_but_moves_no_cursor() {
        let mut tracker = Tracker::resume(Some("e-5".into()), HandledSet::default());
        let old = tracker.arrived("e-6");
        tracker.new_stream();
        assert_eq!(
            tracker.settle(old, Some(("m-6", 1))),
            vec![Record::Handled {
                message_id: "m-6".into(),
                at_ms: 1
            }]
        );
        assert_eq!(tracker.cursor(), Some("e-5"));
        let fresh = tracker.arrived("e-6");
        assert_eq!(
            tracker.settle(fresh, Some(("m-6", 2))),
            vec![Record::Cursor("e-6".into())]
        );
    }

    #[test]
    fn the_handled_set_forgets_the_oldest_id_when_full() {
        let mut set = HandledSet::default();
        for i in 0..=MAX_HANDLED {
            assert!(set.insert(&format!("m-{i}"), i as u64));
        }
        assert_eq!(set.len(), MAX_HANDLED);
        assert!(!set.contains("m-0"));
        assert!(set.contains(&format!("m-{MAX_HANDLED}")));
        assert!(!set.insert("m-1", 0));
    }

    proptest! {
        /// Whatever order frames settle in, the cursor is always the last frame of the settled
        /// prefix of the arrival order, and it never moves backwards.
        #[test]
        fn the_cursor_is_the_end_of_the_settled_prefix(order in Just((0..40usize).collect::<Vec<_>>()).prop_shuffle()) {
            let mut tracker = Tracker::default();
            let tickets: Vec<Ticket> = (0..order.len()).map(|i| tracker.arrived(&format!("e-{i}"))).collect();
            let mut settled = vec![false; order.len()];
            let mut last = None::<usize>;
            for &i in &order {
                tracker.settle(tickets[i], None);
                settled[i] = true;
                let prefix = settled.iter().take_while(|s| **s).count();
                let expected = prefix.checked_sub(1);
                prop_assert_eq!(tracker.cursor().map(str::to_owned), expected.map(|p| format!("e-{p}")));
                prop_assert!(expected >= last);
                last = expected;
            }
            prop_assert_eq!(tracker.unsettled(), 0);
        }
    }
}

//! Question states (coms-bridge.md §6.12), in memory only.
//!
//! | From | Event | To |
//! | --- | --- | --- |
//! | none | `question_received` | `pending` |
//! | `pending` | `delivered` | `delivered` |
//! | `pending` | `delivery_error` | none |
//! | `pending`, `delivered` | `answered` | `answered` |
//! | `pending`, `delivered` | `cancelled` | `cancelled` |
//! | `pending`, `delivered` | `timeout` | `timeout` |
//! | `answered`, `cancelled`, `timeout` | `late_answer` | unchanged |
//!
//! Anything else is `unsupported_transition`. Closed qids are kept in a [`ClosedSet`] of at most
//! [`CLOSED_CAPACITY`] entries, oldest evicted first.

use std::collections::{HashMap, VecDeque};

/// A question's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Received; `hermes send` not yet done.
    Pending,
    /// On Telegram.
    Delivered,
    /// Answered by an answer file.
    Answered,
    /// Cancelled by a cancel envelope.
    Cancelled,
    /// Timed out.
    Timeout,
}

impl State {
    /// The state as the log writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Delivered => "delivered",
            State::Answered => "answered",
            State::Cancelled => "cancelled",
            State::Timeout => "timeout",
        }
    }

    /// Whether the question still waits (`pending` or `delivered`).
    pub fn is_open(self) -> bool {
        matches!(self, State::Pending | State::Delivered)
    }
}

/// The events of the state table, which are also the core log events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// A prompt with a valid qid arrived.
    QuestionReceived,
    /// `hermes send` succeeded.
    Delivered,
    /// `hermes send` failed.
    DeliveryError,
    /// A valid answer file arrived.
    Answered,
    /// A cancel envelope arrived.
    Cancelled,
    /// The timer fired.
    Timeout,
    /// An answer file for a closed qid arrived.
    LateAnswer,
}

impl Event {
    /// Every event, in the order of coms-bridge.md §6.13.
    pub const ALL: [Event; 7] = [
        Event::QuestionReceived,
        Event::Delivered,
        Event::DeliveryError,
        Event::Answered,
        Event::Cancelled,
        Event::Timeout,
        Event::LateAnswer,
    ];

    /// The event as the log writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Event::QuestionReceived => "question_received",
            Event::Delivered => "delivered",
            Event::DeliveryError => "delivery_error",
            Event::Answered => "answered",
            Event::Cancelled => "cancelled",
            Event::Timeout => "timeout",
            Event::LateAnswer => "late_answer",
        }
    }
}

/// A transition the table does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unsupported_transition")]
pub struct UnsupportedTransition {
    /// The state it started from.
    pub from: Option<State>,
    /// The event.
    pub event: Event,
}

/// The state after `event` in state `from` (`None` = no state).
pub fn transition(
    from: Option<State>,
    event: Event,
) -> Result<Option<State>, UnsupportedTransition> {
    use Event as E;
    use State as S;
    let to = match (from, event) {
        (None, E::QuestionReceived) => Some(S::Pending),
        (Some(S::Pending), E::Delivered) => Some(S::Delivered),
        (Some(S::Pending), E::DeliveryError) => None,
        (Some(S::Pending | S::Delivered), E::Answered) => Some(S::Answered),
        (Some(S::Pending | S::Delivered), E::Cancelled) => Some(S::Cancelled),
        (Some(S::Pending | S::Delivered), E::Timeout) => Some(S::Timeout),
        (Some(closed @ (S::Answered | S::Cancelled | S::Timeout)), E::LateAnswer) => Some(closed),
        _ => return Err(UnsupportedTransition { from, event }),
    };
    Ok(to)
}

/// How many closed qids are remembered.
pub const CLOSED_CAPACITY: usize = 1000;

/// Closed qids and their terminal state, insertion-ordered and bounded: inserting past the
/// capacity evicts the oldest.
#[derive(Debug, Clone)]
pub struct ClosedSet {
    order: VecDeque<String>,
    states: HashMap<String, State>,
    capacity: usize,
}

impl Default for ClosedSet {
    fn default() -> Self {
        ClosedSet::with_capacity(CLOSED_CAPACITY)
    }
}

impl ClosedSet {
    /// An empty set holding at most `capacity` qids.
    pub fn with_capacity(capacity: usize) -> Self {
        ClosedSet {
            order: VecDeque::new(),
            states: HashMap::new(),
            capacity: capacity.max(1),
        }
    }

    /// Records `qid` as closed in `state`; a known qid keeps its place.
    pub fn insert(&mut self, qid: &str, state: State) {
        if let Some(known) = self.states.get_mut(qid) {
            *known = state;
            return;
        }
        if self.order.len() == self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.states.remove(&oldest);
            }
        }
        self.order.push_back(qid.to_owned());
        self.states.insert(qid.to_owned(), state);
    }

    /// The terminal state of `qid`, when it is remembered.
    pub fn get(&self, qid: &str) -> Option<State> {
        self.states.get(qid).copied()
    }

    /// Forgets `qid`.
    pub fn remove(&mut self, qid: &str) {
        if self.states.remove(qid).is_some() {
            self.order.retain(|q| q != qid);
        }
    }

    /// How many qids are remembered.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Event as E;
    use State as S;

    #[test]
    fn the_supported_transitions() {
        let supported = [
            (None, E::QuestionReceived, Some(S::Pending)),
            (Some(S::Pending), E::Delivered, Some(S::Delivered)),
            (Some(S::Pending), E::DeliveryError, None),
            (Some(S::Delivered), E::Answered, Some(S::Answered)),
            (Some(S::Pending), E::Cancelled, Some(S::Cancelled)),
            (Some(S::Delivered), E::Cancelled, Some(S::Cancelled)),
            (Some(S::Pending), E::Timeout, Some(S::Timeout)),
            (Some(S::Delivered), E::Timeout, Some(S::Timeout)),
            (Some(S::Answered), E::LateAnswer, Some(S::Answered)),
            (Some(S::Cancelled), E::LateAnswer, Some(S::Cancelled)),
            (Some(S::Timeout), E::LateAnswer, Some(S::Timeout)),
            // Ours (the seed's table): an answer may arrive before `hermes send` returns.
            (Some(S::Pending), E::Answered, Some(S::Answered)),
        ];
        for (from, event, to) in supported {
            assert_eq!(transition(from, event), Ok(to), "{from:?} + {event:?}");
        }
        let states = [
            None,
            Some(S::Pending),
            Some(S::Delivered),
            Some(S::Answered),
            Some(S::Cancelled),
            Some(S::Timeout),
        ];
        let mut count = 0;
        for from in states {
            for event in E::ALL {
                if transition(from, event).is_ok() {
                    count += 1;
                    assert!(supported.iter().any(|(f, e, _)| *f == from && *e == event));
                }
            }
        }
        assert_eq!(count, supported.len());
        let error = transition(Some(S::Answered), E::Timeout).expect_err("closed");
        assert_eq!(error.to_string(), "unsupported_transition");
    }

    #[test]
    fn closed_set_evicts_the_oldest_at_capacity() {
        let mut closed = ClosedSet::default();
        for i in 0..CLOSED_CAPACITY {
            closed.insert(&format!("q{i}"), S::Answered);
        }
        assert_eq!(closed.len(), CLOSED_CAPACITY);
        assert_eq!(closed.get("q0"), Some(S::Answered));
        closed.insert("q0", S::Timeout);
        closed.insert("new", S::Cancelled);
        assert_eq!(closed.len(), CLOSED_CAPACITY);
        assert_eq!(closed.get("q0"), None, "the oldest went first");
        assert_eq!(closed.get("q1"), Some(S::Answered));
        assert_eq!(closed.get("new"), Some(S::Cancelled));
        closed.remove("q1");
        assert_eq!(closed.get("q1"), None);
        assert_eq!(closed.len(), CLOSED_CAPACITY - 1);
    }
}

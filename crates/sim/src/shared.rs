//! The state every connection shares: one [`State`] behind a mutex, and a version counter
//! that is bumped after every change so `wait_for` and the open streams can wake up. Before and
//! after each change it applies the interaction answers that have become due. The server, the
//! stream, the control API and the test handle all reach the state through it.

use std::sync::{Mutex, MutexGuard};

use tokio::sync::watch;

use crate::interactions::run_due;
use crate::state::State;

/// State shared by every connection: the state and a version counter bumped on every change,
/// which `wait_for` and the open streams watch.
#[derive(Debug)]
pub struct Shared {
    state: Mutex<State>,
    version: watch::Sender<u64>,
}

impl Shared {
    /// Wraps a fresh state; the version counter starts at 0.
    pub(crate) fn new(state: State) -> Self {
        let (version, _) = watch::channel(0);
        Self {
            state: Mutex::new(state),
            version,
        }
    }

    /// Runs `f` on the state, then announces a change.
    pub fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let result = {
            let mut state = self.lock();
            run_due(&mut state);
            let result = f(&mut state);
            // A clock change inside `f` may have made scheduled answers due.
            run_due(&mut state);
            result
        };
        self.version.send_modify(|v| *v += 1);
        result
    }

    /// Reads the state without announcing a change.
    pub fn read<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&self.lock())
    }

    /// A receiver that wakes on every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A handler never panics while holding the lock; recover the data if one did.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

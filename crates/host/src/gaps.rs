//! Gaps in the event stream the daemon can detect, so that none stays silent.
//!
//! Canon replays the events after the stream's `Last-Event-ID` from a bounded buffer. When
//! that id has left the buffer, it answers `replay.expired` and goes on from its newest event
//! (canon-wire.md §5.3): whatever happened in between is never sent, and over REST and SSE
//! there is no call that returns it (canon-wire.md §5.7, resume). The daemon cannot recover
//! those messages; it makes sure the operator and domain plugins know:
//!
//! * a WARN naming the conversations the agent is in and the time window that may have been
//!   missed (from the last conversation event the daemon received to the `replay.expired`);
//! * [`EventGaps`], which the session keeps: the count since the daemon started and the last
//!   gap, read by `current_canon_runtime_health()` (its `eventGap` field, and the code
//!   [`EVENTS_MISSED`] for a conversation of a gap for [`GAP_NOTICE_MS`] after it);
//! * a [`StreamGap`] effect the shell records in the Canon home (`event-gaps-<scope>.json`),
//!   which `canon-hermes doctor` reports.

use serde_json::{json, Value};

/// The runtime-health code of a conversation whose events may have been missed recently:
/// Canon's replay expired while it was a conversation of the agent.
pub const EVENTS_MISSED: &str = "CANON_EVENTS_MISSED";

/// How long after a gap its conversations report [`EVENTS_MISSED`]: long enough for a domain
/// plugin's next turns there to see it, short enough that one old gap does not mark a
/// conversation unhealthy for the daemon's whole life (the count and the last gap stay).
pub const GAP_NOTICE_MS: u64 = 60 * 60 * 1000;

/// At most this many conversations are named in one gap (the WARN, the health field, the
/// file); the count of the rest is kept.
pub const MAX_NAMED: usize = 50;

/// One detected gap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamGap {
    /// The last conversation event received before the gap (epoch ms); `None` when this
    /// daemon had received none (the cursor came from a predecessor's journal).
    pub from_ms: Option<u64>,
    /// When the gap was detected (epoch ms).
    pub to_ms: u64,
    /// The conversations the agent was in (at most [`MAX_NAMED`], sorted).
    pub conversations: Vec<String>,
    /// How many more conversations there were.
    pub more: usize,
    /// Gaps detected by this daemon so far, this one included.
    pub count: u64,
}

impl StreamGap {
    /// The JSON form: in `current_canon_runtime_health()`'s `eventGap` and in the gaps file.
    pub fn to_json(&self) -> Value {
        json!({
            "count": self.count,
            "from": self.from_ms.map(iso_utc),
            "to": iso_utc(self.to_ms),
            "conversationIds": self.conversations,
            "moreConversations": self.more,
        })
    }

    /// The window for a person: `between <from> and <to>` or `before <to>`.
    pub fn window(&self) -> String {
        match self.from_ms {
            Some(from) => format!("between {} and {}", iso_utc(from), iso_utc(self.to_ms)),
            None => format!(
                "before {} (since the previous daemon's last event)",
                iso_utc(self.to_ms)
            ),
        }
    }
}

/// What the session knows of the stream's gaps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventGaps {
    /// When the last conversation event arrived (epoch ms).
    last_event_ms: Option<u64>,
    /// Gaps detected since the daemon started.
    count: u64,
    /// The last one.
    last: Option<StreamGap>,
}

impl EventGaps {
    /// An event of a conversation (a message, a change, a runtime control) arrived at `now_ms`.
    pub fn event_at(&mut self, now_ms: u64) {
        self.last_event_ms = Some(now_ms);
    }

    /// Canon's replay expired at `now_ms` while the agent was in `conversations`: the gap,
    /// recorded and logged at WARN.
    pub fn expired(&mut self, mut conversations: Vec<String>, now_ms: u64) -> StreamGap {
        conversations.sort();
        conversations.dedup();
        let more = conversations.len().saturating_sub(MAX_NAMED);
        conversations.truncate(MAX_NAMED);
        self.count += 1;
        let gap = StreamGap {
            from_ms: self.last_event_ms,
            to_ms: now_ms,
            conversations,
            more,
            count: self.count,
        };
        let named = if gap.more > 0 {
            format!("{} and {} more", gap.conversations.join(", "), gap.more)
        } else {
            gap.conversations.join(", ")
        };
        tracing::warn!(
            window = %gap.window(),
            conversations = %named,
            gaps = gap.count,
            "Canon's event replay expired: messages sent in these conversations in this window \
             may never reach the agent (Canon does not send them again); look there for \
             unanswered messages"
        );
        self.last = Some(gap.clone());
        gap
    }

    /// Gaps detected since the daemon started.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The last gap, when there was one.
    pub fn last(&self) -> Option<&StreamGap> {
        self.last.as_ref()
    }

    /// The last gap when it concerns `conversation` and is recent at `now_ms`: the health
    /// code applies.
    pub fn recent_for(&self, conversation: &str, now_ms: u64) -> Option<&StreamGap> {
        self.last.as_ref().filter(|gap| {
            now_ms.saturating_sub(gap.to_ms) < GAP_NOTICE_MS
                && (gap.more > 0 || gap.conversations.iter().any(|c| c == conversation))
        })
    }
}

/// `ms` since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC, proleptic Gregorian calendar).
pub fn iso_utc(ms: u64) -> String {
    let (days, in_day) = (ms / 86_400_000, ms % 86_400_000);
    // Days since 1970-01-01 to a civil date (the era-based method: 400-year eras of 146,097
    // days, years starting in March so the leap day ends the year).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1_000 % 60,
        in_day % 1_000,
    );
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_utc_matches_known_instants() {
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso_utc(1_796_603_999_999), "2026-12-07T00:39:59.999Z");
        assert_eq!(iso_utc(4_107_542_400_000), "2100-03-01T00:00:00.000Z");
    }

    #[test]
    fn a_gap_names_its_window_and_conversations_and_stays_recent_for_an_hour() {
        let mut gaps = EventGaps::default();
        let first = gaps.expired(vec!["c2".into(), "c1".into(), "c1".into()], 1_000);
        assert_eq!(first.from_ms, None);
        assert_eq!(first.conversations, ["c1", "c2"]);
        assert!(first
            .window()
            .starts_with("before 1970-01-01T00:00:01.000Z"));
        gaps.event_at(5_000);
        let second = gaps.expired(vec!["c1".into()], 9_000);
        assert_eq!(second.count, 2);
        assert_eq!(
            second.window(),
            "between 1970-01-01T00:00:05.000Z and 1970-01-01T00:00:09.000Z"
        );
        assert_eq!(gaps.count(), 2);
        assert!(gaps.recent_for("c1", 9_000 + GAP_NOTICE_MS - 1).is_some());
        assert!(
            gaps.recent_for("c2", 9_000).is_none(),
            "not in the last gap"
        );
        assert!(gaps.recent_for("c1", 9_000 + GAP_NOTICE_MS).is_none());
        assert_eq!(second.to_json()["from"], "1970-01-01T00:00:05.000Z");
    }

    #[test]
    fn past_the_named_limit_the_rest_is_counted_and_every_conversation_is_concerned() {
        let mut gaps = EventGaps::default();
        let many: Vec<String> = (0..MAX_NAMED + 3).map(|i| format!("c{i:03}")).collect();
        let gap = gaps.expired(many, 10);
        assert_eq!(gap.conversations.len(), MAX_NAMED);
        assert_eq!(gap.more, 3);
        assert!(gaps.recent_for("c999", 10).is_some());
    }
}

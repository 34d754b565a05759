//! The producers of a turn's activity trail (turns.md §5.1–§5.3): speech
//! segments, tool calls and subagent rows, kept as
//! [`canon_dispatch::trail::TrailBlock`]s in insertion order.
//!
//! Compaction, the live 30-block view and the bounded final trail are
//! `canon_dispatch::trail`'s job; this module only decides which block an
//! event creates or updates. Memory is bounded: after
//! [`MAX_ACTIVITY_BLOCKS`] blocks new blocks are no longer added (updates to
//! existing ones still apply). Neither the live view (first 30) nor the
//! final trail (first 20) can see a block that late, so the output is
//! unchanged.

use canon_dispatch::trail::{BlockKind, BlockStatus, TrailBlock};
use serde_json::Value;

/// Cap on blocks kept per turn (our number; see the module doc).
pub(crate) const MAX_ACTIVITY_BLOCKS: usize = 256;

/// Cap on a tool title, in code points, cut without an ellipsis
/// (turns.md §5.3).
const TOOL_TITLE_CHARS: usize = 80;

/// Cap on previews of tool args, results and subagent summaries
/// (turns.md §5.3).
const PREVIEW_CHARS: usize = 280;

/// Cap on a subagent title (turns.md §5.3).
const SUBAGENT_TITLE_CHARS: usize = 80;

/// Cap on a subagent summary (turns.md §5.3).
const SUBAGENT_SUMMARY_CHARS: usize = 120;

/// The activity of one turn.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Activity {
    turn_id: String,
    blocks: Vec<TrailBlock>,
    next_sequence: u64,
    speech_segments: u64,
    /// Index into `blocks` of the open speech segment.
    open_speech: Option<usize>,
    /// Index into `blocks` of the speech segment sealed last (by a tool
    /// call), which the host may still be closing (see
    /// [`Activity::revise_sealed_speech`]).
    sealed_speech: Option<usize>,
    /// Tool blocks started without a call id, by tool name (block id).
    open_by_name: Vec<(String, String)>,
}

impl Activity {
    pub(crate) fn new(turn_id: &str) -> Activity {
        Activity {
            turn_id: turn_id.to_owned(),
            blocks: Vec::new(),
            next_sequence: 1,
            speech_segments: 0,
            open_speech: None,
            sealed_speech: None,
            open_by_name: Vec::new(),
        }
    }

    /// All blocks in sequence order.
    pub(crate) fn blocks(&self) -> &[TrailBlock] {
        &self.blocks
    }

    /// Drops every block (the activity was consumed by a durable send,
    /// turns.md §5.6); sequence numbers keep counting.
    pub(crate) fn consume(&mut self) {
        self.blocks.clear();
        self.open_speech = None;
        self.sealed_speech = None;
        self.open_by_name.clear();
    }

    /// Number of tool blocks still running.
    pub(crate) fn running_tools(&self) -> usize {
        self.blocks
            .iter()
            .filter(|b| b.kind == BlockKind::Tool && b.status == BlockStatus::Running)
            .count()
    }

    /// Mirrors the staged durable text into the open speech block, opening
    /// one if needed (turns.md §5.3 "Text staged").
    pub(crate) fn replace_text_segment(&mut self, text: &str, finalized: bool) {
        let status = if finalized {
            BlockStatus::Completed
        } else {
            BlockStatus::Running
        };
        if let Some(index) = self.open_speech {
            if let Some(block) = self.blocks.get_mut(index) {
                block.text = Some(text.to_owned()).filter(|t| !t.is_empty());
                block.status = status;
            }
            return;
        }
        if text.is_empty() {
            return;
        }
        if let Some(index) = self.push_speech(text, status) {
            self.open_speech = Some(index);
        }
    }

    /// Appends a new speech block (the next `text:<turn>:<n>` segment); its
    /// index, or `None` when the trail is full.
    fn push_speech(&mut self, text: &str, status: BlockStatus) -> Option<usize> {
        let id = format!("text:{}:{}", self.turn_id, self.speech_segments + 1);
        let index = self.insert(TrailBlock {
            id,
            turn_id: self.turn_id.clone(),
            kind: BlockKind::Text,
            status,
            sequence: 0,
            title: None,
            text: Some(text.to_owned()),
            summary: None,
        })?;
        self.speech_segments += 1;
        Some(index)
    }

    /// Seals the open speech segment: it is completed and forgotten, so later
    /// text opens a new segment (the "bubble seal" of turns.md §5.3).
    pub(crate) fn close_text_segment(&mut self) {
        if let Some(index) = self.open_speech.take() {
            if let Some(block) = self.blocks.get_mut(index) {
                block.status = BlockStatus::Completed;
            }
            self.sealed_speech = Some(index);
        }
    }

    /// The host is still closing the speech segment a tool call sealed: its
    /// stream consumer finalizes the pre-tool message on its next tick, which
    /// usually comes after `pre_tool_call` (hermes-host.md §10). The text
    /// replaces the sealed block's text (dropping the live cursor); with no
    /// sealed block (nothing was previewed before the tool) it becomes a new
    /// completed speech block. Either way it stays out of the answer.
    pub(crate) fn revise_sealed_speech(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        if let Some(block) = self.sealed_speech.and_then(|i| self.blocks.get_mut(i)) {
            block.text = Some(text.to_owned());
            block.status = BlockStatus::Completed;
            return;
        }
        if let Some(index) = self.push_speech(text, BlockStatus::Completed) {
            self.sealed_speech = Some(index);
        }
    }

    /// `pre_tool_call` (turns.md §5.3), after the caller sealed speech.
    pub(crate) fn tool_started(
        &mut self,
        tool_call_id: Option<&str>,
        tool_name: Option<&str>,
        args: Option<&Value>,
    ) {
        let name = tool_name.filter(|n| !n.is_empty()).unwrap_or("tool");
        let title = cut_chars(name, TOOL_TITLE_CHARS);
        let text = preview(args, PREVIEW_CHARS);
        let call_id = tool_call_id.map(str::trim).filter(|id| !id.is_empty());
        let id = match call_id {
            Some(call_id) => format!("tool:{call_id}"),
            None => format!("tool:{name}:{}", self.next_sequence),
        };
        let update = TrailBlock {
            id: id.clone(),
            turn_id: self.turn_id.clone(),
            kind: BlockKind::Tool,
            status: BlockStatus::Running,
            sequence: 0,
            title: Some(title),
            text,
            summary: None,
        };
        let inserted = self.upsert(update);
        if call_id.is_none() && inserted {
            self.open_by_name.retain(|(n, _)| n != name);
            self.open_by_name.push((name.to_owned(), id));
        }
    }

    /// `post_tool_call` (turns.md §5.3).
    pub(crate) fn tool_finished(&mut self, finish: &ToolFinish<'_>) {
        let name = finish.tool_name.filter(|n| !n.is_empty()).unwrap_or("tool");
        let call_id = finish
            .tool_call_id
            .map(str::trim)
            .filter(|id| !id.is_empty());
        let id = match call_id {
            Some(call_id) => format!("tool:{call_id}"),
            None => match self.open_by_name.iter().position(|(n, _)| n == name) {
                Some(position) => self.open_by_name.remove(position).1,
                None => format!("tool:{name}:{}", self.next_sequence),
            },
        };
        let failed = matches!(finish.status, Some("failed" | "error" | "blocked"));
        let existing_text = self
            .blocks
            .iter()
            .find(|b| b.id == id)
            .and_then(|b| b.text.clone());
        let text = preview(finish.result, PREVIEW_CHARS)
            .or(existing_text)
            .or_else(|| preview(finish.args, PREVIEW_CHARS));
        let summary = finish
            .duration_ms
            .and_then(Value::as_i64)
            .filter(|d| *d >= 0)
            .map(|d| format!("{d} ms"));
        self.upsert(TrailBlock {
            id,
            turn_id: self.turn_id.clone(),
            kind: BlockKind::Tool,
            status: if failed {
                BlockStatus::Failed
            } else {
                BlockStatus::Completed
            },
            sequence: 0,
            title: Some(cut_chars(name, TOOL_TITLE_CHARS)),
            text,
            summary,
        });
    }

    /// `subagent_stop` (turns.md §5.3).
    pub(crate) fn subagent_stopped(&mut self, stop: &SubagentStop<'_>) {
        let role = stop.child_role.filter(|r| !r.is_empty());
        let key = stop
            .child_session_id
            .filter(|s| !s.is_empty())
            .or(role)
            .unwrap_or("subagent");
        let text = stop
            .child_summary
            .filter(|s| s.is_string())
            .and_then(|s| preview(Some(s), PREVIEW_CHARS));
        let summary = stop
            .duration_ms
            .and_then(Value::as_i64)
            .map(|d| format!("{d} ms"))
            .and_then(|s| trim_field(&s, SUBAGENT_SUMMARY_CHARS));
        let failed = matches!(stop.child_status, Some("failed" | "error"));
        self.upsert(TrailBlock {
            id: format!("subagent:{key}"),
            turn_id: self.turn_id.clone(),
            kind: BlockKind::Status,
            status: if failed {
                BlockStatus::Failed
            } else {
                BlockStatus::Completed
            },
            sequence: 0,
            title: trim_field(role.unwrap_or("subagent"), SUBAGENT_TITLE_CHARS),
            text,
            summary,
        });
    }

    /// Inserts a new block with the next sequence; `None` at the cap.
    fn insert(&mut self, mut block: TrailBlock) -> Option<usize> {
        if self.blocks.len() >= MAX_ACTIVITY_BLOCKS {
            return None;
        }
        block.sequence = self.next_sequence;
        self.next_sequence = self.next_sequence.saturating_add(1);
        self.blocks.push(block);
        Some(self.blocks.len() - 1)
    }

    /// Updates the block with the same id (only fields with a value are
    /// overwritten; the sequence never changes) or inserts it. Returns
    /// whether a new block was inserted.
    fn upsert(&mut self, update: TrailBlock) -> bool {
        if let Some(block) = self.blocks.iter_mut().find(|b| b.id == update.id) {
            block.kind = update.kind;
            block.status = update.status;
            if update.title.is_some() {
                block.title = update.title;
            }
            if update.text.is_some() {
                block.text = update.text;
            }
            if update.summary.is_some() {
                block.summary = update.summary;
            }
            return false;
        }
        self.insert(update).is_some()
    }
}

/// What `post_tool_call` reports.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ToolFinish<'a> {
    pub(crate) tool_call_id: Option<&'a str>,
    pub(crate) tool_name: Option<&'a str>,
    pub(crate) args: Option<&'a Value>,
    pub(crate) result: Option<&'a Value>,
    pub(crate) status: Option<&'a str>,
    pub(crate) duration_ms: Option<&'a Value>,
}

/// What `subagent_stop` reports.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SubagentStop<'a> {
    pub(crate) child_session_id: Option<&'a str>,
    pub(crate) child_role: Option<&'a str>,
    pub(crate) child_summary: Option<&'a Value>,
    pub(crate) child_status: Option<&'a str>,
    pub(crate) duration_ms: Option<&'a Value>,
}

/// `preview(v, n)` of turns.md §5.3: strings as they are, anything else as
/// compact JSON (insertion order, non-ASCII raw); whitespace runs collapse
/// to one space and the ends are trimmed; empty gives `None`; longer than
/// `n` code points keeps `n − 3` and appends `...`.
pub(crate) fn preview(value: Option<&Value>, max: usize) -> Option<String> {
    let raw = match value? {
        Value::Null => return None,
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let collapsed = raw.split_whitespace().collect::<Vec<_>>().join(" ");
    trim_field(&collapsed, max)
}

/// `trim(v, n)` of turns.md §5.3.
fn trim_field(value: &str, max: usize) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    if value.chars().count() <= max {
        return Some(value.to_owned());
    }
    let mut out: String = value.chars().take(max.saturating_sub(3)).collect();
    out.push_str("...");
    Some(out)
}

/// The first `max` code points, without an ellipsis.
fn cut_chars(value: &str, max: usize) -> String {
    value.chars().take(max).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ids(activity: &Activity) -> Vec<String> {
        activity
            .blocks()
            .iter()
            .map(|b| format!("{}#{}:{}", b.id, b.sequence, b.status))
            .collect()
    }

    #[test]
    fn speech_then_tool_then_speech_gives_ordered_blocks() {
        let mut a = Activity::new("T");
        a.replace_text_segment("Checking.", false);
        a.replace_text_segment("Checking.", true);
        a.close_text_segment();
        a.tool_started(
            Some(" call_1 "),
            Some("web_search"),
            Some(&json!({"q": "x"})),
        );
        a.tool_finished(&ToolFinish {
            tool_call_id: Some("call_1"),
            tool_name: Some("web_search"),
            result: Some(&json!("ok")),
            status: Some("ok"),
            duration_ms: Some(&json!(12)),
            ..ToolFinish::default()
        });
        a.replace_text_segment("Answer", false);
        assert_eq!(
            ids(&a),
            [
                "text:T:1#1:completed",
                "tool:call_1#2:completed",
                "text:T:2#3:running"
            ]
        );
        let tool = &a.blocks()[1];
        assert_eq!(tool.title.as_deref(), Some("web_search"));
        assert_eq!(tool.text.as_deref(), Some("ok"));
        assert_eq!(tool.summary.as_deref(), Some("12 ms"));
        assert_eq!(a.running_tools(), 0);
    }

    #[test]
    fn tools_without_call_ids_pair_by_name() {
        let mut a = Activity::new("T");
        a.tool_started(None, None, Some(&json!({"cmd": "ls   -la"})));
        assert_eq!(a.blocks()[0].id, "tool:tool:1");
        assert_eq!(a.blocks()[0].text.as_deref(), Some(r#"{"cmd":"ls -la"}"#));
        assert_eq!(a.running_tools(), 1);
        a.tool_finished(&ToolFinish {
            status: Some("error"),
            ..ToolFinish::default()
        });
        assert_eq!(ids(&a), ["tool:tool:1#1:failed"]);
        // A finish without a matching start creates a start-less block.
        a.tool_finished(&ToolFinish {
            tool_name: Some("late"),
            ..ToolFinish::default()
        });
        assert_eq!(ids(&a)[1], "tool:late:2#2:completed");
    }

    #[test]
    fn subagent_rows_and_previews() {
        let mut a = Activity::new("T");
        a.subagent_stopped(&SubagentStop {
            child_role: Some("researcher"),
            child_summary: Some(&json!("x".repeat(300))),
            child_status: Some("failed"),
            duration_ms: Some(&json!(5)),
            ..SubagentStop::default()
        });
        let block = &a.blocks()[0];
        assert_eq!(block.id, "subagent:researcher");
        assert_eq!(block.kind, BlockKind::Status);
        assert_eq!(block.status, BlockStatus::Failed);
        assert_eq!(block.text.as_ref().map(|t| t.chars().count()), Some(280));
        assert_eq!(preview(Some(&json!("  ")), 280), None);
        assert_eq!(preview(None, 280), None);
    }

    #[test]
    fn block_count_is_bounded() {
        let mut a = Activity::new("T");
        for i in 0..(MAX_ACTIVITY_BLOCKS + 10) {
            a.tool_started(Some(&format!("c{i}")), Some("t"), None);
        }
        assert_eq!(a.blocks().len(), MAX_ACTIVITY_BLOCKS);
    }
}

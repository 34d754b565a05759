//! Fault injection (canon-wire.md §11.6).
//!
//! A [`FaultRule`] is a matcher plus an [`FaultAction`]. Rules are checked in insertion order for
//! every request; the first rule whose matcher accepts the request fires. Rules are plain JSON
//! (serde), so the HTTP control API and the Rust API share one shape, for example
//! `{"matcher":{"method":"POST","path":"/messages/send","nth":[1]},"action":{"type":"status","status":503}}`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Which requests a rule applies to. Every present field must match.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultMatcher {
    /// HTTP method (case-insensitive).
    #[serde(default)]
    pub method: Option<String>,
    /// Exact path, or a prefix when it ends with `*`.
    #[serde(default)]
    pub path: Option<String>,
    /// The authenticated agent id.
    #[serde(default)]
    pub agent: Option<String>,
    /// The conversation (`conversationId` of the JSON body or the path segment).
    #[serde(default)]
    pub conversation: Option<String>,
    /// Fire only on these 1-based occurrences of matching requests.
    #[serde(default)]
    pub nth: Option<Vec<u64>>,
    /// Fire at most this many times.
    #[serde(default)]
    pub times: Option<u64>,
    /// Fire with this probability (0.0–1.0), drawn from the seeded generator.
    #[serde(default)]
    pub probability: Option<f64>,
}

/// How a malformed success body looks.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MalformedKind {
    /// `{not json`.
    InvalidJson,
    /// A JSON array.
    Array,
    /// Status 200 with an empty body.
    Empty,
    /// A verb response with a wrong `wire`.
    WrongWire,
    /// A verb response with a different `verb`.
    WrongVerb,
    /// A verb response whose `result.value` is not an object.
    NonObjectValue,
}

/// Line endings used on an SSE stream.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LineEnding {
    /// `\n` (default).
    #[default]
    Lf,
    /// `\r\n`.
    Crlf,
    /// `\r`.
    Cr,
}

/// What a firing rule does.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultAction {
    /// Respond with `status` (and optional body, `Retry-After` and headers) **before** processing.
    Status {
        /// HTTP status.
        status: u16,
        /// JSON body (default `{"error":"injected fault","code":"SIM_FAULT"}`).
        #[serde(default)]
        body: Option<Value>,
        /// `Retry-After` seconds.
        #[serde(default, rename = "retryAfter")]
        retry_after: Option<u64>,
        /// Extra headers, for example `Location` for redirects or a wrong `Content-Type`.
        #[serde(default)]
        headers: Vec<(String, String)>,
    },
    /// Process the request, then answer `status` instead of the real response.
    ProcessThenStatus {
        /// HTTP status.
        status: u16,
    },
    /// Process the request, then drop the connection without a response.
    ProcessThenDrop,
    /// Wait `ms` (real time) before processing.
    DelayBefore {
        /// Milliseconds.
        ms: u64,
    },
    /// Wait `ms` (real time), then drop the connection without processing or responding: a
    /// request lost in transit while its client waits for it, so a client killed meanwhile
    /// leaves nothing behind (unlike `delay_before`, whose request is processed even after
    /// its client went away).
    Stall {
        /// Milliseconds.
        ms: u64,
    },
    /// Process, then wait `ms` (real time) before responding.
    DelayAfter {
        /// Milliseconds.
        ms: u64,
    },
    /// Drop the connection without processing or responding.
    Drop,
    /// Process, send the headers and half the body, then abort the connection.
    ResetMidBody,
    /// Process, then answer 200 with a malformed body.
    Malformed {
        /// Which malformation.
        kind: MalformedKind,
    },
    /// Serve a body of `bytes` bytes (media downloads), with or without `Content-Length`.
    OversizeBody {
        /// Body size.
        bytes: u64,
        /// Whether to declare `Content-Length`.
        #[serde(default, rename = "contentLength")]
        content_length: bool,
    },
    /// Process, then send the body slowly: `chunkBytes` at a time, `delayMs` (real time) apart.
    Drip {
        /// Bytes per write.
        #[serde(rename = "chunkBytes")]
        chunk_bytes: usize,
        /// Pause between writes.
        #[serde(rename = "delayMs")]
        delay_ms: u64,
    },
    /// Shape the SSE stream of a matching `GET /agents/stream`.
    Sse(SseFault),
}

/// SSE stream faults (canon-wire.md §11.6, §5.2, §5.7).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SseFault {
    /// Answer 200 and close at once.
    #[serde(default)]
    pub close_immediately: bool,
    /// Close cleanly after this many frames.
    #[serde(default)]
    pub close_after_frames: Option<u64>,
    /// Write every frame in pieces of at most this many bytes (cuts land inside UTF-8
    /// sequences and between CR and LF).
    #[serde(default)]
    pub split_every: Option<usize>,
    /// Line endings.
    #[serde(default)]
    pub line_ending: LineEnding,
    /// Stall this many ms (real time) after the initial frames.
    #[serde(default)]
    pub stall_ms: Option<u64>,
    /// Send every event twice.
    #[serde(default)]
    pub duplicate: bool,
    /// Swap every two consecutive events carrying an id (the first is held back until the
    /// second has been written).
    #[serde(default)]
    pub reorder: bool,
    /// Send one frame with this many data bytes first.
    #[serde(default)]
    pub oversize_bytes: Option<usize>,
    /// Raw text written right after the headers (comments, id-only frames, frames without
    /// `event`, non-JSON data, …), verbatim.
    #[serde(default)]
    pub raw_prelude: Option<String>,
}

/// A rule: matcher plus action, with a hit counter.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FaultRule {
    /// Rule id (assigned when added).
    #[serde(default)]
    pub id: String,
    /// Which requests.
    #[serde(default)]
    pub matcher: FaultMatcher,
    /// What to do.
    pub action: FaultAction,
    /// Matching requests seen so far.
    #[serde(default)]
    pub seen: u64,
    /// Times the rule fired.
    #[serde(default)]
    pub fired: u64,
}

/// What a request looks like to the matcher.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    /// HTTP method.
    pub method: &'a str,
    /// Path.
    pub path: &'a str,
    /// Authenticated agent.
    pub agent: Option<&'a str>,
    /// Conversation the request is about.
    pub conversation: Option<&'a str>,
}

impl FaultMatcher {
    fn accepts(&self, facts: &RequestFacts<'_>) -> bool {
        if let Some(m) = &self.method {
            if !m.eq_ignore_ascii_case(facts.method) {
                return false;
            }
        }
        if let Some(p) = &self.path {
            let ok = match p.strip_suffix('*') {
                Some(prefix) => facts.path.starts_with(prefix),
                None => facts.path == p,
            };
            if !ok {
                return false;
            }
        }
        if self.agent.is_some() && self.agent.as_deref() != facts.agent {
            return false;
        }
        if self.conversation.is_some() && self.conversation.as_deref() != facts.conversation {
            return false;
        }
        true
    }
}

/// The installed rules.
#[derive(Debug, Default)]
pub struct Faults {
    rules: Vec<FaultRule>,
    next_id: u64,
}

/// Most rules installed at once (bounded memory).
pub const FAULT_RULES_CAP: usize = 256;

impl Faults {
    /// Installs a rule and returns its id, or `None` when the cap is reached.
    pub fn add(&mut self, mut rule: FaultRule) -> Option<String> {
        if self.rules.len() >= FAULT_RULES_CAP {
            return None;
        }
        self.next_id += 1;
        rule.id = format!("fault-{}", self.next_id);
        rule.seen = 0;
        rule.fired = 0;
        let id = rule.id.clone();
        self.rules.push(rule);
        Some(id)
    }

    /// Removes a rule; true when it existed.
    pub fn remove(&mut self, id: &str) -> bool {
        let before = self.rules.len();
        self.rules.retain(|r| r.id != id);
        before != self.rules.len()
    }

    /// Removes every rule.
    pub fn clear(&mut self) {
        self.rules.clear();
    }

    /// The installed rules with their counters.
    pub fn list(&self) -> Vec<FaultRule> {
        self.rules.clone()
    }

    /// The action of the first rule that fires for this request. `draw` yields a uniform
    /// number in [0, 1) for probabilistic rules.
    pub fn take(
        &mut self,
        facts: &RequestFacts<'_>,
        draw: &mut dyn FnMut() -> f64,
    ) -> Option<FaultAction> {
        // Every rule counts every request it matches, whether or not an earlier rule fires,
        // so `nth` means "the nth matching request" independently per rule.
        let mut candidates = Vec::new();
        for (index, rule) in self.rules.iter_mut().enumerate() {
            if rule.matcher.accepts(facts) {
                rule.seen += 1;
                candidates.push(index);
            }
        }
        for index in candidates {
            let rule = &mut self.rules[index];
            if let Some(nth) = &rule.matcher.nth {
                if !nth.contains(&rule.seen) {
                    continue;
                }
            }
            if rule.matcher.times.is_some_and(|t| rule.fired >= t) {
                continue;
            }
            if let Some(p) = rule.matcher.probability {
                if draw() >= p {
                    continue;
                }
            }
            rule.fired += 1;
            return Some(rule.action.clone());
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn facts(path: &str) -> RequestFacts<'_> {
        RequestFacts {
            method: "POST",
            path,
            agent: Some("a1"),
            conversation: None,
        }
    }

    #[test]
    fn nth_and_times_limit_firing() {
        let mut faults = Faults::default();
        let rule: FaultRule = serde_json::from_value(json!({
            "matcher": {"path": "/messages/*", "nth": [2, 3], "times": 1},
            "action": {"type": "status", "status": 503}
        }))
        .unwrap();
        faults.add(rule);
        let mut draw = || 0.0;
        assert!(faults.take(&facts("/messages/send"), &mut draw).is_none());
        assert!(faults.take(&facts("/messages/send"), &mut draw).is_some());
        assert!(faults.take(&facts("/messages/send"), &mut draw).is_none());
        assert!(faults.take(&facts("/typing"), &mut draw).is_none());
    }

    #[test]
    fn unknown_action_fields_are_refused() {
        let bad = serde_json::from_value::<FaultRule>(json!({
            "action": {"type": "status", "status": 500, "bogus": 1}
        }));
        assert!(bad.is_err());
    }
}

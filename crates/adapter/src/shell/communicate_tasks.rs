//! The Canon call of a `canon_communicate` tool call (runtime-control.md §5.4): one verb through
//! `POST /agent/verbs/<verb>` or the agent directory `GET /agents/discover`, run as a
//! background task whose result goes back to the session as
//! [`SessionInput::CommunicateDone`]; the session maps it to the tool result
//! (`canon_host::communicate`).

use super::*;
use canon_host::communicate::{CanonRequest, Communicate, Failure};
use canon_transport::client::DiscoverAgents;

impl Driver {
    /// Runs the call; its result comes back through the communicate channel. Without a
    /// client (the session saw a connect, so this does not happen) the call fails at once.
    pub(super) fn run_communicate(
        &mut self,
        id: String,
        re: &'static str,
        call: Box<Communicate>,
    ) -> Option<SessionInput> {
        let Some(client) = self.client.clone() else {
            tracing::error!("canon_communicate call without a Canon client");
            return Some(SessionInput::CommunicateDone {
                id,
                re,
                call,
                result: Err(Failure {
                    message: canon_host::tools::NO_CREDENTIALS.to_owned(),
                    code: None,
                }),
            });
        };
        let reports = self.communicate_tx.clone();
        self.spawn_background(async move {
            let result = canon_call(&client, &call.request).await;
            let done = SessionInput::CommunicateDone {
                id,
                re,
                call,
                result,
            };
            if reports.send(done).await.is_err() {
                tracing::debug!("canon_communicate result after the loop ended; dropped");
            }
        });
        None
    }
}

/// One attempt of the call (the reference makes one too). An HTTP error keeps the text
/// `Canon API returned <status>: <body>` (runtime-control.md §2) and its body's `code`, which
/// the session reads for `OUTBOUND_APPROVAL_REQUIRED`.
async fn canon_call(
    client: &CanonClient,
    request: &CanonRequest,
) -> Result<serde_json::Map<String, serde_json::Value>, Failure> {
    let result = match request {
        CanonRequest::Verb {
            verb,
            envelope,
            value,
        } => {
            client
                .execute_verb(verb, envelope.clone(), value.clone())
                .await
        }
        CanonRequest::Discover {
            query,
            limit,
            cursor,
        } => {
            let query = DiscoverAgents {
                query: query.clone(),
                limit: *limit,
                cursor: cursor.clone(),
            };
            client.discover_agents(&query).await
        }
    };
    result.map_err(|error| {
        let http = error.http();
        Failure {
            message: http.map_or_else(|| error.to_string(), ToString::to_string),
            code: http.and_then(|h| h.code.clone()),
        }
    })
}

//! The Canon connection's I/O: the connect calls, opening and stopping the
//! event stream and its loops (the runtime-signal pass, doorbell consumes,
//! the status loop) and conversation re-fetches. What each event means is
//! the session's.

use super::*;
use crate::config::{MAX_LOOP_INTERVAL, MIN_LOOP_INTERVAL};
use crate::tasks::{consume_signal, poll_signals, publish_status};
use canon_host::connect::ConnectFailure;
use canon_transport::stream::StreamConfig;
use canon_wire::types::{AgentMe, Conversation};

/// The health check of the configured environment, if any
/// (canon-wire.md §1.2): both services must name the environment and, for a packaged one,
/// its project; a non-packaged environment's project is the one the API
/// names, and its RTDB URL must then belong to it (cli.md §5.2 rule 5). The
/// error is a safe text.
pub(crate) async fn verify_environment(
    client: &CanonClient,
    config: &Config,
) -> Result<(), String> {
    let Some(environment) = config.environment_id.as_deref() else {
        return Ok(());
    };
    let expected = config
        .connection
        .as_ref()
        .and_then(|c| c.project_id.as_deref());
    let project = client
        .verify_environment(environment, expected)
        .await
        .map_err(|error| error.to_string())?;
    if let Some(connection) = config
        .connection
        .as_ref()
        .filter(|c| c.project_id.is_none())
    {
        connection
            .bind_project(&project)
            .map_err(|error| error.to_string())?;
    }
    Ok(())
}

impl Driver {
    /// The calls of `adapter.connect` (the session checked the settings
    /// first): the environment when one is configured, then `GET
    /// /agents/me` and `GET /conversations`, in order.
    pub(super) async fn connect_calls(
        &mut self,
    ) -> Result<(AgentMe, Vec<Conversation>), ConnectFailure> {
        // Both calls are reads: a cut or malformed answer is worth another try as much as a
        // timeout is, and a refusal here would stop the gateway's start for good.
        let call_failed = |error: &TransportError| ConnectFailure::Call {
            status: error.status(),
            message: error.to_string(),
            retryable: canon_wire::retry::is_retryable_read(error.kind()),
        };
        let client = self
            .client()
            .map_err(|error| ConnectFailure::Client(error.to_string()))?;
        verify_environment(&client, &self.config)
            .await
            .map_err(ConnectFailure::Environment)?;
        let me = client.get_me().await.map_err(|e| call_failed(&e))?;
        let conversations = client
            .list_conversations()
            .await
            .map_err(|e| call_failed(&e))?;
        self.open_inbox(&client, &me).await?;
        Ok((me, conversations))
    }

    /// Opens the durable inbox of this agent on this Canon origin and resumes the session from
    /// it, unless it is open already (a reconnect of the same agent keeps the live state). A
    /// damaged journal refuses the connect for good; a journal another daemon still holds after
    /// the wait, or a file system error, refuses it as retryable, so Hermes tries again and the
    /// agent never runs without its inbox.
    async fn open_inbox(
        &mut self,
        client: &CanonClient,
        me: &AgentMe,
    ) -> Result<(), ConnectFailure> {
        let (Some(home), Some(agent_id)) = (self.config.canon_home.clone(), me.agent_id.as_deref())
        else {
            return Ok(());
        };
        let scope = canon_inbox::scope_key(client.base_url(), agent_id);
        if self.inbox.as_ref().is_some_and(|w| w.scope() == scope) {
            return Ok(());
        }
        self.inbox = None;
        match crate::inbox::InboxWriter::open(&home, scope, self.config.inbox_lock_wait).await {
            Ok((writer, loaded)) => {
                if loaded.torn_tail {
                    tracing::warn!(
                        path = %writer.path().display(),
                        "the inbox's last record was cut short by a crash and was dropped"
                    );
                }
                self.session.inbox_resume(
                    loaded.cursor,
                    loaded.handled,
                    &loaded.open_turns,
                    &loaded.runtime_turns,
                );
                self.inbox = Some(writer);
                Ok(())
            }
            Err(error @ crate::inbox::InboxError::Corrupt { .. }) => {
                tracing::error!(%error, "the durable inbox cannot be opened");
                Err(ConnectFailure::InboxDamaged(error.to_string()))
            }
            Err(error @ crate::inbox::InboxError::Busy { .. }) => {
                tracing::warn!(%error, "the connect is refused for now; Hermes retries it");
                Err(ConnectFailure::InboxUnavailable(format!(
                    "{error}; Hermes retries the connect. If two gateways serve this agent with \
                     one Canon home, stop one of them."
                )))
            }
            Err(error) => {
                tracing::warn!(%error, "the connect is refused for now; Hermes retries it");
                Err(ConnectFailure::InboxUnavailable(format!(
                    "{error}; Hermes retries the connect (free disk space or fix the Canon \
                     home's file system if this persists)"
                )))
            }
        }
    }

    /// A connect succeeded: the media downloader (once), the event stream,
    /// the loops of the new connection, and one runtime status publish.
    pub(super) fn open_connection(&mut self) {
        let Some(client) = self.client.clone() else {
            tracing::error!("connection opened without a client");
            return;
        };
        if self.downloader.is_none() {
            self.downloader = Some(self.new_downloader());
        }
        let config = StreamConfig {
            initial_cursor: self.session.inbox_new_stream(),
            ..StreamConfig::default()
        };
        self.stream = Some(EventStream::open(&client, config));
        let status_client = client.clone();
        self.start_loops(client.clone());
        self.start_approvals(client);
        self.start_card_scan();
        self.spawn_background(async move {
            if let Err(error) = status_client.publish_runtime_status().await {
                tracing::warn!(%error, "runtime status publish failed");
            }
        });
    }

    /// Starts the signal pass and the status loop of a new connection
    /// (canon-wire.md §8.1 step 7), stopping those of the previous one.
    pub(super) fn start_loops(&mut self, client: CanonClient) {
        self.stop_loops();
        self.signal_tasks.spawn(poll_signals(
            client.clone(),
            self.signal_ids.subscribe(),
            self.config
                .signal_poll
                .clamp(MIN_LOOP_INTERVAL, MAX_LOOP_INTERVAL),
            self.signal_tx.clone(),
        ));
        self.status_tasks.spawn(publish_status(
            client,
            self.config
                .status_interval
                .clamp(MIN_LOOP_INTERVAL, MAX_LOOP_INTERVAL),
        ));
    }

    /// Stops the signal pass, any doorbell consume, the status loop and a
    /// conversation re-fetch in flight (connect, disconnect, shutdown, exit).
    pub(super) fn stop_loops(&mut self) {
        self.stop_approvals();
        self.signal_tasks.abort_all();
        self.signal_tasks.detach_all();
        self.status_tasks.abort_all();
        self.status_tasks.detach_all();
        if let Some(refetch) = self.refetch.take() {
            refetch.abort();
        }
    }

    /// Re-fetches `GET /conversations` on a task of its own, as generation
    /// `generation`; the result comes back as a [`Refetched`]. A re-fetch
    /// still in flight is superseded.
    pub(super) fn refetch_conversations(&mut self, generation: u64) {
        let Some(client) = self.client.clone() else {
            return;
        };
        if let Some(previous) = self.refetch.take() {
            previous.abort();
        }
        let tx = self.refetch_tx.clone();
        let task = tokio::spawn(async move {
            let result = client.list_conversations().await;
            let _ = tx
                .send(Refetched {
                    id: generation,
                    result,
                })
                .await;
        });
        self.refetch = Some(task.abort_handle());
    }

    /// A `runtime.control` doorbell: consume that conversation's signal now,
    /// beside the loop (canon-wire.md §5.6).
    pub(super) fn ring(&mut self, conversation_id: String) {
        let Some(client) = self.client.clone() else {
            return;
        };
        while self.signal_tasks.try_join_next().is_some() {}
        // The poll loop is one of these tasks; beyond it a burst of doorbells shares the cap
        // (`MAX_DOORBELLS`): a dropped doorbell's signal is consumed by the next poll.
        if self.signal_tasks.len() > crate::config::MAX_DOORBELLS {
            tracing::debug!(
                conversation_id,
                "doorbell dropped: too many consumes in flight"
            );
            return;
        }
        let tx = self.signal_tx.clone();
        self.signal_tasks.spawn(async move {
            consume_signal(&client, conversation_id, &tx).await;
        });
    }
}

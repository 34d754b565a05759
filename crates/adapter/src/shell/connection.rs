//! The Canon connection: connect, the event stream and what each event
//! becomes, the runtime-signal pass, the status loop and conversation
//! re-fetches.

use super::*;
use crate::config::{MAX_LOOP_INTERVAL, MIN_LOOP_INTERVAL};
use crate::tasks::{consume_signal, poll_signals, publish_status, ConsumedSignal, Refetched};

impl Driver {
    pub(super) async fn connect(&mut self, busy_handler: bool, extra: &Value) -> ConnectResult {
        let call_failed = |error: &TransportError| ConnectFailure::Call {
            status: error.status(),
            message: error.to_string(),
            retryable: error.is_retryable(),
        };
        let facts = ConnectFacts {
            inbound_image_delivery: self.config.inbound_image_delivery.as_deref(),
            inbound_visual_media_delivery: self.config.inbound_visual_media_delivery.as_deref(),
            api_key_set: !self.config.api_key.expose().is_empty(),
            base_url_set: !self.config.base_url.is_empty(),
        };
        if let Err(refused) = self.session.connect_start(facts, extra) {
            return refused;
        }
        let client = match self.client() {
            Ok(client) => client,
            Err(error) => return connect::refusal(ConnectFailure::Client(error.to_string())),
        };
        if let Some(environment) = self.config.environment_id.clone() {
            if let Err(error) = client.verify_environment(&environment, None).await {
                return connect::refusal(ConnectFailure::Environment(error.to_string()));
            }
        }
        let me = match client.get_me().await {
            Ok(me) => me,
            Err(error) => return connect::refusal(call_failed(&error)),
        };
        let conversations = match client.list_conversations().await {
            Ok(conversations) => conversations,
            Err(error) => return connect::refusal(call_failed(&error)),
        };
        let result = self.session.connected(me, conversations, busy_handler);
        self.publish_signal_ids();
        if self.downloader.is_none() {
            self.downloader = Some(MediaDownloader::new(MediaOptions {
                policy: AddressPolicy {
                    allow_private: self.config.allow_private_urls,
                    allow_loopback: false,
                },
                ..MediaOptions::default()
            }));
        }
        self.stream = Some(EventStream::open(&client, StreamConfig::default()));
        let status_client = client.clone();
        self.start_loops(client.clone());
        self.spawn_background(async move {
            if let Err(error) = status_client.publish_runtime_status().await {
                tracing::warn!(%error, "runtime status publish failed");
            }
        });
        result
    }

    pub(super) async fn on_stream(&mut self, item: StreamItem) {
        let event = match item {
            StreamItem::Event(event) => event,
            StreamItem::State(ConnectionState::Failed(error)) => {
                tracing::error!(%error, "event stream stopped");
                self.stream = None;
                self.notify(DaemonNotification::AdapterFatal(connect::stream_stopped(
                    error.to_string(),
                )))
                .await;
                return;
            }
            StreamItem::State(state) => {
                tracing::debug!(?state, "event stream state");
                if matches!(state, ConnectionState::Connected) {
                    self.notify(DaemonNotification::AdapterStatus(AdapterStatus {
                        connected: true,
                    }))
                    .await;
                }
                return;
            }
        };
        let (step, keys_changed) = self.session.stream_event(event.kind);
        if keys_changed {
            self.publish_signal_ids();
        }
        match step {
            StreamStep::Nothing => {}
            StreamStep::Inbound(step) => self.on_inbound(step).await,
            StreamStep::Ring(conversation_id) => self.ring(conversation_id),
            StreamStep::Refetch => self.refetch_conversations(),
        }
    }

    /// Carries out what a `message.created` event became.
    pub(super) async fn on_inbound(&mut self, step: InboundStep) {
        match step {
            InboundStep::Nothing => {}
            InboundStep::Send(message) => {
                self.send_request(DaemonRequest::InboundMessage(*message))
                    .await
            }
            InboundStep::Materialize {
                job,
                conversation_id,
                message,
                source,
                attachments,
                intent,
            } => self.spawn_media(job, conversation_id, *message, source, attachments, intent),
        }
    }

    /// Hands a consumed runtime signal to the shim as `control.signal`
    /// (hermes-host.md §12.3, §19.7).
    pub(super) async fn on_signal(&mut self, consumed: ConsumedSignal) {
        let ConsumedSignal {
            conversation_id,
            signal,
        } = consumed;
        let control = requests::control_signal(
            conversation_id,
            signal,
            self.session.agent.agent_id.as_deref(),
            &self.session.conversations,
        );
        tracing::info!(conversation_id = control.chat_id, signal = ?control.signal, "runtime control signal");
        self.send_request(DaemonRequest::ControlSignal(control))
            .await;
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
        self.signal_tasks.abort_all();
        self.signal_tasks.detach_all();
        self.status_tasks.abort_all();
        self.status_tasks.detach_all();
        if let Some(refetch) = self.refetch.take() {
            refetch.abort();
        }
        // A result already on its way is stale from now on.
        self.session.stop_refetch();
    }

    /// Re-fetches `GET /conversations` on a task of its own after
    /// `replay.expired` (canon-wire.md §5.3); the result comes back as a
    /// [`Refetched`] to [`Driver::on_refetched`]. A re-fetch still in flight
    /// is superseded.
    pub(super) fn refetch_conversations(&mut self) {
        let Some(client) = self.client.clone() else {
            return;
        };
        if let Some(previous) = self.refetch.take() {
            previous.abort();
        }
        let id = self.session.start_refetch();
        let tx = self.refetch_tx.clone();
        let task = tokio::spawn(async move {
            let result = client.list_conversations().await;
            let _ = tx.send(Refetched { id, result }).await;
        });
        self.refetch = Some(task.abort_handle());
    }

    /// A re-fetch finished: the list replaces the cache (as at connect);
    /// a failure is logged and the stream reconnects with its new cursor
    /// (canon-wire.md §5.3). Stale results are dropped.
    pub(super) fn on_refetched(&mut self, refetched: Refetched) {
        let result = refetched.result.map_err(|error| error.to_string());
        match self.session.refetched(refetched.id, result) {
            RefetchStep::Stale => {}
            RefetchStep::Replaced => {
                self.refetch = None;
                self.publish_signal_ids();
            }
            RefetchStep::Reconnect => {
                self.refetch = None;
                if let Some(stream) = &self.stream {
                    stream.reconnect();
                }
            }
        }
    }

    /// A `runtime.control` doorbell: consume that conversation's signal now,
    /// beside the loop (canon-wire.md §5.6).
    pub(super) fn ring(&mut self, conversation_id: String) {
        let Some(client) = self.client.clone() else {
            return;
        };
        while self.signal_tasks.try_join_next().is_some() {}
        let tx = self.signal_tx.clone();
        self.signal_tasks.spawn(async move {
            consume_signal(&client, conversation_id, &tx).await;
        });
    }

    /// Republishes the set of conversations the signal pass visits.
    pub(super) fn publish_signal_ids(&self) {
        self.signal_ids
            .send_replace(self.session.conversations.ids());
    }
}

//! Media I/O: outbound uploads before the turn machine sends their message,
//! and inbound downloads that hold their message's place in its
//! conversation's lane. The session decides what is uploaded or
//! downloaded and what the result becomes.

use super::*;
use crate::inbound_media::{materialize, write_handoff_files};
use crate::tasks::AbortOnDrop;
use canon_host::inbound::Materialized;
use canon_host::media::capture::CapturedMedia;
use canon_host::protocol::{
    self, AdapterSendMedia, ErrorBody, ErrorCode, InboundMediaBatch, ShimResponse,
};
use canon_host::session::Materialize;
use canon_host::turn::{MediaPayload, RequestId};

impl Driver {
    /// Whether another upload task may start (at most `MAX_UPLOAD_TASKS`); reaps finished ones.
    fn upload_room(&mut self) -> bool {
        while self.upload_tasks.try_join_next().is_some() {}
        self.upload_tasks.len() < outbound::MAX_UPLOAD_TASKS
    }

    /// Uploads the file of an `adapter.send_media` on a task (at most
    /// [`outbound::UPLOAD_CONCURRENCY`] at once); without a client the
    /// failure is reported at once.
    pub(super) fn upload_media(
        &mut self,
        request: RequestId,
        media: AdapterSendMedia,
    ) -> Option<SessionInput> {
        if !self.upload_room() {
            return Some(SessionInput::Uploaded {
                request,
                result: Err(outbound::TOO_MANY_UPLOADS.to_owned()),
            });
        }
        let client = match self.client() {
            Ok(client) => client,
            Err(error) => {
                return Some(SessionInput::Uploaded {
                    request,
                    result: Err(error.to_string()),
                })
            }
        };
        let downloader = self.media_downloader();
        let budget = self.config.media_download_budget;
        let permits = self.upload_permits.clone();
        let done = self.upload_tx.clone();
        let item = outbound::MediaItem {
            op: media.op,
            url: media.url,
            path: media.path,
            file_name: media.file_name,
            mime_type: media.mime_type,
            duration_ms: media.duration_ms,
        };
        self.upload_tasks.spawn(async move {
            let _permit = permits.acquire_owned().await;
            let result =
                outbound::upload_item(&client, &downloader, budget, &media.chat_id, &item).await;
            let _ = done.send(Uploaded { request, result }).await;
        });
        None
    }

    /// Uploads the hand-off file of `upload_media_for_current_conversation` on a task; the
    /// session answers the plugin's call with the attachment or the error.
    pub(super) fn upload_api_media(
        &mut self,
        request: RequestId,
        conversation_id: String,
        path: String,
        mime_type: String,
        file_name: Option<String>,
    ) {
        if !self.upload_room() {
            outbound::remove_handoff(&path);
            let done = self.upload_tx.clone();
            tokio::spawn(async move {
                let result = Err(outbound::TOO_MANY_UPLOADS.to_owned());
                let _ = done.send(Uploaded { request, result }).await;
            });
            return;
        }
        let done = self.upload_tx.clone();
        let permits = self.upload_permits.clone();
        let client = self.client();
        self.upload_tasks.spawn(async move {
            let result = match client {
                Ok(client) => {
                    let _permit = permits.acquire_owned().await;
                    outbound::upload_handoff(
                        &client,
                        &conversation_id,
                        &path,
                        &mime_type,
                        file_name,
                    )
                    .await
                }
                Err(error) => {
                    outbound::remove_handoff(&path);
                    Err(error.to_string())
                }
            };
            let _ = done.send(Uploaded { request, result }).await;
        });
    }

    /// Uploads every file of a standalone send into `target` first; the
    /// text then goes out as one standalone id group with the media on the
    /// final part (hermes-host.md §15).
    pub(super) fn upload_standalone(
        &mut self,
        request: RequestId,
        target: String,
        files: Vec<String>,
        force_document: bool,
    ) {
        if !self.upload_room() {
            let done = self.upload_tx.clone();
            tokio::spawn(async move {
                let result = Err(outbound::TOO_MANY_UPLOADS.to_owned());
                let _ = done.send(Uploaded { request, result }).await;
            });
            return;
        }
        let done = self.upload_tx.clone();
        let permits = self.upload_permits.clone();
        let client = self.client();
        self.upload_tasks.spawn(async move {
            let result: Result<MediaPayload, String> = match client {
                Ok(client) => {
                    let _permit = permits.acquire_owned().await;
                    outbound::upload_files(&client, &target, &files, force_document).await
                }
                Err(error) => Err(error.to_string()),
            };
            let _ = done.send(Uploaded { request, result }).await;
        });
    }

    /// A downloader with the configured address policy.
    pub(super) fn new_downloader(&self) -> MediaDownloader {
        MediaDownloader::new(MediaOptions {
            policy: AddressPolicy {
                allow_private: self.config.allow_private_urls,
                allow_loopback: false,
            },
            ..MediaOptions::default()
        })
    }

    /// The guarded media downloader (built here when no connect did yet).
    pub(super) fn media_downloader(&mut self) -> MediaDownloader {
        if self.downloader.is_none() {
            self.downloader = Some(self.new_downloader());
        }
        self.downloader
            .clone()
            .unwrap_or_else(|| self.new_downloader())
    }

    /// Downloads a waking message's attachments on a task of its own
    /// (runtime-control.md §8.2–§8.3), at most [`MEDIA_CONCURRENCY`] at
    /// once; the message with what was found (or the session's fallback,
    /// when the work task dies) is reported as a [`MediaDone`].
    pub(super) fn spawn_media(&mut self, job: Materialize) {
        let Materialize {
            job,
            conversation_id,
            message,
            source,
            attachments,
            intent,
            scope,
            fallback,
        } = job;
        let downloader = self.downloader.clone();
        let dir = self.media_dir.clone();
        let permits = Arc::clone(&self.media_permits);
        let done = self.media_done.clone();
        let budget = self.config.media_download_budget;
        while self.media_tasks.try_join_next().is_some() {}
        self.media_tasks.spawn(async move {
            let work = tokio::spawn(async move {
                // A closed semaphore cannot happen (never closed); go on.
                let _permit = permits.acquire_owned().await.ok();
                let (listed, counts, captures) = materialize(
                    downloader.as_ref(),
                    dir.as_deref(),
                    scope,
                    &attachments,
                    budget,
                )
                .await;
                let found = Materialized {
                    source,
                    intent,
                    scope,
                    listed,
                    counts,
                    captures,
                };
                (message, found)
            });
            let _abort = AbortOnDrop(work.abort_handle());
            let (message, materialized) = match work.await {
                Ok((message, found)) => (message, Some(Box::new(found))),
                Err(error) => {
                    tracing::error!(%error, "inbound media task failed; sending without media");
                    (fallback, None)
                }
            };
            let _ = done
                .send(MediaDone {
                    conversation_id,
                    job,
                    message: Box::new(message),
                    materialized,
                })
                .await;
        });
    }

    /// Answers an `api.inbound_media` with its batch written out as new
    /// hand-off files (hermes-host.md Q8), on a task: the shim reads and
    /// deletes each. Without a `CANON_HOME`, or when a write fails, the
    /// request fails and no file is left (never a partial batch).
    pub(super) fn serve_inbound_media(
        &mut self,
        id: String,
        re: &'static str,
        message_id: String,
        media: Vec<CapturedMedia>,
    ) {
        let dir = self.media_dir.clone();
        let out = self.out.clone();
        self.spawn_background(async move {
            let written = match dir {
                Some(dir) => tokio::task::spawn_blocking(move || {
                    write_handoff_files(&dir, &message_id, &media)
                })
                .await
                .map_err(|error| error.to_string())
                .and_then(|result| result.map_err(|error| error.to_string())),
                None => Err("no CANON_HOME to hand the media over in".to_owned()),
            };
            let line = match written {
                Ok(files) => {
                    let body = ShimResponse::ApiInboundMedia(InboundMediaBatch {
                        media: files,
                        error: None,
                    })
                    .to_body();
                    protocol::encode_response(&id, re, Ok(body))
                }
                Err(error) => {
                    tracing::warn!(%error, "trusted inbound media could not be handed over");
                    let error = ErrorBody {
                        code: ErrorCode::Internal,
                        message: "trusted inbound media could not be handed over".to_owned(),
                        retryable: true,
                    };
                    protocol::encode_response(&id, re, Err(&error))
                }
            };
            if out.send(line).await.is_err() {
                tracing::debug!("stdout writer is gone; frame dropped");
            }
        });
    }
}

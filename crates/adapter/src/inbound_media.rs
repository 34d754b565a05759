//! Inbound attachments on disk: each attachment downloaded through the
//! guarded downloader, classified by `canon_host::media`, captured for
//! trusted tools, and (unless hidden) written as a new private hand-off
//! file under `CANON_HOME/tmp`; stale hand-off files are swept.

use std::io::{self, Write as _};
use std::path::Path;
use std::time::{Duration, SystemTime};

use std::sync::Arc;

use canon_host::media::capture::{CaptureBatch, CapturedMedia};
use canon_host::media::{self, MediaCounts, TrustedScope};
use canon_host::protocol::{InboundMedia, InboundMediaFile};
use canon_transport::media::{safe_url, MediaDownloader};
use serde_json::Value;

use crate::config::HANDOFF_MAX_AGE;
use crate::env::random_u128;

/// Downloads, classifies, captures and hands off a message's attachments
/// in array order (runtime-control.md §8.3): the listed media, the
/// runtime-control.md §8.5 counts and the trusted captures. Nothing here
/// fails the message: a failed attachment is skipped and counted
/// unavailable when the scope says so, and then a trusted batch is dropped
/// whole (fail closed). Each download has `budget` in total
/// ([`crate::config::MEDIA_DOWNLOAD_BUDGET`]); one past it counts as failed.
pub(crate) async fn materialize(
    downloader: Option<&MediaDownloader>,
    dir: Option<&Path>,
    scope: TrustedScope,
    attachments: &[Value],
    budget: Duration,
) -> (Vec<InboundMedia>, MediaCounts, CaptureBatch) {
    // runtime-control.md §8.3: without a live Canon client nothing is downloaded.
    let Some(downloader) = downloader else {
        tracing::warn!("inbound attachments skipped: no media downloader");
        return (
            Vec::new(),
            media::all_unavailable(scope, attachments),
            CaptureBatch::default(),
        );
    };
    let mut listed = Vec::new();
    let mut counts = MediaCounts::default();
    let mut captures = CaptureBatch::default();
    for (index, attachment) in attachments.iter().enumerate() {
        let failed = |counts: &mut MediaCounts| {
            if media::requires_trusted_failure(scope, attachment) {
                counts.unavailable += 1;
            }
        };
        if index >= media::MAX_ATTACHMENTS_PER_MESSAGE {
            tracing::warn!(index, "inbound attachment skipped: too many in one message");
            failed(&mut counts);
            continue;
        }
        let Some(url) = media::attachment_url(attachment).filter(|_| attachment.is_object()) else {
            tracing::debug!(index, "inbound attachment skipped: no url");
            failed(&mut counts);
            continue;
        };
        let downloaded = match tokio::time::timeout(budget, downloader.download(url)).await {
            Ok(Ok(downloaded)) => downloaded,
            Err(_) => {
                let url = safe_url(url);
                let budget_ms = u64::try_from(budget.as_millis()).unwrap_or(u64::MAX);
                tracing::warn!(index, %url, budget_ms, "inbound attachment download took too long");
                failed(&mut counts);
                continue;
            }
            Ok(Err(error)) => {
                // An HTTP failure is logged by status only: its body is the
                // media server's, not ours to copy into logs.
                let error = match error.status() {
                    Some(status) => format!("HTTP {status}"),
                    None => error.to_string(),
                };
                let url = safe_url(url);
                tracing::warn!(index, %url, %error, "inbound attachment download failed");
                failed(&mut counts);
                continue;
            }
        };
        let classified = media::classify(
            scope,
            attachment,
            downloaded.content_type.as_deref(),
            &downloaded.bytes,
        );
        let bytes: Arc<[u8]> = Arc::from(&downloaded.bytes[..]);
        // runtime-control.md §8.3 step 7: every attachment that arrived
        // whole is captured, hidden or not (runtime-control.md Q11).
        let capture = CapturedMedia {
            index,
            mime_type: classified.mime_type.clone(),
            file_name: classified.file_name.clone(),
            data: Arc::clone(&bytes),
        };
        if classified.hidden {
            // Trusted-only: never written, never listed (runtime-control.md §8.3 step 4).
            tracing::debug!(index, ?scope, "inbound attachment hidden from the model");
            counts.hidden += 1;
            captures.offer(capture);
            continue;
        }
        let Some(dir) = dir else {
            tracing::warn!(
                index,
                "inbound attachment skipped: no CANON_HOME to hand it off in"
            );
            failed(&mut counts);
            continue;
        };
        let name = media::disk_file_name(&format!("{:032x}", random_u128()), &classified.file_name);
        let dir = dir.to_path_buf();
        let written =
            tokio::task::spawn_blocking(move || write_handoff_file(&dir, &name, &bytes)).await;
        match written {
            Ok(Ok(path)) => {
                listed.push(InboundMedia {
                    path,
                    mime_type: classified.mime_type,
                    kind: classified.kind,
                    file_name: Some(classified.file_name),
                });
                captures.offer(capture);
            }
            Ok(Err(error)) => {
                tracing::warn!(index, %error, "writing an inbound attachment failed");
                failed(&mut counts);
            }
            Err(error) => {
                tracing::warn!(index, %error, "writing an inbound attachment failed");
                failed(&mut counts);
            }
        }
    }
    // runtime-control.md §8.3, after the loop: an unavailable attachment
    // in a trusted scope leaves no partial trusted set.
    if scope != TrustedScope::None && counts.unavailable > 0 {
        tracing::warn!(
            unavailable = counts.unavailable,
            "trusted inbound media withheld: the batch is incomplete"
        );
        captures.drop_all();
    }
    (listed, counts, captures)
}

/// Writes one captured batch of `message_id` as new hand-off files for an
/// `api.inbound_media` answer (runtime-control.md §7.6, hermes-host.md Q8),
/// in capture order. On the first failed write every file already written
/// is removed again, so the shim never sees part of a batch.
pub(crate) fn write_handoff_files(
    dir: &Path,
    message_id: &str,
    media: &[CapturedMedia],
) -> io::Result<Vec<InboundMediaFile>> {
    let mut files = Vec::with_capacity(media.len());
    for item in media {
        let name = media::disk_file_name(&format!("{:032x}", random_u128()), &item.file_name);
        match write_handoff_file(dir, &name, &item.data) {
            Ok(path) => files.push(InboundMediaFile {
                message_id: message_id.to_owned(),
                attachment_index: item.index as u64,
                mime_type: item.mime_type.clone(),
                file_name: item.file_name.clone(),
                path,
                size_bytes: item.data.len() as u64,
            }),
            Err(error) => {
                for file in &files {
                    let _ = std::fs::remove_file(&file.path);
                }
                return Err(error);
            }
        }
    }
    Ok(files)
}

/// Writes one hand-off
/// file (hermes-host.md Q8): the directory is created 0700 when missing,
/// the file is new (`create_new`, never following or replacing anything)
/// and 0600. Returns its path as a string; a partial file is removed.
pub(crate) fn write_handoff_file(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let path = dir.join(name);
    let Some(text) = path.to_str().map(str::to_owned) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "hand-off path is not UTF-8",
        ));
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    let written = file
        .set_permissions(std::fs::Permissions::from_mode(0o600))
        .and_then(|()| file.write_all(bytes))
        .and_then(|()| file.flush());
    if let Err(error) = written {
        drop(file);
        let _ = std::fs::remove_file(&path);
        return Err(error);
    }
    Ok(text)
}

/// Deletes this daemon's hand-off files (named with
/// [`media::DISK_NAME_PREFIX`]) older than [`HANDOFF_MAX_AGE`] in `dir`
/// (hermes-host.md Q8); returns how many. Symlinks and directories are left
/// alone; a missing directory is fine.
pub(crate) fn sweep_handoff_dir(dir: &Path, now: SystemTime) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name
            .to_str()
            .is_some_and(|n| n.starts_with(media::DISK_NAME_PREFIX))
        {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let stale = meta
            .modified()
            .ok()
            .and_then(|modified| now.duration_since(modified).ok())
            .is_some_and(|age| age > HANDOFF_MAX_AGE);
        if meta.is_file() && stale && std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn handoff_files_are_new_private_and_never_replace_anything() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().expect("temp dir");
        let dir = home.path().join("tmp");
        let path = write_handoff_file(&dir, "canon-inbound-1-a.png", b"\x89PNG").expect("written");
        assert_eq!(std::fs::read(&path).expect("readable"), b"\x89PNG");
        let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode(Path::new(&path)), 0o600);
        assert_eq!(mode(&dir), 0o700);
        let again = write_handoff_file(&dir, "canon-inbound-1-a.png", b"other");
        assert_eq!(
            again.map_err(|e| e.kind()),
            Err(io::ErrorKind::AlreadyExists)
        );
        assert_eq!(std::fs::read(&path).expect("readable"), b"\x89PNG");
    }

    #[test]
    fn sweep_deletes_only_stale_handoff_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        let touch = |name: &str, age: Duration| {
            let path = dir.path().join(name);
            let file = std::fs::File::create(&path).expect("created");
            file.set_modified(SystemTime::now() - age)
                .expect("mtime set");
            path
        };
        let stale = touch("canon-inbound-1-a.png", Duration::from_secs(7_200));
        let fresh = touch("canon-inbound-2-b.png", Duration::from_secs(60));
        let foreign = touch("someone-else.png", Duration::from_secs(7_200));
        let stale_dir = dir.path().join("canon-inbound-dir");
        std::fs::create_dir(&stale_dir).expect("dir");
        assert_eq!(sweep_handoff_dir(dir.path(), SystemTime::now()), 1);
        assert!(!stale.exists());
        assert!(fresh.exists() && foreign.exists() && stale_dir.exists());
        assert_eq!(
            sweep_handoff_dir(&dir.path().join("missing"), SystemTime::now()),
            0
        );
    }
}

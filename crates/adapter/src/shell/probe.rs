//! The check of a verifying `probe` (hermes-host.md §19.6): one health or
//! `GET /agents/me` call on a task of its own, within a budget. The answer
//! never carries the key.

use super::*;
use crate::config::PROBE_VERIFY_BUDGET;
use canon_host::credentials::PlatformCredentials;
use canon_host::protocol::ProbeResult;
use canon_host::session::handle::probe_answer;

impl Driver {
    /// Checks Canon once (the environment when one is configured, else
    /// `GET /agents/me`) and answers the probe with the check's error.
    /// With `platform`, the check uses the credentials of that config
    /// (resolved again), not the daemon's.
    pub(super) async fn verify_probe(
        &mut self,
        id: String,
        re: &'static str,
        mut result: ProbeResult,
        platform: Option<&PlatformCredentials>,
    ) {
        let (client, config) = match platform {
            None => (self.client(), self.config.clone()),
            Some(platform) => {
                let mut config = self.config.clone();
                config.adopt(self.resolve(platform).await);
                (client_for(&config), config)
            }
        };
        let client = match client {
            Ok(client) => client,
            Err(error) => {
                result.error = Some(error.to_string());
                self.send_line(probe_answer(&id, re, result)).await;
                return;
            }
        };
        let out = self.out.clone();
        self.spawn_background(async move {
            let check = async {
                if config.environment_id.is_some() {
                    super::connection::verify_environment(&client, &config).await
                } else {
                    client.get_me().await.map(drop).map_err(|e| e.to_string())
                }
            };
            result.error = match tokio::time::timeout(PROBE_VERIFY_BUDGET, check).await {
                Ok(Ok(())) => None,
                Ok(Err(error)) => Some(error),
                Err(_) => Some("Canon did not answer in time".to_owned()),
            };
            if out.send(probe_answer(&id, re, result)).await.is_err() {
                tracing::debug!("stdout writer is gone; probe answer dropped");
            }
        });
    }
}

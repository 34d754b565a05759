//! The Canon calls the CLI makes itself, all unauthenticated and all through canon-transport:
//! the health check of cli.md §5.3 (`doctor --online`, and `setup` before it uses a connection)
//! and the registration calls of canon-wire.md §1.4 (`setup`). The client built here holds no
//! API key at all, so none can be sent.

use canon_profiles::Connection;
use canon_transport::{CanonClient, ClientConfig, TransportError};

/// A client for `connection`'s API and stream URLs without a key.
pub(crate) fn keyless_client(connection: &Connection) -> Result<CanonClient, TransportError> {
    CanonClient::new(ClientConfig::new(
        connection.base_url.clone(),
        connection.stream_url.clone(),
        canon_wire::ApiKey::new(""),
    ))
}

/// cli.md §5.3: `GET {baseUrl}/healthz/` then `GET {streamUrl}/health` (the check the daemon
/// runs at connect), then for a non-packaged environment the RTDB binding to the project the
/// health check reported (cli.md §5.2 rule 5). The connection bound to its project, or the
/// error's text (canon-transport and canon-profiles errors carry no secret).
pub(crate) async fn verify_connection(connection: &Connection) -> Result<Connection, String> {
    let client = keyless_client(connection).map_err(|e| e.to_string())?;
    let project = client
        .verify_environment(&connection.environment_id, connection.project_id.as_deref())
        .await
        .map_err(|e| e.to_string())?;
    match &connection.project_id {
        Some(_) => Ok(connection.clone()),
        None => connection.bind_project(&project).map_err(|e| e.to_string()),
    }
}

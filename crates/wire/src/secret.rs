//! Values that must never reach logs or `Debug` output: reply-authority
//! tokens, API keys, approval reasons and opaque host JSON that may carry
//! any of them (style.md §6.5).
//!
//! [`ApiKey`] is the bearer credential; [`Secret`] wraps any other secret
//! string and [`Opaque`] wraps a JSON value. `Secret` and `Opaque`
//! serialize transparently (they cross the stdio protocol as plain values)
//! and print a redacted placeholder from `Debug`.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A secret string. `Debug` prints `Secret(<redacted>)`; read it with
/// [`Secret::expose`] only where the value is sent on.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// A JSON value from the host or the model whose content may be sensitive
/// (platform extras holding an API key, tool arguments holding an approval
/// reason, raw payloads). `Debug` prints only its shape.
#[derive(Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Opaque(pub Value);

impl fmt::Debug for Opaque {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Value::Object(map) => write!(f, "Opaque(object, {} keys)", map.len()),
            Value::Array(items) => write!(f, "Opaque(array, {} items)", items.len()),
            Value::String(_) => f.write_str("Opaque(string)"),
            Value::Null => f.write_str("Opaque(null)"),
            Value::Bool(_) => f.write_str("Opaque(bool)"),
            Value::Number(_) => f.write_str("Opaque(number)"),
        }
    }
}

/// A Canon API key (bearer token). `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> ApiKey {
        ApiKey(key.into())
    }

    /// The secret itself, for the `Authorization` header only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_the_value() {
        let secret = Secret::new("tok-0123456789abcdef0123456789abcdef");
        assert_eq!(format!("{secret:?}"), "Secret(<redacted>)");
        let opaque = Opaque(serde_json::json!({"api_key": "sk-live-secret"}));
        let shown = format!("{opaque:?}");
        assert!(!shown.contains("sk-live-secret"), "{shown}");
        assert_eq!(shown, "Opaque(object, 1 keys)");
    }

    #[test]
    fn serializes_transparently() {
        let secret = Secret::new("abc");
        assert_eq!(serde_json::to_string(&secret).unwrap(), r#""abc""#);
        let back: Secret = serde_json::from_str(r#""abc""#).unwrap();
        assert_eq!(back.expose(), "abc");
    }
}

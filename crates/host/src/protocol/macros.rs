//! The `messages!` macro: a closed enum of message bodies keyed by their wire `type`, with
//! its `TYPES`, `type_name`, `from_parts` and `to_body`. Declared first in `protocol/mod.rs`
//! so that the direction modules can use it.

/// Defines a closed enum of message bodies keyed by their wire `type`.
macro_rules! messages {
    (
        $(#[$meta:meta])*
        $name:ident {
            $( $(#[$vmeta:meta])* $wire:literal => $variant:ident($body:ty), )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        // Closed on purpose: the daemon must handle every kind, so a new
        // kind fails to compile where it is not handled yet.
        // One message is decoded, handled and dropped at a time, so the size
        // of the largest body costs nothing worth a box per variant.
        #[allow(clippy::large_enum_variant)]
        pub enum $name {
            $( $(#[$vmeta])* $variant($body), )*
        }

        impl $name {
            /// Every wire `type` of this enum.
            pub const TYPES: &'static [&'static str] = &[$($wire),*];

            /// The wire `type`.
            pub fn type_name(&self) -> &'static str {
                match self {
                    $( $name::$variant(_) => $wire, )*
                }
            }

            /// Decodes a body by its `type`.
            pub fn from_parts(
                kind: &str,
                body: ::serde_json::Value,
            ) -> Result<$name, $crate::protocol::ProtocolError> {
                match kind {
                    $( $wire => $crate::protocol::decode_body(kind, body).map($name::$variant), )*
                    other => Err($crate::protocol::ProtocolError::UnknownType {
                        kind: other.to_owned(),
                    }),
                }
            }

            /// The body as JSON.
            pub fn to_body(&self) -> ::serde_json::Value {
                match self {
                    $( $name::$variant(body) => $crate::protocol::encode_body(body), )*
                }
            }
        }
    };
}

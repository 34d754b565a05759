"""Constants the shim shares with the Rust daemon, `canon-hermes serve --stdio`.

Each value mirrors a Rust constant, named in its comment; the Rust test
crates/cli/tests/it/shim_constants.rs imports this module and fails when either side changes
alone. No imports: this module loads without Hermes.
"""

PROTOCOL = 1  # canon_host::protocol::PROTOCOL_VERSION
AUDITED_HERMES = "0.19.0"  # canon_host::protocol::AUDITED_HERMES
AUDITED_PYTHON = "3.11"  # canon_host::protocol::AUDITED_PYTHON
# The refusal of a host outside that pair, worded as canon_host::protocol::negotiate words it.
HOST_REFUSAL = "Canon requires hermes-agent %s on Python %s; found %s on %s"
MULTIPLEX_MESSAGE = (  # canon_host::protocol::MULTIPLEX_MESSAGE
    "Canon cannot start while Hermes gateway.multiplex_profiles is enabled. The Canon adapter "
    "still uses process-global profile, credential, and hook state, so multiplexing could cross "
    "profile boundaries. Set gateway.multiplex_profiles: false and run one Hermes gateway "
    "process per Canon profile."
)
PLATFORM = "canon"  # canon_host::protocol::PLATFORM: the turn context's platform inside Canon
# The turn context's fields, in the order of canon_host::protocol::TurnContext.
CTX_VARS = ("platform", "chat_id", "chat_name", "thread_id", "user_id", "user_name",
            "session_key", "session_id", "message_id", "profile")
# Where Hermes keeps the context fields whose variable is not HERMES_SESSION_<FIELD>
# (gateway/session_context.py in hermes-agent 0.19.0).
CTX_ENV = {"session_key": "HERMES_SESSION_KEY", "session_id": "HERMES_SESSION_ID"}
CONTROL_ID_PREFIX = "canon-control:"  # canon_host::turn::CONTROL_EVENT_PREFIX
STANDALONE_FAILED = "Canon standalone send failed"  # a standalone send's error without a reason
STANDALONE_ERROR_PREFIX = STANDALONE_FAILED + ": "  # canon_host::turn::STANDALONE_ERROR_PREFIX
# The adapter's limits when the manifest names none, in UTF-8 bytes:
MAX_MESSAGE_LENGTH = 3900  # canon_chunking::limits::HOST_MAX_MESSAGE_LENGTH
STREAMING_OVERFLOW_LIMIT = 60800  # canon_chunking::limits::STREAMED_ANSWER_MAX_BYTES

# How long the shim waits for the answer to each request it sends, in seconds:
# canon_host::protocol::SHIM_TIMEOUTS (hermes-host.md §19.6). `turn.accepted` is sent without
# waiting; `tool.call` waits as long as the tool's manifest entry says (`timeout_s`).
TIMEOUTS = {
    "hello": 10, "probe": 5, "adapter.connect": 28, "adapter.disconnect": 10,
    "adapter.send": 120, "adapter.edit": 120, "adapter.send_media": 300,
    "adapter.send_clarify": 14, "adapter.send_exec_approval": 14, "adapter.chat_info": 10,
    "turn.start": 30, "turn.complete": 600, "standalone.send": 120, "resync": 30, "shutdown": 5,
    "api.inbound_media": 30, "api.call": 1860,
}
EXIT_WAIT = 7  # seconds from stdin EOF to SIGTERM; more than canon_adapter::config::EXIT_GRACE

# Error codes the shim sets itself: values of canon_host::protocol::ErrorCode.
BACKPRESSURE, TIMEOUT, DAEMON_EXITED = "backpressure", "timeout", "daemon_exited"
NOT_CONNECTED, UNKNOWN_TYPE, INTERNAL = "not_connected", "unknown_type", "internal"

# The domain-plugin API's errors (runtime-control.md §7.2, §7.6), exact: canon_host::api.
SESSION_CONTEXT_UNAVAILABLE = "Hermes session context is unavailable"  # api::SESSION_CONTEXT_UNAVAILABLE
NO_CANON_CONVERSATION = "This operation requires an active Canon conversation"  # api::NO_CANON_CONVERSATION
NO_TRUSTED_HUMAN = "This operation requires a trusted triggering Canon human"  # api::NO_TRUSTED_HUMAN
NO_MESSAGE_PROVENANCE = "This operation requires a Canon turn with trusted message provenance"  # api::NO_MESSAGE_PROVENANCE

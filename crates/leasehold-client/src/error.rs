//! What a call can fail with, and the one line that describes it.

use leasehold_proto::{INDETERMINATE_KEY, SESSION_KEY};
use tonic::{Code, Status};

use crate::failure::causes;

/// Why a call got no answer. Refusals the store decides (the lease is held, the token is stale)
/// are not errors: they are answers, in [`crate::answers`].
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// An endpoint that is not `host:port` or a URI; nothing was sent.
    #[error("invalid endpoint {endpoint:?}: {reason}")]
    Endpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The last attempt's status, with the mark when the write may have been applied.
    #[error("{}", describe(.0))]
    Status(Status),
    /// A node answered with a message this client cannot read (a field it needs is missing):
    /// a node of another version, most likely. A write answered so was decided by the store.
    #[error("malformed answer from the node: {0}")]
    Malformed(&'static str),
}

impl ClientError {
    /// The gRPC code: `InvalidArgument` for bad input, `Unavailable` when no node could
    /// answer, `Aborted` for a session the store no longer knows, and so on.
    pub fn code(&self) -> Code {
        match self {
            ClientError::Endpoint { .. } => Code::InvalidArgument,
            ClientError::Status(status) => status.code(),
            ClientError::Malformed(_) => Code::Internal,
        }
    }

    /// The call was a write that may or may not have been applied: some attempt of it reached
    /// the store, or may have, and no answer came back. Never true of a read.
    pub fn is_indeterminate(&self) -> bool {
        match self {
            ClientError::Endpoint { .. } | ClientError::Malformed(_) => false,
            ClientError::Status(status) => status.metadata().get(INDETERMINATE_KEY).is_some(),
        }
    }

    /// The store refused the request because its session is not open (expired, say).
    pub(crate) fn is_unknown_session(&self) -> bool {
        match self {
            ClientError::Endpoint { .. } | ClientError::Malformed(_) => false,
            ClientError::Status(status) => status.metadata().get(SESSION_KEY).is_some(),
        }
    }
}

/// One line: the code, then whether the write may have been applied, then the message.
pub(crate) fn describe(status: &Status) -> String {
    let kind = match status.code() {
        Code::InvalidArgument => "invalid argument".to_owned(),
        Code::Unavailable => "unavailable".to_owned(),
        Code::FailedPrecondition => "failed precondition".to_owned(),
        Code::DeadlineExceeded => "deadline exceeded".to_owned(),
        Code::Internal => "internal error".to_owned(),
        Code::PermissionDenied => "permission denied".to_owned(),
        other => format!("{other:?}"),
    };
    let indeterminate = if status.metadata().get(INDETERMINATE_KEY).is_some() {
        " (indeterminate)"
    } else {
        ""
    };
    format!("{kind}{indeterminate}: {}", message_with_cause(status))
}

/// What failed at the bottom of the transport under `status`, if it did.
pub(crate) fn deepest_cause(status: &Status) -> Option<String> {
    causes(status).last().map(|error| error.to_string())
}

/// The status's message and, when the transport failed, what failed underneath (a refused
/// connection, a TLS handshake alert): tonic's own message then says only "transport error".
pub(crate) fn message_with_cause(status: &Status) -> String {
    let mut text = status.message().to_owned();
    if let Some(cause) = deepest_cause(status).filter(|cause| !text.contains(cause.as_str())) {
        text = format!("{text}: {cause}");
    }
    if status.code() == Code::Internal && text.contains("h2 protocol error") {
        text += " (is the node serving TLS? then pass --tls-ca)";
    }
    text
}

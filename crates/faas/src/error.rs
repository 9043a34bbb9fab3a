//! Errors of the serverless layer.

use crate::pb;

/// What can go wrong with a registration or a call.
#[derive(Debug, thiserror::Error)]
pub enum FaasError {
    /// An error answered by the scheduler (or produced by a host for a call).
    #[error("{}: {message}", code_name(*code))]
    Remote {
        /// The error code.
        code: pb::ErrorCode,
        /// A message for people.
        message: String,
        /// For [`pb::ErrorCode::FunctionRaised`]: the Python traceback text.
        traceback: String,
        /// For [`pb::ErrorCode::FunctionRaised`]: the function that raised.
        function: String,
        /// For [`pb::ErrorCode::FunctionRaised`]: the exception, pickled (may be empty).
        exception: bytes::Bytes,
    },
    /// The connection to the scheduler could not be opened or broke.
    #[error("connection to {addr}: {reason}")]
    Connection {
        /// The scheduler's address.
        addr: String,
        /// What happened.
        reason: String,
    },
    /// The peer sent bytes that are not a valid message.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// No answer in time.
    #[error("timed out")]
    Timeout,
    /// The store failed (registry reads, scheduler discovery).
    #[error("store: {0}")]
    Store(#[from] client::ClientError),
}

/// The name of a code as users read it.
pub fn code_name(code: pb::ErrorCode) -> &'static str {
    match code {
        pb::ErrorCode::ErrorUnspecified => "error",
        pb::ErrorCode::NotFound => "not found",
        pb::ErrorCode::BadRequest => "bad request",
        pb::ErrorCode::FunctionRaised => "function raised",
        pb::ErrorCode::NoExecutors => "no executors",
        pb::ErrorCode::Unavailable => "unavailable",
        pb::ErrorCode::Timeout => "timeout",
        pb::ErrorCode::NotImplemented => "not implemented",
    }
}

/// An error code's identifier (`not_found`, `function_raised`, …): the label of the
/// metrics and the Python SDK's `FaasError.code`.
pub fn code_id(code: pb::ErrorCode) -> &'static str {
    match code {
        pb::ErrorCode::ErrorUnspecified => "error",
        pb::ErrorCode::NotFound => "not_found",
        pb::ErrorCode::BadRequest => "bad_request",
        pb::ErrorCode::FunctionRaised => "function_raised",
        pb::ErrorCode::NoExecutors => "no_executors",
        pb::ErrorCode::Unavailable => "unavailable",
        pb::ErrorCode::Timeout => "timeout",
        pb::ErrorCode::NotImplemented => "not_implemented",
    }
}

impl FaasError {
    /// A remote error with a code and a message.
    pub fn remote(code: pb::ErrorCode, message: impl Into<String>) -> FaasError {
        FaasError::Remote {
            code,
            message: message.into(),
            traceback: String::new(),
            function: String::new(),
            exception: bytes::Bytes::new(),
        }
    }

    /// From the wire.
    pub fn from_pb(e: pb::Error) -> FaasError {
        FaasError::Remote {
            code: e.code(),
            message: e.message,
            traceback: e.traceback,
            function: e.function,
            exception: e.exception,
        }
    }

    /// To the wire (errors of this side become UNAVAILABLE or TIMEOUT).
    pub fn to_pb(&self) -> pb::Error {
        match self {
            FaasError::Remote {
                code,
                message,
                traceback,
                function,
                exception,
            } => pb::Error {
                code: *code as i32,
                message: message.clone(),
                traceback: traceback.clone(),
                function: function.clone(),
                exception: exception.clone(),
            },
            FaasError::Timeout => pb_error(pb::ErrorCode::Timeout, self.to_string()),
            other => pb_error(pb::ErrorCode::Unavailable, other.to_string()),
        }
    }

    /// The error code, as the wire would carry it.
    pub fn code(&self) -> pb::ErrorCode {
        self.to_pb().code()
    }
}

/// A wire error with a code and a message.
pub fn pb_error(code: pb::ErrorCode, message: impl Into<String>) -> pb::Error {
    pb::Error {
        code: code as i32,
        message: message.into(),
        ..Default::default()
    }
}

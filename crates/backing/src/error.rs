//! [`BackingError`] and the classification of what the driver and the pool report.
//!
//! The caller (the node's write-back workers) needs one decision from an error: is the
//! store *unavailable* (keep buffering, fail over, probe with `ping` until it is back) or
//! did it *answer* with a refusal (this batch is wrong or the store refuses it; retrying
//! the same batch will not help)? The classification, by SQLSTATE class where the server
//! answered:
//!
//! | what | variant |
//! |---|---|
//! | no server answer: connection refused / reset / closed, I/O errors, protocol errors | `Unavailable` |
//! | `08xxx` connection exception | `Unavailable` |
//! | `57P01` admin shutdown, `57P02` crash shutdown, `57P03` cannot connect now | `Unavailable` |
//! | `57014` query canceled (our `statement_timeout`), `55P03` lock not available | `Unavailable` |
//! | `53300` too many connections (a connect-time refusal that passes) | `Unavailable` |
//! | `40001` serialization failure, `40P01` deadlock (after the internal retries) | `Unavailable` |
//! | timeouts (connect, pool wait, the call's own bound), pool closed | `Unavailable` |
//! | `28xxx` authentication, `3D000` no such database, `3F000` no such schema | `Config` |
//! | class `42` (the table does not have the expected shape), except `42501` | `Config` |
//! | everything else the server answered: `42501` permission denied, `23xxx` constraint, `53xxx` disk full / out of memory, `54xxx` limits (a key too long for the index), `22xxx` data, `25xxx`… | `Rejected` |
//!
//! A stored state that does not decode is [`BackingError::Corrupt`]; it comes from this
//! crate's decoding, never from the driver.

use deadpool_postgres::{PoolError, TimeoutType};

/// Why a call to the backing store failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackingError {
    /// The store could not be reached or did not answer in time: connection refused or
    /// reset, SQLSTATE `08xxx`, `57P01`/`57P02`/`57P03` (shutdown, crash, cannot connect
    /// now), timeouts, pool exhausted while waiting. Nothing can be assumed about a batch
    /// that failed this way, except that applying it again is harmless.
    #[error("backing store unavailable: {0}")]
    Unavailable(String),
    /// The store answered with an error for this call (permission denied, a constraint,
    /// disk full `53xxx`, a key too long for the index, a batch over this crate's bounds):
    /// the batch was not applied.
    #[error("backing store rejected the batch: {0}")]
    Rejected(String),
    /// A stored state that does not decode (written by something other than latticekv, or
    /// damaged). A batch touching the key is not applied.
    #[error("stored state of key {key:?} does not decode: {reason}")]
    Corrupt {
        /// The key, lossily as text.
        key: String,
        /// What failed.
        reason: String,
    },
    /// The configuration is wrong: bad URL, bad table name, a table of the wrong shape,
    /// authentication refused, a database or schema that does not exist.
    #[error("backing store configuration: {0}")]
    Config(String),
}

impl BackingError {
    /// True for [`BackingError::Unavailable`]: the store may come back, retry later.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, BackingError::Unavailable(_))
    }

    /// A corrupt state of `key`.
    pub(crate) fn corrupt(key: &[u8], reason: impl Into<String>) -> Self {
        BackingError::Corrupt {
            key: String::from_utf8_lossy(key).into_owned(),
            reason: reason.into(),
        }
    }
}

/// True for the errors the transaction is retried on at once: serialization failure and
/// deadlock (the server rolled the transaction back; running it again may well succeed).
pub(crate) fn is_conflict(e: &tokio_postgres::Error) -> bool {
    matches!(sqlstate(e), Some("40001" | "40P01"))
}

/// True if the server answered the request with an error (as opposed to the connection
/// failing): the connection is still usable.
pub(crate) fn server_answered(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some()
}

fn sqlstate(e: &tokio_postgres::Error) -> Option<&str> {
    e.as_db_error().map(|db| db.code().code())
}

/// Classifies an error of the driver (see the module docs for the table).
pub(crate) fn classify(e: &tokio_postgres::Error) -> BackingError {
    let Some(db) = e.as_db_error() else {
        // The driver reports connection failures, timeouts, I/O and protocol errors
        // without a server answer: the store is not there (or not sane) right now.
        return BackingError::Unavailable(e.to_string());
    };
    by_sqlstate(db.code().code(), db.message())
}

/// Classifies a server error by its SQLSTATE `code` (see the module docs for the table).
fn by_sqlstate(code: &str, message: &str) -> BackingError {
    let text = format!("{message} ({code})");
    let class = code.get(..2).unwrap_or("");
    match (class, code) {
        ("08", _) | (_, "57P01" | "57P02" | "57P03" | "57014" | "55P03" | "53300") => {
            BackingError::Unavailable(text)
        }
        (_, "40001" | "40P01") => BackingError::Unavailable(text),
        ("28" | "3D" | "3F", _) => BackingError::Config(text),
        ("42", c) if c != "42501" => BackingError::Config(text),
        _ => BackingError::Rejected(text),
    }
}

/// Classifies an error of the pool: a timeout or a closed pool is `Unavailable`; the
/// driver's own errors are classified by [`classify`].
pub(crate) fn classify_pool(e: &PoolError) -> BackingError {
    match e {
        PoolError::Backend(e) => classify(e),
        PoolError::Timeout(TimeoutType::Wait) => {
            BackingError::Unavailable("no free connection in the pool in time".into())
        }
        PoolError::Timeout(TimeoutType::Create) => {
            BackingError::Unavailable("connecting to the store timed out".into())
        }
        PoolError::Timeout(TimeoutType::Recycle) => {
            BackingError::Unavailable("checking a pooled connection timed out".into())
        }
        PoolError::Closed => BackingError::Unavailable("the connection pool is closed".into()),
        PoolError::NoRuntimeSpecified | PoolError::PostCreateHook(_) => {
            BackingError::Config(e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unavailable_is_unavailable() {
        assert!(BackingError::Unavailable("x".into()).is_unavailable());
        assert!(!BackingError::Rejected("x".into()).is_unavailable());
        assert!(!BackingError::Config("x".into()).is_unavailable());
        assert!(!BackingError::corrupt(b"k\xff", "bad").is_unavailable());
        assert_eq!(
            BackingError::corrupt(b"k\xff", "bad"),
            BackingError::Corrupt {
                key: "k\u{fffd}".into(),
                reason: "bad".into()
            }
        );
    }

    #[test]
    fn sqlstates_are_classified() {
        let unavailable = [
            "08000", "08006", "08001", "57P01", "57P02", "57P03", "57014", "55P03", "53300",
            "40001", "40P01",
        ];
        for code in unavailable {
            assert!(by_sqlstate(code, "m").is_unavailable(), "{code}");
        }
        for code in [
            "28000", "28P01", "3D000", "3F000", "42P01", "42703", "42804", "42P10",
        ] {
            assert!(
                matches!(by_sqlstate(code, "m"), BackingError::Config(_)),
                "{code}"
            );
        }
        for code in [
            "42501", "23505", "53100", "53200", "54000", "22021", "25P02", "XX000", "",
        ] {
            assert!(
                matches!(by_sqlstate(code, "m"), BackingError::Rejected(_)),
                "{code}"
            );
        }
        assert_eq!(
            by_sqlstate("53100", "disk full"),
            BackingError::Rejected("disk full (53100)".into())
        );
    }

    #[test]
    fn pool_timeouts_are_unavailable() {
        for t in [TimeoutType::Wait, TimeoutType::Create, TimeoutType::Recycle] {
            assert!(classify_pool(&PoolError::Timeout(t)).is_unavailable());
        }
        assert!(classify_pool(&PoolError::Closed).is_unavailable());
    }
}

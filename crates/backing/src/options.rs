//! [`BackingOptions`]: where the store is, which table, and the bounds on every call.
//!
//! The table name is spliced into SQL text (identifiers cannot be bind parameters), so it is
//! validated here, once, and only ever used quoted: `schema.table` becomes
//! `"schema"."table"`.

use std::str::FromStr;
use std::time::Duration;

use crate::BackingError;

/// The table used when none is named.
pub const DEFAULT_TABLE: &str = "latticekv_kv";
/// Connections kept open at most, by default.
pub const DEFAULT_POOL_SIZE: usize = 8;
/// Connections kept open at most, whatever the options say (PostgreSQL's own default
/// `max_connections` is 100; a pool per node larger than this is a misconfiguration).
pub const MAX_POOL_SIZE: usize = 256;
/// How long getting a connection may take, by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the statements of one call may take, by default.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);
/// PostgreSQL's identifier limit (`NAMEDATALEN - 1`): longer names are silently truncated
/// by the server, so they are refused here instead.
const MAX_IDENTIFIER: usize = 63;

/// How to reach the backing store, and the bounds on every call.
///
/// Every call of [`Postgres`](crate::Postgres) returns within
/// `connect_timeout + statement_timeout`, retries included: getting a connection is bounded
/// by `connect_timeout`, and the statements by `statement_timeout` (set on the server as
/// the session's `statement_timeout`, and enforced on the client too, so a server that
/// stopped answering cannot hang a call).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackingOptions {
    /// A libpq-style connection string or URL: `postgresql://user[:password]@host:port/db`.
    /// Its `connect_timeout` and `options` parameters are overridden or extended by the
    /// fields below.
    pub url: String,
    /// The table holding the rows: `name` or `schema.name`, each part lowercase ASCII
    /// letters, digits and `_`, not starting with a digit, at most 63 bytes. Default
    /// [`DEFAULT_TABLE`]. The schema must exist; the table is created if missing.
    pub table: String,
    /// Connections kept open at most (1 ..= [`MAX_POOL_SIZE`]). A call waiting for a free
    /// connection waits at most `connect_timeout`. Default [`DEFAULT_POOL_SIZE`].
    pub pool_size: usize,
    /// How long getting a connection may take (TCP connect, startup and authentication, or
    /// waiting for a free one in the pool). Default [`DEFAULT_CONNECT_TIMEOUT`].
    pub connect_timeout: Duration,
    /// How long the statements of one call may take, all attempts together. At least 1 ms
    /// (PostgreSQL counts in milliseconds, and 0 would disable it). Default
    /// [`DEFAULT_STATEMENT_TIMEOUT`].
    pub statement_timeout: Duration,
}

impl BackingOptions {
    /// The options for the store at `url`, with every other field at its default.
    pub fn new(url: impl Into<String>) -> Self {
        BackingOptions {
            url: url.into(),
            table: DEFAULT_TABLE.to_string(),
            pool_size: DEFAULT_POOL_SIZE,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
        }
    }

    /// Checks every field without contacting the store.
    ///
    /// # Errors
    /// [`BackingError::Config`] naming the first bad field: a URL that does not parse or
    /// names no host, a bad table name, a pool size out of range, a zero timeout.
    pub fn validate(&self) -> Result<(), BackingError> {
        self.pg_config()?;
        quoted_table(&self.table)?;
        if self.pool_size == 0 || self.pool_size > MAX_POOL_SIZE {
            return Err(BackingError::Config(format!(
                "pool_size {} is out of range 1..={MAX_POOL_SIZE}",
                self.pool_size
            )));
        }
        if self.connect_timeout.is_zero() {
            return Err(BackingError::Config("connect_timeout is zero".into()));
        }
        if self.statement_timeout < Duration::from_millis(1) {
            return Err(BackingError::Config(
                "statement_timeout is below 1 ms (0 would disable it)".into(),
            ));
        }
        Ok(())
    }

    /// The bound on one whole call: `connect_timeout + statement_timeout`.
    pub(crate) fn call_timeout(&self) -> Duration {
        self.connect_timeout.saturating_add(self.statement_timeout)
    }

    /// The driver's configuration: the URL, with our connect timeout, our statement timeout
    /// appended to the session options, and an application name unless the URL has one.
    ///
    /// The URL itself never appears in an error message: it may hold a password.
    pub(crate) fn pg_config(&self) -> Result<tokio_postgres::Config, BackingError> {
        let mut config = tokio_postgres::Config::from_str(&self.url)
            .map_err(|e| BackingError::Config(format!("the store URL does not parse: {e}")))?;
        if config.get_hosts().is_empty() {
            return Err(BackingError::Config("the store URL names no host".into()));
        }
        config.connect_timeout(self.connect_timeout);
        let millis = self.statement_timeout.as_millis().max(1);
        let options = match config.get_options() {
            Some(existing) if !existing.trim().is_empty() => {
                format!("{existing} -c statement_timeout={millis}")
            }
            _ => format!("-c statement_timeout={millis}"),
        };
        config.options(&options);
        if config.get_application_name().is_none() {
            config.application_name("latticekv");
        }
        Ok(config)
    }
}

/// The table name as SQL text, each part double-quoted: `"latticekv_kv"`,
/// `"schema"."table"`.
///
/// # Errors
/// [`BackingError::Config`] unless the name is one or two dot-separated parts of lowercase
/// ASCII letters, digits and `_`, not starting with a digit, each at most 63 bytes. The
/// rule is strict on purpose: the name is spliced into SQL, and lowercase-only names mean
/// the same thing quoted and unquoted, so SQL users can write them without quotes.
pub(crate) fn quoted_table(name: &str) -> Result<String, BackingError> {
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() > 2 {
        return Err(BackingError::Config(format!(
            "table name {name:?} has more than one '.' (expected table or schema.table)"
        )));
    }
    for part in &parts {
        let valid_start = part
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_');
        let valid_rest = part
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid_start || !valid_rest || part.len() > MAX_IDENTIFIER {
            return Err(BackingError::Config(format!(
                "table name {name:?}: each part must be 1 to {MAX_IDENTIFIER} lowercase ASCII \
                 letters, digits or '_', not starting with a digit"
            )));
        }
    }
    Ok(parts
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_error(r: Result<impl std::fmt::Debug, BackingError>) -> String {
        match r {
            Err(BackingError::Config(m)) => m,
            other => panic!("expected a Config error, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_valid() {
        let o = BackingOptions::new("postgresql://postgres@127.0.0.1:5432/postgres");
        assert_eq!(o.table, "latticekv_kv");
        assert_eq!(o.pool_size, 8);
        assert_eq!(o.connect_timeout, Duration::from_secs(2));
        assert_eq!(o.statement_timeout, Duration::from_secs(5));
        o.validate().unwrap();
        assert_eq!(o.call_timeout(), Duration::from_secs(7));
    }

    #[test]
    fn table_names_are_quoted_or_refused() {
        assert_eq!(quoted_table("latticekv_kv").unwrap(), "\"latticekv_kv\"");
        assert_eq!(quoted_table("app.kv_2").unwrap(), "\"app\".\"kv_2\"");
        assert_eq!(quoted_table("_x").unwrap(), "\"_x\"");
        for bad in [
            "",
            ".",
            "a.",
            ".a",
            "a.b.c",
            "1kv",
            "Kv",
            "kv-1",
            "kv\"; drop table x; --",
            "kv x",
            "kv\0",
            "é",
            &"k".repeat(64),
        ] {
            config_error(quoted_table(bad));
        }
        assert!(quoted_table(&"k".repeat(63)).is_ok());
    }

    #[test]
    fn bad_fields_are_config_errors() {
        let good = BackingOptions::new("postgresql://postgres@127.0.0.1:5432/postgres");
        let mut o = good.clone();
        o.url = "postgresql://[::1".into();
        config_error(o.validate());
        o.url = "not a url at all = = =".into();
        config_error(o.validate());
        o.url = "dbname=postgres".into();
        assert!(config_error(o.validate()).contains("no host"));
        let mut o = good.clone();
        o.table = "bad name".into();
        config_error(o.validate());
        let mut o = good.clone();
        o.pool_size = 0;
        config_error(o.validate());
        o.pool_size = MAX_POOL_SIZE + 1;
        config_error(o.validate());
        let mut o = good.clone();
        o.connect_timeout = Duration::ZERO;
        config_error(o.validate());
        let mut o = good;
        o.statement_timeout = Duration::from_micros(10);
        config_error(o.validate());
    }

    #[test]
    fn password_never_in_errors() {
        let o = BackingOptions::new("postgresql://u:s3cret@[::1");
        assert!(!config_error(o.validate()).contains("s3cret"));
    }

    #[test]
    fn statement_timeout_is_appended_to_session_options() {
        let mut o = BackingOptions::new(
            "postgresql://postgres@127.0.0.1:1/postgres?options=-c%20work_mem%3D8MB",
        );
        o.statement_timeout = Duration::from_millis(1500);
        let c = o.pg_config().unwrap();
        assert_eq!(
            c.get_options(),
            Some("-c work_mem=8MB -c statement_timeout=1500")
        );
        assert_eq!(c.get_connect_timeout(), Some(&Duration::from_secs(2)));
        assert_eq!(c.get_application_name(), Some("latticekv"));
    }
}

//! Options of a write-ahead log, with documented defaults.
//!
//! [`WalOptions`] deserializes from a TOML table with the same field names (unknown keys are
//! an error); [`FsyncPolicy`] is written as a string so it works the same in a file, an
//! environment variable and a command-line flag.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::wal::error::WalError;
use crate::wal::format::{MAX_RECORD_LEN, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN};

/// Default interval of [`FsyncPolicy::Periodic`] written as plain `"periodic"`: 100 ms.
pub const DEFAULT_PERIODIC_INTERVAL: Duration = Duration::from_millis(100);

/// When the writer calls `fdatasync` on the log, and so what "durable" means for an
/// appended record ([`Wal::wait_durable`](crate::wal::Wal::wait_durable)).
///
/// | policy | fsync | a record is *durable* once | lost on power failure | lost on `kill -9` |
/// |---|---|---|---|---|
/// | `Always` | once per batch (group commit) | its batch is fsynced | nothing durable | nothing durable |
/// | `Periodic { interval }` | at most every `interval` | it is written to the OS | up to `interval` plus one batch of durable records | nothing durable |
/// | `Never` | only when a segment is closed, on [`Wal::sync`](crate::wal::Wal::sync) and on close | it is written to the OS | whatever the OS had not written back (Linux: up to ~30 s) | nothing durable |
///
/// [`Wal::wait_synced`](crate::wal::Wal::wait_synced) always waits for an fsync, whatever the
/// policy.
///
/// String form (config files, environment, flags): `always`, `never`, `periodic` (every
/// 100 ms), `periodic:250ms`, `periodic:2s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum FsyncPolicy {
    /// Fsync every batch before its records count as durable.
    Always,
    /// Fsync at most once per `interval` (only when something was written since).
    Periodic {
        /// Longest time between a write and its fsync.
        interval: Duration,
    },
    /// Never fsync on the write path; the OS writes back when it chooses.
    Never,
}

impl Default for FsyncPolicy {
    /// `Always`: see the crate docs ("Defaults") for why.
    fn default() -> Self {
        FsyncPolicy::Always
    }
}

impl fmt::Display for FsyncPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FsyncPolicy::Always => f.write_str("always"),
            FsyncPolicy::Never => f.write_str("never"),
            FsyncPolicy::Periodic { interval } => {
                let ms = interval.as_millis();
                if ms > 0 && ms % 1000 == 0 {
                    write!(f, "periodic:{}s", ms / 1000)
                } else {
                    write!(f, "periodic:{ms}ms")
                }
            }
        }
    }
}

impl FromStr for FsyncPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let bad = || {
            format!(
                "invalid fsync policy {s:?}: expected always, never, periodic, \
                 periodic:<N>ms or periodic:<N>s"
            )
        };
        match s {
            "always" => return Ok(FsyncPolicy::Always),
            "never" => return Ok(FsyncPolicy::Never),
            "periodic" => {
                return Ok(FsyncPolicy::Periodic {
                    interval: DEFAULT_PERIODIC_INTERVAL,
                })
            }
            _ => {}
        }
        let spec = s.strip_prefix("periodic:").ok_or_else(bad)?;
        let interval = if let Some(ms) = spec.strip_suffix("ms") {
            Duration::from_millis(ms.trim().parse().map_err(|_| bad())?)
        } else if let Some(secs) = spec.strip_suffix('s') {
            Duration::from_secs(secs.trim().parse().map_err(|_| bad())?)
        } else {
            return Err(bad());
        };
        if interval.is_zero() {
            return Err(format!(
                "invalid fsync policy {s:?}: the interval must be positive (use always)"
            ));
        }
        Ok(FsyncPolicy::Periodic { interval })
    }
}

impl TryFrom<String> for FsyncPolicy {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<FsyncPolicy> for String {
    fn from(p: FsyncPolicy) -> String {
        p.to_string()
    }
}

/// Options of one write-ahead log (one per worker). Every field has a default; see the
/// crate docs ("Defaults") for the reasons.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WalOptions {
    /// When records are fsynced and what "durable" means. Default: `always`.
    pub fsync: FsyncPolicy,
    /// Size at which a segment is closed and a new one started, in bytes (a record is never
    /// split; a segment holds at least one record). Default: 64 MiB.
    pub segment_bytes: u64,
    /// Reserve each new segment's full size on disk when it is created (`fallocate`): a full
    /// disk is found when a segment is opened rather than in the middle of a batch, and
    /// `fdatasync` need not update the file size. Ignored where the file system cannot.
    /// Default: true.
    pub preallocate: bool,
    /// Largest payload of one record, in bytes. Default: 32 MiB (the node's largest value
    /// plus its key and encoding).
    pub max_record_bytes: usize,
    /// Bound of the append queue, in bytes of records (payload plus 16-byte header) not yet
    /// taken by the writer; a full queue makes [`Wal::append`](crate::wal::Wal::append) wait and
    /// [`Wal::try_append`](crate::wal::Wal::try_append) fail. Must be at least
    /// `max_record_bytes + 16`. Default: 64 MiB.
    pub queue_bytes: usize,
    /// After a disk failure, how often the writer retries opening a fresh segment, in ms.
    /// Appends are refused in between. Default: 1,000.
    pub retry_interval_ms: u64,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            fsync: FsyncPolicy::default(),
            segment_bytes: 64 << 20,
            preallocate: true,
            max_record_bytes: 32 << 20,
            queue_bytes: 64 << 20,
            retry_interval_ms: 1_000,
        }
    }
}

impl WalOptions {
    /// Checks that the options are consistent.
    pub fn validate(&self) -> Result<(), WalError> {
        let err = |m: String| Err(WalError::Config(m));
        let min_segment = (SEGMENT_HEADER_LEN + RECORD_HEADER_LEN) as u64;
        if self.segment_bytes < min_segment || self.segment_bytes > 1 << 40 {
            return err(format!(
                "segment_bytes = {} must be between {min_segment} and 2^40",
                self.segment_bytes
            ));
        }
        if self.max_record_bytes == 0 || self.max_record_bytes > MAX_RECORD_LEN as usize {
            return err(format!(
                "max_record_bytes = {} must be between 1 and {MAX_RECORD_LEN}",
                self.max_record_bytes
            ));
        }
        if self.queue_bytes < self.max_record_bytes + RECORD_HEADER_LEN {
            return err(format!(
                "queue_bytes = {} must be at least max_record_bytes + {RECORD_HEADER_LEN} = {}",
                self.queue_bytes,
                self.max_record_bytes + RECORD_HEADER_LEN
            ));
        }
        if self.retry_interval_ms == 0 {
            return err("retry_interval_ms must be positive".into());
        }
        if let FsyncPolicy::Periodic { interval } = self.fsync {
            if interval.is_zero() {
                return err("the periodic fsync interval must be positive".into());
            }
        }
        Ok(())
    }

    /// The retry interval as a duration.
    pub fn retry_interval(&self) -> Duration {
        Duration::from_millis(self.retry_interval_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_strings_round_trip() {
        for (text, policy) in [
            ("always", FsyncPolicy::Always),
            ("never", FsyncPolicy::Never),
            (
                "periodic",
                FsyncPolicy::Periodic {
                    interval: DEFAULT_PERIODIC_INTERVAL,
                },
            ),
            (
                "periodic:250ms",
                FsyncPolicy::Periodic {
                    interval: Duration::from_millis(250),
                },
            ),
            (
                "periodic:2s",
                FsyncPolicy::Periodic {
                    interval: Duration::from_secs(2),
                },
            ),
        ] {
            let parsed: FsyncPolicy = text.parse().unwrap();
            assert_eq!(parsed, policy, "{text}");
            assert_eq!(parsed.to_string().parse::<FsyncPolicy>().unwrap(), policy);
        }
        for bad in [
            "",
            "sometimes",
            "periodic:",
            "periodic:0ms",
            "periodic:5",
            "periodic:xs",
        ] {
            assert!(bad.parse::<FsyncPolicy>().is_err(), "{bad}");
        }
    }

    #[test]
    fn options_from_toml() {
        let o: WalOptions =
            toml::from_str("fsync = \"periodic:50ms\"\nsegment_bytes = 1048576\n").unwrap();
        assert_eq!(
            o.fsync,
            FsyncPolicy::Periodic {
                interval: Duration::from_millis(50)
            }
        );
        assert_eq!(o.segment_bytes, 1 << 20);
        assert_eq!(o.queue_bytes, WalOptions::default().queue_bytes);
        o.validate().unwrap();
        assert!(toml::from_str::<WalOptions>("fsync = \"sometimes\"").is_err());
        assert!(toml::from_str::<WalOptions>("segment_size = 1").is_err());
        let text = toml::to_string(&WalOptions::default()).unwrap();
        assert!(text.contains("fsync = \"always\""), "{text}");
        assert_eq!(
            toml::from_str::<WalOptions>(&text).unwrap(),
            WalOptions::default()
        );
    }

    #[test]
    fn validation() {
        WalOptions::default().validate().unwrap();
        let bad = [
            WalOptions {
                segment_bytes: 10,
                ..Default::default()
            },
            WalOptions {
                max_record_bytes: 0,
                ..Default::default()
            },
            WalOptions {
                queue_bytes: 1024,
                ..Default::default()
            },
            WalOptions {
                retry_interval_ms: 0,
                ..Default::default()
            },
        ];
        for o in bad {
            assert!(matches!(o.validate(), Err(WalError::Config(_))), "{o:?}");
        }
    }
}

//! Acknowledgement levels: when a write is answered.
//!
//! A write is answered after the merge at the replica that ran it ([`Ack::MERGED`], the
//! default), or once it is on disk there (`durable`), and either way once `replicas`
//! replicas of its key (counting the one that ran it) hold it. The loss window of each
//! level is in `docs/durability.md`; the one place that carries a level out is the replica
//! core's write path (`core::acks`).

use serde::Deserialize;

/// When writes that ask for no level are acknowledged (the node's `ack` setting).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AckLevel {
    /// After the merge at the replica that ran it (the default; lost if that node dies
    /// before its log record reaches the disk, see `docs/durability.md`).
    #[default]
    Merged,
    /// After the write is on disk at that replica (WAL record fsynced under the WAL's
    /// policy, or the LSM journal synced).
    Durable,
}

impl std::str::FromStr for AckLevel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "merged" => Ok(AckLevel::Merged),
            "durable" => Ok(AckLevel::Durable),
            other => Err(format!(
                "unknown acknowledgement level {other:?} (merged or durable)"
            )),
        }
    }
}

/// The acknowledgement a write asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ack {
    /// Replicas (counting the one that ran it) that must hold the write: 0 or 1 is the
    /// replica that ran it alone.
    pub replicas: usize,
    /// Each of them must have it on disk.
    pub durable: bool,
    /// Send no keyspace notifications for the ops (the parts of a composite command, such
    /// as `RENAME`, that sends its own events).
    pub quiet: bool,
}

impl Ack {
    /// The default: after the merge at the replica that ran the write.
    pub const MERGED: Ack = Ack {
        replicas: 1,
        durable: false,
        quiet: false,
    };

    /// True for the default level (no fan-out, no wait for the disk).
    pub fn is_default(&self) -> bool {
        self.replicas <= 1 && !self.durable
    }

    /// The stronger of two levels: the node's default applies to writes that ask for less.
    pub fn at_least(self, other: Ack) -> Ack {
        Ack {
            replicas: self.replicas.max(other.replicas),
            durable: self.durable || other.durable,
            quiet: self.quiet || other.quiet,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_combine() {
        assert_eq!("durable".parse::<AckLevel>(), Ok(AckLevel::Durable));
        assert_eq!("merged".parse::<AckLevel>(), Ok(AckLevel::Merged));
        assert!("fast".parse::<AckLevel>().is_err());
        let d = Ack {
            replicas: 0,
            durable: true,
            quiet: false,
        };
        assert!(Ack::MERGED.is_default() && Ack::default().is_default() && !d.is_default());
        assert_eq!(
            Ack::MERGED.at_least(d),
            Ack {
                replicas: 1,
                durable: true,
                quiet: false,
            }
        );
    }
}

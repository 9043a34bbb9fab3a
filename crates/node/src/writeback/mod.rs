//! Write policies towards a backing store (PostgreSQL), and TARDIS's modes.
//!
//! A node may sit in front of a *backing store*, the system of record (`[backing]`,
//! `--backing-store`): keys under a write policy are read through from it when they are
//! not in RAM and their changes are applied to it. What is applied is the key's whole
//! record, *merged* into the stored row (the `backing` crate): applying a record twice, or
//! two records in either order, leaves the same row, so a buffered write re-applied after
//! a crash or applied by two workers is harmless, and counters (state-based: per-writer
//! totals) are counted exactly once. That is what lets this layer do without TARDIS's
//! leases and snapshots (docs/writeback.md has the argument).
//!
//! Policies, per key prefix (the longest matching prefix wins; `policy` covers the rest):
//! - **write-through**: a write is answered once the store has it;
//! - **write-around**: the same, and the key leaves RAM once the store has it (a read
//!   brings it back);
//! - **write-back**: a write is answered at once; its key is *dirty* — pinned in RAM,
//!   replicated like any key — until a background applier has merged it into the store.
//!
//! Each memory-tier worker applies the dirty keys it is the primary replica of (and the
//! write-through writes its clients made), in batches. Its [`Mode`] follows TARDIS:
//! - **normal**: as above;
//! - **failed** (an apply found the store unavailable): writes keep succeeding and are
//!   buffered whatever their policy; every dirty key is on the *failed list*; a read of a
//!   key not in RAM fails with a clear error; one probe at a time with exponential backoff;
//! - **recovery** (a probe succeeded): `recovery_workers` batches at a time drain the failed
//!   list; writes buffer (TAR, TARD) or are applied at once with their key's buffered state
//!   (DIS, TARDIS); reads of keys not in RAM fail (TAR, DIS) or read through (TARD,
//!   TARDIS); back to normal once the failed list is empty.

mod mode;

use std::str::FromStr;

use serde::Deserialize;

pub use mode::{Mode, ModeMachine};

/// How writes to a key reach the backing store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WritePolicy {
    /// Answered once the store has the write; the key then leaves RAM.
    WriteAround,
    /// Answered once the store has the write.
    WriteThrough,
    /// Answered at once; applied in the background.
    WriteBack,
}

impl WritePolicy {
    /// The name used in configuration and status.
    pub fn name(self) -> &'static str {
        match self {
            WritePolicy::WriteAround => "write-around",
            WritePolicy::WriteThrough => "write-through",
            WritePolicy::WriteBack => "write-back",
        }
    }
}

impl FromStr for WritePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "write-around" | "around" => Ok(WritePolicy::WriteAround),
            "write-through" | "through" => Ok(WritePolicy::WriteThrough),
            "write-back" | "back" => Ok(WritePolicy::WriteBack),
            other => Err(format!(
                "unknown write policy {other:?} (write-around, write-through, write-back)"
            )),
        }
    }
}

/// What a worker does while the store recovers (TARDIS's four techniques).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Technique {
    /// Writes keep buffering; reads of keys not in RAM fail; only the recovery workers
    /// drain the failed list.
    Tar,
    /// Writes are applied at once, with their key's buffered state; reads of keys not in
    /// RAM fail.
    Dis,
    /// Writes keep buffering; reads of keys not in RAM read through.
    Tard,
    /// Writes applied at once and reads through: foreground requests help recovery.
    #[default]
    Tardis,
}

impl Technique {
    /// Recovery-mode writes are applied at once (DIS, TARDIS).
    pub fn writes_apply(self) -> bool {
        matches!(self, Technique::Dis | Technique::Tardis)
    }

    /// Recovery-mode reads of keys not in RAM read through (TARD, TARDIS).
    pub fn reads_through(self) -> bool {
        matches!(self, Technique::Tard | Technique::Tardis)
    }

    /// The name used in configuration and status.
    pub fn name(self) -> &'static str {
        match self {
            Technique::Tar => "tar",
            Technique::Dis => "dis",
            Technique::Tard => "tard",
            Technique::Tardis => "tardis",
        }
    }
}

impl FromStr for Technique {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "tar" => Ok(Technique::Tar),
            "dis" => Ok(Technique::Dis),
            "tard" => Ok(Technique::Tard),
            "tardis" => Ok(Technique::Tardis),
            other => Err(format!(
                "unknown technique {other:?} (tar, dis, tard, tardis)"
            )),
        }
    }
}

/// A write policy for the keys starting with `prefix` (`[[backing.prefixes]]`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefixPolicy {
    /// Keys starting with these bytes (UTF-8).
    pub prefix: String,
    /// Their policy.
    pub policy: WritePolicy,
}

/// The backing store and how keys use it (`[backing]`; see docs/writeback.md).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackingConfig {
    /// The store: `postgresql://user@host:port/db`. None: no backing store.
    pub url: Option<String>,
    /// The table keys are rows of. Default `latticekv_kv`.
    pub table: String,
    /// The policy of keys matching no prefix (None: they are not backed). Default
    /// write-through when `url` is set and no prefix is given, else none.
    pub policy: Option<WritePolicy>,
    /// Policies per key prefix; the longest matching prefix wins.
    pub prefixes: Vec<PrefixPolicy>,
    /// What writes and reads do while the store recovers. Default TARDIS.
    pub technique: Technique,
    /// Batches each worker applies at once in normal mode. Default 2.
    pub appliers: usize,
    /// Batches each worker applies at once while recovering (0: only foreground requests
    /// drain the failed list). Default 4.
    pub recovery_workers: usize,
    /// How long a write-back key may stay dirty before it is applied, ms: writes to it
    /// meanwhile are absorbed into one apply. Default 100.
    pub apply_delay_ms: u64,
    /// Most keys per applied batch. Default 256.
    pub batch_keys: usize,
    /// Most bytes of dirty records buffered on the node (split among its workers): beyond
    /// it write-back writes are applied at once (store up) or refused (store down).
    /// Default 256 MiB.
    pub max_buffered_bytes: u64,
    /// Connections to the store. Default 8.
    pub pool_size: usize,
    /// Time to connect to the store, ms. Default 2,000.
    pub connect_timeout_ms: u64,
    /// Time allowed for one statement, ms: beyond it the store counts as unavailable.
    /// Default 5,000.
    pub statement_timeout_ms: u64,
    /// Longest pause between probes of a store that is down, ms. Default 5,000.
    pub probe_max_ms: u64,
}

impl Default for BackingConfig {
    fn default() -> Self {
        BackingConfig {
            url: None,
            table: "latticekv_kv".into(),
            policy: None,
            prefixes: Vec::new(),
            technique: Technique::default(),
            appliers: 2,
            recovery_workers: 4,
            apply_delay_ms: 100,
            batch_keys: 256,
            max_buffered_bytes: 256 << 20,
            pool_size: 8,
            connect_timeout_ms: 2_000,
            statement_timeout_ms: 5_000,
            probe_max_ms: 5_000,
        }
    }
}

impl BackingConfig {
    /// True if a backing store is configured.
    pub fn enabled(&self) -> bool {
        self.url.is_some()
    }

    /// The policy of `key` (None: not backed). Metadata keys are never backed.
    pub fn policy_of(&self, key: &[u8]) -> Option<WritePolicy> {
        if !self.enabled() || placement::replication::is_metadata_key(key) {
            return None;
        }
        let mut best: Option<&PrefixPolicy> = None;
        for p in &self.prefixes {
            if key.starts_with(p.prefix.as_bytes())
                && best.is_none_or(|b| p.prefix.len() > b.prefix.len())
            {
                best = Some(p);
            }
        }
        match best {
            Some(p) => Some(p.policy),
            None => self.default_policy(),
        }
    }

    /// The policy of keys matching no prefix.
    fn default_policy(&self) -> Option<WritePolicy> {
        match self.policy {
            Some(p) => Some(p),
            None if self.prefixes.is_empty() => Some(WritePolicy::WriteThrough),
            None => None,
        }
    }

    /// Checks the settings (bounds, the URL's scheme).
    pub fn validate(&self) -> Result<(), String> {
        let Some(url) = &self.url else {
            if self.policy.is_some() || !self.prefixes.is_empty() {
                return Err("backing: write policies given without a backing store (url)".into());
            }
            return Ok(());
        };
        if !(url.starts_with("postgresql://") || url.starts_with("postgres://")) {
            return Err(format!(
                "backing.url {url:?}: only PostgreSQL is supported (postgresql://user@host:port/db)"
            ));
        }
        if self.appliers == 0 {
            return Err("backing.appliers must be at least 1".into());
        }
        if self.batch_keys == 0 || self.batch_keys > 1_000 {
            return Err("backing.batch_keys must be between 1 and 1,000".into());
        }
        if self.pool_size == 0 {
            return Err("backing.pool_size must be at least 1".into());
        }
        if self.prefixes.iter().any(|p| p.prefix.is_empty()) {
            return Err("backing.prefixes: an empty prefix (use backing.policy)".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(policy: Option<WritePolicy>, prefixes: &[(&str, WritePolicy)]) -> BackingConfig {
        BackingConfig {
            url: Some("postgresql://u@h/db".into()),
            policy,
            prefixes: prefixes
                .iter()
                .map(|(p, w)| PrefixPolicy {
                    prefix: p.to_string(),
                    policy: *w,
                })
                .collect(),
            ..BackingConfig::default()
        }
    }

    #[test]
    fn the_longest_prefix_wins_and_the_default_covers_the_rest() {
        use WritePolicy::*;
        let c = config(
            Some(WriteThrough),
            &[("user:", WriteBack), ("user:admin:", WriteAround)],
        );
        assert_eq!(c.policy_of(b"user:1"), Some(WriteBack));
        assert_eq!(c.policy_of(b"user:admin:1"), Some(WriteAround));
        assert_eq!(c.policy_of(b"other"), Some(WriteThrough));
        // Prefixes only: other keys are not backed.
        let c = config(None, &[("user:", WriteBack)]);
        assert_eq!(c.policy_of(b"other"), None);
        // A store alone: everything write-through.
        let c = config(None, &[]);
        assert_eq!(c.policy_of(b"k"), Some(WriteThrough));
        // No store: nothing backed.
        assert_eq!(BackingConfig::default().policy_of(b"k"), None);
    }

    #[test]
    fn metadata_keys_are_never_backed() {
        let c = config(Some(WritePolicy::WriteBack), &[]);
        let meta = placement::replication::replication_key(b"k");
        assert_eq!(c.policy_of(&meta), None);
    }

    #[test]
    fn bad_settings_are_refused() {
        let mut c = config(None, &[]);
        assert!(c.validate().is_ok());
        c.url = Some("mysql://x".into());
        assert!(c.validate().unwrap_err().contains("PostgreSQL"));
        let c = BackingConfig {
            policy: Some(WritePolicy::WriteBack),
            ..BackingConfig::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .contains("without a backing store"));
        assert_eq!("tardis".parse(), Ok(Technique::Tardis));
        assert!("write-sideways".parse::<WritePolicy>().is_err());
    }
}

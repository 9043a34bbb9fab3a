//! Schedulers sharing a store know of each other, so that the dependency GC can check its
//! soundness condition (one scheduler per store) instead of assuming it.
//!
//! Every scheduler, GC on or off, registers a fresh random id in the OR-set
//! [`LEASES_KEY`] when it binds, and bumps its heartbeat, the PN-counter
//! `lkv.faas/beat/<id>` ([`beat_key`]), every [`SchedulerConfig::heartbeat`]; a clean stop
//! removes both. Another scheduler is **live** while its heartbeat has moved within the
//! last [`SchedulerConfig::lease`], as this scheduler's own clock measures it (no clocks
//! are compared across machines), and for a lease after it is first seen. One stale for
//! longer (killed outright) is removed from the set; its heartbeat puts it back if it was
//! only slow.
//!
//! [`SchedulerConfig::heartbeat`]: super::SchedulerConfig::heartbeat
//! [`SchedulerConfig::lease`]: super::SchedulerConfig::lease

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// The OR-set of the ids of the schedulers running on the store.
pub const LEASES_KEY: &str = "lkv.faas/scheduler-ids";

/// The heartbeat counter of scheduler `id`.
pub fn beat_key(id: &str) -> String {
    format!("lkv.faas/beat/{id}")
}

/// A fresh scheduler id (random, 64 bits, hex).
pub(super) fn new_id() -> String {
    format!("{:016x}", fastrand::u64(..))
}

/// Registers `id` and starts its heartbeat.
pub(super) async fn register(store: &client::Client, id: &str) -> Result<(), client::ClientError> {
    store.set_add(LEASES_KEY, [id.as_bytes()]).await?;
    store.counter_add(beat_key(id), 1).await?;
    Ok(())
}

/// One heartbeat: the id back in the set (a peer may have taken it for dead) and the
/// counter moved.
pub(super) async fn beat(store: &client::Client, id: &str) -> Result<(), client::ClientError> {
    register(store, id).await
}

/// Renews the scheduler's lease every `period` (errors are logged: a peer may then take
/// it for dead after its lease, and the next beat registers it again).
pub(super) async fn renew(store: client::Client, id: String, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        if let Err(e) = beat(&store, &id).await {
            tracing::warn!("faas scheduler {id}: renewing its lease: {e}");
        }
    }
}

/// Withdraws `id` (a clean stop).
pub(super) async fn withdraw(store: &client::Client, id: &str) {
    let _ = store.set_remove(LEASES_KEY, [id.as_bytes()]).await;
    let _ = store.delete(beat_key(id)).await;
}

/// What one scheduler has seen of the others' heartbeats.
pub(super) struct Peers {
    me: String,
    lease: Duration,
    /// Per other id: its last heartbeat value and when this scheduler saw it change.
    seen: HashMap<String, (i64, Instant)>,
}

impl Peers {
    /// The view of scheduler `me`.
    pub(super) fn new(me: String, lease: Duration) -> Peers {
        Peers {
            me,
            lease,
            seen: HashMap::new(),
        }
    }

    /// The ids of the other live schedulers, sorted.
    ///
    /// # Errors
    /// The store's: the caller cannot tell who is live, and must act as if someone were.
    pub(super) async fn others(
        &mut self,
        store: &client::Client,
    ) -> Result<Vec<String>, client::ClientError> {
        let now = Instant::now();
        let mut live = Vec::new();
        let mut ids = Vec::new();
        for m in store.set_members(LEASES_KEY).await? {
            let id = String::from_utf8_lossy(&m).into_owned();
            if id != self.me {
                ids.push(id);
            }
        }
        for id in &ids {
            let beat = store.counter_get(beat_key(id)).await?;
            if self.observe(id, beat, now) {
                live.push(id.clone());
            } else {
                tracing::info!(scheduler = %id, "a scheduler's lease expired; removing it");
                let _ = store.set_remove(LEASES_KEY, [id.as_bytes()]).await;
                self.seen.remove(id);
            }
        }
        self.seen.retain(|id, _| ids.contains(id));
        live.sort();
        Ok(live)
    }

    /// Records `id`'s heartbeat `beat` seen at `now`; true while its lease holds.
    fn observe(&mut self, id: &str, beat: i64, now: Instant) -> bool {
        let e = self.seen.entry(id.to_string()).or_insert((beat, now));
        if e.0 != beat {
            *e = (beat, now);
        }
        now.duration_since(e.1) <= self.lease
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_is_live_while_its_heartbeat_moves_within_the_lease() {
        let lease = Duration::from_secs(10);
        let mut p = Peers::new("me".into(), lease);
        let t0 = Instant::now();
        assert!(p.observe("b", 5, t0), "first seen: live for a lease");
        assert!(p.observe("b", 5, t0 + lease), "unchanged, lease not over");
        assert!(!p.observe("b", 5, t0 + lease + Duration::from_millis(1)));
        let t1 = t0 + lease + Duration::from_secs(1);
        assert!(p.observe("b", 6, t1), "it moved: live again");
        assert!(p.observe("b", 6, t1 + lease));
        assert!(!p.observe("b", 6, t1 + lease * 2));
    }

    #[test]
    fn ids_are_fresh_and_beat_keys_documented() {
        assert_ne!(new_id(), new_id());
        assert_eq!(beat_key("ab"), "lkv.faas/beat/ab");
    }
}

//! Algorithm 2, HotKeyReplication: hot memory keys get more replicas, across nodes first,
//! then across the workers of each node; previously hot keys go back to the default vector
//! once they cool.
//!
//! Resolved ambiguities (spec §8):
//! - H = mean + s·σ and L = mean over the keys accessed in the window (the reference code's
//!   choice; keys never accessed would drag the mean to 0 and make every accessed key hot).
//! - R_M_ideal = ceil(R_M · L_obs / L_obj), at least R_M + 1: between f_upper·L_obj and
//!   L_obj the ratio is below 1 and the formula would lower a hot key's factor while the
//!   text says "increment". The same for T_M. The global L_obs is used (our latency is
//!   measured per server, not per key).
//! - De-replication runs every round outside the grace period, whatever the latency branch
//!   (the paper's §6.4 shows it alongside a node addition; the reference code runs it every
//!   round), but only for keys with an explicit vector replicated beyond one node or one
//!   worker whose count fell strictly below the mean — not, as the reference code, every
//!   key at or below the mean every round.

use super::{Branch, Change, Round};
use crate::snapshot::KeyStats;

/// The hot-key replication or de-replication `key` gets this round, if any.
pub(super) fn replication(round: &Round<'_>, key: &KeyStats) -> Option<Change> {
    let v = key.vector;
    let nodes = round.nodes[0];
    let threads = round.threads[0];
    let r_m = v.memory.global.min(nodes);
    if r_m == 0 {
        // Only the memory tier replicates hot keys; a hot disk key is promoted first.
        return None;
    }
    let t_m = v.memory.local.clamp(1, threads.max(1));
    let accesses = key.accesses as f64;
    if round.branch == Branch::Replicate && accesses > round.hot {
        let ratio = round.l_obs / round.l_obj;
        let mut target = v;
        let reason;
        if r_m < nodes {
            target.memory.global = grow(r_m, ratio, nodes);
            reason = format!(
                "hot ({} accesses > H = {:.0}), latency {:.0} µs > {:.0} µs: {} → {} memory nodes",
                key.accesses,
                round.hot,
                round.l_obs,
                round.cfg.latency_band.upper * round.l_obj,
                r_m,
                target.memory.global
            );
        } else if t_m < threads {
            target.memory.global = r_m;
            target.memory.local = grow(t_m, ratio, threads);
            reason = format!(
                "hot ({} accesses > H = {:.0}) on every memory node, latency {:.0} µs: {} → {} workers per node",
                key.accesses, round.hot, round.l_obs, t_m, target.memory.local
            );
        } else {
            return None;
        }
        return Some(Change { target, reason });
    }
    let replicated = v.memory.global > 1 || v.memory.local > 1;
    if !round.in_grace && round.explicit(key) && replicated && accesses < round.mean {
        return Some(Change {
            target: round.snap.default_vector,
            reason: format!(
                "cooled ({} accesses < mean {:.0}): default vector",
                key.accesses, round.mean
            ),
        });
    }
    None
}

/// `current · ratio` rounded up, at least `current + 1`, at most `max`.
fn grow(current: u32, ratio: f64, max: u32) -> u32 {
    let ideal = (f64::from(current) * ratio).ceil();
    // `as` saturates for floats out of range (and maps NaN to 0).
    let ideal = ideal as u32;
    ideal.max(current.saturating_add(1)).min(max)
}

#[cfg(test)]
mod tests {
    use super::grow;

    #[test]
    fn grow_rounds_up_adds_at_least_one_and_caps() {
        let table = [
            // (current, ratio, max, expected)
            (1, 0.8, 10, 2),      // ratio below 1: still +1
            (2, 1.2, 10, 3),      // ceil(2.4) = 3
            (3, 3.0, 10, 9),      // ceil(9) = 9
            (3, 5.0, 10, 10),     // capped
            (4, f64::NAN, 10, 5), // NaN: +1
            (4, f64::INFINITY, 6, 6),
            (u32::MAX, 2.0, u32::MAX, u32::MAX),
        ];
        for (current, ratio, max, expected) in table {
            assert_eq!(
                grow(current, ratio, max),
                expected,
                "grow({current}, {ratio}, {max})"
            );
        }
    }
}

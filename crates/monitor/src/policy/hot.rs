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
//! - A key is replicated only as far as each replica still sees it: a worker reports a key
//!   among its heavy hitters only above its noise floor (2 × its window's accesses / 1,024
//!   counters, docs/elasticity.md "Statistics"), and the monitor sums what the replicas
//!   report. A lukewarm key split over too many replicas drops below every replica's floor,
//!   its sum falls to 0, and de-replication undoes the replication the next round — an
//!   oscillation the SLO experiment showed (the top keys of a Zipf 0.5 load, 20–40
//!   accesses per window against a floor of ~23 per worker, replicated and reset every
//!   two seconds).

use super::{Branch, Change, Round};
use crate::snapshot::{KeyStats, Tier};

/// Counters per row of a worker's count-min sketch: a worker reports a key only above
/// 2 × its window's accesses / this (the node's `stats` module).
const SKETCH_COUNTERS: f64 = 1024.0;

/// The noise floor of an average worker this round: the fewest accesses a key needs on a
/// worker to be reported by it.
fn noise_floor(round: &Round<'_>) -> f64 {
    let workers: u32 = Tier::ALL
        .iter()
        .flat_map(|t| round.snap.alive(*t))
        .map(|n| n.workers.max(1))
        .sum();
    2.0 * round.snap.access.accesses_total as f64 / (f64::from(workers.max(1)) * SKETCH_COUNTERS)
}

/// The most copies (nodes × workers) `accesses` can be split over while each copy still
/// gets at least `floor` of them (at least 1).
fn trackable_copies(accesses: f64, floor: f64) -> u32 {
    if floor <= 0.0 || !floor.is_finite() {
        return u32::MAX;
    }
    // `as` saturates; NaN maps to 0.
    ((accesses / floor).floor() as u32).max(1)
}

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
        let copies = trackable_copies(accesses, noise_floor(round));
        let mut target = v;
        let reason;
        if r_m < nodes && r_m.saturating_add(1).saturating_mul(t_m) <= copies {
            target.memory.global = grow(r_m, ratio, nodes).min(copies / t_m.max(1));
            reason = format!(
                "hot ({} accesses > H = {:.0}), latency {:.0} µs > {:.0} µs: {} → {} memory nodes",
                key.accesses,
                round.hot,
                round.l_obs,
                round.cfg.latency_band.upper * round.l_obj,
                r_m,
                target.memory.global
            );
        } else if r_m == nodes && t_m < threads && r_m.saturating_mul(t_m + 1) <= copies {
            target.memory.global = r_m;
            target.memory.local = grow(t_m, ratio, threads).min(copies / r_m.max(1));
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
    use super::{grow, trackable_copies};

    #[test]
    fn a_key_is_split_only_while_each_copy_stays_above_the_noise_floor() {
        // (accesses, floor, most copies)
        let table = [
            (30.0, 23.0, 1), // a lukewarm key: one copy
            (46.0, 23.0, 2), // two copies of 23
            (1e6, 23.0, 43_478),
            (5.0, 0.0, u32::MAX), // no accesses at all: no floor
            (0.0, 23.0, 1),
        ];
        for (accesses, floor, want) in table {
            assert_eq!(
                trackable_copies(accesses, floor),
                want,
                "{accesses} / {floor}"
            );
        }
    }

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

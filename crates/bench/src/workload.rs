//! Operation mixes and the operations a connection sends each round.

use crate::args::Workload;

/// One benchmark operation's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// A read of the key.
    Read,
    /// A write (update) of the key.
    Write,
    /// A read, then (after its reply) a write of the same key: one operation whose latency
    /// is the sum of the two round trips.
    Rmw,
}

/// What goes on the wire for an operation in one phase of a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// A read request.
    Read,
    /// A write request.
    Write,
}

impl OpKind {
    /// The request this operation sends in `phase` (0: every operation; 1: the write of a
    /// read-modify-write), or `None` if it sends nothing then.
    #[inline]
    pub fn action(self, phase: usize) -> Option<Action> {
        match (self, phase) {
            (OpKind::Read | OpKind::Rmw, 0) => Some(Action::Read),
            (OpKind::Write, 0) | (OpKind::Rmw, 1) => Some(Action::Write),
            _ => None,
        }
    }
}

/// Proportions of reads, writes and read-modify-writes, as thresholds over `0..SCALE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mix {
    /// Draws below this are reads.
    read_below: u32,
    /// Draws from `read_below` below this are writes; the rest are read-modify-writes.
    write_below: u32,
}

/// Resolution of the mix thresholds.
const SCALE: u32 = 1_000_000;

impl Mix {
    /// The mix of a workload: a 50/50, b 95/5, c 100/0, update 0/100 (read/update);
    /// rmw (YCSB F) 50% reads, 50% read-modify-writes; set = update, get = c.
    pub fn of(w: Workload) -> Mix {
        let (read, write) = match w {
            Workload::A => (0.5, 0.5),
            Workload::B => (0.95, 0.05),
            Workload::C | Workload::Get => (1.0, 0.0),
            Workload::Update | Workload::Set => (0.0, 1.0),
            Workload::Rmw => (0.5, 0.0),
        };
        Mix::new(read, write)
    }

    /// A mix with these fractions of reads and writes; the remainder are read-modify-writes.
    pub fn new(read: f64, write: f64) -> Mix {
        let read_below = (read.clamp(0.0, 1.0) * f64::from(SCALE)).round() as u32;
        let write_below = ((read + write).clamp(0.0, 1.0) * f64::from(SCALE)).round() as u32;
        Mix {
            read_below,
            write_below: write_below.max(read_below),
        }
    }

    /// Fraction of operations of `kind`.
    pub fn fraction(&self, kind: OpKind) -> f64 {
        let width = match kind {
            OpKind::Read => self.read_below,
            OpKind::Write => self.write_below - self.read_below,
            OpKind::Rmw => SCALE - self.write_below,
        };
        f64::from(width) / f64::from(SCALE)
    }

    /// Draws an operation kind.
    #[inline]
    pub fn pick(&self, rng: &mut fastrand::Rng) -> OpKind {
        let x = rng.u32(..SCALE);
        if x < self.read_below {
            OpKind::Read
        } else if x < self.write_below {
            OpKind::Write
        } else {
            OpKind::Rmw
        }
    }
}

/// One operation of a round, with what its replies said so far.
#[derive(Clone, Copy, Debug)]
pub struct Slot {
    /// Key id.
    pub key: u32,
    /// Operation kind.
    pub kind: OpKind,
    /// A small random number choosing the value window / OR-set member.
    pub variant: u16,
    /// Latency accumulated over the operation's round trips, in microseconds.
    pub latency_us: u64,
    /// True if any of its replies was an error.
    pub error: bool,
    /// Times it was sent again (`--follow-topology`).
    pub resent: u8,
}

impl Slot {
    /// A fresh operation.
    pub fn new(key: u32, kind: OpKind, variant: u16) -> Slot {
        Slot {
            key,
            kind,
            variant,
            latency_us: 0,
            error: false,
            resent: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proportions(w: Workload) -> [f64; 3] {
        let mix = Mix::of(w);
        let mut rng = fastrand::Rng::with_seed(11);
        let n = 200_000;
        let mut counts = [0usize; 3];
        for _ in 0..n {
            counts[match mix.pick(&mut rng) {
                OpKind::Read => 0,
                OpKind::Write => 1,
                OpKind::Rmw => 2,
            }] += 1;
        }
        counts.map(|c| c as f64 / n as f64)
    }

    #[test]
    fn workload_mixes() {
        let close = |a: [f64; 3], b: [f64; 3]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 0.006);
        assert!(close(proportions(Workload::A), [0.5, 0.5, 0.0]));
        assert!(close(proportions(Workload::B), [0.95, 0.05, 0.0]));
        assert_eq!(proportions(Workload::C), [1.0, 0.0, 0.0]);
        assert_eq!(proportions(Workload::Get), [1.0, 0.0, 0.0]);
        assert_eq!(proportions(Workload::Update), [0.0, 1.0, 0.0]);
        assert_eq!(proportions(Workload::Set), [0.0, 1.0, 0.0]);
        assert!(close(proportions(Workload::Rmw), [0.5, 0.0, 0.5]));
        let b = Mix::of(Workload::B);
        assert!((b.fraction(OpKind::Read) - 0.95).abs() < 1e-9);
        assert!((b.fraction(OpKind::Write) - 0.05).abs() < 1e-9);
        assert_eq!(b.fraction(OpKind::Rmw), 0.0);
    }

    #[test]
    fn actions_per_phase() {
        assert_eq!(OpKind::Read.action(0), Some(Action::Read));
        assert_eq!(OpKind::Read.action(1), None);
        assert_eq!(OpKind::Write.action(0), Some(Action::Write));
        assert_eq!(OpKind::Write.action(1), None);
        assert_eq!(OpKind::Rmw.action(0), Some(Action::Read));
        assert_eq!(OpKind::Rmw.action(1), Some(Action::Write));
    }
}

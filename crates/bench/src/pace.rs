//! The open loop (`--rate`): each connection's schedule of rounds ([`Pacer`]) and the timer
//! that waits for them.
//!
//! **The timer.** tokio's timer wheel counts whole milliseconds: a deadline is rounded up to
//! the next tick and the runtime parks for whole milliseconds, so a sleep ends 0–2 ms after
//! its deadline (about 1.25 ms late on average on the 2-core VM of docs/elasticity.md), and
//! every round due within one tick starts at that tick, in a burst. At 80,000 ops/s over
//! 16 connections × 8-key rounds a round is due every 1.6 ms per connection: the timer's
//! lateness alone made a third of the rounds start after the next one was due, and the
//! bursts queued at the server. On Linux each paced connection therefore sleeps on its own
//! `timerfd` (registered with the runtime's reactor), which wakes within the kernel's timer
//! slack (50 µs by default) plus the scheduler's wake-up; elsewhere, or if a `timerfd`
//! cannot be made, on tokio's sleep.
//!
//! **What a round's latency counts.** A round that had to wait starts when its timer fires;
//! how late the timer fired is the client's own delay, not the server's, and is not
//! counted. A round due while the previous one was still out starts late, and that delay
//! counts (coordinated omission), minus the part of it that the client's own lateness
//! caused: the schedule is followed as if every round had started when it was due or,
//! if the previous round was still out, when that one would have been answered had it
//! started on time. So a round is charged the queue that slow replies built, never the
//! client's timer.

use std::time::{Duration, Instant};

use crate::clock::micros;

/// The schedule of a paced connection (`--rate`): a round is due every `period`.
#[derive(Debug)]
pub(crate) struct Pacer {
    next: Instant,
    period: Duration,
    /// How much later than its schedule the current round started through the client's
    /// own doing (the timer woke late), carried through rounds that follow back to back.
    own: Duration,
    /// The connection's timer (made at the first wait, in the connection's runtime).
    timer: Option<Timer>,
}

/// What a paced connection does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pace {
    /// The round is not due yet: wait until then; it starts on time.
    Wait(Instant),
    /// The round was due before the previous one was answered: start now, and count this
    /// delay in its latency, as a client with a queue would see it.
    Late(Duration),
}

impl Pacer {
    /// A schedule whose first round is due at `first`, then one every `period`.
    pub(crate) fn new(first: Instant, period: Duration) -> Pacer {
        Pacer {
            next: first,
            period,
            own: Duration::ZERO,
            timer: None,
        }
    }

    /// The next round's due time at `now`; advances the schedule by one round. A late
    /// round's delay leaves out the client's own lateness (see [`woke`](Self::woke)).
    pub(crate) fn next(&mut self, now: Instant) -> Pace {
        let due = self.next;
        self.next += self.period;
        if now < due {
            return Pace::Wait(due);
        }
        let behind = now - due;
        let charged = behind.saturating_sub(self.own);
        // The part not charged stays the client's while the rounds run back to back.
        self.own = behind - charged;
        Pace::Late(charged)
    }

    /// The round due at `due` started at `at` after waiting for it: the timer's lateness
    /// is the client's own.
    pub(crate) fn woke(&mut self, due: Instant, at: Instant) {
        self.own = at.saturating_duration_since(due);
    }

    /// Waits for the next round; returns the delay to count in its latency, in
    /// microseconds (0 when it had to wait).
    pub(crate) async fn wait(&mut self) -> u64 {
        match self.next(Instant::now()) {
            Pace::Wait(due) => {
                self.timer
                    .get_or_insert_with(Timer::new)
                    .sleep_until(due)
                    .await;
                self.woke(due, Instant::now());
                0
            }
            Pace::Late(by) => micros(by),
        }
    }
}

/// The round period of one of `connections` connections sharing `rate` operations per
/// second, `round` operations per round.
pub(crate) fn round_period(rate: f64, connections: usize, round: usize) -> Duration {
    let per_connection = rate / connections.max(1) as f64;
    Duration::from_secs_f64((round.max(1) as f64 / per_connection).clamp(1e-6, 3600.0))
}

/// A sleep with the system timer's resolution where there is one (see the module's
/// documentation).
#[derive(Debug)]
pub(crate) struct Timer {
    #[cfg(target_os = "linux")]
    fd: Option<timerfd::TimerFd>,
}

impl Timer {
    /// A timer of the current runtime (which must have its I/O driver enabled).
    pub(crate) fn new() -> Timer {
        Timer {
            #[cfg(target_os = "linux")]
            fd: timerfd::TimerFd::new().ok(),
        }
    }

    /// Returns at `due` or soon after (never before).
    pub(crate) async fn sleep_until(&self, due: Instant) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.fd {
            let left = due.saturating_duration_since(Instant::now());
            if left.is_zero() || fd.sleep(left).await.is_ok() {
                return;
            }
        }
        tokio::time::sleep_until(due.into()).await;
    }
}

#[cfg(target_os = "linux")]
mod timerfd {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Duration;

    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;

    /// A one-shot `CLOCK_MONOTONIC` timerfd registered with the runtime's reactor.
    #[derive(Debug)]
    pub(super) struct TimerFd(AsyncFd<OwnedFd>);

    impl TimerFd {
        pub(super) fn new() -> io::Result<TimerFd> {
            let flags = libc::TFD_NONBLOCK | libc::TFD_CLOEXEC;
            // SAFETY: no pointer arguments; the result is checked below.
            let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, flags) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `fd` is a descriptor just created for us and owned by nothing else.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            // SAFETY: an `OwnedFd` keeps its descriptor open, and the same, until the
            // `AsyncFd` that owns it drops it.
            let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) };
            Ok(TimerFd(fd.map_err(io::Error::from)?))
        }

        /// Sleeps for `d` (more than zero): arms the timer, waits until it expired.
        pub(super) async fn sleep(&self, d: Duration) -> io::Result<()> {
            let value = libc::timespec {
                tv_sec: libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX),
                // Below 10⁹: fits a 32-bit `c_long` too.
                tv_nsec: d.subsec_nanos() as libc::c_long,
            };
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            let spec = libc::itimerspec {
                it_interval: zero,
                it_value: value,
            };
            // SAFETY: `spec` lives across the call; a null old value is allowed. Arming
            // replaces any earlier setting, so an expiry not read yet cannot end this sleep
            // early: it is read (and discarded) below only after this one.
            let r = unsafe {
                libc::timerfd_settime(self.0.as_raw_fd(), 0, &spec, std::ptr::null_mut())
            };
            if r != 0 {
                return Err(io::Error::last_os_error());
            }
            loop {
                let mut ready = self.0.readable().await?;
                match ready.try_io(|fd| read_expirations(fd.get_ref())) {
                    Ok(Ok(())) => return Ok(()),
                    Ok(Err(e)) => return Err(e),
                    // Not expired yet (readiness was stale): wait again.
                    Err(_would_block) => continue,
                }
            }
        }
    }

    /// Reads the timer's expiration count (8 bytes); WouldBlock while it has not expired.
    fn read_expirations(fd: &OwnedFd) -> io::Result<()> {
        let mut count = [0u8; 8];
        // SAFETY: the buffer is 8 writable bytes, as the length says.
        let n = unsafe { libc::read(fd.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
        if n == 8 {
            Ok(())
        } else if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "short timerfd read",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pacer_waits_for_due_rounds_and_counts_late_ones_from_when_they_were_due() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut p = Pacer::new(t0 + ms(5), ms(10));
        // Early: wait for the first due time; the schedule moves on by one period.
        assert_eq!(p.next(t0), Pace::Wait(t0 + ms(5)));
        assert_eq!(p.next(t0 + ms(15)), Pace::Late(ms(0)));
        // The round due at 25 ms started at 40 ms: 15 ms late; the one due at 35 is late
        // too (a queue), then the schedule is caught up.
        assert_eq!(p.next(t0 + ms(40)), Pace::Late(ms(15)));
        assert_eq!(p.next(t0 + ms(41)), Pace::Late(ms(6)));
        assert_eq!(p.next(t0 + ms(42)), Pace::Wait(t0 + ms(45)));
        // 1,000 ops/s over 4 connections, 5 ops a round: a round every 20 ms each.
        assert_eq!(round_period(1_000.0, 4, 5), ms(20));
        assert_eq!(round_period(1e12, 1, 1), Duration::from_micros(1));
    }

    #[test]
    fn a_late_timer_is_not_counted_in_the_rounds_it_delays() {
        let t0 = Instant::now();
        let us = Duration::from_micros;
        // A round every 1,600 µs (80,000 ops/s over 16 connections × 8 keys).
        let mut p = Pacer::new(t0, us(1_600));
        assert_eq!(p.next(t0 - us(100)), Pace::Wait(t0));
        // The timer fired 1,900 µs late (tokio's millisecond wheel); the reply took
        // 150 µs, so the round due at 1,600 starts at 2,050: 450 µs behind, all of it the
        // timer's. Nothing is counted.
        p.woke(t0, t0 + us(1_900));
        assert_eq!(p.next(t0 + us(2_050)), Pace::Late(us(0)));
        // Back to back: answered 150 µs later, at 2,200, before the round due at 3,200.
        assert_eq!(p.next(t0 + us(2_200)), Pace::Wait(t0 + us(3_200)));
        // The timer is on time now; a reply of 2,000 µs (the server's queue) delays the next
        // round by 400 µs, which counts in full, and so does the queue it leaves.
        p.woke(t0 + us(3_200), t0 + us(3_200));
        assert_eq!(p.next(t0 + us(5_200)), Pace::Late(us(400)));
        assert_eq!(p.next(t0 + us(7_000)), Pace::Late(us(600)));
        // A slow reply after a late timer: only what the reply added beyond the timer's
        // lateness counts (the round would have been 300 µs late had it started on time).
        assert_eq!(p.next(t0 + us(7_100)), Pace::Wait(t0 + us(8_000)));
        p.woke(t0 + us(8_000), t0 + us(8_500));
        assert_eq!(p.next(t0 + us(10_400)), Pace::Late(us(300)));
        // The client's part stays uncounted while the rounds run back to back…
        assert_eq!(p.next(t0 + us(11_600)), Pace::Late(us(0)));
        // …and is forgotten once a round waits.
        assert_eq!(p.next(t0 + us(12_000)), Pace::Wait(t0 + us(12_800)));
        p.woke(t0 + us(12_800), t0 + us(12_800));
        assert_eq!(p.next(t0 + us(15_000)), Pace::Late(us(600)));
    }

    #[test]
    fn the_timer_never_returns_early_and_beats_the_millisecond_wheel() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let timer = Timer::new();
            #[cfg(target_os = "linux")]
            assert!(timer.fd.is_some(), "a timerfd could not be made");
            let mut late = Vec::new();
            for _ in 0..40 {
                let due = Instant::now() + Duration::from_micros(300);
                timer.sleep_until(due).await;
                let at = Instant::now();
                assert!(at >= due, "woke {:?} early", due - at);
                late.push(at - due);
            }
            // A sleep already due returns at once.
            let t = Instant::now();
            timer.sleep_until(t - Duration::from_millis(1)).await;
            late.sort();
            // tokio's wheel wakes a 300 µs sleep at the next millisecond tick or after
            // it (700–2,000 µs late); the timerfd within the timer slack and a wake-up.
            // The median leaves room for a loaded machine.
            #[cfg(target_os = "linux")]
            assert!(
                late[late.len() / 2] < Duration::from_micros(600),
                "{late:?}"
            );
        });
    }
}

//! Waiting for conditions: [`eventually`], [`closed_by_peer`], and [`serial`] for tests that
//! must not overlap.

use std::io::Read;
use std::net::TcpStream;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Polls `f` every 20 ms until it returns true or `timeout` passes; then tries once more.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// True if the peer closed `stream` (read returns 0 or an error other than a timeout);
/// reads and discards whatever arrives first, for at most 5 s of silence.
pub fn closed_by_peer(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Holds the lock that makes the tests taking it run one at a time (within one test binary:
/// each integration-test file is its own process). For tests that start clusters or measure
/// timing: several clusters at once on a 2-core machine starve the agents' heartbeats and
/// make nodes suspect each other, which tests something else. A test that panicked while
/// holding it does not poison it for the others.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    #[test]
    fn eventually_polls_until_true_or_timeout() {
        let mut calls = 0;
        assert!(eventually(Duration::from_secs(5), || {
            calls += 1;
            calls == 3
        }));
        assert_eq!(calls, 3);
        let start = Instant::now();
        assert!(!eventually(Duration::from_millis(100), || false));
        assert!(start.elapsed() >= Duration::from_millis(100));
    }

    #[test]
    fn closed_by_peer_tells_a_close_from_silence() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut closed = TcpStream::connect(addr).unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        peer.write_all(b"bye").unwrap();
        drop(peer);
        assert!(closed_by_peer(&mut closed));

        let mut open = TcpStream::connect(addr).unwrap();
        let (_peer, _) = listener.accept().unwrap();
        // Silence for the whole 5 s: not closed.
        assert!(!closed_by_peer(&mut open));
    }

    #[test]
    fn serial_survives_a_panicking_holder() {
        let _ = std::thread::spawn(|| {
            let _guard = serial();
            panic!("a failing test");
        })
        .join();
        drop(serial());
    }
}

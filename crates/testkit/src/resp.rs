//! [`Resp`]: a blocking RESP connection that speaks raw bytes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A blocking RESP connection speaking raw bytes: commands go out as multibulk arrays,
/// replies are compared byte for byte. Reads time out after 10 s.
pub struct Resp {
    /// The connection (for raw writes, or [`closed_by_peer`](crate::closed_by_peer)).
    pub stream: TcpStream,
}

impl Resp {
    /// Connects to `addr`.
    pub fn connect(addr: SocketAddr) -> Resp {
        let stream = TcpStream::connect(addr).expect("connect RESP");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Resp { stream }
    }

    /// Sends a command as a multibulk array.
    pub fn send(&mut self, args: &[&[u8]]) {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.stream.write_all(&out).unwrap();
    }

    /// Reads exactly `expected.len()` bytes and compares them.
    pub fn expect(&mut self, expected: &[u8]) {
        let mut got = vec![0u8; expected.len()];
        self.stream
            .read_exact(&mut got)
            .unwrap_or_else(|e| panic!("reading {:?}: {e}", String::from_utf8_lossy(expected)));
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(expected)
        );
    }

    /// Sends a command and checks the exact reply bytes.
    pub fn roundtrip(&mut self, args: &[&[u8]], expected: &[u8]) {
        self.send(args);
        self.expect(expected);
    }

    /// Reads one line (up to and including \r\n).
    pub fn line(&mut self) -> String {
        let mut out = Vec::new();
        let mut byte = [0u8; 1];
        while !out.ends_with(b"\r\n") {
            self.stream.read_exact(&mut byte).unwrap();
            out.push(byte[0]);
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn sends_multibulk_and_reads_exact_replies() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let want = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
            let mut got = vec![0u8; want.len()];
            s.read_exact(&mut got).unwrap();
            assert_eq!(got, want);
            s.write_all(b"$1\r\nv\r\n+OK\r\n").unwrap();
        });
        let mut r = Resp::connect(addr);
        r.roundtrip(&[b"GET", b"k"], b"$1\r\nv\r\n");
        assert_eq!(r.line(), "+OK\r\n");
        server.join().unwrap();
    }
}

//! [`Native`]: a blocking native-protocol connection sending raw protobuf requests.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use prost::Message;
use wire::pb;

/// A blocking native-protocol connection: requests are framed with [`wire::frame::encode`]
/// and sent as given, one response frame is read back. Reads time out after 10 s.
pub struct Native {
    /// The connection (for raw writes, or [`closed_by_peer`](crate::closed_by_peer)).
    pub stream: TcpStream,
    /// The id [`call`](Native::call) gives its next request (1 first).
    pub next_id: u64,
}

impl Native {
    /// Connects to `addr` (a node's front port or a worker's port).
    pub fn connect(addr: SocketAddr) -> Native {
        let stream = TcpStream::connect(addr).expect("connect native");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Native { stream, next_id: 1 }
    }

    /// Sends one request and reads its response.
    pub fn call(&mut self, op: pb::request::Op) -> pb::Response {
        let id = self.next_id;
        self.next_id += 1;
        let mut out = Vec::new();
        wire::frame::encode(
            &pb::Request {
                id,
                op: Some(op),
                ..Default::default()
            },
            &mut out,
        );
        self.stream.write_all(&out).unwrap();
        let resp = self.read();
        assert_eq!(resp.id, id, "response id");
        resp
    }

    /// Sends a request as given (any id, possibly no op) and reads one response.
    pub fn call_raw(&mut self, req: pb::Request) -> pb::Response {
        let mut out = Vec::new();
        wire::frame::encode(&req, &mut out);
        self.stream.write_all(&out).unwrap();
        self.read()
    }

    /// Reads one response frame.
    pub fn read(&mut self) -> pb::Response {
        let mut header = [0u8; 4];
        self.stream
            .read_exact(&mut header)
            .expect("response header");
        let len = u32::from_be_bytes(header) as usize;
        let mut body = vec![0u8; len];
        self.stream.read_exact(&mut body).expect("response body");
        pb::Response::decode(&body[..]).expect("decodable response")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// Reads one request frame.
    fn read_request(s: &mut TcpStream) -> pb::Request {
        let mut header = [0u8; 4];
        s.read_exact(&mut header).unwrap();
        let mut body = vec![0u8; u32::from_be_bytes(header) as usize];
        s.read_exact(&mut body).unwrap();
        pb::Request::decode(&body[..]).unwrap()
    }

    #[test]
    fn calls_number_requests_and_read_framed_responses() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut ids = Vec::new();
            for _ in 0..3 {
                let req = read_request(&mut s);
                ids.push(req.id);
                let mut out = Vec::new();
                wire::frame::encode(
                    &pb::Response {
                        id: req.id,
                        ..Default::default()
                    },
                    &mut out,
                );
                s.write_all(&out).unwrap();
            }
            ids
        });
        let mut n = Native::connect(addr);
        assert_eq!(n.call(pb::request::Op::Ping(pb::Ping {})).id, 1);
        assert_eq!(n.call(pb::request::Op::Ping(pb::Ping {})).id, 2);
        let raw = n.call_raw(pb::Request {
            id: 77,
            ..Default::default()
        });
        assert_eq!(raw.id, 77);
        assert_eq!(server.join().unwrap(), vec![1, 2, 77]);
    }
}

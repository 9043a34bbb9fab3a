//! The Redis protocol against a real node: exact reply bytes, pipelining, RESP3, wrong
//! types, unknown commands, and `redis-cli` unchanged.

mod common;

use std::process::Command;

use common::{NodeProc, Resp};

#[test]
fn commands_reply_like_redis() {
    let node = NodeProc::start(&["--workers", "2"]);
    let mut c = Resp::connect(node.resp);
    c.roundtrip(&[b"PING"], b"+PONG\r\n");
    c.roundtrip(&[b"ping", b"hi"], b"$2\r\nhi\r\n");
    c.roundtrip(&[b"ECHO", b"x y"], b"$3\r\nx y\r\n");
    c.roundtrip(&[b"SELECT", b"0"], b"+OK\r\n");
    c.roundtrip(&[b"SELECT", b"1"], b"-ERR DB index is out of range\r\n");
    c.roundtrip(&[b"GET", b"a"], b"$-1\r\n");
    c.roundtrip(&[b"SET", b"a", b"1"], b"+OK\r\n");
    c.roundtrip(&[b"GET", b"a"], b"$1\r\n1\r\n");
    c.roundtrip(&[b"SET", b"a", b"2", b"NX"], b"$-1\r\n");
    c.roundtrip(&[b"SET", b"b", b"2", b"XX"], b"$-1\r\n");
    c.roundtrip(&[b"SET", b"a", b"3", b"XX", b"GET"], b"$1\r\n1\r\n");
    c.roundtrip(&[b"GET", b"a"], b"$1\r\n3\r\n");
    c.roundtrip(&[b"SET", b"a", b"3", b"EX", b"10"], b"+OK\r\n");
    c.roundtrip(&[b"TTL", b"a"], b":10\r\n");
    c.roundtrip(&[b"PERSIST", b"a"], b":1\r\n");
    c.roundtrip(
        &[b"SET", b"a", b"3", b"EX", b"0"],
        b"-ERR invalid expire time in 'set' command\r\n",
    );
    c.roundtrip(&[b"SET", b"a", b"1", b"BOGUS"], b"-ERR syntax error\r\n");
    c.roundtrip(
        &[b"MSET", b"k1", b"v1", b"k2", b"v2", b"k3", b"v3"],
        b"+OK\r\n",
    );
    c.roundtrip(
        &[b"MGET", b"k1", b"nope", b"k3"],
        b"*3\r\n$2\r\nv1\r\n$-1\r\n$2\r\nv3\r\n",
    );
    c.roundtrip(&[b"EXISTS", b"k1", b"k2", b"nope", b"k1"], b":3\r\n");
    c.roundtrip(&[b"DEL", b"k1", b"k2", b"nope"], b":2\r\n");
    c.roundtrip(&[b"EXISTS", b"k1"], b":0\r\n");
    c.roundtrip(&[b"INCR", b"c"], b":1\r\n");
    c.roundtrip(&[b"INCRBY", b"c", b"10"], b":11\r\n");
    c.roundtrip(&[b"DECR", b"c"], b":10\r\n");
    c.roundtrip(&[b"DECRBY", b"c", b"15"], b":-5\r\n");
    c.roundtrip(&[b"GET", b"c"], b"$2\r\n-5\r\n");
    c.roundtrip(
        &[b"INCRBY", b"c", b"x"],
        b"-ERR value is not an integer or out of range\r\n",
    );
    c.roundtrip(
        &[b"INCRBY", b"c", b"9223372036854775807"],
        b":9223372036854775802\r\n",
    );
    c.roundtrip(
        &[b"INCRBY", b"c", b"10"],
        b"-ERR increment or decrement would overflow\r\n",
    );
    c.roundtrip(&[b"DECRBY", b"c", b"9223372036854775802"], b":0\r\n");
    c.roundtrip(&[b"DECRBY", b"c", b"5"], b":-5\r\n");
    c.roundtrip(&[b"SADD", b"s", b"x", b"y", b"x"], b":2\r\n");
    c.roundtrip(&[b"SISMEMBER", b"s", b"y"], b":1\r\n");
    c.roundtrip(&[b"SCARD", b"s"], b":2\r\n");
    c.roundtrip(&[b"SMEMBERS", b"s"], b"*2\r\n$1\r\nx\r\n$1\r\ny\r\n");
    c.roundtrip(&[b"SREM", b"s", b"x", b"z"], b":1\r\n");
    c.roundtrip(&[b"TYPE", b"s"], b"+set\r\n");
    c.roundtrip(&[b"TYPE", b"a"], b"+string\r\n");
    c.roundtrip(&[b"TYPE", b"nope"], b"+none\r\n");
    // A string holding an integer counts, as in Redis; one that does not is refused.
    c.roundtrip(&[b"SET", b"i", b"41"], b"+OK\r\n");
    c.roundtrip(&[b"INCR", b"i"], b":42\r\n");
    c.roundtrip(&[b"SET", b"w", b"word"], b"+OK\r\n");
    c.roundtrip(
        &[b"INCR", b"w"],
        b"-ERR value is not an integer or out of range\r\n",
    );
    // Wrong types.
    c.send(&[b"INCR", b"s"]);
    assert!(c
        .line()
        .starts_with("-WRONGTYPE Operation against a key holding the wrong kind of value"));
    c.send(&[b"SADD", b"a", b"m"]);
    assert!(c.line().starts_with("-WRONGTYPE"));
    c.send(&[b"GET", b"s"]);
    assert!(c.line().starts_with("-WRONGTYPE"));
    c.send(&[b"SET", b"s", b"v"]);
    assert!(c.line().starts_with("-WRONGTYPE"));
    // Unknown commands and arity errors keep the connection.
    c.roundtrip(
        &[b"FOO", b"bar"],
        b"-ERR unknown command 'FOO', with args beginning with: 'bar' \r\n",
    );
    c.roundtrip(
        &[b"GET"],
        b"-ERR wrong number of arguments for 'get' command\r\n",
    );
    c.roundtrip(&[b"DBSIZE"], b":6\r\n");
    c.roundtrip(&[b"QUIT"], b"+OK\r\n");
    assert!(common::closed_by_peer(&mut c.stream));
}

#[test]
fn pipelined_commands_and_inline_commands() {
    let node = NodeProc::start(&["--workers", "2"]);
    let mut c = Resp::connect(node.resp);
    // 200 pipelined SETs then GETs in one write, keys spread over both workers.
    let mut batch = Vec::new();
    let mut expected = Vec::new();
    for i in 0..200 {
        let k = format!("key:{i}");
        batch.extend_from_slice(
            format!("*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n$1\r\nv\r\n", k.len()).as_bytes(),
        );
        expected.extend_from_slice(b"+OK\r\n");
    }
    for i in 0..200 {
        let k = format!("key:{i}");
        batch.extend_from_slice(format!("*2\r\n$3\r\nGET\r\n${}\r\n{k}\r\n", k.len()).as_bytes());
        expected.extend_from_slice(b"$1\r\nv\r\n");
    }
    use std::io::Write;
    c.stream.write_all(&batch).unwrap();
    c.expect(&expected);
    // Inline commands, as typed into telnet.
    c.stream
        .write_all(b"SET \"inline key\" 'a b'\r\nGET \"inline key\"\r\n")
        .unwrap();
    c.expect(b"+OK\r\n$3\r\na b\r\n");
}

#[test]
fn resp3_after_hello_3() {
    let node = NodeProc::start(&["--workers", "1"]);
    let mut c = Resp::connect(node.resp);
    c.send(&[b"HELLO", b"3"]);
    c.send(&[b"PING"]);
    assert_eq!(c.line(), "%7\r\n");
    let mut rest = String::new();
    while !rest.ends_with("+PONG\r\n") {
        rest.push_str(&c.line());
    }
    assert!(
        rest.contains("latticekv") && rest.contains("proto\r\n:3\r\n"),
        "{rest}"
    );
    c.roundtrip(&[b"GET", b"missing"], b"_\r\n");
    c.roundtrip(&[b"SADD", b"s", b"a"], b":1\r\n");
    c.roundtrip(&[b"SMEMBERS", b"s"], b"~1\r\n$1\r\na\r\n");
    c.roundtrip(
        &[b"HELLO", b"4"],
        b"-NOPROTO unsupported protocol version\r\n",
    );
}

fn redis_cli(node: &NodeProc, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &node.resp.port().to_string()])
        .args(args)
        .output()
        .expect("redis-cli must be installed (make test installs redis-tools)");
    assert!(
        out.status.success(),
        "redis-cli {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn redis_cli_works_unchanged() {
    let node = NodeProc::start(&["--workers", "2"]);
    assert_eq!(redis_cli(&node, &["PING"]), "PONG\n");
    assert_eq!(redis_cli(&node, &["SET", "a", "1"]), "OK\n");
    assert_eq!(redis_cli(&node, &["GET", "a"]), "1\n");
    assert_eq!(redis_cli(&node, &["INCR", "c"]), "1\n");
    assert_eq!(redis_cli(&node, &["INCR", "c"]), "2\n");
    assert_eq!(redis_cli(&node, &["SADD", "s", "x"]), "1\n");
    assert_eq!(redis_cli(&node, &["SMEMBERS", "s"]), "x\n");
    assert_eq!(redis_cli(&node, &["DBSIZE"]), "3\n");
    assert!(redis_cli(&node, &["INFO"]).contains("db0:keys=3"));
    assert!(redis_cli(&node, &["NOSUCHCMD"]).contains("ERR unknown command"));
    // The same key written with redis-cli is visible through the native CLI.
    assert_eq!(node.cli_ok(&["get", "a"]), "1\n");
}

#[test]
fn redis_benchmark_runs_unchanged() {
    let node = NodeProc::start(&["--workers", "2"]);
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &node.resp.port().to_string()])
        .args([
            "-t",
            "set,get,incr,sadd",
            "-n",
            "2000",
            "-c",
            "8",
            "-P",
            "4",
            "-q",
            "-r",
            "1000",
        ])
        .output()
        .expect("redis-benchmark must be installed (make test installs redis-tools)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Progress updates are separated by \r, results by \n.
    let results: Vec<&str> = text.split(['\r', '\n']).map(str::trim).collect();
    for test in ["SET", "GET", "INCR", "SADD"] {
        assert!(
            results
                .iter()
                .any(|l| l.starts_with(&format!("{test}: ")) && l.contains("requests per second")),
            "no {test} result in:\n{text}"
        );
    }
    assert!(!text.contains("ERR"), "{text}");
}

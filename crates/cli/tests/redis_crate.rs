//! The Rust ecosystem's Redis client (the `redis` crate, sync API, no extra features)
//! against a latticekv node: strings and counters, a MULTI/EXEC pipeline, a SCAN
//! iteration, EXPIRE/TTL, and the key-space and set commands.

mod common;

use std::collections::BTreeSet;

use common::NodeProc;

fn connect(node: &NodeProc) -> redis::Connection {
    let url = format!("redis://{}/", node.resp);
    redis::Client::open(url)
        .expect("a valid URL")
        .get_connection()
        .expect("connected")
}

#[test]
fn the_redis_crate_works_unchanged() {
    let node = NodeProc::start(&["--workers", "2"]);
    let mut con = connect(&node);

    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    let v: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(v, "v");
    let n: i64 = redis::cmd("INCR").arg("n").query(&mut con).unwrap();
    assert_eq!(n, 1);
    let missing: Option<String> = redis::cmd("GET").arg("nope").query(&mut con).unwrap();
    assert_eq!(missing, None);

    // A transactional pipeline: MULTI … EXEC, one array of replies.
    let (set, incr, get): (String, i64, String) = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("t")
        .arg("10")
        .cmd("INCRBY")
        .arg("t")
        .arg(5)
        .cmd("GET")
        .arg("t")
        .query(&mut con)
        .unwrap();
    assert_eq!((set.as_str(), incr, get.as_str()), ("OK", 15, "15"));

    // EXPIRE / TTL.
    let done: i64 = redis::cmd("EXPIRE")
        .arg("k")
        .arg(100)
        .query(&mut con)
        .unwrap();
    assert_eq!(done, 1);
    let ttl: i64 = redis::cmd("TTL").arg("k").query(&mut con).unwrap();
    assert!((99..=100).contains(&ttl), "TTL {ttl}");

    // SCAN: every key once, over two workers.
    let mut pipe = redis::pipe();
    for i in 0..500 {
        pipe.cmd("SET").arg(format!("scan:{i}")).arg(i).ignore();
    }
    let _: () = pipe.query(&mut con).unwrap();
    let mut cursor = 0u64;
    let mut seen = Vec::new();
    loop {
        let (next, page): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("scan:*")
            .arg("COUNT")
            .arg(50)
            .query(&mut con)
            .unwrap();
        seen.extend(page);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    assert_eq!(seen.len(), 500, "a key returned twice or missed");
    let expected: BTreeSet<String> = (0..500).map(|i| format!("scan:{i}")).collect();
    assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), expected);
    let size: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(size, 503);

    // Sets and key-space commands.
    let _: i64 = redis::cmd("SADD")
        .arg("a")
        .arg(&["1", "2", "3"])
        .query(&mut con)
        .unwrap();
    let _: i64 = redis::cmd("SADD")
        .arg("b")
        .arg(&["2", "3", "4"])
        .query(&mut con)
        .unwrap();
    let inter: BTreeSet<String> = redis::cmd("SINTER")
        .arg("a")
        .arg("b")
        .query(&mut con)
        .unwrap();
    assert_eq!(inter, ["2", "3"].iter().map(|s| s.to_string()).collect());
    let stored: i64 = redis::cmd("SUNIONSTORE")
        .arg("u")
        .arg("a")
        .arg("b")
        .query(&mut con)
        .unwrap();
    assert_eq!(stored, 4);
    let _: () = redis::cmd("RENAME")
        .arg("u")
        .arg("u2")
        .query(&mut con)
        .unwrap();
    let card: i64 = redis::cmd("SCARD").arg("u2").query(&mut con).unwrap();
    assert_eq!(card, 4);
    let _: () = redis::cmd("FLUSHDB").query(&mut con).unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}

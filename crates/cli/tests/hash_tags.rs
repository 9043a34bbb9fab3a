//! Hash tags in a cluster of `latticekv server` processes: the rule is in force only when
//! every storage member advertises it. With a member started `--hash-tags false` (placing
//! keys as versions before hash tags) the cluster places whole keys and a script over two
//! keys of one tag is refused; once that member has left, the rule changes, the keys move
//! to their tag's worker with nothing lost, and a node joining later keeps each tag's keys
//! together, on whichever node holds the tag.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use common::cluster::{
    alive_members, flags, holders, topology, unreadable, wait_exit, with, write_all,
};
use common::{eventually, serial, NodeProc, Resp};

const TAGS: usize = 40;
const SUFFIXES: [&str; 3] = ["wait", "active", "done"];

/// `job:{qT}:S` for every tag T and suffix S, tag by tag.
fn tagged_keys() -> Vec<String> {
    (0..TAGS)
        .flat_map(|t| SUFFIXES.map(|s| format!("job:{{q{t}}}:{s}")))
        .collect()
}

/// A script reading the first two keys of tag `t` through `node`'s RESP port: `None` if it
/// ran, the error line if refused.
fn script_refusal(node: &NodeProc, t: usize) -> Option<String> {
    let mut r = Resp::connect(node.resp);
    let (a, b) = (format!("job:{{q{t}}}:wait"), format!("job:{{q{t}}}:active"));
    r.send(&[
        b"EVAL",
        b"return {redis.call('EXISTS', KEYS[1]), redis.call('EXISTS', KEYS[2])}",
        b"2",
        a.as_bytes(),
        b.as_bytes(),
    ]);
    let first = r.line();
    if first.starts_with('-') {
        return Some(first);
    }
    assert_eq!(first, "*2\r\n");
    assert_eq!((r.line(), r.line()), (":1\r\n".into(), ":1\r\n".into()));
    None
}

/// Worker address → keys it holds, over `nodes`, as tag → the workers holding its keys.
fn tag_holders(nodes: &[&NodeProc], keys: &[String]) -> HashMap<usize, BTreeSet<String>> {
    let mut out: HashMap<usize, BTreeSet<String>> = HashMap::new();
    for (worker, held) in holders(nodes, keys) {
        for k in held {
            let t = keys.iter().position(|x| *x == k).unwrap() / SUFFIXES.len();
            out.entry(t).or_default().insert(worker.clone());
        }
    }
    out
}

/// True if every key is held by exactly one worker of `nodes`, the same for all keys of a
/// tag.
fn each_tag_on_one_worker(nodes: &[&NodeProc], keys: &[String]) -> bool {
    let counts = holders(nodes, keys).into_values().flatten().fold(
        HashMap::<String, usize>::new(),
        |mut m, k| {
            *m.entry(k).or_default() += 1;
            m
        },
    );
    counts.len() == keys.len()
        && counts.values().all(|&c| c == 1)
        && tag_holders(nodes, keys).values().all(|w| w.len() == 1)
}

#[test]
fn the_rule_waits_for_every_member_and_its_change_loses_nothing() {
    let _serial = serial();
    let base = flags("1", "3000");
    let n1 = NodeProc::server("n1", None, &base);
    let mut n2 = NodeProc::server(
        "n2",
        Some(n1.native),
        &with(&base, &["--hash-tags", "false"]),
    );
    for n in [&n1, &n2] {
        assert!(eventually(Duration::from_secs(20), || alive_members(n) == 2));
    }
    // Each member advertises its placement version; n2 keeps the cluster on whole keys.
    let placement: HashMap<String, u32> = topology(n1.native)
        .members
        .iter()
        .map(|m| (m.node_id.clone(), m.placement))
        .collect();
    assert_eq!(placement["n1"], placement::PLACEMENT_HASH_TAGS);
    assert_eq!(placement["n2"], placement::PLACEMENT_WHOLE_KEY);
    let status = n1.cli_ok(&["status"]);
    assert!(
        status.contains("placement whole keys (members placing whole keys: n2)"),
        "{status}"
    );

    let keys = tagged_keys();
    write_all(n1.native, &keys);
    assert!(unreadable(n1.native, &keys).is_empty());
    let refused: Vec<usize> = (0..TAGS)
        .filter(|&t| script_refusal(&n1, t).is_some())
        .collect();
    // Four workers on two nodes: most tags have their keys apart.
    assert!(refused.len() >= TAGS / 3, "{refused:?}");
    assert!(script_refusal(&n1, refused[0])
        .unwrap()
        .contains("CROSSSLOT"));
    assert!(tag_holders(&[&n1, &n2], &keys)
        .values()
        .any(|w| w.len() > 1));

    // n2 leaves: n1 alone advertises hash tags, so the rule changes and its keys move.
    let out = n2.cli(&["leave", "--addr", &n2.native.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_exit(&mut n2, Duration::from_secs(20));
    assert!(
        eventually(Duration::from_secs(30), || each_tag_on_one_worker(
            &[&n1],
            &keys
        )),
        "the keys of each tag did not come together: {:?}",
        tag_holders(&[&n1], &keys)
    );
    assert_eq!(unreadable(n1.native, &keys), Vec::<usize>::new());
    for t in 0..TAGS {
        assert_eq!(script_refusal(&n1, t), None, "tag {t}");
    }
    assert!(n1.cli_ok(&["status"]).contains("placement hash tags"));

    // A node with hash tags joins: the rule stays, each tag's keys stay together, on
    // either node.
    let n3 = NodeProc::server("n3", Some(n1.native), &base);
    for n in [&n1, &n3] {
        assert!(eventually(Duration::from_secs(20), || alive_members(n) == 2));
    }
    assert!(
        eventually(Duration::from_secs(30), || {
            each_tag_on_one_worker(&[&n1, &n3], &keys)
                && !holders(&[&n3], &keys).values().all(BTreeSet::is_empty)
        }),
        "{:?}",
        tag_holders(&[&n1, &n3], &keys)
    );
    assert_eq!(unreadable(n3.native, &keys), Vec::<usize>::new());
    for t in 0..TAGS {
        assert_eq!(script_refusal(&n1, t), None, "tag {t} through n1");
        assert_eq!(script_refusal(&n3, t), None, "tag {t} through n3");
    }
}

fn disk_node(dir: &std::path::Path, hash_tags: &str) -> NodeProc {
    let dir = dir.to_str().unwrap();
    NodeProc::server(
        "d1",
        None,
        &[
            "--tier",
            "disk",
            "--data-dir",
            dir,
            "--workers",
            "4",
            "--hash-tags",
            hash_tags,
        ],
    )
}

/// Every key of `keys` (tag by tag: a register, a counter, a set) through `c`.
async fn check_disk_keys(c: &client::Client, keys: &[String]) {
    for (i, k) in keys.iter().enumerate() {
        match i % SUFFIXES.len() {
            0 => assert_eq!(
                c.get_lww(k).await.unwrap().as_deref(),
                Some(format!("v{i}").as_bytes()),
                "{k}"
            ),
            1 => assert_eq!(c.counter_get(k).await.unwrap(), i as i64, "{k}"),
            _ => assert_eq!(c.set_members(k).await.unwrap().len(), 2, "{k}"),
        }
    }
}

/// A disk node's store written under whole keys (killed, no shutdown path) and started
/// with hash tags: every key reads back at once (reads that miss ask the other rule's
/// worker while the node walks its store), and the walk brings each tag's keys together.
#[test]
fn a_disk_node_written_under_whole_keys_reads_back_and_regroups_by_tag() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let keys = tagged_keys();
    let rt = common::cluster::rt();
    {
        let node = disk_node(dir.path(), "false");
        rt.block_on(async {
            let c = client::Client::connect(&node.native.to_string())
                .await
                .unwrap();
            for (i, k) in keys.iter().enumerate() {
                match i % SUFFIXES.len() {
                    0 => c.assign(k, format!("v{i}")).await.map(drop).unwrap(),
                    1 => c.counter_add(k, i as i64).await.map(drop).unwrap(),
                    _ => c.set_add(k, ["a", "b"]).await.map(drop).unwrap(),
                }
            }
            check_disk_keys(&c, &keys).await;
        });
        assert!(tag_holders(&[&node], &keys).values().any(|w| w.len() > 1));
        // `node` is dropped here: SIGKILL.
    }
    let node = disk_node(dir.path(), "true");
    rt.block_on(async {
        let c = client::Client::connect(&node.native.to_string())
            .await
            .unwrap();
        check_disk_keys(&c, &keys).await;
    });
    assert!(
        eventually(Duration::from_secs(30), || each_tag_on_one_worker(
            &[&node],
            &keys
        )),
        "{:?}",
        tag_holders(&[&node], &keys)
    );
    rt.block_on(async {
        let c = client::Client::connect(&node.native.to_string())
            .await
            .unwrap();
        check_disk_keys(&c, &keys).await;
    });
}

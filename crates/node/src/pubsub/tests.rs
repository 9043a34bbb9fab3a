use bytes::Bytes;

use super::{Hub, Kind, SubscribeError, QUEUE_MESSAGES};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

#[test]
fn channel_and_pattern_subscribers_each_count() {
    let hub = Hub::default();
    let (a, mut rx_a, _) = hub.register();
    let (p, mut rx_p, _) = hub.register();
    assert_eq!(hub.subscribe(a, Kind::Channel, &b("news")), Ok(1));
    assert_eq!(
        hub.subscribe(a, Kind::Channel, &b("news")),
        Ok(1),
        "twice: once"
    );
    assert_eq!(hub.subscribe(p, Kind::Pattern, &b("n*")), Ok(1));
    assert_eq!(hub.subscribe(p, Kind::Channel, &b("news")), Ok(2));
    assert_eq!(hub.publish(&b("news"), &b("hi"), false), 3);
    assert_eq!(rx_a.try_recv().unwrap().data, b("hi"));
    assert!(rx_a.try_recv().is_err());
    let first = rx_p.try_recv().unwrap();
    let second = rx_p.try_recv().unwrap();
    assert_eq!(first.pattern, None, "channel subscribers first, as Redis");
    assert_eq!(second.pattern, Some(b("n*")));
    assert_eq!(hub.publish(&b("other"), &b("x"), false), 0);
    assert_eq!(hub.numsub(b"news", false), 2);
    assert_eq!(hub.numpat(), 1);
    assert_eq!(
        hub.publish(&b("news"), &b("s"), true),
        0,
        "shard channels apart"
    );
    hub.close(a);
    assert_eq!(hub.numsub(b"news", false), 1);
    assert_eq!(hub.unsubscribe(p, Kind::Channel, b"news"), 1);
    assert_eq!(hub.channels(None, false), Vec::<Bytes>::new());
}

#[test]
fn a_subscriber_that_falls_behind_is_disconnected() {
    let hub = Hub::default();
    let (slow, _rx, gauge) = hub.register();
    let (fast, mut rx_fast, _) = hub.register();
    hub.subscribe(slow, Kind::Channel, &b("c")).unwrap();
    hub.subscribe(fast, Kind::Channel, &b("c")).unwrap();
    for i in 0..QUEUE_MESSAGES {
        assert_eq!(hub.publish(&b("c"), &b("m"), false), 2, "message {i}");
        let m = rx_fast.try_recv().unwrap();
        assert!(m.data == b("m"));
    }
    assert!(!gauge.killed());
    assert_eq!(hub.publish(&b("c"), &b("m"), false), 1);
    assert!(gauge.killed());
    assert_eq!(hub.numsub(b"c", false), 1, "its subscriptions ended");
    assert_eq!(
        hub.subscribe(slow, Kind::Channel, &b("c")),
        Err(SubscribeError::Killed)
    );
}

#[test]
fn the_byte_limit_applies_too() {
    let hub = Hub::default();
    let (id, _rx, gauge) = hub.register();
    hub.subscribe(id, Kind::Channel, &b("c")).unwrap();
    let big = Bytes::from(vec![0u8; 1 << 20]);
    let mut sent = 0;
    while hub.publish(&b("c"), &big, false) == 1 {
        sent += 1;
        assert!(sent <= 64);
    }
    assert_eq!(sent, 31, "32 MiB of 1 MiB messages, each with its overhead");
    assert!(gauge.killed());
}

//! The Rust examples of the README and docs/, verbatim, so that they compile (`cargo test`
//! builds examples). `tests/python/test_docs.py` checks that every `rust` block of the docs
//! appears here, line for line. Compiled, not run: the snippets use the default address and
//! the subscription loop never ends.
#![allow(dead_code, unused_variables)]

use std::error::Error;
use std::time::Duration;

type Result = std::result::Result<(), Box<dyn Error>>;

/// README.md: "And from Rust", then "Consistency levels".
#[rustfmt::skip] // verbatim, as in the docs
async fn readme() -> Result {
    let c = client::Client::connect("127.0.0.1:7700").await?;
    c.assign("greeting", "hello").await?;
    c.counter_add("visits", 1).await?;
    c.set_add("tags", ["red", "green"]).await?;

    let s = c.session(client::Level::Causal); // or ReadYourWrites, Pram, ItemCut…
    s.write("cart", "apple").await?;
    let mut t = c.session(client::Level::ReadCommitted).begin()?;
    t.write("alice", "90").await?;
    t.write("bob", "110").await?;
    t.commit().await?; // one batch, all or retried
    Ok(())
}

/// docs/consistency.md.
#[rustfmt::skip] // verbatim, as in the docs
async fn consistency() -> Result {
    let c = client::Client::connect("127.0.0.1:7700").await?;
    let s = c.session(client::Level::Causal);
    s.write("cart", "apple").await?;
    let siblings = s.read("cart").await?; // the register's value(s)

    let rc = c.session(client::Level::ReadCommitted);
    let mut t = rc.begin()?;
    let balance = t.read("alice").await?;
    t.write("alice", "90").await?;
    t.write("bob", "110").await?;
    t.commit().await?; // one batch, one request
    Ok(())
}

/// docs/subscriptions.md.
#[rustfmt::skip] // verbatim, as in the docs
async fn subscriptions() -> Result {
    let c = client::Client::connect("127.0.0.1:7700").await?;
    let mut sub = c.subscribe(["config", "leader"], Duration::from_millis(200)).await?;
    while let Some(n) = sub.next().await {
        println!("{:?} is now {:?}", n.key, n.value); // value None: absent or deleted
    }
    Ok(())
}

fn main() {
    println!("the docs' Rust examples compile; they are not meant to be run");
}

//! The session driver: each connection is one [`client::Session`] at the run's level, doing
//! one operation at a time (a session's operations are sequential by definition), so the
//! latency of an operation is what the level costs a caller: extra round trips (a causal
//! read that asks every replica), client-side merges, a commit's batch through the front
//! port. Reads are `Session::get`; writes are `Session::write` (an LWW register, or a causal
//! register on the causal levels); a read-modify-write is both.
//!
//! On the transactional levels each round (`--pipeline` operations) is one transaction, as
//! in the Anna paper's consistency experiment (six operations per transaction), and every
//! operation of it counts the whole transaction's time, begin to commit, as its latency
//! (its writes are not visible before the commit).

use std::time::Instant;

use client::Client;

use crate::clock::micros;
use crate::error::BenchError;
use crate::setup::{ConnCtx, Setup};
use crate::workload::Action;

/// Runs one connection's session until the phase ends.
pub(crate) async fn run(ctx: &mut ConnCtx) -> Result<(), BenchError> {
    let setup = ctx.setup.clone();
    let client = Client::connect(&setup.addr).await?;
    let session = client.session(setup.level);
    let mut slots = Vec::new();
    let mut first_error: Option<String> = None;
    while ctx.next_round(&mut slots).await {
        if setup.level.is_transactional() {
            let start = Instant::now();
            let result = transaction(&session, &setup, &slots).await;
            let latency = micros(start.elapsed());
            for slot in slots.iter_mut() {
                slot.latency_us = latency;
                slot.error = result.is_err();
            }
            if let Err(e) = result {
                first_error.get_or_insert(e.to_string());
            }
            ctx.control
                .finish_round(&slots, &mut ctx.stats.borrow_mut(), &mut first_error);
            continue;
        }
        for slot in slots.iter_mut() {
            let key = setup.keys.get(slot.key);
            for phase in 0..2 {
                let Some(action) = slot.kind.action(phase) else {
                    continue;
                };
                let start = Instant::now();
                let result = match action {
                    Action::Read => session.get(key).await.map(|_| ()),
                    Action::Write => {
                        let value = setup.values.get(slot.variant as usize);
                        session.write(key, value).await
                    }
                };
                slot.latency_us += micros(start.elapsed());
                if let Err(e) = result {
                    slot.error = true;
                    if first_error.is_none() {
                        first_error = Some(e.to_string());
                    }
                }
            }
        }
        ctx.control
            .finish_round(&slots, &mut ctx.stats.borrow_mut(), &mut first_error);
    }
    Ok(())
}

/// Runs a round's operations as one transaction.
async fn transaction(
    session: &client::Session,
    setup: &Setup,
    slots: &[crate::workload::Slot],
) -> Result<(), client::ClientError> {
    let mut txn = session.begin()?;
    for slot in slots {
        let key = setup.keys.get(slot.key);
        for phase in 0..2 {
            match slot.kind.action(phase) {
                Some(Action::Read) => {
                    txn.get(key).await?;
                }
                Some(Action::Write) => {
                    txn.write(key, setup.values.get(slot.variant as usize))
                        .await?
                }
                None => {}
            }
        }
    }
    txn.commit().await
}

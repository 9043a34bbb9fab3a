//! The simulated network: reachability under partitions, sending (through the peer plane's
//! encoding between nodes), delivery.

use super::*;

impl World {
    // ---- network --------------------------------------------------------------------------

    /// True if nodes `a` and `b` can talk (no partition between them).
    pub(super) fn reachable(&self, a: NodeKey, b: NodeKey) -> bool {
        match &self.partition {
            Some(p) => a == b || p.side.contains(&a) == p.side.contains(&b),
            None => true,
        }
    }

    /// True if `a`'s agent considers `b` dead because a partition has separated them for
    /// longer than the failure detector waits.
    pub(super) fn suspects(&self, a: NodeKey, b: NodeKey) -> bool {
        match &self.partition {
            Some(p) => !self.reachable(a, b) && self.now >= p.start + self.p.detect_ms,
            None => false,
        }
    }

    /// Sends a request from `from` to worker `to` (its current incarnation); a request that
    /// fails on the spot is returned with its failure.
    pub(super) fn send(
        &mut self,
        from: Replica,
        from_inc: u64,
        to: Replica,
        message: Message,
    ) -> Option<(ReqId, PeerFailure)> {
        let dest = self
            .nodes
            .get(&to.node)
            .filter(|n| n.status != Status::Down && (to.worker as usize) < n.workers.len())
            .map(|n| n.inc);
        match dest {
            Some(to_inc) => self.send_to(from, from_inc, to, to_inc, message),
            None => {
                // Connection refused: the request certainly did not run.
                if let Message::Request { req, .. } = message {
                    self.report.messages += 1;
                    self.report.lost += 1;
                    self.schedule(
                        1,
                        Event::Refused {
                            from,
                            from_inc,
                            req,
                        },
                    );
                }
                None
            }
        }
    }

    /// Sends a message to `to` of incarnation `to_inc`: through the mesh within a node
    /// (reliable), over the network between nodes (loss, duplication, delay, partitions),
    /// in the peer plane's encoding. A request to a worker of the same node whose inbox is
    /// full fails on the spot: it is returned with its failure.
    pub(super) fn send_to(
        &mut self,
        from: Replica,
        from_inc: u64,
        to: Replica,
        to_inc: u64,
        message: Message,
    ) -> Option<(ReqId, PeerFailure)> {
        let kind = describe(&message);
        if from.node == to.node {
            if let Message::Request { req, .. } = &message {
                if self.rng.f64() < self.p.inbox_full {
                    // The worker's inbox is full: the send fails at once.
                    let why = format!("worker {}'s inbox is full", to.worker);
                    return Some((*req, PeerFailure::Unreachable(why)));
                }
            }
            self.in_flight += 1;
            let delay = self.rng.u64(0..=1);
            let env = Envelope {
                from,
                from_inc,
                to,
                to_inc,
                message,
            };
            self.schedule(delay, Event::Deliver(env));
            return None;
        }
        let message = through_the_wire(message);
        self.report.messages += 1;
        let fate = if !self.reachable(from.node, to.node) {
            Some("partitioned")
        } else if !self.healing && self.rng.f64() < self.p.loss {
            Some("lost")
        } else {
            None
        };
        if let Some(fate) = fate {
            self.report.lost += 1;
            let (f, t) = (self.name(from), self.name(to));
            self.trace
                .event(self.now, || format!("{kind} {f} -> {t} {fate}"));
            // The broken modes: a lost batch is acknowledged anyway.
            if let (
                Mode::AckOnTimeout | Mode::NoRetryNoAntiEntropy,
                Message::Request {
                    req,
                    msg: PeerMsg::Replicate { entries, .. },
                },
            ) = (self.p.mode, &message)
            {
                let reply = Message::Reply {
                    req: *req,
                    result: Ok(PeerReply::Ack(entries.len() as u64)),
                };
                let delay = self.rng.u64(1..=self.p.max_delay_ms);
                self.in_flight += 1;
                let env = Envelope {
                    from: to,
                    from_inc: to_inc,
                    to: from,
                    to_inc: from_inc,
                    message: reply,
                };
                self.schedule(delay, Event::Deliver(env));
            }
            return None;
        }
        let copies = if !self.healing && self.rng.f64() < self.p.dup {
            self.report.duplicated += 1;
            2
        } else {
            1
        };
        let delay = self.rng.u64(1..=self.p.max_delay_ms);
        self.in_flight += 1;
        let env = Envelope {
            from,
            from_inc,
            to,
            to_inc,
            message,
        };
        if copies == 2 {
            let again = clone_message(&env.message);
            let delay2 = self.rng.u64(1..=self.p.max_delay_ms);
            self.in_flight += 1;
            self.schedule(
                delay2,
                Event::Deliver(Envelope {
                    from,
                    from_inc,
                    to,
                    to_inc,
                    message: again,
                }),
            );
        }
        self.schedule(delay, Event::Deliver(env));
        None
    }

    pub(super) fn deliver(&mut self, env: Envelope) -> Result<(), String> {
        self.in_flight -= 1;
        if !self.reachable(env.from.node, env.to.node) {
            return Ok(());
        }
        let (from, to) = (env.from, env.to);
        let kind = describe(&env.message);
        let (f, t) = (self.name(from), self.name(to));
        self.trace
            .event(self.now, || format!("{kind} {f} -> {t} delivered"));
        match env.message {
            Message::Request { req, msg } => {
                self.next_token += 1;
                let token = self.next_token;
                self.asked.insert(
                    token,
                    Asked {
                        asker: from,
                        asker_inc: env.from_inc,
                        req,
                    },
                );
                let handled =
                    self.with_core(to, Some(env.to_inc), |c| c.on_peer(from, msg, Token(token)));
                if handled.is_none() {
                    self.asked.remove(&token);
                }
            }
            Message::Reply { req, result } => {
                let handoff = self.handoffs.remove(&(to, req.0));
                if result.is_ok() {
                    if let Some((replica, entries)) = handoff {
                        for (key, record) in entries {
                            self.handoff_acks
                                .entry((to, key))
                                .or_default()
                                .push((replica, record));
                        }
                    }
                }
                self.with_core(to, Some(env.to_inc), |c| c.on_reply(req, result));
            }
        }
        Ok(())
    }
}

/// A message's kind, for the trace.
pub(super) fn describe(m: &Message) -> String {
    match m {
        Message::Request { msg, .. } => match msg {
            PeerMsg::Replicate { entries, durable } => {
                format!(
                    "replicate({}{})",
                    entries.len(),
                    if *durable { ", durable" } else { "" }
                )
            }
            other => other.name().to_string(),
        },
        Message::Reply { result, .. } => match result {
            Ok(_) => "answer".into(),
            Err(e) => format!("failure {e:?}"),
        },
    }
}

/// A message as the other node decodes it: requests and answers between nodes cross the
/// peer plane's protobuf encoding.
pub(super) fn through_the_wire(m: Message) -> Message {
    match m {
        Message::Request { req, msg } => {
            let pb = node::peer::convert::request_to_pb(req.0, msg);
            match node::peer::convert::request_from_pb(pb) {
                Ok((id, msg)) => Message::Request {
                    req: ReqId(id),
                    msg,
                },
                Err(e) => panic!("a request does not decode: {e}"),
            }
        }
        Message::Reply { req, result } => {
            let pb = node::peer::convert::response_to_pb(
                req.0,
                result.map_err(|f| match f {
                    PeerFailure::Refused(e) => e,
                    other => other.to_error("answer"),
                }),
            );
            let (id, result) = node::peer::convert::response_from_pb(pb);
            Message::Reply {
                req: ReqId(id),
                result,
            }
        }
    }
}

pub(super) fn clone_message(m: &Message) -> Message {
    match m {
        Message::Request { req, msg } => Message::Request {
            req: *req,
            msg: msg.clone(),
        },
        Message::Reply { req, result } => Message::Reply {
            req: *req,
            result: result.clone(),
        },
    }
}

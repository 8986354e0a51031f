//! Writes: checked, stamped and proposed through the log here when this node leads, or
//! forwarded to the leader (in batches, see `forwarder`) when it follows.

use super::{Node, NodeError};
use crate::limits::{CARRY_REFRESH_AFTER, LEADERS_FOLLOWED, QUORUM_WAIT};
use crate::raft::Applied;
use leasehold_core::format::FORMAT_1;
use leasehold_core::{validate, Command, Limits, Op, RequestId};

/// Whether a write slow to commit has a tick logged after it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Refresh {
    WhenSlow,
    /// The refreshing tick itself.
    Never,
}

/// The refresh of carried time claimed from the leader clock, released however its task ends.
pub(super) struct RefreshClaim(pub(super) Node);

impl Drop for RefreshClaim {
    fn drop(&mut self) {
        self.0.inner.clock.refreshed();
    }
}

impl Node {
    /// [`Node::write`] here or, when another node leads, sent there with the other writes
    /// bound for it (see [`forwarder::Forwarder`]). The leader answers a forwarded write itself
    /// and never forwards it again. What the client-facing service calls.
    ///
    /// A leader that stopped answering without closing its connections (paused, or cut off)
    /// holds a forwarded write until the call times out, long after this node knows it no
    /// longer leads. So once this node sees another leader, it sends the write on to that one
    /// (or applies it, if it leads now): under its request id the write applies once however
    /// many leaders it reached. Handing it back to the client instead cost a whole client
    /// attempt whenever the client's next node was the stopped leader (the fault suite's
    /// five-node probe: leases living 0.5 to 1.3 s past their TTL). A write without a request
    /// id could apply twice, so it is given up (indeterminate) instead, except a registration,
    /// where that costs only an unused session.
    pub async fn write_or_forward(
        &self,
        op: Op,
        request: Option<RequestId>,
    ) -> Result<Applied, NodeError> {
        let follows = request.is_some() || matches!(op.bare(), Op::Register);
        let mut op = op;
        let mut leaders_followed = 0;
        loop {
            // Only a follower needs the op after a refusal, to forward it: the leader copies
            // nothing.
            let leads = self.is_leader() && !self.inner.proposals.is_closed();
            let spare = (!leads).then(|| op.clone());
            let (leader, addr, spare) = match (self.write(op, request).await, spare) {
                (Ok(applied), _) => return Ok(applied),
                (
                    Err(NodeError::NotLeader {
                        leader: Some((leader, addr)),
                        ..
                    }),
                    Some(spare),
                ) => (leader, addr, spare),
                (Err(e), _) => return Err(e),
            };
            let forwarded = self
                .inner
                .forwarder
                .write(leader, &addr, (spare.clone(), request));
            tokio::select! {
                answer = forwarded => return answer,
                () = self.leader_moves_from(leader) => {}
            }
            leaders_followed += 1;
            if !follows || leaders_followed == LEADERS_FOLLOWED {
                // The write may have reached the old leader: indeterminate, and the client
                // retries it by name, here or where the leader is now.
                return Err(NodeError::ForwardLost {
                    leader,
                    addr,
                    reason: "this node no longer sees it lead".into(),
                });
            }
            op = spare;
        }
    }

    /// Proposes `op` through the log and returns what applying it answered. A `request` that
    /// was applied before is answered as it was then.
    pub async fn write(&self, op: Op, request: Option<RequestId>) -> Result<Applied, NodeError> {
        self.write_many(vec![(op, request)])
            .await
            .pop()
            .unwrap_or_else(|| Err(NodeError::Invariant("a write got no answer".into())))
    }

    /// Proposes `writes` together, so that they share log entries, and answers each in order.
    pub async fn write_many(
        &self,
        writes: Vec<(Op, Option<RequestId>)>,
    ) -> Vec<Result<Applied, NodeError>> {
        self.propose(writes, Refresh::WhenSlow).await
    }

    /// [`Node::write_many`]; `refresh` says whether a slow commit has a tick logged after it
    /// (see [`Node::refresh_carried_time`]).
    pub(super) async fn propose(
        &self,
        writes: Vec<(Op, Option<RequestId>)>,
        refresh: Refresh,
    ) -> Vec<Result<Applied, NodeError>> {
        let checked: Vec<_> = writes
            .into_iter()
            .map(|(op, request)| self.check_write(&op).map(|()| (op, request)))
            .collect();
        if checked.iter().all(Result::is_err) {
            // Nothing to propose: no need to wait for a leader.
            return checked
                .into_iter()
                .filter_map(Result::err)
                .map(Err)
                .collect();
        }
        let (term, at_ms, _pass) = match self.stamped_pass().await {
            Ok(stamped) => stamped,
            Err(e) => return checked.into_iter().map(|w| w.and(Err(e.clone()))).collect(),
        };
        let stamped = tokio::time::Instant::now();
        let deadline = tokio::time::Instant::now() + QUORUM_WAIT;
        // Writes under a cap (see `caps`) hold their seats until answered.
        let mut seats = Vec::new();
        let answers: Vec<_> = checked
            .into_iter()
            .map(|w| {
                let (op, request) = w?;
                seats.extend(self.take_seat(&op)?);
                let op = logged(op, at_ms);
                Ok(self.inner.proposer.submit(Command { at_ms, request, op }))
            })
            .collect();
        let mut silent = std::pin::pin!(self.inner.quorum.until_silent(term));
        let mut given_up = false;
        let mut results = Vec::with_capacity(answers.len());
        for answer in answers {
            results.push(match answer {
                Err(e) => Err(e),
                Ok(_) if given_up => Err(NodeError::QuorumWentSilent { me: self.inner.id }),
                Ok(answer) => tokio::select! {
                    biased;
                    answer = tokio::time::timeout_at(deadline, answer) => match answer {
                        Err(_) => Err(NodeError::NoQuorum(QUORUM_WAIT)),
                        Ok(Err(_)) => Err(NodeError::Unanswered),
                        Ok(Ok(Ok(applied))) => Ok(applied),
                        // Handed to Raft: whatever it answers, the write may be in the log.
                        Ok(Ok(Err(e))) => Err(NodeError::proposal_failed(e)),
                    },
                    () = &mut silent => {
                        given_up = true;
                        Err(NodeError::QuorumWentSilent { me: self.inner.id })
                    }
                },
            });
        }
        if refresh == Refresh::WhenSlow
            && at_ms.is_some()
            && stamped.elapsed() > CARRY_REFRESH_AFTER
            && results.iter().any(Result::is_ok)
        {
            self.refresh_carried_time();
        }
        results
    }

    /// The term and stamp to propose under, with a pass counted until the proposals are
    /// answered, so that a leader handing over knows when its log is whole; a leader that began
    /// handing over meanwhile waits, as for an election, for its successor.
    async fn stamped_pass(
        &self,
    ) -> Result<(u64, Option<u64>, super::hand_over::InFlight<'_>), NodeError> {
        loop {
            let (term, at_ms) = self.leader_stamp().await?;
            if let Some(pass) = self.inner.proposals.enter() {
                return Ok((term, at_ms, pass));
            }
        }
    }

    /// Refuses an operation of log format `format` that not every member reads yet. Judged by
    /// the leader, which hears every member (learners too: they apply the log); a follower
    /// hears only the leader, and refuses only what the leader itself would not read (forwarded,
    /// it would fail to decode there, and with it every write forwarded in the same batch).
    fn check_format(&self, format: leasehold_core::format::Format) -> Result<(), NodeError> {
        let protocols = self.inner.channels.protocols();
        let behind = match self.is_leader() {
            true => protocols.behind_for(self.inner.id, self.member_ids(), format),
            false => {
                let leader = self.inner.raft.metrics().borrow().current_leader;
                let read = |id| protocols.of(id).map_or(FORMAT_1, |a| a.format);
                leader
                    .map(|id| (id, read(id)))
                    .filter(|(_, read)| *read < format)
                    .map(|behind| vec![behind])
            }
        };
        match behind {
            Some(behind) => Err(NodeError::FormatNotAgreed { format, behind }),
            None => Ok(()),
        }
    }

    /// Refuses what no node would propose: bad input, an op for the other clock, or one of a
    /// log format that not every voter reads yet (see `raft::protocol`).
    pub(super) fn check_write(&self, op: &Op) -> Result<(), NodeError> {
        validate(op)?;
        let format = op.format();
        // A format the applied state already holds is in use: every member must read it to
        // apply the log as it stands, so more of it risks nothing new. A leader that restarted
        // while a member is down, and so never heard that member announce, still serves it.
        // (Its format is read without the state's lock, which the apply thread holds across
        // whole batches: each etcd write would wait on it.)
        if format > FORMAT_1 && format > self.inner.state.table_format() {
            self.check_format(format)?;
        }
        match (op.bare(), self.inner.manual_clock) {
            (Op::Advance { .. }, false) => Err(NodeError::WrongClock(
                "advance is refused: this cluster runs the default clock; \
                 start it with --manual-clock to move time by hand",
            )),
            (Op::Tick, true) => Err(NodeError::WrongClock(
                "tick is refused under the manual clock",
            )),
            _ => Ok(()),
        }
    }
}

/// What the leader logs of `op`, stamped `at_ms`: under the default clock every grant and
/// renewal held `Limits::GRANT_MARGIN_MS` longer than asked, what store time may gain on real
/// time when a leader's clock changes rate (see `clock`).
fn logged(op: Op, at_ms: Option<u64>) -> Op {
    match at_ms {
        Some(_) => op.held_longer(Limits::GRANT_MARGIN_MS),
        None => op,
    }
}

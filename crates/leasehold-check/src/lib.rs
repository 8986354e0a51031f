//! Checkers for the fault suite: given what clients saw (the history) and what the cluster
//! logged, find anomalies. Pure: no I/O, so each checker is tested on hand-made bad histories.
//!
//! The log is the ground truth of what happened: every command a node applied, at its index.
//! Replaying it through the reference [`model`], written from the README and sharing no code
//! with the product's table, gives each command's outcome; the linearizability checker ties
//! every acknowledged answer to that replay, so a bug in the product's table (a late retry
//! applied twice, a fence check gone missing) is an answer the model does not give. The fencing
//! and exclusion checkers judge the replay on their own terms, and the store-time checker
//! ([`store_time_follows_real_time`]) judges the clients' answers against their own clock. Both
//! fault suites draw their schedules from [`Rng`].

#![warn(missing_docs)]

mod clock;
mod etcd_history;
pub mod etcd_model;
mod fencing;
mod history;
mod limits;
mod linearizable;
pub mod model;
mod rng;

pub use clock::{most_store_time_gained, store_time_follows_real_time, store_time_gains_at_most};
pub use etcd_history::{etcd_linearizable, EtcdCompletion, EtcdOperation, EtcdRequest};
pub use fencing::{fencing, mutual_exclusion, real_time_exclusion};
pub use history::{replay, Anomaly, Answer, Completion, Log, Operation, Replayed, Request};
pub use limits::ROUNDING_NS;
pub use linearizable::{linearizable, read_answer};
pub use rng::Rng;

use leasehold_core::Op;

/// What the checkers allow past their invariants, in a run whose faults the server bounds
/// rather than rules out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tolerance {
    /// How much store time may gain on the clients' clock (see [`store_time_gains_at_most`]).
    pub store_time_gain_ns: u64,
}

/// Every checker over one run.
pub fn check_all(history: &[Operation], log: &Log) -> Vec<Anomaly> {
    check_all_within(history, log, Tolerance::default())
}

/// Every checker over one run, allowing what `tolerance` says.
pub fn check_all_within(history: &[Operation], log: &Log, tolerance: Tolerance) -> Vec<Anomaly> {
    let applied = match replay(log) {
        Ok(applied) => applied,
        Err(anomaly) => return vec![anomaly],
    };
    let mut anomalies = linearizable(history, log, &applied);
    anomalies.extend(fencing(&applied));
    anomalies.extend(mutual_exclusion(&applied));
    anomalies.extend(real_time_exclusion(history, &applied));
    // Under the manual clock store time moves by what `Advance` says, not with real time.
    let manual = applied.iter().any(|a| matches!(a.op, Op::Advance { .. }));
    if !manual {
        let gain_ns = tolerance.store_time_gain_ns;
        anomalies.extend(store_time_gains_at_most(history, gain_ns));
    }
    anomalies
}

#[cfg(test)]
mod tests {
    //! Each checker must flag the bad history it exists for, and pass a clean one.
    use crate::*;
    use leasehold_core::{Command, Fence, Limits, Outcome};

    /// The hand-made histories' unit of time: as long as the log's stamps step (100 ms, see
    /// [`log_of`]) over ten, so that their clients' clock keeps up with store time.
    const T: u64 = 10_000_000;

    fn acquire(lease: &str, holder: &str) -> Op {
        Op::Acquire {
            lease: lease.into(),
            holder: holder.into(),
            ttl_ms: 1_000,
        }
    }
    fn put(key: &str, value: &str, fence: Option<(&str, u64)>) -> Op {
        Op::Put {
            key: key.into(),
            value: value.into(),
            fence: fence.map(|(lease, token)| Fence {
                lease: lease.into(),
                token,
            }),
        }
    }

    /// A log of `ops` stamped 100 ms apart, after Raft's own first entry.
    fn log_of(ops: &[Op]) -> Log {
        let mut log = vec![(1, vec![])];
        for (i, op) in ops.iter().enumerate() {
            let command = Command {
                at_ms: Some(i as u64 * 100),
                request: None,
                op: op.clone(),
            };
            log.push((i as u64 + 2, vec![command]));
        }
        log
    }

    /// A history in which each write of `log` was acknowledged with the replay's answer, one
    /// after the other, 10 ns apart.
    fn honest_history(log: &Log) -> Vec<Operation> {
        replay(log)
            .unwrap()
            .into_iter()
            .enumerate()
            .map(|(i, a)| Operation {
                client: 0,
                request: Request::Write(a.op),
                invoked_ns: i as u64 * 10 * T,
                completed_ns: (i as u64 * 10 + 5) * T,
                completion: Completion::Ok {
                    log_index: a.index,
                    position: a.position,
                    store_time_ms: a.store_time_ms,
                    answer: Answer::Outcome(a.outcome),
                },
            })
            .collect()
    }

    /// A read invoked at `invoked` (in units of [`T`]).
    fn read(key: &str, at_index: u64, value: Option<&str>, invoked: u64) -> Operation {
        let invoked_ns = invoked * T;
        Operation {
            client: 1,
            request: Request::Get { key: key.into() },
            invoked_ns,
            completed_ns: invoked_ns + 5 * T,
            completion: Completion::Ok {
                log_index: at_index,
                position: 0,
                store_time_ms: 0,
                answer: Answer::Value(value.map(|v| v.as_bytes().to_vec())),
            },
        }
    }

    fn scenario() -> Log {
        log_of(&[
            acquire("l", "a"),
            put("k", "1", Some(("l", 1))),
            acquire("l", "b"), // refused: held by a
            put("k", "2", None),
        ])
    }

    #[test]
    fn a_clean_history_passes_every_checker() {
        let log = scenario();
        let mut history = honest_history(&log);
        history.push(read("k", 5, Some("2"), 1_000));
        history.push(read("k", 3, Some("1"), 15)); // concurrent with the write at 4: fine
        assert_eq!(check_all(&history, &log), vec![]);
    }

    #[test]
    fn a_lost_write_is_flagged() {
        let log = scenario();
        let mut history = honest_history(&log);
        // A write acknowledged at index 5, but the log stops at 5 with another command.
        history.push(Operation {
            client: 2,
            request: Request::Write(put("lost", "x", None)),
            invoked_ns: 500 * T,
            completed_ns: 505 * T,
            completion: Completion::Ok {
                log_index: 5,
                position: 0,
                store_time_ms: 300,
                answer: Answer::Outcome(Outcome::Written),
            },
        });
        let anomalies = check_all(&history, &log);
        assert!(
            anomalies.iter().any(|a| a.checker == "durability"),
            "{anomalies:?}"
        );
    }

    #[test]
    fn an_acquire_logged_with_the_grant_margin_is_the_one_sent_and_any_other_ttl_is_lost() {
        let sent = [acquire("l", "a"), put("k", "1", None)];
        let history_of = |log: &Log| {
            let mut history = honest_history(log);
            for (op, sent) in history.iter_mut().zip(&sent) {
                op.request = Request::Write(sent.clone());
            }
            history
        };
        let logged = sent
            .clone()
            .map(|op| op.held_longer(Limits::GRANT_MARGIN_MS));
        let log = log_of(&logged);
        assert_eq!(check_all(&history_of(&log), &log), vec![]);
        let log = log_of(&sent.clone().map(|op| op.held_longer(1)));
        let anomalies = check_all(&history_of(&log), &log);
        assert!(
            anomalies.iter().any(|a| a.what.contains("a lost write")),
            "{anomalies:?}"
        );
    }

    #[test]
    fn a_write_beyond_the_end_of_the_log_is_lost() {
        let log = scenario();
        let mut history = honest_history(&log);
        if let Completion::Ok { log_index, .. } = &mut history[0].completion {
            *log_index = 99;
        }
        let anomalies = check_all(&history, &log);
        assert!(
            anomalies.iter().any(|a| a.what.contains("log ends at 5")),
            "{anomalies:?}"
        );
    }

    #[test]
    fn a_stale_fenced_write_accepted_is_flagged() {
        // As if the table's fence check had been removed: b holds token 2, a's token 1 lands.
        let applied = vec![
            Replayed {
                request: None,
                retry: false,
                position: 0,
                index: 2,
                store_time_ms: 0,
                op: acquire("l", "a"),
                outcome: Outcome::Granted {
                    token: 1,
                    expires_at_ms: 1_000,
                    renewed: false,
                },
                identity: None,
            },
            Replayed {
                request: None,
                retry: false,
                position: 0,
                index: 3,
                store_time_ms: 1_500,
                op: acquire("l", "b"),
                outcome: Outcome::Granted {
                    token: 2,
                    expires_at_ms: 2_500,
                    renewed: false,
                },
                identity: None,
            },
            Replayed {
                request: None,
                retry: false,
                position: 0,
                index: 4,
                store_time_ms: 1_600,
                op: put("k", "by a", Some(("l", 1))),
                outcome: Outcome::Written,
                identity: None,
            },
        ];
        let anomalies = fencing(&applied);
        assert_eq!(anomalies.len(), 1, "{anomalies:?}");
        assert!(anomalies[0].what.contains("stale token"), "{anomalies:?}");
    }

    #[test]
    fn a_token_that_does_not_grow_is_flagged() {
        let grant = |index, token| Replayed {
            request: None,
            retry: false,
            index,
            position: 0,
            store_time_ms: index * 1_000,
            op: acquire("l", "a"),
            outcome: Outcome::Granted {
                token,
                expires_at_ms: index * 1_000 + 10,
                renewed: false,
            },
            identity: None,
        };
        let anomalies = fencing(&[grant(2, 1), grant(3, 1)]);
        assert!(
            anomalies.iter().any(|a| a.what.contains("not above 1")),
            "{anomalies:?}"
        );
    }

    #[test]
    fn an_overlapping_grant_is_flagged() {
        let grant = |index, holder: &str, at_ms, token| Replayed {
            request: None,
            retry: false,
            index,
            position: 0,
            store_time_ms: at_ms,
            op: acquire("l", holder),
            outcome: Outcome::Granted {
                token,
                expires_at_ms: at_ms + 1_000,
                renewed: false,
            },
            identity: None,
        };
        let anomalies = mutual_exclusion(&[grant(2, "a", 0, 1), grant(3, "b", 500, 2)]);
        assert_eq!(anomalies.len(), 1, "{anomalies:?}");
        assert_eq!(anomalies[0].checker, "mutual exclusion");
        // After a release the next grant may start at once.
        let released = Replayed {
            request: None,
            retry: false,
            index: 3,
            position: 0,
            store_time_ms: 400,
            op: Op::Release {
                lease: "l".into(),
                holder: "a".into(),
                token: 1,
            },
            outcome: Outcome::Released { token: 1 },
            identity: None,
        };
        assert_eq!(
            mutual_exclusion(&[grant(2, "a", 0, 1), released, grant(4, "b", 500, 2)]),
            vec![]
        );
    }

    #[test]
    fn a_renewal_answered_renewed_for_a_lease_not_held_so_is_flagged() {
        use leasehold_core::{Renewal, Renewed};
        let replayed = |index, at_ms, op, outcome| Replayed {
            request: None,
            retry: false,
            index,
            position: 0,
            store_time_ms: at_ms,
            op,
            outcome,
            identity: None,
        };
        let grant = replayed(
            2,
            0,
            acquire("l", "a"),
            Outcome::Granted {
                token: 1,
                expires_at_ms: 1_000,
                renewed: false,
            },
        );
        let renew = |index, at_ms, holder: &str, token| {
            let leases = vec![Renewal {
                lease: "l".into(),
                holder: holder.into(),
                token,
                ttl_ms: 1_000,
            }];
            let until = Renewed::Until {
                expires_at_ms: at_ms + 1_000,
            };
            replayed(
                index,
                at_ms,
                Op::Renew { leases },
                Outcome::Renewed(vec![until]),
            )
        };
        let honest = [grant.clone(), renew(3, 500, "a", 1)];
        assert_eq!(fencing(&honest), vec![]);
        assert_eq!(mutual_exclusion(&honest), vec![]);
        // Past the expiry, by another holder, or under another token: each a renewal the
        // store must have refused.
        for wrong in [renew(3, 1_000, "a", 1), renew(3, 500, "b", 1)] {
            let anomalies = mutual_exclusion(&[grant.clone(), wrong]);
            assert_eq!(anomalies.len(), 1, "{anomalies:?}");
        }
        let anomalies = fencing(&[grant, renew(3, 500, "a", 2)]);
        assert!(
            anomalies.iter().any(|a| a.what.contains("renewed token 2")),
            "{anomalies:?}"
        );
    }

    /// Store time says a's lease expired (the leader's clock ran fast: 1,500 ms of store time in
    /// 600 ms of real time), so the store granted it to b; the clients' clock says b got it
    /// while a had been promised it.
    fn fast_clock_history(b_completed_ms: u64, release_between: bool) -> (Log, Vec<Operation>) {
        let acquire = |holder: &str| Op::Acquire {
            lease: "l".into(),
            holder: holder.into(),
            ttl_ms: 1_000,
        };
        let command = |at_ms, op: &Op| Command {
            at_ms: Some(at_ms),
            request: None,
            op: op.clone(),
        };
        let release = Op::Release {
            lease: "l".into(),
            holder: "a".into(),
            token: 1,
        };
        let mut log = vec![(1, vec![]), (2, vec![command(0, &acquire("a"))])];
        if release_between {
            log.push((3, vec![command(100, &release)]));
        }
        let b_index = log.len() as u64 + 1;
        log.push((b_index, vec![command(1_500, &acquire("b"))]));
        let ms = 1_000_000;
        let done =
            |request: Op, invoked_ns, completed_ns, index, store_time_ms, answer| Operation {
                client: 0,
                request: Request::Write(request),
                invoked_ns,
                completed_ns,
                completion: Completion::Ok {
                    log_index: index,
                    position: 0,
                    store_time_ms,
                    answer: Answer::Outcome(answer),
                },
            };
        let mut history = vec![
            done(
                acquire("a"),
                0,
                ms,
                2,
                0,
                Outcome::Granted {
                    token: 1,
                    expires_at_ms: 1_000,
                    renewed: false,
                },
            ),
            done(
                acquire("b"),
                500 * ms,
                b_completed_ms * ms,
                b_index,
                1_500,
                Outcome::Granted {
                    token: 2,
                    expires_at_ms: 2_500,
                    renewed: false,
                },
            ),
        ];
        if release_between {
            // a released it; its answer was lost, but the log has the release.
            history.push(Operation {
                client: 0,
                request: Request::Write(release),
                invoked_ns: 50 * ms,
                completed_ns: 60 * ms,
                completion: Completion::Indeterminate("answer lost".into()),
            });
        }
        (log, history)
    }

    #[test]
    fn a_grant_before_the_previous_holders_ttl_passed_in_real_time_is_flagged() {
        let (log, history) = fast_clock_history(600, false);
        let applied = replay(&log).unwrap();
        let anomalies = real_time_exclusion(&history, &applied);
        assert_eq!(anomalies.len(), 1, "{anomalies:?}");
        assert!(anomalies[0].what.contains("400 ms early"), "{anomalies:?}");
        // Store time alone sees nothing wrong: that is the point of judging in real time.
        assert!(mutual_exclusion(&applied).is_empty());
        // The clock that ran fast is itself an anomaly, whatever it was used for.
        let checkers: Vec<_> = check_all(&history, &log)
            .iter()
            .map(|a| a.checker)
            .collect();
        assert_eq!(checkers, ["real-time exclusion", "store time"]);
    }

    #[test]
    fn store_time_that_gains_on_the_clients_clock_is_flagged_and_rounding_is_not() {
        let (_, history) = fast_clock_history(600, false);
        let anomalies = store_time_follows_real_time(&history);
        assert_eq!(anomalies.len(), 1, "{anomalies:?}");
        assert!(
            anomalies[0].what.contains("900 ms more"),
            "1,500 ms of store time between a send at 0 and an answer at 600: {anomalies:?}"
        );
        // Log order, not answer order: the earlier write in the log is the one sent first.
        let mut reversed = history.clone();
        reversed.reverse();
        assert_eq!(store_time_follows_real_time(&reversed), anomalies);

        let (_, mut history) = fast_clock_history(1_500, false);
        assert_eq!(store_time_follows_real_time(&history), vec![]);
        history[1].completed_ns -= ROUNDING_NS;
        assert_eq!(
            store_time_follows_real_time(&history),
            vec![],
            "a stamp cut down to whole milliseconds is no anomaly"
        );
        history[1].completed_ns -= 1;
        assert_eq!(store_time_follows_real_time(&history).len(), 1);
        // A gain allowed, and one past it.
        let (_, history) = fast_clock_history(600, false);
        assert_eq!(store_time_gains_at_most(&history, 900 * 1_000_000), vec![]);
        let past = store_time_gains_at_most(&history, 897 * 1_000_000);
        assert_eq!(past.len(), 1, "{past:?}");
        // And the most it gained, for a run's report.
        assert_eq!(most_store_time_gained(&history), Some(900 * 1_000_000));
        assert_eq!(most_store_time_gained(&history[..1]), None);
    }

    #[test]
    fn a_grant_after_the_ttl_or_after_a_release_is_not_flagged() {
        let (log, history) = fast_clock_history(1_001, false);
        assert_eq!(
            real_time_exclusion(&history, &replay(&log).unwrap()),
            vec![]
        );
        let (log, history) = fast_clock_history(600, true);
        assert_eq!(
            real_time_exclusion(&history, &replay(&log).unwrap()),
            vec![]
        );
    }

    #[test]
    fn a_renewal_with_a_shorter_ttl_replaces_what_the_grant_promised() {
        let acquire = |holder: &str, ttl_ms| Op::Acquire {
            lease: "l".into(),
            holder: holder.into(),
            ttl_ms,
        };
        let entry = |index, at_ms, op: Op| {
            (
                index,
                vec![Command {
                    at_ms: Some(at_ms),
                    request: None,
                    op,
                }],
            )
        };
        let log = vec![
            (1, vec![]),
            entry(2, 0, acquire("a", 1_000)),
            entry(3, 10, acquire("a", 100)),
            entry(4, 200, acquire("b", 1_000)),
        ];
        let ms = 1_000_000;
        let history: Vec<Operation> = replay(&log)
            .unwrap()
            .into_iter()
            .map(|a| Operation {
                client: 0,
                request: Request::Write(a.op),
                invoked_ns: a.store_time_ms * ms,
                completed_ns: a.store_time_ms * ms + 50 * ms,
                completion: Completion::Ok {
                    log_index: a.index,
                    position: a.position,
                    store_time_ms: a.store_time_ms,
                    answer: Answer::Outcome(a.outcome),
                },
            })
            .collect();
        // a was told at 10 ms that its lease ends 100 ms later; b's grant at 250 ms is fine.
        assert_eq!(check_all(&history, &log), vec![]);
    }

    /// The leader logs every grant and renewal held the grant margin longer than asked
    /// (`Op::held_longer`); the holder counts only the TTL it asked, from its send. A fault
    /// run's exclusion checker took the logged TTL for the promise, and so called a store time
    /// that gained 26 ms on real time (well inside the margin) 26 ms early.
    #[test]
    fn a_grant_or_renewal_logged_with_the_margin_promises_only_the_ttl_asked() {
        use leasehold_core::{Limits, Renewal};
        let ms = 1_000_000;
        let acquire = |holder: &str, ttl_ms| Op::Acquire {
            lease: "l".into(),
            holder: holder.into(),
            ttl_ms,
        };
        let renew = |ttl_ms| Op::Renew {
            leases: vec![Renewal {
                lease: "l".into(),
                holder: "a".into(),
                token: 1,
                ttl_ms,
            }],
        };
        // Each op sent at its store time (ms), logged held the margin longer, answered 10 ms
        // later; the last one's answer comes at `answered` ms instead.
        let exclusion = |sent: &[(u64, Op)], answered: u64| {
            let entry = |index, (at_ms, op): &(u64, Op)| {
                let op = op.clone().held_longer(Limits::GRANT_MARGIN_MS);
                let command = Command {
                    at_ms: Some(*at_ms),
                    request: None,
                    op,
                };
                (index, vec![command])
            };
            let log: Log = std::iter::once((1, vec![]))
                .chain((2..).zip(sent).map(|(index, op)| entry(index, op)))
                .collect();
            let replayed = replay(&log).unwrap();
            let mut history: Vec<Operation> = (replayed.iter().zip(sent))
                .map(|(a, (_, op))| Operation {
                    client: 0,
                    request: Request::Write(op.clone()),
                    invoked_ns: a.store_time_ms * ms,
                    completed_ns: (a.store_time_ms + 10) * ms,
                    completion: Completion::Ok {
                        log_index: a.index,
                        position: a.position,
                        store_time_ms: a.store_time_ms,
                        answer: Answer::Outcome(a.outcome.clone()),
                    },
                })
                .collect();
            let last = history.last_mut().unwrap();
            (last.invoked_ns, last.completed_ns) = ((answered - 50) * ms, answered * ms);
            real_time_exclusion(&history, &replayed)
        };
        // a acquires for 1,000 ms at 0; the store frees it at 1,150. b's grant answered at
        // 1,050 in real time is past what a was told, and at 990, 10 ms early.
        let granted = [(0, acquire("a", 1_000)), (1_151, acquire("b", 1_000))];
        assert_eq!(exclusion(&granted, 1_050), vec![]);
        let anomalies = exclusion(&granted, 990);
        assert!(anomalies[0].what.contains("10 ms early"), "{anomalies:?}");
        // a renews for 500 ms at 300 (until 800 as told; the store frees it at 950).
        let renewed = [
            (0, acquire("a", 1_000)),
            (300, renew(500)),
            (951, acquire("b", 1_000)),
        ];
        assert_eq!(exclusion(&renewed, 900), vec![]);
        let anomalies = exclusion(&renewed, 790);
        assert!(anomalies[0].what.contains("10 ms early"), "{anomalies:?}");
    }

    #[test]
    fn a_retry_answered_otherwise_than_its_first_attempt_is_flagged() {
        use leasehold_core::RequestId;
        // A stale fenced put, refused, then its retry reaches the log again and is acknowledged
        // as written: what a store that applied the retry anew would answer.
        let request = Some(RequestId {
            client: 1,
            sequence: 1,
        });
        let stale = put("k", "late", Some(("l", 1)));
        let entry = |index, op: Op, request| {
            (
                index,
                vec![Command {
                    at_ms: Some(index * 10),
                    request,
                    op,
                }],
            )
        };
        let log = vec![
            (1, vec![]),
            entry(2, Op::Register, None),
            entry(3, acquire("l", "a"), None),
            entry(
                4,
                Op::Release {
                    lease: "l".into(),
                    holder: "a".into(),
                    token: 1,
                },
                None,
            ),
            entry(5, acquire("l", "b"), None),
            entry(6, stale.clone(), request),
            entry(7, stale.clone(), request),
        ];
        let applied = replay(&log).unwrap();
        // Entries 2 to 7, one command each: the put and its retry are the last two.
        assert_eq!(applied[4].outcome, Outcome::StaleToken { fence: 2 });
        assert_eq!(
            applied[5].outcome, applied[4].outcome,
            "the model answers the retry with the first answer"
        );
        let acknowledged = |answer| Operation {
            client: 0,
            request: Request::Write(stale.clone()),
            invoked_ns: 0,
            completed_ns: 1,
            completion: Completion::Ok {
                log_index: 7,
                position: 0,
                store_time_ms: 70,
                answer: Answer::Outcome(answer),
            },
        };
        let anomalies = check_all(&[acknowledged(Outcome::Written)], &log);
        assert!(
            anomalies
                .iter()
                .any(|a| a.checker == "linearizability" && a.what.contains("index 7")),
            "{anomalies:?}"
        );
        assert_eq!(
            check_all(&[acknowledged(Outcome::StaleToken { fence: 2 })], &log)
                .into_iter()
                .filter(|a| a.what.contains("index 7"))
                .collect::<Vec<_>>(),
            vec![],
            "the first answer, acknowledged at the retry's place, is right"
        );
    }

    #[test]
    fn a_read_that_goes_back_in_time_is_flagged() {
        let log = scenario();
        let mut history = honest_history(&log);
        // Invoked after the write at index 5 completed (at 35 ns), yet answered at index 3.
        history.push(read("k", 3, Some("1"), 100));
        let anomalies = check_all(&history, &log);
        assert!(
            anomalies
                .iter()
                .any(|a| a.what.contains("went back in time")),
            "{anomalies:?}"
        );
    }

    #[test]
    fn a_read_of_a_value_the_state_never_had_is_flagged() {
        let log = scenario();
        let mut history = honest_history(&log);
        history.push(read("k", 5, Some("1"), 1_000));
        let anomalies = check_all(&history, &log);
        assert!(
            anomalies
                .iter()
                .any(|a| a.what.contains("the state there gives")),
            "{anomalies:?}"
        );
    }

    #[test]
    fn a_command_applied_twice_is_flagged_and_an_indeterminate_one_may_apply_once() {
        let mut log = scenario();
        let twice = put("k", "2", None);
        log.push((
            6,
            vec![Command {
                at_ms: Some(400),
                request: None,
                op: twice.clone(),
            }],
        ));
        let history = honest_history(&scenario());
        let anomalies = check_all(&history, &log);
        assert!(
            anomalies.iter().any(|a| a.what.contains("applied 2 times")),
            "{anomalies:?}"
        );

        let mut history = history;
        history.push(Operation {
            client: 3,
            request: Request::Write(twice),
            invoked_ns: 1_000 * T,
            completed_ns: 2_000 * T,
            completion: Completion::Indeterminate("timed out".into()),
        });
        assert_eq!(check_all(&history, &log), vec![]);
    }

    #[test]
    fn a_retried_request_in_the_log_twice_is_one_effect() {
        let request = Some(leasehold_core::RequestId {
            client: 9,
            sequence: 1,
        });
        let grant = Command {
            at_ms: Some(0),
            request,
            op: acquire("l", "a"),
        };
        let retried = Command {
            at_ms: Some(50),
            ..grant.clone()
        };
        let log: Log = vec![(1, vec![]), (2, vec![grant]), (3, vec![retried])];
        // The client saw only the retry's answer, at index 3.
        let history: Vec<Operation> = honest_history(&log).into_iter().skip(1).collect();
        assert_eq!(check_all(&history, &log), vec![]);
    }

    #[test]
    fn a_hole_in_the_log_is_flagged() {
        let mut log = scenario();
        log.remove(2);
        let anomalies = check_all(&[], &log);
        assert!(anomalies[0].what.contains("hole"), "{anomalies:?}");
    }

    /// Two writes gathered into one entry: each is answered at its own position there.
    fn batched() -> Log {
        let command = |at_ms, op| Command {
            at_ms: Some(at_ms),
            request: None,
            op,
        };
        vec![
            (1, vec![]),
            (
                2,
                vec![
                    command(0, acquire("l", "a")),
                    command(0, put("k", "1", Some(("l", 1)))),
                ],
            ),
            (3, vec![command(100, put("k", "2", None))]),
        ]
    }

    #[test]
    fn writes_sharing_an_entry_pass_at_their_own_positions() {
        let log = batched();
        let mut history = honest_history(&log);
        // The two writes of entry 2 were pending together, as a leader gathers them.
        history[1].invoked_ns = history[0].invoked_ns;
        history[1].completed_ns = history[0].completed_ns;
        history.push(read("k", 2, Some("1"), 6));
        history.push(read("k", 3, Some("2"), 1_000));
        assert_eq!(check_all(&history, &log), vec![]);
        // Sequential writes in one entry cannot be: the second began after the first was
        // answered, so it belongs to a later entry.
        let sequential = honest_history(&log);
        assert!(check_all(&sequential, &log)
            .iter()
            .any(|a| a.what.contains("went back in time")));
    }

    #[test]
    fn a_write_acknowledged_at_another_commands_position_is_flagged() {
        let log = batched();
        let mut history = honest_history(&log);
        // The fenced put answered as if it were the entry's first command.
        if let Completion::Ok { position, .. } = &mut history[1].completion {
            *position = 0;
        }
        let anomalies = check_all(&history, &log);
        assert!(
            anomalies
                .iter()
                .any(|a| a.what.contains("acknowledged at index 2 position 0")),
            "{anomalies:?}"
        );
    }
}

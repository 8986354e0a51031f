//! Clients: each opens a session and sends random acquires, releases, fenced and plain puts
//! and reads to random nodes, recording what it sent and saw for the checkers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_check::{self as check, Answer, Completion, Operation, Request, Rng};
use leasehold_core::{Command, Fence, Op, Outcome, RequestId};
use tokio::time::Instant;

use super::cluster::Sim;
use crate::node::{Code, NodeError};
use crate::raft::Applied;

pub(super) type History = Arc<Mutex<Vec<Operation>>>;

/// What a client sees of a node's answer: an outcome, a refusal of bad input (it did not
/// happen), or anything else (it may have happened).
fn completion(answer: Result<Applied, NodeError>) -> Completion {
    match answer {
        Ok(Applied {
            log_index,
            position,
            store_time_ms,
            outcome,
        }) => Completion::Ok {
            log_index,
            position,
            store_time_ms,
            answer: Answer::Outcome(outcome),
        },
        Err(e) if matches!(e.code(), Code::InvalidArgument | Code::FailedPrecondition) => {
            Completion::Failed(e.to_string())
        }
        Err(e) => Completion::Indeterminate(e.to_string()),
    }
}

/// Sends `op` to `node` as a client of the product does: the node stamps it with its leader
/// clock and proposes it, or forwards it to the leader in a batch. Waits at most until
/// `deadline`.
pub(super) async fn write(
    sim: &Sim,
    node: u64,
    op: Op,
    request: Option<RequestId>,
    deadline: Instant,
) -> Completion {
    let Some(node) = sim.node(node) else {
        return Completion::Indeterminate("node down".into());
    };
    match tokio::time::timeout_at(deadline, node.write_or_forward(op, request)).await {
        Err(_) => Completion::Indeterminate("timed out".into()),
        Ok(answer) => completion(answer),
    }
}

/// A linearizable read through the product's read path on `node`, or on the leader it names.
pub(super) async fn read(sim: &Sim, node: u64, request: &Request) -> Completion {
    let mut asked = node;
    for _ in 0..2 {
        let Some(node) = sim.node(asked) else {
            return Completion::Indeterminate("node down".into());
        };
        let answer = node.read(|state| {
            let answer = check::read_answer(&state.table, request).expect("a read, not a write");
            (answer, state.last_applied.map_or(0, |id| id.index))
        });
        match tokio::time::timeout(Duration::from_secs(1), answer).await {
            Ok(Ok(((answer, _), at))) => {
                return Completion::Ok {
                    log_index: at.log_index,
                    position: 0,
                    store_time_ms: at.store_time_ms,
                    answer,
                }
            }
            Ok(Err(NodeError::NotLeader {
                leader: Some((leader, _)),
                ..
            })) => asked = leader,
            Ok(Err(e)) => return Completion::Indeterminate(e.to_string()),
            Err(_) => return Completion::Indeterminate("timed out".into()),
        }
    }
    Completion::Indeterminate("leadership moved".into())
}

pub(super) async fn client(id: u32, sim: Arc<Sim>, history: History, seed: u64, until: Instant) {
    let mut rng = Rng(seed);
    let holder = format!("c{id}");
    let mut tokens: BTreeMap<&str, u64> = BTreeMap::new();
    let mut sequence = 0;
    // A session first, through the log, as the client library opens one.
    let session = loop {
        if Instant::now() >= until {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        let node = match sim.up().first() {
            Some(node) => *node,
            None => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Completion::Ok {
            answer: Answer::Outcome(Outcome::Registered { client }),
            ..
        } = write(&sim, node, Op::Register, None, deadline).await
        {
            break client;
        }
    };
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(rng.between(1, 30))).await;
        let lease = ["L0", "L1"][rng.below(2) as usize];
        let up = sim.up();
        if up.is_empty() {
            continue;
        }
        let node = up[rng.below(up.len() as u64) as usize];
        sequence += 1;
        let value = format!("{holder}-{sequence}").into_bytes();
        let op = match rng.below(10) {
            0..=2 => Op::Acquire {
                lease: lease.into(),
                holder: holder.clone(),
                ttl_ms: rng.between(100, 1_000),
            },
            3 => match tokens.get(lease) {
                Some(token) => Op::Release {
                    lease: lease.into(),
                    holder: holder.clone(),
                    token: *token,
                },
                None => continue,
            },
            4..=5 => match tokens.get(lease) {
                Some(token) => Op::Put {
                    key: format!("f{}", &lease[1..]),
                    value,
                    fence: Some(Fence {
                        lease: lease.into(),
                        token: *token,
                    }),
                },
                None => continue,
            },
            6 if rng.below(3) == 0 => Op::Delete {
                key: "p".into(),
                fence: None,
            },
            6 => Op::Put {
                key: "p".into(),
                value,
                fence: None,
            },
            read_choice => {
                let request = if read_choice <= 8 {
                    Request::Get {
                        key: ["f0", "f1", "p"][rng.below(3) as usize].into(),
                    }
                } else {
                    Request::GetLease {
                        lease: lease.into(),
                    }
                };
                let invoked = sim.now_ns();
                let completion = read(&sim, node, &request).await;
                let completed = sim.now_ns();
                history.lock().unwrap().push(Operation {
                    client: id,
                    request,
                    invoked_ns: invoked,
                    completed_ns: completed,
                    completion,
                });
                continue;
            }
        };
        let invoked = sim.now_ns();
        let request = Some(RequestId {
            client: session,
            sequence,
        });
        let deadline = Instant::now() + Duration::from_secs(2);
        let completion = write(&sim, node, op.clone(), request, deadline).await;
        if let Completion::Ok {
            answer: Answer::Outcome(outcome),
            ..
        } = &completion
        {
            match (outcome, &op) {
                (Outcome::Granted { token, .. }, _) => {
                    tokens.insert(lease, *token);
                }
                (Outcome::Released { .. } | Outcome::StaleToken { .. }, _) => {
                    tokens.remove(lease);
                }
                _ => {}
            }
        }
        let completed = sim.now_ns();
        history.lock().unwrap().push(Operation {
            client: id,
            request: Request::Write(op),
            invoked_ns: invoked,
            completed_ns: completed,
            completion,
        });
    }
}

// ---------------------------------------------------------------------------------------------

pub(super) fn plain_put(key: &str) -> Command {
    Command {
        at_ms: Some(0),
        request: None,
        op: Op::Put {
            key: key.into(),
            value: b"v".to_vec(),
            fence: None,
        },
    }
}

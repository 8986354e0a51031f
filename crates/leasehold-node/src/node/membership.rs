//! Changing who is in the cluster, on the leader: a node started with `serve --join` is added as
//! a learner, caught up, then made a voter; a member is removed; the members are listed with
//! their addresses and how far their logs have come. Membership is Raft's own: in the log and in
//! snapshots, changed through joint consensus, so no acknowledged write is lost on the way.

use std::collections::{BTreeMap, BTreeSet};

use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers};

use super::{Node, NodeError};
use crate::limits::MEMBER_CATCH_UP;
use crate::proto::v1 as pb;
use crate::NodeId;
use leasehold_core::InvalidInput;

/// A status for what a membership change refused, naming what to do.
fn refused(message: String) -> NodeError {
    NodeError::Refused(message)
}

fn change_failed(e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>) -> NodeError {
    match e {
        // As for a write (see `NodeError::proposal_failed`): the change may be in the log of
        // the nodes that elect the next leader.
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => NodeError::ChangeDeposed,
        RaftError::APIError(ClientWriteError::ChangeMembershipError(
            ChangeMembershipError::InProgress(p),
        )) => NodeError::ChangeInProgress(p.to_string()),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            NodeError::Refused(e.to_string())
        }
        // Raft stopped, or its storage failed: after the change was proposed, for all we know.
        fatal @ RaftError::Fatal(_) => NodeError::proposal_failed(fatal),
    }
}

fn invalid(field: &'static str, problem: String) -> NodeError {
    NodeError::Invalid(InvalidInput::new(field, problem))
}

/// The voters and learners of the membership the leader knows now, with their peer addresses.
fn current(node: &Node) -> (u64, BTreeSet<NodeId>, BTreeMap<NodeId, String>) {
    let metrics = node.raft().metrics().borrow().clone();
    let config = metrics.membership_config.membership();
    let voters: BTreeSet<NodeId> = config.voter_ids().collect();
    let nodes = config
        .nodes()
        .map(|(id, n)| (*id, n.addr.clone()))
        .collect();
    let index = metrics.membership_config.log_id().map_or(0, |id| id.index);
    (index, voters, nodes)
}

/// The members, as the leader knows them; each member's client address as it gives it out.
pub async fn list(node: &Node) -> Result<pb::MembersResponse, NodeError> {
    node.leading().await?;
    let (log_index, voters, nodes) = current(node);
    let matched = node
        .raft()
        .metrics()
        .borrow()
        .replication
        .clone()
        .unwrap_or_default();
    let mut asks = tokio::task::JoinSet::new();
    for (&id, addr) in &nodes {
        let (node, addr) = (node.clone(), addr.clone());
        asks.spawn(async move {
            let client = if id == node.id() {
                node.advertise().to_owned()
            } else {
                node.link().status(id, addr).await.address
            };
            (id, client)
        });
    }
    let mut clients = BTreeMap::new();
    while let Some(Ok((id, client))) = asks.join_next().await {
        clients.insert(id, client);
    }
    let last_log = node.raft().metrics().borrow().last_log_index.unwrap_or(0);
    let members = nodes
        .into_iter()
        .map(|(id, peer_address)| pb::Member {
            id,
            role: if voters.contains(&id) {
                pb::MemberRole::Voter
            } else {
                pb::MemberRole::Learner
            } as i32,
            peer_address,
            client_address: clients.remove(&id).unwrap_or_default(),
            match_index: if id == node.id() {
                last_log
            } else {
                matched
                    .get(&id)
                    .copied()
                    .flatten()
                    .map_or(0, |log_id| log_id.index)
            },
        })
        .collect();
    Ok(pb::MembersResponse { members, log_index })
}

/// Adds node `id`, started with `serve --join` and reachable at `peer`: as a learner, caught up,
/// then a voter.
pub async fn add(node: &Node, r: pb::AddMemberRequest) -> Result<pb::MembersResponse, NodeError> {
    node.leading().await?;
    may_join(node, &r)?;
    serves_as_named(node, &r).await?;
    tracing::info!(id = r.id, peer = %r.peer_address, "adding a member: as a learner first");
    let learner = node.raft().add_learner(
        r.id,
        BasicNode {
            addr: r.peer_address.clone(),
        },
        true,
    );
    match tokio::time::timeout(MEMBER_CATCH_UP, learner).await {
        Err(_) => {
            return Err(NodeError::CatchUpTimeout {
                id: r.id,
                within: MEMBER_CATCH_UP,
            })
        }
        Ok(Err(e)) => return Err(change_failed(e)),
        Ok(Ok(_)) => {}
    }
    let promote = ChangeMembers::AddVoterIds([r.id].into_iter().collect());
    node.raft()
        .change_membership(promote, false)
        .await
        .map_err(change_failed)?;
    tracing::info!(id = r.id, "member added as a voter");
    list(node).await
}

/// Whether `r` may join as asked: a valid id and peer address, not a voter already, not a
/// learner at another address, not an id used before, and not another node's address.
fn may_join(node: &Node, r: &pb::AddMemberRequest) -> Result<(), NodeError> {
    if r.id == 0 {
        return Err(invalid("id", "node ids start at 1".to_owned()));
    }
    if r.peer_address.is_empty() || !r.peer_address.contains(':') {
        return Err(invalid(
            "peer_address",
            format!("{:?} is not HOST:PORT", r.peer_address),
        ));
    }
    let (_, voters, nodes) = current(node);
    if voters.contains(&r.id) {
        return Err(refused(format!(
            "node {} is a voter already; to replace it, remove it (`leasehold member remove {}`) \
             and add the new node under a new id",
            r.id, r.id
        )));
    }
    match nodes.get(&r.id) {
        // A learner from an `add` that did not finish: this one finishes it, at its address.
        Some(addr) if *addr != r.peer_address => {
            return Err(refused(format!(
                "node {} is a learner at {addr}, not {}; remove it (`leasehold member remove {}`) \
                 and add it again",
                r.id, r.peer_address, r.id
            )))
        }
        Some(_) => {}
        // An id seen before: its old data dir's incarnation is noted, so a node on a new one
        // would be refused; ids are not reused.
        None if node
            .channels()
            .incarnations()
            .is_some_and(|i| i.known(r.id).is_some()) =>
        {
            return Err(refused(format!(
                "node {} was a member before, and ids are not reused (a node on a new disk must \
                 not pass for the old one, whose vote it lost); add the node under a new id",
                r.id
            )))
        }
        None => {}
    }
    if let Some((id, _)) = nodes
        .iter()
        .find(|(id, addr)| **addr == r.peer_address && **id != r.id)
    {
        return Err(refused(format!(
            "peer address {} is node {id}'s already",
            r.peer_address
        )));
    }
    Ok(())
}

/// Whether the node at `r`'s peer address is there, serving as the id it is added under, at the
/// client address given.
async fn serves_as_named(node: &Node, r: &pb::AddMemberRequest) -> Result<(), NodeError> {
    let status = node.link().status(r.id, r.peer_address.clone()).await;
    if status.role == pb::Role::Unreachable as i32 {
        return Err(NodeError::MemberUnreachable {
            id: r.id,
            addr: r.peer_address.clone(),
            reason: status.error,
        });
    }
    if status.id != r.id {
        return Err(refused(format!(
            "the node at {} is node {}, not {}",
            r.peer_address, status.id, r.id
        )));
    }
    if !r.client_address.is_empty() && status.address != r.client_address {
        return Err(refused(format!(
            "node {} gives out client address {}, not {}; check --advertise, or the address \
             given",
            r.id, status.address, r.client_address
        )));
    }
    Ok(())
}

/// Removes voter or learner `id`.
pub async fn remove(
    node: &Node,
    r: pb::RemoveMemberRequest,
) -> Result<pb::MembersResponse, NodeError> {
    node.leading().await?;
    let (_, voters, nodes) = current(node);
    if !nodes.contains_key(&r.id) {
        return Err(refused(format!("node {} is not a member", r.id)));
    }
    let change = if voters.contains(&r.id) {
        if voters.len() == 1 {
            return Err(refused(format!("node {} is the last voter", r.id)));
        }
        ChangeMembers::RemoveVoters([r.id].into_iter().collect())
    } else {
        ChangeMembers::RemoveNodes([r.id].into_iter().collect())
    };
    // Not retained as a learner: removed voters leave the cluster whole.
    node.raft()
        .change_membership(change, false)
        .await
        .map_err(change_failed)?;
    tracing::info!(id = r.id, "member removed");
    list(node).await.or_else(|e| match e {
        // The leader removed itself: it is no longer the one to ask.
        e if e.unavailable() => Ok(pb::MembersResponse::default()),
        e => Err(e),
    })
}

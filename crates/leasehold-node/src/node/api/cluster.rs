//! The public `Cluster` service: who is who, and how far each member's log has come.

use openraft::ServerState;
use tokio::sync::mpsc;

use super::caller::{self, Caller, Credentials};
use super::{convert, Plane};
use crate::limits::{BACKUP_CHUNKS_QUEUED, BACKUP_CHUNK_BYTES};
use crate::node::{membership, Node, NodeError};
use crate::proto::v1 as pb;
use leasehold_core::auth::{Action, AuthChange};
use leasehold_core::Op;

/// A saved snapshot's chunks, the first with its header; an error ends them.
pub type Chunks = mpsc::Receiver<Result<pb::SnapshotChunk, NodeError>>;

pub(crate) struct ClusterApi {
    node: Node,
    /// Where the requests' identities come from.
    plane: Plane,
}

impl ClusterApi {
    pub fn new(node: Node, plane: Plane) -> Self {
        ClusterApi { node, plane }
    }

    /// Whether the caller may see the cluster's inside: the peer plane's addresses (what an
    /// attacker of the peer plane would dial) and the nodes' pids. Only admins may, once
    /// authorization is on; everyone sees the members, their client addresses and roles, which
    /// clients need to find the cluster. By this node's policy: it hides, it grants nothing.
    fn sees_inside(&self, credentials: &Credentials) -> bool {
        let Ok(caller) = Caller::of(&self.node, credentials) else {
            return false;
        };
        let state = self.node.state().read();
        let admin = Action::Admin("see the peer plane");
        caller.may(state.table.policy(), &admin).is_ok()
    }

    /// Whether the caller may act on a local cluster's nodes from the console (kill, pause,
    /// resume, restart): an admin's act once authorization is on, by this node's policy; anyone's
    /// while it is off (the console says so).
    pub fn may_act_on_nodes(&self, credentials: &Credentials) -> Result<(), NodeError> {
        // A cluster created with an admin refuses everything until its policy is on: until
        // then no one is an admin, and the policy's check would let anyone in.
        self.node.auth_set_up()?;
        let caller = Caller::of(&self.node, credentials)?;
        let state = self.node.state().read();
        let admin = Action::Admin("act on the local cluster's nodes");
        caller.may(state.table.policy(), &admin)
    }

    /// Whether this node serves its clients over TLS.
    pub fn serves_tls(&self) -> bool {
        self.node.tls()
    }

    fn local(&self) -> pb::NodeStatus {
        let metrics = self.node.raft().metrics().borrow().clone();
        let role = match metrics.state {
            ServerState::Leader => pb::Role::Leader,
            ServerState::Follower => pb::Role::Follower,
            ServerState::Candidate => pb::Role::Candidate,
            ServerState::Learner => pb::Role::Learner,
            ServerState::Shutdown => pb::Role::Unreachable,
        };
        let (store_time_ms, state_digest, applied_index, leases, rows, sessions, authorization) = {
            let state = self.node.state().read();
            let applied = state.last_applied.map_or(0, |id| id.index);
            let table = &state.table;
            (
                table.now_ms(),
                table.digest(),
                applied,
                table.lease_count() as u64,
                table.row_count() as u64,
                table.session_count() as u64,
                table.policy().enabled(),
            )
        };
        let snapshot_bytes = self.node.snapshot_bytes();
        let disk = self.node.disk_space();
        let clock = self.node.own_clock();
        pb::NodeStatus {
            id: self.node.id(),
            address: self.node.advertise().to_owned(),
            peer_address: self
                .node
                .members()
                .remove(&self.node.id())
                .unwrap_or_default(),
            pid: std::process::id(),
            role: role as i32,
            term: metrics.current_term,
            leader: metrics.current_leader.unwrap_or(0),
            last_log_index: metrics.last_log_index.unwrap_or(0),
            // Read with the digest, so the two always describe the same state.
            applied_index,
            store_time_ms,
            manual_clock: self.node.manual_clock(),
            error: String::new(),
            snapshot_index: metrics.snapshot.map_or(0, |id| id.index),
            purged_index: metrics.purged.map_or(0, |id| id.index),
            state_digest,
            leases,
            rows,
            sessions,
            snapshot_bytes,
            tls: self.node.tls(),
            client_certificates: self.node.client_certificates(),
            authorization,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            protocol: crate::raft::protocol::PROTOCOL,
            log_format: u32::from(leasehold_core::format::LOG_FORMAT),
            clock_rate_ratio: clock.rate_ratio.unwrap_or(0.0),
            clock_odd: clock.odd.is_some(),
            clock_odd_reason: clock.odd.unwrap_or_default().to_owned(),
            disk_free_bytes: disk.map_or(0, |d| d.free),
            disk_size_bytes: disk.map_or(0, |d| d.size),
            http_address: self.node.http_address().unwrap_or_default().to_owned(),
        }
    }
}

/// Clears what only an admin sees of a node: its peer address and its pid.
fn hide_inside(node: &mut pb::NodeStatus) {
    node.peer_address.clear();
    node.pid = 0;
}

/// The calls; none is counted in the metrics, which count the lease calls.
impl ClusterApi {
    pub async fn save_snapshot(
        &self,
        credentials: &Credentials,
        _m: pb::SaveSnapshotRequest,
    ) -> Result<Chunks, NodeError> {
        let _working = self.node.admit(1)?;
        self.node.auth_set_up()?;
        let caller = Caller::of(&self.node, credentials)?;
        // A linearizable read: the leader confirms its leadership, then checks the policy and
        // clones the table under the state lock, so the copy is exactly what was applied up to
        // `last_applied`. The clone is cheap (its maps share their nodes); encoding it, which
        // is not, happens off the lock and off the runtime's threads, while applies go on.
        let ((table, last_applied, digest), _) =
            caller::admin_read(&self.node, &caller, "save a snapshot", |s| {
                (s.table.clone(), s.last_applied, s.table.digest())
            })
            .await?;
        // The saved state's own time, not the read's (see `node::Reading`).
        let store_time_ms = table.now_ms();
        let data = tokio::task::spawn_blocking(move || crate::raft::codec::encode_sized(&table))
            .await
            .map_err(|e| NodeError::Encoding {
                what: "encoding the state",
                reason: e.to_string(),
            })?;
        let data = data.map_err(|e| NodeError::Encoding {
            what: "encoding the state",
            reason: e.to_string(),
        })?;
        let last = last_applied.ok_or(NodeError::NothingApplied)?;
        let header = pb::SnapshotHeader {
            log_index: last.index,
            term: last.leader_id.term,
            leader_id: last.leader_id.node_id,
            store_time_ms,
            state_digest: digest,
            manual_clock: self.node.manual_clock(),
            bytes: data.len() as u64,
            crc32: crc32fast::hash(&data),
        };
        tracing::info!(
            log_index = header.log_index,
            bytes = header.bytes,
            "snapshot saved for a client"
        );
        let (chunks, stream) = mpsc::channel(BACKUP_CHUNKS_QUEUED);
        tokio::spawn(async move {
            let mut header = Some(header);
            // At least one chunk, which carries the header, even for an empty state.
            let parts: Vec<&[u8]> = if data.is_empty() {
                vec![&[]]
            } else {
                data.chunks(BACKUP_CHUNK_BYTES).collect()
            };
            for part in parts {
                let chunk = pb::SnapshotChunk {
                    header: header.take(),
                    data: part.to_vec(),
                };
                if chunks.send(Ok(chunk)).await.is_err() {
                    return;
                }
            }
        });
        Ok(stream)
    }

    pub async fn add_member(
        &self,
        credentials: &Credentials,
        m: pb::AddMemberRequest,
    ) -> Result<pb::MembersResponse, NodeError> {
        let _working = self.node.admit(1)?;
        self.node.auth_set_up()?;
        let caller = Caller::of(&self.node, credentials)?;
        caller::admin_read(&self.node, &caller, "add a member", |_| ()).await?;
        membership::add(&self.node, m).await
    }

    pub async fn remove_member(
        &self,
        credentials: &Credentials,
        m: pb::RemoveMemberRequest,
    ) -> Result<pb::MembersResponse, NodeError> {
        let _working = self.node.admit(1)?;
        self.node.auth_set_up()?;
        let caller = Caller::of(&self.node, credentials)?;
        caller::admin_read(&self.node, &caller, "remove a member", |_| ()).await?;
        membership::remove(&self.node, m).await
    }

    pub async fn list_members(
        &self,
        credentials: &Credentials,
        _m: pb::ListMembersRequest,
    ) -> Result<pb::MembersResponse, NodeError> {
        Caller::of(&self.node, credentials)?;
        let _working = self.node.admit(1)?;
        let inside = self.sees_inside(credentials);
        let mut members = membership::list(&self.node).await?;
        if !inside {
            for member in &mut members.members {
                member.peer_address.clear();
            }
        }
        Ok(members)
    }

    pub async fn status(
        &self,
        credentials: &Credentials,
        _m: pb::StatusRequest,
    ) -> Result<pb::StatusResponse, NodeError> {
        // Any caller may ask, but one a node demanding certificates refuses (`Caller::of`).
        Caller::of(&self.node, credentials)?;
        let inside = self.sees_inside(credentials);
        // Admitted like every request: a client looping status must not outrun the node.
        let _working = self.node.admit(1)?;
        self.node.membership_standing()?;
        // Ask every member at once, so one dead member costs one timeout, not one each.
        let mut asks = tokio::task::JoinSet::new();
        for (id, addr) in self.node.members() {
            if id != self.node.id() {
                asks.spawn(self.node.link().status(id, addr));
            }
        }
        let mut nodes = vec![self.local()];
        while let Some(joined) = asks.join_next().await {
            if let Ok(status) = joined {
                nodes.push(status);
            }
        }
        nodes.sort_by_key(|n| n.id);
        if !inside {
            nodes.iter_mut().for_each(hide_inside);
        }
        Ok(pb::StatusResponse { nodes })
    }

    pub async fn change_policy(
        &self,
        credentials: &Credentials,
        m: pb::ChangePolicyRequest,
    ) -> Result<pb::ChangePolicyResponse, NodeError> {
        let _working = self.node.admit(1)?;
        self.node.auth_set_up()?;
        let caller = Caller::of(&self.node, credentials)?;
        let change = convert::policy_change(m)?;
        if matches!(change, AuthChange::Enable { .. }) && !self.node.tls() {
            return Err(NodeError::Refused(
                "authorization needs TLS, which gives clients their identities (certificates, \
                 bearer tokens), and this node serves without it: start every node with \
                 --tls-ca, --tls-cert and --tls-key first"
                    .into(),
            ));
        }
        let op = caller.log(Op::Auth(change));
        let applied = self.node.write_or_forward(op, None).await?;
        convert::policy_changed(applied)
    }

    pub async fn get_policy(
        &self,
        credentials: &Credentials,
        _m: pb::GetPolicyRequest,
    ) -> Result<pb::PolicyResponse, NodeError> {
        let _working = self.node.admit(1)?;
        self.node.auth_set_up()?;
        let caller = Caller::of(&self.node, credentials)?;
        let (policy, at) = caller::admin_read(&self.node, &caller, "read the policy", |s| {
            s.table.policy().clone()
        })
        .await?;
        Ok(convert::policy(&policy, &at))
    }

    pub async fn who_am_i(
        &self,
        credentials: &Credentials,
        _m: pb::WhoAmIRequest,
    ) -> Result<pb::WhoAmIResponse, NodeError> {
        let _working = self.node.admit(1)?;
        let caller = Caller::of(&self.node, credentials)?;
        let identity = caller.identity().unwrap_or_default().to_owned();
        let state = self.node.state().read();
        let policy = state.table.policy();
        Ok(pb::WhoAmIResponse {
            auth_enabled: policy.enabled(),
            roles: policy
                .bindings()
                .get(&identity)
                .into_iter()
                .flatten()
                .cloned()
                .collect(),
            identity,
        })
    }

    pub async fn node_status(
        &self,
        credentials: &Credentials,
        _m: pb::NodeStatusRequest,
    ) -> Result<pb::NodeStatus, NodeError> {
        Caller::of(&self.node, credentials)?;
        let _working = self.node.admit(1)?;
        let mut local = self.local();
        // Members ask each other on the peer plane, for `Status`, which hides what it must.
        if self.plane == Plane::Client && !self.sees_inside(credentials) {
            hide_inside(&mut local);
        }
        Ok(local)
    }
}

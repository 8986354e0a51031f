//! The internal Raft service: peers' RPCs in, handed to openraft, its answers encoded back.

use std::sync::Mutex;
use std::time::Instant;

use tonic::{Request, Response, Status};

use super::gate::PeerMember;
use crate::limits::{MAX_SNAPSHOT_BYTES, REFUSAL_LOG_EVERY};
use crate::node::error::{ForwardedError, NodeError};
use crate::node::link::Forwarded;
use crate::node::Node;
use crate::proto::raft_v1::{raft_server, RaftMessage};
use crate::raft::codec::{decode, encode};
use crate::raft::{incarnation, protocol};
use crate::raft::{Applied, ClockMode, LogId, TypeConfig};
use leasehold_core::format::{LOG_FORMAT, TABLE_FORMAT};
use leasehold_core::InvalidInput;
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::Vote;

pub struct RaftService {
    node: Node,
    /// How much of the snapshot being received has arrived, to refuse chunks that would leave
    /// a gap (openraft seeks to any offset, and the gap fills with zeros in memory).
    chunks: Mutex<SnapshotChunks>,
    clock: ClockMode,
    /// When a refused peer was last logged: a misconfigured peer retries every heartbeat, and
    /// one line every few seconds says it all.
    refusal_logged: Mutex<Option<Instant>>,
}

/// The snapshot being received, by id, and the bytes of it that have arrived.
#[derive(Debug, Default)]
struct SnapshotChunks {
    receiving: Option<(String, u64)>,
}

impl SnapshotChunks {
    /// A chunk of `len` bytes at `offset` of snapshot `id` may be written only where it leaves
    /// no gap (at or before what has arrived; a new snapshot starts at 0) and within
    /// [`MAX_SNAPSHOT_BYTES`].
    fn admit(&self, id: &str, offset: u64, len: u64) -> Result<(), InvalidInput> {
        let arrived = match &self.receiving {
            Some((receiving, arrived)) if receiving == id => *arrived,
            _ => 0,
        };
        if offset > arrived {
            return Err(InvalidInput::new(
                "install_snapshot",
                format!(
                    "a chunk at offset {offset} of snapshot {id:?} would leave a gap: {arrived} \
                     bytes of it have arrived"
                ),
            ));
        }
        if offset.saturating_add(len) > MAX_SNAPSHOT_BYTES {
            return Err(InvalidInput::new(
                "install_snapshot",
                format!(
                    "a chunk ending at byte {} is past the {MAX_SNAPSHOT_BYTES}-byte limit on a \
                     snapshot",
                    offset.saturating_add(len)
                ),
            ));
        }
        Ok(())
    }

    /// Snapshot `id` has arrived up to byte `end`; `done`, and it is whole.
    fn received(&mut self, id: &str, end: u64, done: bool) {
        let arrived = match &self.receiving {
            Some((receiving, arrived)) if receiving == id => (*arrived).max(end),
            _ => end,
        };
        self.receiving = (!done).then(|| (id.to_owned(), arrived));
    }
}

impl RaftService {
    pub fn new(node: Node) -> Self {
        RaftService {
            clock: ClockMode::from_manual(node.manual_clock()),
            node,
            chunks: Mutex::default(),
            refusal_logged: Mutex::new(None),
        }
    }

    /// Refuses a Raft message from a sender whose data dir changed, or one that knew this node
    /// with another data dir (see `raft::incarnation`): either way a vote was forgotten.
    fn check_incarnations(&self, sender: Option<u64>, shown: Shown) -> Result<(), Status> {
        let (Some(incarnations), Some(sender)) = (self.node.channels().incarnations(), sender)
        else {
            return Ok(());
        };
        let checked = incarnations
            .check_me(sender, shown.receiver)
            .and_then(|()| incarnations.check_peer(sender, shown.sender));
        checked.map_err(|why| {
            incarnations.log_refusal(&why);
            NodeError::Refused(why).into()
        })
    }

    /// openraft's result, refusal or not, for the peer's network to unpack, with this node's
    /// incarnation.
    fn reply<T: serde::Serialize>(&self, result: &T) -> Result<Response<RaftMessage>, Status> {
        let mut response = encode_reply(result)?;
        if let Some(incarnations) = self.node.channels().incarnations() {
            incarnation::write(
                response.metadata_mut(),
                incarnation::FROM_KEY,
                incarnations.mine(),
            );
        }
        Ok(response)
    }

    /// A Raft message from a peer: admitted to this plane, decoded, and refused unless it comes
    /// from the member its vote names (the candidate or the leader, see [`sender_is`]) and both
    /// sides' incarnations are the ones it shows.
    fn checked<T: serde::de::DeserializeOwned>(
        &self,
        request: Request<RaftMessage>,
        vote: impl Fn(&T) -> &Vote<u64>,
    ) -> Result<T, Status> {
        let member = self.admit(&request)?;
        let shown = Shown::of(&request);
        let (metadata, _, message) = request.into_parts();
        let rpc: T = decoded(&message)?;
        let sender = vote(&rpc).leader_id().voted_for();
        sender_is(member, sender)?;
        self.check_incarnations(sender, shown)?;
        if let Some(sender) = sender {
            self.node.channels().protocols().heard(sender, &metadata);
        }
        Ok(rpc)
    }

    fn chunks(&self) -> std::sync::MutexGuard<'_, SnapshotChunks> {
        self.chunks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks what a peer message carries outside its body before the body is decoded; the
    /// member the caller's certificate names, if TLS is on (see [`sender_is`]).
    fn admit<T>(&self, request: &Request<T>) -> Result<Option<PeerMember>, Status> {
        // A format this build cannot read is never guessed at: the leader (or the follower
        // forwarding) sent what this node cannot apply, and every such message is refused
        // until this node is upgraded.
        let checked = (self.clock.check_peer(request.metadata()))
            .and_then(|()| protocol::check_format(request.metadata(), LOG_FORMAT));
        if let Err(why) = checked {
            let mut logged = self
                .refusal_logged
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if logged.is_none_or(|at| at.elapsed() >= REFUSAL_LOG_EVERY) {
                *logged = Some(Instant::now());
                tracing::error!(peer = ?request.remote_addr(), "{why}");
            }
            return Err(NodeError::Refused(why).into());
        }
        Ok(request.extensions().get::<PeerMember>().copied())
    }
}

/// The incarnations a Raft message carries: its sender's, and the one it knows for this node.
#[derive(Clone, Copy)]
struct Shown {
    sender: Option<u64>,
    receiver: Option<u64>,
}

impl Shown {
    fn of<T>(request: &Request<T>) -> Shown {
        Shown {
            sender: incarnation::read(request.metadata(), incarnation::FROM_KEY),
            receiver: incarnation::read(request.metadata(), incarnation::TO_KEY),
        }
    }
}

/// Refuses a Raft message whose sender (`claimed`, from its vote) is not the member the caller's
/// certificate names; without TLS there is no certificate to hold it to.
fn sender_is(member: Option<PeerMember>, claimed: Option<u64>) -> Result<(), Status> {
    match (member, claimed) {
        (Some(PeerMember(member)), Some(claimed)) if member != claimed => {
            Err(NodeError::Forbidden(format!(
                "the message claims to come from node {claimed}, but the caller's certificate \
                 names node {member}"
            ))
            .into())
        }
        _ => Ok(()),
    }
}

fn decode_request<T: serde::de::DeserializeOwned>(
    request: Request<RaftMessage>,
) -> Result<T, Status> {
    decoded(&request.into_inner())
}

fn decoded<T: serde::de::DeserializeOwned>(message: &RaftMessage) -> Result<T, Status> {
    decode(&message.data)
        .map_err(|e| NodeError::Invalid(InvalidInput::new("raft message", e.to_string())).into())
}

/// openraft's result, refusal or not, travels back whole for the peer's network to unpack.
fn encode_reply<T: serde::Serialize>(result: &T) -> Result<Response<RaftMessage>, Status> {
    let data = encode(result).map_err(|e| NodeError::Encoding {
        what: "raft reply",
        reason: e.to_string(),
    })?;
    let mut reply = Response::new(RaftMessage { data });
    protocol::announce(reply.metadata_mut());
    Ok(reply)
}

#[tonic::async_trait]
impl raft_server::Raft for RaftService {
    async fn append_entries(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let rpc = self.checked(request, |rpc: &AppendEntriesRequest<TypeConfig>| &rpc.vote)?;
        self.reply(&self.node.raft().append_entries(rpc).await)
    }

    async fn vote(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let rpc = self.checked(request, |rpc: &VoteRequest<u64>| &rpc.vote)?;
        self.reply(&self.node.raft().vote(rpc).await)
    }

    async fn pre_vote(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let rpc = self.checked(request, |rpc: &VoteRequest<u64>| &rpc.vote)?;
        self.reply(&self.node.raft().pre_vote(rpc).await)
    }

    async fn install_snapshot(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        // A snapshot is marked with its table's layout, numbered apart from the log's formats.
        protocol::check_format(request.metadata(), TABLE_FORMAT)
            .map_err(|why| Status::from(NodeError::Refused(why)))?;
        let rpc = self.checked(request, |rpc: &InstallSnapshotRequest<TypeConfig>| {
            &rpc.vote
        })?;
        let (id, offset, len, done) = (
            rpc.meta.snapshot_id.clone(),
            rpc.offset,
            rpc.data.len() as u64,
            rpc.done,
        );
        self.chunks()
            .admit(&id, offset, len)
            .map_err(|e| Status::from(NodeError::Invalid(e)))?;
        let reply = self.node.raft().install_snapshot(rpc).await;
        if reply.is_ok() {
            self.chunks().received(&id, offset + len, done);
        }
        self.reply(&reply)
    }

    async fn read_log(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let (from, to): (u64, u64) = decode_request(request)?;
        let entries = self
            .node
            .applied_log(from, to)
            .await
            .map_err(Status::from)?;
        encode_reply(&entries)
    }

    async fn carried_time(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        self.admit(&request)?;
        // Empty from a node of the version before, which waited for nothing.
        let oldest: Option<LogId> = match request.get_ref().data.is_empty() {
            true => None,
            false => decode_request(request)?,
        };
        encode_reply(&self.node.carried_time_from(oldest).await)
    }

    async fn clock_reading(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        self.admit(&request)?;
        encode_reply(&self.node.clock_reading())
    }

    async fn hand_over(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        // From the leader the vote names, as its certificate shows: no other member may move
        // this node's vote.
        let (from, to) = self.checked(request, |(vote, _): &(Vote<u64>, u64)| vote)?;
        let told = self.node.raft().trigger().hand_over(from, to).await;
        told.map_err(|fatal| NodeError::RaftStopped(fatal.to_string()))?;
        self.reply(&())
    }

    async fn propose(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        self.admit(&request)?;
        // Not charged to this node's requests: each was admitted by the follower its client
        // called, and refusing it here, past any check, would fail a write the client's node
        // took (safety review 161302a, finding 4).
        let writes: Vec<Forwarded> = decode_request(request)?;
        let answers: Vec<Result<Applied, ForwardedError>> = self
            .node
            .write_many(writes)
            .await
            .into_iter()
            .map(|answer| answer.map_err(ForwardedError::from))
            .collect();
        encode_reply(&answers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_chunks_that_would_leave_a_gap_or_pass_the_limit_are_refused() {
        let mut chunks = SnapshotChunks::default();
        assert!(chunks.admit("s1", 0, 100).is_ok());
        chunks.received("s1", 100, false);
        // A resent chunk, and the next one, are fine; one past a gap is not.
        assert!(chunks.admit("s1", 0, 100).is_ok());
        assert!(chunks.admit("s1", 100, 100).is_ok());
        let gap = chunks.admit("s1", 1 << 40, 1).unwrap_err().to_string();
        assert!(gap.contains("gap") && gap.contains("100 bytes"), "{gap}");
        // Another snapshot starts from 0.
        assert!(chunks.admit("s2", 50, 1).is_err());
        assert!(chunks.admit("s2", 0, 1).is_ok());
        let too_big = chunks
            .admit("s1", 100, MAX_SNAPSHOT_BYTES)
            .unwrap_err()
            .to_string();
        assert!(too_big.contains("limit"), "{too_big}");
        // Once whole, the next snapshot starts afresh.
        chunks.received("s1", 200, true);
        assert!(chunks.admit("s1", 100, 1).is_err());
    }
}

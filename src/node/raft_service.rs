//! The internal Raft service: peers' RPCs in, handed to openraft, its answers encoded back.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tonic::{Request, Response, Status};

use super::error::ForwardedError;
use super::forwarder::Forwarded;
use super::Node;
use crate::proto::raft_v1::{raft_server, RaftMessage};
use crate::raft::codec::{decode, encode};
use crate::raft::{Applied, ClockMode};

pub struct RaftService {
    node: Node,
    clock: ClockMode,
    /// When a refused peer was last logged: a misconfigured peer retries every heartbeat, and
    /// one line every few seconds says it all.
    refusal_logged: Mutex<Option<Instant>>,
}

/// How often a peer refusal is logged at most.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(5);

impl RaftService {
    pub fn new(node: Node) -> Self {
        RaftService {
            clock: ClockMode::from_manual(node.manual_clock()),
            node,
            refusal_logged: Mutex::new(None),
        }
    }

    /// Checks what a peer message carries outside its body before the body is decoded.
    fn admit<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let refused = self.clock.check_peer(request.metadata());
        if let Err(status) = &refused {
            let mut logged = self
                .refusal_logged
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if logged.is_none_or(|at| at.elapsed() >= REFUSAL_LOG_EVERY) {
                *logged = Some(Instant::now());
                tracing::error!(peer = ?request.remote_addr(), "{}", status.message());
            }
        }
        refused
    }
}

fn decode_request<T: serde::de::DeserializeOwned>(
    request: Request<RaftMessage>,
) -> Result<T, Status> {
    decode(&request.into_inner().data)
        .map_err(|e| Status::invalid_argument(format!("raft message: {e}")))
}

/// openraft's result, refusal or not, travels back whole for the peer's network to unpack.
fn encode_reply<T: serde::Serialize>(result: &T) -> Result<Response<RaftMessage>, Status> {
    let data = encode(result).map_err(|e| Status::internal(format!("raft reply: {e}")))?;
    Ok(Response::new(RaftMessage { data }))
}

#[tonic::async_trait]
impl raft_server::Raft for RaftService {
    async fn append_entries(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        self.admit(&request)?;
        let rpc = decode_request(request)?;
        encode_reply(&self.node.raft().append_entries(rpc).await)
    }

    async fn vote(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        self.admit(&request)?;
        let rpc = decode_request(request)?;
        encode_reply(&self.node.raft().vote(rpc).await)
    }

    async fn install_snapshot(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        self.admit(&request)?;
        let rpc = decode_request(request)?;
        encode_reply(&self.node.raft().install_snapshot(rpc).await)
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

    async fn propose(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        self.admit(&request)?;
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

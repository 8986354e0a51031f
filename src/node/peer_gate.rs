//! The peer plane's gate. With TLS on, rustls has already checked that the caller's
//! certificate chains to the cluster's CA; the gate lets the call through only if that
//! certificate names another member of this cluster, so that a client's certificate, or one made
//! for a node of another cluster by the same CA, cannot send Raft messages. It runs before the
//! message is decoded. Without TLS it lets everything through: the peer plane is then as safe
//! as the network it listens on. It leaves the member it let through on the request
//! ([`PeerMember`]): a member's Raft message that claims another sender is refused too, so a
//! node whose key leaked cannot vote or lead as another.

use tonic::{Request, Status};

use crate::raft::NodeId;
use crate::tls::{member_named, node_name, RefusalLog};

/// The member a caller's certificate names, left on the request for the handlers, which check
/// that a Raft message claims no other sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerMember(pub NodeId);

#[derive(Clone)]
pub struct PeerGate {
    /// The members whose certificates are let through: every voter but this node.
    others: Vec<NodeId>,
    tls: bool,
    refusals: RefusalLog,
}

impl PeerGate {
    pub fn new(
        me: NodeId,
        members: impl IntoIterator<Item = NodeId>,
        tls: bool,
        refusals: RefusalLog,
    ) -> Self {
        PeerGate {
            others: members.into_iter().filter(|id| *id != me).collect(),
            tls,
            refusals,
        }
    }
}

impl tonic::service::Interceptor for PeerGate {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if !self.tls {
            return Ok(request);
        }
        let certs = request.peer_certs();
        let reason = match certs.as_deref().and_then(|certs| certs.first()) {
            None => "the caller showed no certificate".to_owned(),
            Some(cert) => match member_named(cert, self.others.iter().copied()) {
                Some(member) => {
                    request.extensions_mut().insert(PeerMember(member));
                    return Ok(request);
                }
                None => format!(
                    "the caller's certificate names no other member of this cluster (one of {})",
                    self.others
                        .iter()
                        .map(|id| node_name(*id))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
        };
        self.refusals
            .refused("peer", request.remote_addr(), &reason);
        Err(Status::permission_denied(format!(
            "refused on the peer plane: {reason}"
        )))
    }
}

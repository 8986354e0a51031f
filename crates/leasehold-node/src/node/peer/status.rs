//! A member's own view of itself, asked over the peer plane: for `Status` (every member at
//! once) and for the membership checks that a node to add or remove answers.

use tonic::Request;

use crate::limits::PEER_STATUS_TIMEOUT;
use crate::proto::v1 as pb;
use crate::proto::v1::cluster_client::ClusterClient;
use crate::raft::Channels;

/// One member's own view, asked over the peer plane at its peer address `addr`, or why it could
/// not be had.
pub(crate) async fn remote_status(channels: Channels, id: u64, addr: String) -> pb::NodeStatus {
    let unreachable = |error: String| pb::NodeStatus {
        id,
        peer_address: addr.clone(),
        role: pb::Role::Unreachable as i32,
        error,
        ..Default::default()
    };
    let channel = match channels.get(id, &addr) {
        Ok(channel) => channel,
        Err(e) => return unreachable(e.to_string()),
    };
    let mut request = Request::new(pb::NodeStatusRequest {});
    request.set_timeout(PEER_STATUS_TIMEOUT);
    let mut client = ClusterClient::new(channel);
    match tokio::time::timeout(PEER_STATUS_TIMEOUT, client.node_status(request)).await {
        Ok(Ok(status)) => status.into_inner(),
        Ok(Err(status)) => unreachable(status.message().to_owned()),
        Err(_) => unreachable(format!(
            "no answer within {} ms",
            PEER_STATUS_TIMEOUT.as_millis()
        )),
    }
}

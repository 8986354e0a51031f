//! The benchmark's etcd side, through the `etcd-client` crate (etcd's own v3 API, as a Rust user
//! of etcd calls it), each workload done the way an etcd user does it. Acquire is a LeaseGrant
//! plus a Txn that creates the lock key with that lease; renew is LeaseKeepAlive on one stream
//! per client; a fenced put is a Txn comparing the lock key's mod revision.
//!
//! Each client is built on a plain tonic channel to its one endpoint (`Client::from_channel`, the
//! crate's `raw-channel` feature), as Leasehold's benchmark clients are: the crate's default
//! balanced channel puts a load balancer's queue in front of every call.

use etcd_client::{
    Client, Compare, CompareOp, LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn, TxnOp,
};
use tonic::transport::Endpoint;
use tonic::Status;

pub struct Etcd {
    client: Client,
    keepalive: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    /// The lease and the lock key's revision from this client's last successful acquire.
    pub lease_id: i64,
    pub lock_revision: i64,
}

/// An etcd-client error as the gRPC status the benchmark counts.
fn status(error: etcd_client::Error) -> Status {
    match error {
        etcd_client::Error::GRpcStatus(status) => status,
        other => Status::unknown(other.to_string()),
    }
}

/// Which of `endpoints` leads, and which follow, by each member's status: its own id against
/// the leader's it names.
pub(super) async fn roles(
    endpoints: &[String],
    tls: Option<tonic::transport::ClientTlsConfig>,
) -> anyhow::Result<(String, Vec<String>)> {
    let mut leader = None;
    let mut followers = Vec::new();
    for endpoint in endpoints {
        let status = Etcd::connect(endpoint, tls.clone())
            .await?
            .client
            .status()
            .await
            .map_err(|e| anyhow::anyhow!("etcd at {endpoint} gave no status: {e}"))?;
        let Some(member) = status.header().map(|h| h.member_id()) else {
            anyhow::bail!("etcd at {endpoint} gave a status without its member id");
        };
        match status.leader() {
            0 => anyhow::bail!("etcd at {endpoint} knows no leader right now; try again"),
            id if id == member => leader = Some(endpoint.clone()),
            _ => followers.push(endpoint.clone()),
        }
    }
    let leader = leader.ok_or_else(|| anyhow::anyhow!("no endpoint of etcd leads right now"))?;
    Ok((leader, followers))
}

impl Etcd {
    /// A client of etcd at `endpoint`, over TLS when `tls` is given.
    pub async fn connect(
        endpoint: &str,
        tls: Option<tonic::transport::ClientTlsConfig>,
    ) -> anyhow::Result<Etcd> {
        let address = endpoint
            .split_once("://")
            .map_or(endpoint, |(_, rest)| rest);
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut target = Endpoint::from_shared(format!("{scheme}://{address}"))?.tcp_nodelay(true);
        if let Some(tls) = tls {
            target = target.tls_config(tls)?;
        }
        let channel = etcd_client::Channel::Tonic(target.connect_lazy());
        let client = Client::from_channel(channel, None).await?;
        Ok(Etcd {
            client,
            keepalive: None,
            lease_id: 0,
            lock_revision: 0,
        })
    }

    /// LeaseGrant, then a Txn that creates `lock_key` with that lease if nobody holds it.
    /// True when this client now holds the lock.
    pub async fn acquire(&mut self, lock_key: &str, ttl_s: i64) -> Result<bool, Status> {
        let grant = self.client.lease_grant(ttl_s, None).await.map_err(status)?;
        let txn = Txn::new()
            .when([Compare::create_revision(lock_key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                lock_key,
                "",
                Some(PutOptions::new().with_lease(grant.id())),
            )]);
        let reply = self.client.txn(txn).await.map_err(status)?;
        if reply.succeeded() {
            self.lease_id = grant.id();
            self.lock_revision = reply.header().map_or(0, |h| h.revision());
        }
        Ok(reply.succeeded())
    }

    /// One keepalive of this client's lease, on its one stream.
    pub async fn renew(&mut self) -> Result<(), Status> {
        let stream = match self.keepalive.as_mut() {
            Some((keeper, stream)) => {
                keeper.keep_alive().await.map_err(status)?;
                stream
            }
            // Opening the stream sends its first keepalive, and etcd-client (0.21) reads its
            // answer (a lease that is gone is its error): waiting for another hung forever.
            None => {
                let opened = self.client.lease_keep_alive(self.lease_id).await;
                self.keepalive = Some(opened.map_err(status)?);
                return Ok(());
            }
        };
        match stream.message().await.map_err(status)? {
            Some(reply) if reply.ttl() > 0 => Ok(()),
            Some(_) => Err(Status::not_found("lease expired")),
            None => Err(Status::unavailable("keepalive stream ended")),
        }
    }

    /// Writes `key` only if `lock_key` is still at the revision this client created it at.
    pub async fn fenced_put(
        &mut self,
        lock_key: &str,
        key: &str,
        value: &[u8],
    ) -> Result<bool, Status> {
        let txn = Txn::new()
            .when([Compare::mod_revision(
                lock_key,
                CompareOp::Equal,
                self.lock_revision,
            )])
            .and_then([TxnOp::put(key, value, None)]);
        let reply = self.client.txn(txn).await.map_err(status)?;
        Ok(reply.succeeded())
    }

    pub async fn put(&mut self, key: &str, value: &[u8]) -> Result<(), Status> {
        self.client.put(key, value, None).await.map_err(status)?;
        Ok(())
    }

    /// A linearizable read (etcd's default; `serializable` stays false).
    pub async fn get(&mut self, key: &str) -> Result<(), Status> {
        self.client.get(key, None).await.map_err(status)?;
        Ok(())
    }
}

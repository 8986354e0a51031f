//! The benchmark's etcd side: each workload done the way an etcd user does it. Acquire is a
//! LeaseGrant plus a Txn that creates the lock key with that lease; renew is LeaseKeepAlive on
//! one stream per client; a fenced put is a Txn comparing the lock key's mod revision.

use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tonic::{Status, Streaming};

use crate::proto::etcd::compare::{CompareResult, CompareTarget, TargetUnion};
use crate::proto::etcd::kv_client::KvClient;
use crate::proto::etcd::lease_client::LeaseClient;
use crate::proto::etcd::request_op::Request;
use crate::proto::etcd::{
    Compare, LeaseGrantRequest, LeaseKeepAliveRequest, LeaseKeepAliveResponse, PutRequest,
    RangeRequest, RequestOp, TxnRequest,
};

pub struct Etcd {
    kv: KvClient<Channel>,
    lease: LeaseClient<Channel>,
    keepalive: Option<(
        tokio::sync::mpsc::Sender<LeaseKeepAliveRequest>,
        Streaming<LeaseKeepAliveResponse>,
    )>,
    /// The lease and the lock key's revision from this client's last successful acquire.
    pub lease_id: i64,
    pub lock_revision: i64,
}

impl Etcd {
    /// A client of etcd at `endpoint`, over TLS when `tls` is given.
    pub fn connect(
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
        let channel = target.connect_lazy();
        Ok(Etcd {
            kv: KvClient::new(channel.clone()),
            lease: LeaseClient::new(channel),
            keepalive: None,
            lease_id: 0,
            lock_revision: 0,
        })
    }

    /// LeaseGrant, then a Txn that creates `lock_key` with that lease if nobody holds it.
    /// True when this client now holds the lock.
    pub async fn acquire(&mut self, lock_key: &str, ttl_s: i64) -> Result<bool, Status> {
        let grant = self
            .lease
            .lease_grant(LeaseGrantRequest { ttl: ttl_s, id: 0 })
            .await?
            .into_inner();
        let txn = TxnRequest {
            compare: vec![Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Create as i32,
                key: lock_key.as_bytes().to_vec(),
                target_union: Some(TargetUnion::CreateRevision(0)),
                range_end: Vec::new(),
            }],
            success: vec![put_op(lock_key.as_bytes(), b"", grant.id)],
            failure: Vec::new(),
        };
        let reply = self.kv.txn(txn).await?.into_inner();
        if reply.succeeded {
            self.lease_id = grant.id;
            self.lock_revision = reply.header.map_or(0, |h| h.revision);
        }
        Ok(reply.succeeded)
    }

    /// One keepalive of this client's lease, on its one stream.
    pub async fn renew(&mut self) -> Result<(), Status> {
        let request = LeaseKeepAliveRequest { id: self.lease_id };
        let stream = match self.keepalive.as_mut() {
            Some((tx, stream)) => {
                tx.send(request)
                    .await
                    .map_err(|_| Status::unavailable("keepalive stream closed"))?;
                stream
            }
            None => {
                // etcd answers the call only once a first request is on the stream: queue it
                // before opening the call.
                let (tx, rx) = tokio::sync::mpsc::channel(1);
                tx.send(request)
                    .await
                    .map_err(|_| Status::unavailable("keepalive stream closed"))?;
                let stream = self
                    .lease
                    .lease_keep_alive(ReceiverStream::new(rx))
                    .await?
                    .into_inner();
                &mut self.keepalive.insert((tx, stream)).1
            }
        };
        match stream.message().await? {
            Some(reply) if reply.ttl > 0 => Ok(()),
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
        let txn = TxnRequest {
            compare: vec![Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Mod as i32,
                key: lock_key.as_bytes().to_vec(),
                target_union: Some(TargetUnion::ModRevision(self.lock_revision)),
                range_end: Vec::new(),
            }],
            success: vec![put_op(key.as_bytes(), value, 0)],
            failure: Vec::new(),
        };
        Ok(self.kv.txn(txn).await?.into_inner().succeeded)
    }

    pub async fn put(&mut self, key: &str, value: &[u8]) -> Result<(), Status> {
        self.kv
            .put(PutRequest {
                key: key.as_bytes().to_vec(),
                value: value.to_vec(),
                lease: 0,
                prev_kv: false,
            })
            .await?;
        Ok(())
    }

    /// A linearizable read (etcd's default; `serializable` stays false).
    pub async fn get(&mut self, key: &str) -> Result<(), Status> {
        self.kv
            .range(RangeRequest {
                key: key.as_bytes().to_vec(),
                ..Default::default()
            })
            .await?;
        Ok(())
    }
}

fn put_op(key: &[u8], value: &[u8], lease: i64) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestPut(PutRequest {
            key: key.to_vec(),
            value: value.to_vec(),
            lease,
            prev_kv: false,
        })),
    }
}

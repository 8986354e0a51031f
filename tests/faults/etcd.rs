//! The fault suite's etcd workload: clients of etcd's v3 API, through the stubs etcd's own proto
//! generates (as any gRPC user of etcd has them), that take etcd's lock as `clientv3/concurrency`'s
//! `Mutex` does, write fenced by their lock key's create revision as etcd's docs advise, keep their
//! lease alive (or, the sleeper, stop and let it run out, then try a fenced write), and put,
//! delete and read keys. Each operation is recorded in the core's terms, as the node logs it, for
//! `leasehold_check::etcd_linearizable` to judge against the log's replay.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold::lease::etcd::{
    Compare, CompareResult, CompareTarget, DeleteRangeRequest, EtcdAnswer, EtcdOp, EtcdOutcome,
    EtcdRefusal, KeyValue, OpAnswer, PutRequest, RangeAnswer, RangeRequest, RequestOp, SortOrder,
    SortTarget, Txn, TxnAnswer,
};
use leasehold::proto::etcd::etcdserverpb as pb;
use leasehold::proto::etcd::etcdserverpb::{kv_client::KvClient, lease_client::LeaseClient};
use leasehold::proto::etcd::mvccpb;
use leasehold_check::{EtcdCompletion, EtcdOperation, EtcdRequest, Rng};
use tonic::transport::Channel;

use super::Recorder;

/// Where the lock's keys live: each contender's is this and its lease's id.
const LOCK: &str = "etcd/lock/";
/// The key only the lock's holder writes, fenced.
const FENCED: &str = "etcd/fenced";
/// The keys written and deleted without a lock.
const KEYS: [&str; 3] = ["etcd/k0", "etcd/k1", "etcd/k2"];
/// How long a client waits for one answer.
const DEADLINE: Duration = Duration::from_secs(3);
/// How an answer of INTERNAL is marked in the history.
const INTERNAL: &str = "internal error";

/// The first key after every key starting with `prefix`, as etcd's clients compute it.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    *end.last_mut().expect("a prefix") += 1;
    end
}

// ---------------------------------------------------------------------------------------------
// The core's requests as etcd's messages, and etcd's answers as the core's: written here from
// etcd's proto, not taken from the node, so that a field the node's edge misreads shows up as
// an answer the model does not give.

fn range_message(r: &RangeRequest) -> pb::RangeRequest {
    use pb::range_request::{SortOrder as Order, SortTarget as Target};
    pb::RangeRequest {
        key: r.key.clone(),
        range_end: r.range_end.clone(),
        limit: r.limit,
        sort_order: match r.sort_order {
            SortOrder::None => Order::None,
            SortOrder::Ascend => Order::Ascend,
            SortOrder::Descend => Order::Descend,
        } as i32,
        sort_target: match r.sort_target {
            SortTarget::Key => Target::Key,
            SortTarget::Version => Target::Version,
            SortTarget::Create => Target::Create,
            SortTarget::Mod => Target::Mod,
            SortTarget::Value => Target::Value,
        } as i32,
        max_create_revision: r.max_create_revision,
        keys_only: r.keys_only,
        count_only: r.count_only,
        ..pb::RangeRequest::default()
    }
}

fn put_message(p: &PutRequest) -> pb::PutRequest {
    pb::PutRequest {
        key: p.key.clone(),
        value: p.value.clone(),
        lease: p.lease,
        prev_kv: p.prev_kv,
        ignore_value: p.ignore_value,
        ignore_lease: p.ignore_lease,
    }
}

fn delete_message(d: &DeleteRangeRequest) -> pb::DeleteRangeRequest {
    pb::DeleteRangeRequest {
        key: d.key.clone(),
        range_end: d.range_end.clone(),
        prev_kv: d.prev_kv,
    }
}

fn txn_message(t: &Txn) -> pb::TxnRequest {
    use pb::compare::{CompareResult as Result, CompareTarget as Target, TargetUnion};
    let compare = |c: &Compare| {
        let (target, union) = match &c.target {
            CompareTarget::Version(v) => (Target::Version, TargetUnion::Version(*v)),
            CompareTarget::Create(v) => (Target::Create, TargetUnion::CreateRevision(*v)),
            CompareTarget::Mod(v) => (Target::Mod, TargetUnion::ModRevision(*v)),
            CompareTarget::Value(v) => (Target::Value, TargetUnion::Value(v.clone())),
            CompareTarget::Lease(v) => (Target::Lease, TargetUnion::Lease(*v)),
        };
        pb::Compare {
            result: match c.result {
                CompareResult::Equal => Result::Equal,
                CompareResult::Greater => Result::Greater,
                CompareResult::Less => Result::Less,
                CompareResult::NotEqual => Result::NotEqual,
            } as i32,
            target: target as i32,
            key: c.key.clone(),
            range_end: c.range_end.clone(),
            target_union: Some(union),
        }
    };
    let ops = |ops: &[RequestOp]| -> Vec<pb::RequestOp> {
        use pb::request_op::Request;
        let op = |r: &RequestOp| match r {
            RequestOp::Range(r) => Request::RequestRange(range_message(r)),
            RequestOp::Put(p) => Request::RequestPut(put_message(p)),
            RequestOp::DeleteRange(d) => Request::RequestDeleteRange(delete_message(d)),
            RequestOp::Txn(t) => Request::RequestTxn(txn_message(t)),
        };
        (ops.iter())
            .map(|r| pb::RequestOp {
                request: Some(op(r)),
            })
            .collect()
    };
    pb::TxnRequest {
        compare: t.compare.iter().map(compare).collect(),
        success: ops(&t.success),
        failure: ops(&t.failure),
    }
}

fn key_value(kv: mvccpb::KeyValue) -> KeyValue {
    KeyValue {
        key: kv.key.into(),
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        value: kv.value.into(),
        lease: kv.lease,
    }
}

fn range_answer(r: pb::RangeResponse) -> RangeAnswer {
    RangeAnswer {
        kvs: r.kvs.into_iter().map(key_value).collect(),
        more: r.more,
        count: r.count,
    }
}

fn delete_answer(d: pb::DeleteRangeResponse) -> OpAnswer {
    OpAnswer::DeleteRange {
        deleted: d.deleted,
        prev_kvs: d.prev_kvs.into_iter().map(key_value).collect(),
    }
}

fn txn_answer(t: pb::TxnResponse) -> TxnAnswer {
    use pb::response_op::Response;
    let answer = |r: pb::ResponseOp| match r.response.expect("a transaction's answer") {
        Response::ResponseRange(r) => OpAnswer::Range(range_answer(r)),
        Response::ResponsePut(p) => OpAnswer::Put {
            prev_kv: p.prev_kv.map(key_value),
        },
        Response::ResponseDeleteRange(d) => delete_answer(d),
        Response::ResponseTxn(t) => OpAnswer::Txn(txn_answer(t)),
    };
    TxnAnswer {
        succeeded: t.succeeded,
        responses: t.responses.into_iter().map(answer).collect(),
    }
}

fn revision(header: Option<pb::ResponseHeader>) -> i64 {
    header.expect("etcd's answers carry a header").revision
}

/// A transaction of `request` alone, as the node logs a put or a delete.
fn one(request: RequestOp) -> Txn {
    Txn {
        compare: vec![],
        success: vec![request],
        failure: vec![],
    }
}

/// A transaction's answer as the outcome the client saw.
fn wrote(revision: i64, answer: TxnAnswer) -> EtcdCompletion {
    EtcdCompletion::Wrote(EtcdOutcome {
        revision,
        answer: EtcdAnswer::Txn(answer),
    })
}

// ---------------------------------------------------------------------------------------------
// The client.

/// One etcd client over every node, as etcd's clients hold their endpoints: it calls one, and
/// moves to the next when a call fails.
pub struct EtcdClient {
    id: u32,
    channels: Vec<Channel>,
    at: usize,
    recorder: Arc<Recorder>,
}

impl EtcdClient {
    pub fn new(id: u32, channels: Vec<Channel>, first: usize, recorder: Arc<Recorder>) -> Self {
        EtcdClient {
            id,
            channels,
            at: first,
            recorder,
        }
    }

    /// Sends `call` to this client's node and records it as `request`: a refusal of etcd's
    /// keyspace (a lease gone) is an answer; any other failure leaves the operation
    /// indeterminate and moves the client to the next node.
    async fn record<F>(
        &mut self,
        request: EtcdRequest,
        call: impl FnOnce(Channel) -> F,
    ) -> EtcdCompletion
    where
        F: std::future::Future<Output = Result<EtcdCompletion, tonic::Status>>,
    {
        let invoked_ns = self.recorder.now_ns();
        let channel = self.channels[self.at].clone();
        let completion = match tokio::time::timeout(DEADLINE, call(channel)).await {
            Ok(Ok(completion)) => completion,
            Ok(Err(status))
                if status.code() == tonic::Code::NotFound
                    && status.message() == EtcdRefusal::LeaseNotFound.to_string() =>
            {
                EtcdCompletion::Refused(EtcdRefusal::LeaseNotFound)
            }
            // INTERNAL is a broken invariant, which the run reports (see `internal_errors`).
            Ok(Err(status)) if status.code() == tonic::Code::Internal => {
                EtcdCompletion::Indeterminate(format!("{INTERNAL}: {status}"))
            }
            Ok(Err(status)) => EtcdCompletion::Indeterminate(status.to_string()),
            Err(_) => EtcdCompletion::Indeterminate(format!("no answer within {DEADLINE:?}")),
        };
        if let EtcdCompletion::Indeterminate(_) = completion {
            // As etcd's clients do: the next endpoint, after a pause, so that a node that
            // refuses at once is not called in a tight loop.
            self.at = (self.at + 1) % self.channels.len();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.recorder.record_etcd(EtcdOperation {
            client: self.id,
            request,
            invoked_ns,
            completed_ns: self.recorder.now_ns(),
            completion: completion.clone(),
        });
        completion
    }

    async fn range(&mut self, range: RangeRequest) -> Option<(i64, RangeAnswer)> {
        let message = range_message(&range);
        let completion = self
            .record(EtcdRequest::Range(range), |channel| async move {
                let r = KvClient::new(channel).range(message).await?.into_inner();
                Ok(EtcdCompletion::Read {
                    revision: revision(r.header),
                    answer: range_answer(r),
                })
            })
            .await;
        match completion {
            EtcdCompletion::Read { revision, answer } => Some((revision, answer)),
            _ => None,
        }
    }

    async fn put(&mut self, put: PutRequest) -> EtcdCompletion {
        let message = put_message(&put);
        let logged = EtcdOp::Txn(one(RequestOp::Put(put)));
        self.record(EtcdRequest::Write(logged), |channel| async move {
            let p = KvClient::new(channel).put(message).await?.into_inner();
            let put = OpAnswer::Put {
                prev_kv: p.prev_kv.map(key_value),
            };
            let answer = TxnAnswer {
                succeeded: true,
                responses: vec![put],
            };
            Ok(wrote(revision(p.header), answer))
        })
        .await
    }

    async fn delete(&mut self, delete: DeleteRangeRequest) -> EtcdCompletion {
        let message = delete_message(&delete);
        let logged = EtcdOp::Txn(one(RequestOp::DeleteRange(delete)));
        self.record(EtcdRequest::Write(logged), |channel| async move {
            let d = KvClient::new(channel)
                .delete_range(message)
                .await?
                .into_inner();
            let header = d.header;
            let answer = TxnAnswer {
                succeeded: true,
                responses: vec![delete_answer(d)],
            };
            Ok(wrote(revision(header), answer))
        })
        .await
    }

    async fn txn(&mut self, txn: Txn) -> Option<(i64, TxnAnswer)> {
        let message = txn_message(&txn);
        let completion = self
            .record(EtcdRequest::Write(EtcdOp::Txn(txn)), |channel| async move {
                let t = KvClient::new(channel).txn(message).await?.into_inner();
                Ok(wrote(revision(t.header), txn_answer(t)))
            })
            .await;
        match completion {
            EtcdCompletion::Wrote(EtcdOutcome {
                revision,
                answer: EtcdAnswer::Txn(answer),
            }) => Some((revision, answer)),
            _ => None,
        }
    }

    async fn grant(&mut self, ttl_s: i64) -> Option<i64> {
        let op = EtcdOp::LeaseGrant { id: 0, ttl_s };
        let completion = self
            .record(EtcdRequest::Write(op), |channel| async move {
                let message = pb::LeaseGrantRequest { ttl: ttl_s, id: 0 };
                let g = LeaseClient::new(channel).lease_grant(message).await?;
                let g = g.into_inner();
                Ok(EtcdCompletion::Wrote(EtcdOutcome {
                    revision: revision(g.header),
                    answer: EtcdAnswer::LeaseGranted {
                        id: g.id,
                        ttl_s: g.ttl,
                    },
                }))
            })
            .await;
        match completion {
            EtcdCompletion::Wrote(EtcdOutcome {
                answer: EtcdAnswer::LeaseGranted { id, .. },
                ..
            }) => Some(id),
            _ => None,
        }
    }

    async fn revoke(&mut self, id: i64) -> EtcdCompletion {
        self.record(
            EtcdRequest::Write(EtcdOp::LeaseRevoke { id }),
            |channel| async move {
                let message = pb::LeaseRevokeRequest { id };
                let r = LeaseClient::new(channel).lease_revoke(message).await?;
                Ok(EtcdCompletion::Wrote(EtcdOutcome {
                    revision: revision(r.into_inner().header),
                    answer: EtcdAnswer::LeaseRevoked,
                }))
            },
        )
        .await
    }

    /// One keep-alive, on a stream of its own held open until it is answered. A lease that is
    /// gone answers TTL 0, which etcd's clients read as "not found".
    async fn keep_alive(&mut self, id: i64) -> EtcdCompletion {
        self.record(
            EtcdRequest::Write(EtcdOp::LeaseKeepAlive { id }),
            |channel| async move {
                let (send, outbound) = tokio::sync::mpsc::channel(1);
                let outbound = tokio_stream::wrappers::ReceiverStream::new(outbound);
                send.send(pb::LeaseKeepAliveRequest { id }).await.unwrap();
                let mut stream = LeaseClient::new(channel)
                    .lease_keep_alive(outbound)
                    .await?
                    .into_inner();
                let Some(k) = stream.message().await? else {
                    return Err(tonic::Status::unavailable("the keep-alive stream ended"));
                };
                drop(send);
                Ok(match k.ttl {
                    0 => EtcdCompletion::Refused(EtcdRefusal::LeaseNotFound),
                    ttl_s => EtcdCompletion::Wrote(EtcdOutcome {
                        revision: revision(k.header),
                        answer: EtcdAnswer::LeaseKeptAlive { id: k.id, ttl_s },
                    }),
                })
            },
        )
        .await
    }
}

// ---------------------------------------------------------------------------------------------
// The lock, as `clientv3/concurrency`'s Mutex takes it.

/// Where a client stands with the lock.
enum Lock {
    /// Not contending.
    Out,
    /// Its key created at `revision`, behind older keys it waits to see deleted.
    Waiting { key: String, revision: i64 },
    /// Its key is the oldest under the lock's prefix.
    Holding { key: String, revision: i64 },
}

/// The oldest key under the lock's prefix: the Mutex's "owner".
fn owner() -> RangeRequest {
    RangeRequest {
        key: LOCK.into(),
        range_end: prefix_end(LOCK),
        limit: 1,
        sort_order: SortOrder::Ascend,
        sort_target: SortTarget::Create,
        ..RangeRequest::default()
    }
}

/// The Mutex's first step: creates the client's key under the lease if it has none, and reads
/// its key and the owner in the same transaction.
fn contend(key: &str, lease: i64) -> Txn {
    let mine = RangeRequest {
        key: key.into(),
        ..RangeRequest::default()
    };
    Txn {
        compare: vec![created_at(key, 0)],
        success: vec![
            RequestOp::Put(PutRequest {
                key: key.into(),
                lease,
                ..PutRequest::default()
            }),
            RequestOp::Range(owner()),
        ],
        failure: vec![RequestOp::Range(mine), RequestOp::Range(owner())],
    }
}

fn created_at(key: &str, revision: i64) -> Compare {
    Compare {
        result: CompareResult::Equal,
        target: CompareTarget::Create(revision),
        key: key.into(),
        range_end: vec![],
    }
}

/// The newest key under the lock's prefix created before `revision`: while there is one, the
/// Mutex waits (etcd's `waitDeletes`).
fn older_than(revision: i64) -> RangeRequest {
    RangeRequest {
        max_create_revision: revision - 1,
        sort_order: SortOrder::Descend,
        ..owner()
    }
}

/// Where `contend`'s answer leaves the client: its key's create revision, and whether it is
/// the owner.
fn contended(revision: i64, answer: &TxnAnswer) -> Option<(i64, bool)> {
    let first = |r: Option<&OpAnswer>| match r {
        Some(OpAnswer::Range(r)) => Some(r.kvs.first().map_or(0, |kv| kv.create_revision)),
        _ => None,
    };
    let mine = match answer.succeeded {
        true => revision,
        false => first(answer.responses.first())?,
    };
    let owner = first(answer.responses.get(1))?;
    Some((mine, owner == 0 || owner == mine))
}

/// One etcd client's loop until `stop`. Client `sleeper` now and then holds the lock and stops
/// keeping its lease alive for longer than its TTL, then writes fenced, as the seed page's
/// frozen holder does: the write must fail.
pub async fn client_loop(mut client: EtcdClient, seed: u64, sleeper: bool, stop: Arc<AtomicBool>) {
    let mut rng = Rng(seed);
    let mut lease: Option<(i64, i64)> = None;
    let mut lock = Lock::Out;
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        let value = format!("e{}-{seq}", client.id).into_bytes();
        let Some((id, ttl_s)) = lease else {
            let ttl_s = rng.between(1, 3) as i64;
            lease = client.grant(ttl_s).await.map(|id| (id, ttl_s));
            lock = Lock::Out;
            continue;
        };
        let gone = match rng.below(100) {
            0..=19 => {
                let completion = client.keep_alive(id).await;
                matches!(completion, EtcdCompletion::Refused(_))
            }
            20..=44 => {
                step_lock(&mut client, &mut lock, id).await;
                false
            }
            45..=59 => {
                fenced(
                    &mut client,
                    &mut lock,
                    value,
                    sleeper && rng.below(4) == 0,
                    ttl_s,
                )
                .await;
                false
            }
            60..=64 => {
                if let Lock::Waiting { key, .. } | Lock::Holding { key, .. } = &lock {
                    let key = key.clone().into_bytes();
                    let unlock = DeleteRangeRequest {
                        key,
                        ..DeleteRangeRequest::default()
                    };
                    client.delete(unlock).await;
                    lock = Lock::Out;
                }
                false
            }
            65..=66 => {
                client.revoke(id).await;
                true
            }
            67..=84 => plain_write(&mut client, &mut rng, value, id).await,
            _ => {
                plain_read(&mut client, &mut rng).await;
                false
            }
        };
        if gone {
            lease = None;
        }
    }
}

/// The Mutex's next step: contend, or look again whether the older keys are gone. (A contend
/// refused for a lease gone leaves the client out; its next keep-alive learns the lease is
/// gone.)
async fn step_lock(client: &mut EtcdClient, lock: &mut Lock, lease: i64) {
    match lock {
        Lock::Out => {
            let key = format!("{LOCK}{lease:x}");
            let Some((revision, answer)) = client.txn(contend(&key, lease)).await else {
                return;
            };
            // A lease gone refuses the put in the success branch: nothing was created.
            *lock = match contended(revision, &answer) {
                Some((mine, true)) if mine > 0 => Lock::Holding {
                    key,
                    revision: mine,
                },
                Some((mine, false)) if mine > 0 => Lock::Waiting {
                    key,
                    revision: mine,
                },
                _ => Lock::Out,
            };
        }
        Lock::Waiting { key, revision } => {
            if let Some((_, older)) = client.range(older_than(*revision)).await {
                if older.kvs.is_empty() {
                    let (key, revision) = (key.clone(), *revision);
                    *lock = Lock::Holding { key, revision };
                }
            }
        }
        Lock::Holding { .. } => {}
    }
}

/// The holder's write, fenced by its key's create revision. `freeze`: first stops for longer
/// than the lease's TTL, so that the lease runs out and the write must fail.
async fn fenced(
    client: &mut EtcdClient,
    lock: &mut Lock,
    value: Vec<u8>,
    freeze: bool,
    ttl_s: i64,
) {
    let Lock::Holding { key, revision } = &*lock else {
        return;
    };
    if freeze {
        tokio::time::sleep(Duration::from_millis(ttl_s as u64 * 1_000 + 1_500)).await;
    }
    let write = Txn {
        compare: vec![created_at(key, *revision)],
        success: vec![RequestOp::Put(PutRequest {
            key: FENCED.into(),
            value,
            ..PutRequest::default()
        })],
        failure: vec![],
    };
    if let Some((_, answer)) = client.txn(write).await {
        if !answer.succeeded {
            *lock = Lock::Out; // Its key is gone: no longer the holder.
        }
    }
}

/// A put (now and then under the lease) or a delete of one key or all of them. True when the
/// put learned that the lease is gone.
async fn plain_write(client: &mut EtcdClient, rng: &mut Rng, value: Vec<u8>, lease: i64) -> bool {
    let key = rng.pick(&KEYS).as_bytes().to_vec();
    match rng.below(4) {
        0 => {
            let range_end = match rng.coin() {
                true => prefix_end("etcd/k"),
                false => vec![],
            };
            let delete = DeleteRangeRequest {
                key: if range_end.is_empty() {
                    key
                } else {
                    b"etcd/k".to_vec()
                },
                range_end,
                prev_kv: rng.coin(),
            };
            client.delete(delete).await;
            false
        }
        _ => {
            let put = PutRequest {
                key,
                value,
                lease: if rng.below(3) == 0 { lease } else { 0 },
                prev_kv: rng.coin(),
                ..PutRequest::default()
            };
            matches!(client.put(put).await, EtcdCompletion::Refused(_))
        }
    }
}

/// A linearizable read of one key, of every key the workload writes (sorted, limited), or of
/// the lock's owner.
async fn plain_read(client: &mut EtcdClient, rng: &mut Rng) {
    let range = match rng.below(3) {
        0 => RangeRequest {
            key: rng.pick(&KEYS).as_bytes().to_vec(),
            ..RangeRequest::default()
        },
        1 => RangeRequest {
            key: b"etcd/".to_vec(),
            range_end: prefix_end("etcd/"),
            limit: rng.between(0, 4) as i64,
            sort_order: *rng.pick(&[SortOrder::None, SortOrder::Descend]),
            sort_target: *rng.pick(&[SortTarget::Key, SortTarget::Mod]),
            ..RangeRequest::default()
        },
        _ => owner(),
    };
    client.range(range).await;
}

/// How the workload's operations ended, with the lock's transactions apart, so that a run
/// shows the lock was taken and fenced writes both went through and were refused.
pub fn print_counts(history: &[EtcdOperation]) {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for op in history {
        // The lock's transactions compare its key's create revision: 0 to create it, its own
        // to fence a write.
        let lock = match &op.request {
            EtcdRequest::Write(EtcdOp::Txn(t)) => (t.compare.first())
                .filter(|c| c.key.starts_with(LOCK.as_bytes()))
                .map(|c| c.target == CompareTarget::Create(0)),
            _ => None,
        };
        let ended = match (&op.completion, lock) {
            (
                EtcdCompletion::Wrote(EtcdOutcome {
                    answer: EtcdAnswer::Txn(t),
                    ..
                }),
                Some(create),
            ) => match (create, t.succeeded) {
                (true, true) => "lock key created",
                (true, false) => "lock key there already",
                (false, true) => "fenced write through",
                (false, false) => "fenced write refused",
            },
            (EtcdCompletion::Wrote(_), _) => "written",
            (EtcdCompletion::Read { .. }, _) => "read",
            (EtcdCompletion::Refused(_), _) => "refused (lease gone)",
            (EtcdCompletion::Indeterminate(_), _) => "indeterminate",
        };
        *counts.entry(ended).or_default() += 1;
    }
    println!("etcd workload: {counts:?}");
}

/// What the etcd history says is wrong with the run itself: an INTERNAL answer (a broken
/// invariant, which no fault causes), or a workload that got no write or no read acknowledged,
/// so that its checker judged nothing (a run misconfigured: every call denied, say).
pub fn run_anomalies(history: &[EtcdOperation]) -> Vec<leasehold_check::Anomaly> {
    use leasehold_check::Anomaly;
    let mut anomalies = Vec::new();
    for op in history {
        if let EtcdCompletion::Indeterminate(why) = &op.completion {
            if why.starts_with(INTERNAL) {
                let what = format!("{:?} (client {}) failed: {why}", op.request, op.client);
                anomalies.push(Anomaly::new("internal error", what));
            }
        }
    }
    let wrote = history
        .iter()
        .any(|op| matches!(op.completion, EtcdCompletion::Wrote(_)));
    let read = history
        .iter()
        .any(|op| matches!(op.completion, EtcdCompletion::Read { .. }));
    if !(wrote && read) {
        let what =
            format!("the etcd workload had no write ({wrote}) or no read ({read}) acknowledged");
        anomalies.push(Anomaly::new("etcd workload", what));
    }
    anomalies
}

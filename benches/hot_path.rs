//! Micro-benchmarks of the hot path without a cluster: the state machine's apply, and the log
//! store's append with its fsync. `cargo bench --bench hot_path`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use leasehold::lease::etcd::{EtcdOp, PutRequest, RequestOp, Txn};
use leasehold::lease::{Batch, Command, Fence, LeaseTable, Op, RequestId};
use leasehold::raft::{LogStore, TypeConfig};
use openraft::storage::RaftLogStorageExt;
use openraft::testing::log_id;
use openraft::{Entry, EntryPayload};

fn command(at_ms: u64, sequence: u64, op: Op) -> Command {
    Command {
        at_ms: Some(at_ms),
        request: Some(RequestId {
            client: 1,
            sequence,
        }),
        op,
    }
}

fn apply(c: &mut Criterion) {
    // A table with 10,000 leases and rows, as a busy store might hold.
    let mut table = LeaseTable::default();
    for i in 0..10_000u64 {
        let lease = format!("lease-{i}");
        table.apply(&command(
            0,
            i,
            Op::Acquire {
                lease: lease.clone(),
                holder: "h".into(),
                ttl_ms: 600_000,
            },
        ));
        table.apply(&command(
            0,
            i,
            Op::Put {
                key: format!("key-{i}"),
                value: vec![0; 100],
                fence: None,
            },
        ));
    }
    let mut sequence = 1_000_000;
    c.bench_function("apply fenced put (10k leases)", |b| {
        b.iter(|| {
            sequence += 1;
            let op = Op::Put {
                key: "key-5".into(),
                value: vec![1; 100],
                fence: Some(Fence {
                    lease: "lease-5".into(),
                    token: 1,
                }),
            };
            black_box(table.apply(&command(1, sequence, op)))
        })
    });
    c.bench_function("apply renew (10k leases)", |b| {
        b.iter(|| {
            sequence += 1;
            let op = Op::Acquire {
                lease: "lease-7".into(),
                holder: "h".into(),
                ttl_ms: 600_000,
            };
            black_box(table.apply(&command(2, sequence, op)))
        })
    });
}

fn apply_etcd(c: &mut Criterion) {
    // etcd's keyspace with 10,000 keys, each put a Txn of one op, as the etcd API logs a Put.
    let put = |key: String| Command {
        at_ms: Some(1),
        request: None,
        op: Op::Etcd(EtcdOp::Txn(Txn {
            compare: vec![],
            success: vec![RequestOp::Put(PutRequest {
                key: key.into_bytes(),
                value: vec![1; 100],
                ..PutRequest::default()
            })],
            failure: vec![],
        })),
    };
    let mut table = LeaseTable::default();
    for i in 0..10_000u64 {
        table.apply(&put(format!("key-{i}")));
    }
    let mut i = 0u64;
    c.bench_function("apply etcd put (10k keys)", |b| {
        b.iter(|| {
            i += 7_919;
            black_box(table.apply(&put(format!("key-{}", i % 10_000))))
        })
    });
}

fn append(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::TempDir::new().unwrap();
    let mut log = LogStore::open(&dir.path().join("raft-log")).unwrap();
    let mut index = 0u64;
    let mut next = 0u64;
    // `entries` log entries, each carrying a batch of `commands` 100-byte puts.
    let mut entries = |entries: u64, commands: u64| -> Vec<Entry<TypeConfig>> {
        (0..entries)
            .map(|_| {
                index += 1;
                let batch = (0..commands)
                    .map(|_| {
                        next += 1;
                        let op = Op::Put {
                            key: format!("k{next}"),
                            value: vec![0; 100],
                            fence: None,
                        };
                        command(next, next, op)
                    })
                    .collect();
                Entry {
                    log_id: log_id(1, 1, index),
                    payload: EntryPayload::Normal(Batch(batch)),
                }
            })
            .collect()
    };
    for (count, commands) in [(1u64, 1u64), (64, 1), (1, 64)] {
        let name = format!("log append, fsynced, {count} entries of {commands} puts");
        c.bench_function(&name, |b| {
            b.iter_batched(
                || entries(count, commands),
                |entries| runtime.block_on(log.blocking_append(entries)).unwrap(),
                BatchSize::SmallInput,
            )
        });
    }
}

criterion_group!(benches, apply, apply_etcd, append);
criterion_main!(benches);

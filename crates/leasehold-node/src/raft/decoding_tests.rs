//! Everything a peer or the disk hands a node is decoded without trust: random and mutated
//! bytes must give an error, never a panic, and never an allocation beyond what the bytes can
//! fill (postcard sizes a collection by what it reads, not by the length it was told).

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use proptest::prelude::*;

use super::codec::{decode, encode};
use super::state_machine::decode_table;
use super::{snapshot_file::SnapshotFile, TypeConfig};
use crate::node::Forwarded;
use leasehold_core::{Batch, Command, Fence, Op, RequestId};

/// Decodes `bytes` as every message a peer sends and every file a node reads.
fn decode_everything(bytes: &[u8]) {
    let _ = decode::<AppendEntriesRequest<TypeConfig>>(bytes);
    let _ = decode::<VoteRequest<u64>>(bytes);
    let _ = decode::<InstallSnapshotRequest<TypeConfig>>(bytes);
    let _ = decode::<Vec<Forwarded>>(bytes);
    let _ = decode::<(u64, u64)>(bytes);
    let _ = decode::<SnapshotFile>(bytes);
    let _ = decode_table(bytes);
}

/// A real replication message: entries carrying every kind of command.
fn append_entries() -> Vec<u8> {
    let command = |op| Command {
        at_ms: Some(7),
        request: Some(RequestId {
            client: 3,
            sequence: 9,
        }),
        op,
    };
    let entries = (1..=3)
        .map(|index| openraft::Entry {
            log_id: openraft::testing::log_id(2, 1, index),
            payload: openraft::EntryPayload::Normal(Batch(vec![
                command(Op::Acquire {
                    lease: "lease".into(),
                    holder: "holder".into(),
                    ttl_ms: 1_000,
                }),
                command(Op::Put {
                    key: "key".into(),
                    value: vec![1; 40],
                    fence: Some(Fence {
                        lease: "lease".into(),
                        token: 1,
                    }),
                }),
                command(Op::Register),
            ])),
        })
        .collect();
    let request = AppendEntriesRequest::<TypeConfig> {
        vote: openraft::Vote::new_committed(2, 1),
        prev_log_id: Some(openraft::testing::log_id(1, 1, 0)),
        entries,
        leader_commit: Some(openraft::testing::log_id(2, 1, 2)),
    };
    encode(&request).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn random_bytes_decode_to_an_error_or_a_value_never_a_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..2_048)
    ) {
        decode_everything(&bytes);
    }

    #[test]
    fn a_mutated_replication_message_decodes_to_an_error_or_a_value_never_a_panic(
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = append_entries();
        for (at, value) in flips {
            let at = at.index(bytes.len());
            bytes[at] = value;
        }
        let keep = cut.index(bytes.len() + 1);
        decode_everything(&bytes);
        decode_everything(&bytes[..keep]);
    }
}

#[test]
fn a_length_prefix_of_the_largest_size_allocates_nothing_it_cannot_fill() {
    // A Vec<Forwarded> claiming u64::MAX elements, then nothing: decoding reads element by
    // element and fails at the end of the input.
    let mut bytes = vec![0xff; 9];
    bytes.push(0x01);
    assert!(decode::<Vec<Forwarded>>(&bytes).is_err());
    assert!(decode::<AppendEntriesRequest<TypeConfig>>(&append_entries()[..20]).is_err());
}

//! etcd v3's gRPC API, as etcd 3.5 defines it on the wire (`proto/etcd/`): the messages, and the
//! servers and clients of its services. Leasehold's etcd edge serves them, so stock etcd clients
//! work unchanged, and a follower calls them to forward reads to the leader.
//!
//! Each proto package is a module here, as siblings, so the generated `super::mvccpb` and
//! `super::etcdserverpb` paths between packages resolve.

/// The `KV`, `Watch`, `Lease`, `Cluster`, `Maintenance` and `Auth` services and their messages.
#[allow(missing_docs)]
pub mod etcdserverpb {
    tonic::include_proto!("etcdserverpb");
    // serde's impls in the JSON etcd's gateway speaks.
    #[cfg(feature = "json")]
    include!(concat!(env!("OUT_DIR"), "/etcdserverpb.serde.rs"));
}

/// Key-value pairs and watch events.
#[allow(missing_docs)]
pub mod mvccpb {
    tonic::include_proto!("mvccpb");
    // serde's impls in the JSON etcd's gateway speaks.
    #[cfg(feature = "json")]
    include!(concat!(env!("OUT_DIR"), "/mvccpb.serde.rs"));
}

/// The user options and permissions the `Auth` service's messages carry.
#[allow(missing_docs)]
pub mod authpb {
    tonic::include_proto!("authpb");
    // serde's impls in the JSON etcd's gateway speaks.
    #[cfg(feature = "json")]
    include!(concat!(env!("OUT_DIR"), "/authpb.serde.rs"));
}

/// The `Lock` service.
#[allow(missing_docs)]
pub mod v3lockpb {
    tonic::include_proto!("v3lockpb");
    // serde's impls in the JSON etcd's gateway speaks.
    #[cfg(feature = "json")]
    include!(concat!(env!("OUT_DIR"), "/v3lockpb.serde.rs"));
}

/// The `Election` service.
#[allow(missing_docs)]
pub mod v3electionpb {
    tonic::include_proto!("v3electionpb");
    // serde's impls in the JSON etcd's gateway speaks.
    #[cfg(feature = "json")]
    include!(concat!(env!("OUT_DIR"), "/v3electionpb.serde.rs"));
}

#[cfg(test)]
mod tests {
    use super::etcdserverpb::{compare, range_request, Compare, PutRequest, RangeRequest};
    use prost::Message;

    // Tags are `field_number << 3 | wire_type`: 0 for varints (int64, bool, enums), 2 for
    // length-delimited (bytes).

    #[test]
    fn a_put_request_is_encoded_with_etcds_field_numbers() {
        let put = PutRequest {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            lease: 300,
            prev_kv: true,
            ignore_value: true,
            ignore_lease: true,
        };
        let expected = [
            0x0a, 1, b'k', // key = 1, bytes
            0x12, 1, b'v', // value = 2, bytes
            0x18, 0xac, 0x02, // lease = 3, int64 300
            0x20, 1, // prev_kv = 4, bool
            0x28, 1, // ignore_value = 5, bool
            0x30, 1, // ignore_lease = 6, bool
        ];
        assert_eq!(put.encode_to_vec(), expected);
        assert_eq!(PutRequest::decode(&expected[..]).unwrap(), put);
    }

    #[test]
    fn a_range_request_is_encoded_with_etcds_field_numbers() {
        let range = RangeRequest {
            key: b"a".to_vec(),
            range_end: b"b".to_vec(),
            limit: 3,
            revision: 4,
            sort_order: range_request::SortOrder::Descend as i32,
            sort_target: range_request::SortTarget::Mod as i32,
            serializable: true,
            keys_only: true,
            count_only: true,
            min_mod_revision: 10,
            max_mod_revision: 11,
            min_create_revision: 12,
            max_create_revision: 13,
        };
        let expected = [
            0x0a, 1, b'a', // key = 1, bytes
            0x12, 1, b'b', // range_end = 2, bytes
            0x18, 3, // limit = 3, int64
            0x20, 4, // revision = 4, int64
            0x28, 2, // sort_order = 5, DESCEND
            0x30, 3, // sort_target = 6, MOD
            0x38, 1, // serializable = 7, bool
            0x40, 1, // keys_only = 8, bool
            0x48, 1, // count_only = 9, bool
            0x50, 10, // min_mod_revision = 10, int64
            0x58, 11, // max_mod_revision = 11, int64
            0x60, 12, // min_create_revision = 12, int64
            0x68, 13, // max_create_revision = 13, int64
        ];
        assert_eq!(range.encode_to_vec(), expected);
        assert_eq!(RangeRequest::decode(&expected[..]).unwrap(), range);
    }

    #[test]
    fn a_compares_range_end_is_field_64() {
        let compare = Compare {
            result: compare::CompareResult::NotEqual as i32,
            target: compare::CompareTarget::Lease as i32,
            key: b"k".to_vec(),
            range_end: b"l".to_vec(),
            target_union: Some(compare::TargetUnion::Lease(5)),
        };
        let expected = [
            0x08, 3, // result = 1, NOT_EQUAL
            0x10, 4, // target = 2, LEASE
            0x1a, 1, b'k', // key = 3, bytes
            0x40, 5, // lease = 8 (in target_union), int64
            0x82, 0x04, 1, b'l', // range_end = 64, bytes: a two-byte tag
        ];
        assert_eq!(compare.encode_to_vec(), expected);
    }

    #[test]
    fn every_service_has_a_server_and_a_client() {
        use super::{etcdserverpb as pb, v3electionpb as election, v3lockpb as lock};
        let names = [
            std::any::type_name::<pb::kv_server::KvServer<()>>(),
            std::any::type_name::<pb::kv_client::KvClient<()>>(),
            std::any::type_name::<pb::watch_server::WatchServer<()>>(),
            std::any::type_name::<pb::watch_client::WatchClient<()>>(),
            std::any::type_name::<pb::lease_server::LeaseServer<()>>(),
            std::any::type_name::<pb::lease_client::LeaseClient<()>>(),
            std::any::type_name::<pb::cluster_server::ClusterServer<()>>(),
            std::any::type_name::<pb::cluster_client::ClusterClient<()>>(),
            std::any::type_name::<pb::maintenance_server::MaintenanceServer<()>>(),
            std::any::type_name::<pb::maintenance_client::MaintenanceClient<()>>(),
            std::any::type_name::<pb::auth_server::AuthServer<()>>(),
            std::any::type_name::<pb::auth_client::AuthClient<()>>(),
            std::any::type_name::<lock::lock_server::LockServer<()>>(),
            std::any::type_name::<lock::lock_client::LockClient<()>>(),
            std::any::type_name::<election::election_server::ElectionServer<()>>(),
            std::any::type_name::<election::election_client::ElectionClient<()>>(),
        ];
        assert_eq!(names.len(), 16);
        // The gRPC paths clients call are etcd's.
        use tonic::server::NamedService;
        type Kv = pb::kv_server::KvServer<()>;
        assert_eq!(<Kv as NamedService>::NAME, "etcdserverpb.KV");
    }
}

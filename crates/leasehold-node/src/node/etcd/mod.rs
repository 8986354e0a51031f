//! etcd's v3 gRPC services on the client plane, a thin edge over the typed API
//! (`api::etcd`): each call finds its caller's credentials as the `LeaseStore` services do,
//! calls the API, and maps a `NodeError` to a status once. The streams (Watch, LeaseKeepAlive,
//! Observe) run a task each that reads the client's messages and sends the API's answers.
//! The peer plane serves `KV` and `Lease` too, for the reads a follower forwards.

use std::sync::Arc;

use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use super::api::{Deadline, EtcdApi, Plane};
use super::grpc::{answer, credentials, stream, Answers};
use super::NodeError;
use crate::limits::MAX_CLIENT_MESSAGE_BYTES;
use crate::proto::etcd::etcdserverpb::{self as pb, auth_server, cluster_server, kv_server};
use crate::proto::etcd::etcdserverpb::{lease_server, maintenance_server, watch_server};
use crate::proto::etcd::v3electionpb::{self as election, election_server};
use crate::proto::etcd::v3lockpb::{self as lock, lock_server};

/// etcd's services on one plane, over one API.
#[derive(Clone)]
pub(crate) struct EtcdService {
    api: Arc<EtcdApi>,
    plane: Plane,
}

/// The services a plane serves: all of them on the client plane.
pub(crate) struct EtcdServers {
    pub kv: kv_server::KvServer<EtcdService>,
    pub lease: lease_server::LeaseServer<EtcdService>,
    pub watch: watch_server::WatchServer<EtcdService>,
    pub cluster: cluster_server::ClusterServer<EtcdService>,
    pub maintenance: maintenance_server::MaintenanceServer<EtcdService>,
    pub auth: auth_server::AuthServer<EtcdService>,
    pub lock: lock_server::LockServer<EtcdService>,
    pub election: election_server::ElectionServer<EtcdService>,
}

impl EtcdService {
    pub(crate) fn new(api: Arc<EtcdApi>, plane: Plane) -> Self {
        EtcdService { api, plane }
    }

    /// Every service, its messages bounded by the client plane's limit.
    pub(crate) fn servers(self) -> EtcdServers {
        let bounded = MAX_CLIENT_MESSAGE_BYTES;
        EtcdServers {
            kv: kv_server::KvServer::new(self.clone()).max_decoding_message_size(bounded),
            lease: lease_server::LeaseServer::new(self.clone()).max_decoding_message_size(bounded),
            watch: watch_server::WatchServer::new(self.clone()).max_decoding_message_size(bounded),
            cluster: cluster_server::ClusterServer::new(self.clone()),
            maintenance: maintenance_server::MaintenanceServer::new(self.clone()),
            auth: auth_server::AuthServer::new(self.clone()),
            lock: lock_server::LockServer::new(self.clone()).max_decoding_message_size(bounded),
            election: election_server::ElectionServer::new(self).max_decoding_message_size(bounded),
        }
    }
}

/// A service's impl: each `call` answered by the API method of the same name (within tonic's
/// `grpc-timeout`), each `refuse` refused with why (what etcd serves and Leasehold does not),
/// and the rest as written. The attribute is inside, so that it sees the methods written here.
macro_rules! service {
    (
        impl $service:path {
            $(call $method:ident($request:ty) -> $response:ty;)*
            $(refuse($why:expr) $refused:ident($r_request:ty) -> $r_response:ty;)*
            { $($rest:tt)* }
        }
    ) => {
        #[tonic::async_trait]
        impl $service for EtcdService {
            $(
                async fn $method(
                    &self,
                    request: Request<$request>,
                ) -> Result<Response<$response>, Status> {
                    let credentials = credentials(&request, self.plane);
                    let request = request.into_inner();
                    answer(self.api.$method(&credentials, Deadline::NONE, request).await)
                }
            )*
            $(
                async fn $refused(
                    &self,
                    _: Request<$r_request>,
                ) -> Result<Response<$r_response>, Status> {
                    Err(NodeError::NotServed($why).into())
                }
            )*
            $($rest)*
        }
    };
}

service! {
    impl kv_server::Kv {
        call range(pb::RangeRequest) -> pb::RangeResponse;
        call put(pb::PutRequest) -> pb::PutResponse;
        call delete_range(pb::DeleteRangeRequest) -> pb::DeleteRangeResponse;
        call txn(pb::TxnRequest) -> pb::TxnResponse;
        call compact(pb::CompactionRequest) -> pb::CompactionResponse;
        {
        }
    }
}

service! {
    impl lease_server::Lease {
        call lease_grant(pb::LeaseGrantRequest) -> pb::LeaseGrantResponse;
        call lease_revoke(pb::LeaseRevokeRequest) -> pb::LeaseRevokeResponse;
        call lease_time_to_live(pb::LeaseTimeToLiveRequest) -> pb::LeaseTimeToLiveResponse;
        call lease_leases(pb::LeaseLeasesRequest) -> pb::LeaseLeasesResponse;
        {
        type LeaseKeepAliveStream = Answers<pb::LeaseKeepAliveResponse>;

        async fn lease_keep_alive(
            &self,
            request: Request<Streaming<pb::LeaseKeepAliveRequest>>,
        ) -> Result<Response<Self::LeaseKeepAliveStream>, Status> {
            let credentials = credentials(&request, self.plane);
            let inbound = request.into_inner().map_while(Result::ok);
            Ok(Response::new(stream(self.api.keep_alive_stream(credentials, inbound)?)))
        }
        }
    }
}

#[tonic::async_trait]
impl watch_server::Watch for EtcdService {
    type WatchStream = Answers<pb::WatchResponse>;

    async fn watch(
        &self,
        request: Request<Streaming<pb::WatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let credentials = credentials(&request, self.plane);
        let inbound = request.into_inner().map_while(Result::ok);
        let answers = self.api.watch_stream(credentials, inbound)?;
        Ok(Response::new(stream(answers)))
    }
}

const MEMBERS: &str = "Leasehold changes its members with `leasehold member add` and `member \
                       remove`, not through etcd's Cluster service, which lists them only";

service! {
    impl cluster_server::Cluster {
        refuse(MEMBERS) member_add(pb::MemberAddRequest) -> pb::MemberAddResponse;
        refuse(MEMBERS) member_remove(pb::MemberRemoveRequest) -> pb::MemberRemoveResponse;
        refuse(MEMBERS) member_update(pb::MemberUpdateRequest) -> pb::MemberUpdateResponse;
        refuse(MEMBERS) member_promote(pb::MemberPromoteRequest) -> pb::MemberPromoteResponse;
        {
        async fn member_list(
            &self,
            request: Request<pb::MemberListRequest>,
        ) -> Result<Response<pb::MemberListResponse>, Status> {
            let credentials = credentials(&request, self.plane);
            answer(self.api.member_list(&credentials).await)
        }
        }
    }
}

const ALARMS: &str =
    "Leasehold raises no etcd alarms, so none can be set or cleared: ask with action GET";

const MAINTENANCE: &str = "Leasehold serves etcd's Status and alarm list only: its snapshots \
                           are taken with `leasehold snapshot save`, and it has no defragment, \
                           hash or downgrade to ask for";

service! {
    impl maintenance_server::Maintenance {
        refuse(MAINTENANCE) defragment(pb::DefragmentRequest) -> pb::DefragmentResponse;
        refuse(MAINTENANCE) hash(pb::HashRequest) -> pb::HashResponse;
        refuse(MAINTENANCE) hash_kv(pb::HashKvRequest) -> pb::HashKvResponse;
        refuse(MAINTENANCE) move_leader(pb::MoveLeaderRequest) -> pb::MoveLeaderResponse;
        refuse(MAINTENANCE) downgrade(pb::DowngradeRequest) -> pb::DowngradeResponse;
        {
        async fn status(
            &self,
            request: Request<pb::StatusRequest>,
        ) -> Result<Response<pb::StatusResponse>, Status> {
            let credentials = credentials(&request, self.plane);
            answer(self.api.status(&credentials).await)
        }

        async fn alarm(
            &self,
            request: Request<pb::AlarmRequest>,
        ) -> Result<Response<pb::AlarmResponse>, Status> {
            match pb::alarm_request::AlarmAction::try_from(request.get_ref().action) {
                Ok(pb::alarm_request::AlarmAction::Get) => Ok(Response::new(self.api.alarm_list())),
                _ => Err(NodeError::NotServed(ALARMS).into()),
            }
        }

        type SnapshotStream = Answers<pb::SnapshotResponse>;

        async fn snapshot(
            &self,
            _: Request<pb::SnapshotRequest>,
        ) -> Result<Response<Self::SnapshotStream>, Status> {
            Err(NodeError::NotServed(MAINTENANCE).into())
        }
        }
    }
}

/// Why etcd's Auth service is not served, and what authenticates an etcd client instead.
const AUTH: &str = "Leasehold does not serve etcd's users, roles and passwords: an etcd client \
                    is known by its TLS client certificate's name, or by a Leasehold bearer token \
                    sent as `authorization: Bearer TOKEN`, and what it may do is Leasehold's \
                    policy (`leasehold policy`), whose key prefixes apply to etcd keys";

service! {
    impl auth_server::Auth {
        refuse(AUTH) auth_enable(pb::AuthEnableRequest) -> pb::AuthEnableResponse;
        refuse(AUTH) auth_disable(pb::AuthDisableRequest) -> pb::AuthDisableResponse;
        refuse(AUTH) auth_status(pb::AuthStatusRequest) -> pb::AuthStatusResponse;
        refuse(AUTH) authenticate(pb::AuthenticateRequest) -> pb::AuthenticateResponse;
        refuse(AUTH) user_add(pb::AuthUserAddRequest) -> pb::AuthUserAddResponse;
        refuse(AUTH) user_get(pb::AuthUserGetRequest) -> pb::AuthUserGetResponse;
        refuse(AUTH) user_list(pb::AuthUserListRequest) -> pb::AuthUserListResponse;
        refuse(AUTH) user_delete(pb::AuthUserDeleteRequest) -> pb::AuthUserDeleteResponse;
        refuse(AUTH) user_change_password(pb::AuthUserChangePasswordRequest) -> pb::AuthUserChangePasswordResponse;
        refuse(AUTH) user_grant_role(pb::AuthUserGrantRoleRequest) -> pb::AuthUserGrantRoleResponse;
        refuse(AUTH) user_revoke_role(pb::AuthUserRevokeRoleRequest) -> pb::AuthUserRevokeRoleResponse;
        refuse(AUTH) role_add(pb::AuthRoleAddRequest) -> pb::AuthRoleAddResponse;
        refuse(AUTH) role_get(pb::AuthRoleGetRequest) -> pb::AuthRoleGetResponse;
        refuse(AUTH) role_list(pb::AuthRoleListRequest) -> pb::AuthRoleListResponse;
        refuse(AUTH) role_delete(pb::AuthRoleDeleteRequest) -> pb::AuthRoleDeleteResponse;
        refuse(AUTH) role_grant_permission(pb::AuthRoleGrantPermissionRequest) -> pb::AuthRoleGrantPermissionResponse;
        refuse(AUTH) role_revoke_permission(pb::AuthRoleRevokePermissionRequest) -> pb::AuthRoleRevokePermissionResponse;
        {
        }
    }
}

service! {
    impl lock_server::Lock {
        call lock(lock::LockRequest) -> lock::LockResponse;
        call unlock(lock::UnlockRequest) -> lock::UnlockResponse;
        {
        }
    }
}

service! {
    impl election_server::Election {
        call campaign(election::CampaignRequest) -> election::CampaignResponse;
        call proclaim(election::ProclaimRequest) -> election::ProclaimResponse;
        call leader(election::LeaderRequest) -> election::LeaderResponse;
        call resign(election::ResignRequest) -> election::ResignResponse;
        {
        type ObserveStream = Answers<election::LeaderResponse>;

        async fn observe(
            &self,
            request: Request<election::LeaderRequest>,
        ) -> Result<Response<Self::ObserveStream>, Status> {
            let credentials = credentials(&request, self.plane);
            let observed = self.api.observe_stream(&credentials, request.into_inner())?;
            Ok(Response::new(stream(observed)))
        }
        }
    }
}

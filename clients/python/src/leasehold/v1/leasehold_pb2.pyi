from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_KIND_UNSPECIFIED: _ClassVar[EventKind]
    EVENT_KIND_GRANTED: _ClassVar[EventKind]
    EVENT_KIND_RENEWED: _ClassVar[EventKind]
    EVENT_KIND_RELEASED: _ClassVar[EventKind]
    EVENT_KIND_EXPIRED: _ClassVar[EventKind]

class MemberRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMBER_ROLE_UNSPECIFIED: _ClassVar[MemberRole]
    MEMBER_ROLE_VOTER: _ClassVar[MemberRole]
    MEMBER_ROLE_LEARNER: _ClassVar[MemberRole]

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_LEADER: _ClassVar[Role]
    ROLE_FOLLOWER: _ClassVar[Role]
    ROLE_CANDIDATE: _ClassVar[Role]
    ROLE_LEARNER: _ClassVar[Role]
    ROLE_UNREACHABLE: _ClassVar[Role]
EVENT_KIND_UNSPECIFIED: EventKind
EVENT_KIND_GRANTED: EventKind
EVENT_KIND_RENEWED: EventKind
EVENT_KIND_RELEASED: EventKind
EVENT_KIND_EXPIRED: EventKind
MEMBER_ROLE_UNSPECIFIED: MemberRole
MEMBER_ROLE_VOTER: MemberRole
MEMBER_ROLE_LEARNER: MemberRole
ROLE_UNSPECIFIED: Role
ROLE_LEADER: Role
ROLE_FOLLOWER: Role
ROLE_CANDIDATE: Role
ROLE_LEARNER: Role
ROLE_UNREACHABLE: Role

class Applied(_message.Message):
    __slots__ = ("log_index", "store_time_ms", "position")
    LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    STORE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    log_index: int
    store_time_ms: int
    position: int
    def __init__(self, log_index: _Optional[int] = ..., store_time_ms: _Optional[int] = ..., position: _Optional[int] = ...) -> None: ...

class RequestId(_message.Message):
    __slots__ = ("client_id", "sequence")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    client_id: int
    sequence: int
    def __init__(self, client_id: _Optional[int] = ..., sequence: _Optional[int] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("applied", "client_id")
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    applied: Applied
    client_id: int
    def __init__(self, applied: _Optional[_Union[Applied, _Mapping]] = ..., client_id: _Optional[int] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: RequestId
    def __init__(self, request_id: _Optional[_Union[RequestId, _Mapping]] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ("applied",)
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    applied: Applied
    def __init__(self, applied: _Optional[_Union[Applied, _Mapping]] = ...) -> None: ...

class AcquireRequest(_message.Message):
    __slots__ = ("lease", "holder", "ttl_ms", "request_id")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    lease: str
    holder: str
    ttl_ms: int
    request_id: RequestId
    def __init__(self, lease: _Optional[str] = ..., holder: _Optional[str] = ..., ttl_ms: _Optional[int] = ..., request_id: _Optional[_Union[RequestId, _Mapping]] = ...) -> None: ...

class AcquireResponse(_message.Message):
    __slots__ = ("applied", "granted", "held_by")
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    HELD_BY_FIELD_NUMBER: _ClassVar[int]
    applied: Applied
    granted: Granted
    held_by: HeldBy
    def __init__(self, applied: _Optional[_Union[Applied, _Mapping]] = ..., granted: _Optional[_Union[Granted, _Mapping]] = ..., held_by: _Optional[_Union[HeldBy, _Mapping]] = ...) -> None: ...

class Granted(_message.Message):
    __slots__ = ("token", "expires_at_ms", "renewed")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    RENEWED_FIELD_NUMBER: _ClassVar[int]
    token: int
    expires_at_ms: int
    renewed: bool
    def __init__(self, token: _Optional[int] = ..., expires_at_ms: _Optional[int] = ..., renewed: bool = ...) -> None: ...

class HeldBy(_message.Message):
    __slots__ = ("holder", "token", "expires_at_ms")
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    holder: str
    token: int
    expires_at_ms: int
    def __init__(self, holder: _Optional[str] = ..., token: _Optional[int] = ..., expires_at_ms: _Optional[int] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("lease", "holder", "token", "request_id")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    lease: str
    holder: str
    token: int
    request_id: RequestId
    def __init__(self, lease: _Optional[str] = ..., holder: _Optional[str] = ..., token: _Optional[int] = ..., request_id: _Optional[_Union[RequestId, _Mapping]] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("applied", "released", "not_held", "held_by", "wrong_token")
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    NOT_HELD_FIELD_NUMBER: _ClassVar[int]
    HELD_BY_FIELD_NUMBER: _ClassVar[int]
    WRONG_TOKEN_FIELD_NUMBER: _ClassVar[int]
    applied: Applied
    released: Released
    not_held: NotHeld
    held_by: HeldBy
    wrong_token: WrongToken
    def __init__(self, applied: _Optional[_Union[Applied, _Mapping]] = ..., released: _Optional[_Union[Released, _Mapping]] = ..., not_held: _Optional[_Union[NotHeld, _Mapping]] = ..., held_by: _Optional[_Union[HeldBy, _Mapping]] = ..., wrong_token: _Optional[_Union[WrongToken, _Mapping]] = ...) -> None: ...

class RenewRequest(_message.Message):
    __slots__ = ("leases", "request_id")
    LEASES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[Renewal]
    request_id: RequestId
    def __init__(self, leases: _Optional[_Iterable[_Union[Renewal, _Mapping]]] = ..., request_id: _Optional[_Union[RequestId, _Mapping]] = ...) -> None: ...

class Renewal(_message.Message):
    __slots__ = ("lease", "holder", "token", "ttl_ms")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    lease: str
    holder: str
    token: int
    ttl_ms: int
    def __init__(self, lease: _Optional[str] = ..., holder: _Optional[str] = ..., token: _Optional[int] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class RenewResponse(_message.Message):
    __slots__ = ("applied", "leases")
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    applied: Applied
    leases: _containers.RepeatedCompositeFieldContainer[LeaseRenewal]
    def __init__(self, applied: _Optional[_Union[Applied, _Mapping]] = ..., leases: _Optional[_Iterable[_Union[LeaseRenewal, _Mapping]]] = ...) -> None: ...

class LeaseRenewal(_message.Message):
    __slots__ = ("renewed", "not_held", "held_by", "wrong_token")
    RENEWED_FIELD_NUMBER: _ClassVar[int]
    NOT_HELD_FIELD_NUMBER: _ClassVar[int]
    HELD_BY_FIELD_NUMBER: _ClassVar[int]
    WRONG_TOKEN_FIELD_NUMBER: _ClassVar[int]
    renewed: Renewed
    not_held: NotHeld
    held_by: HeldBy
    wrong_token: WrongToken
    def __init__(self, renewed: _Optional[_Union[Renewed, _Mapping]] = ..., not_held: _Optional[_Union[NotHeld, _Mapping]] = ..., held_by: _Optional[_Union[HeldBy, _Mapping]] = ..., wrong_token: _Optional[_Union[WrongToken, _Mapping]] = ...) -> None: ...

class Renewed(_message.Message):
    __slots__ = ("expires_at_ms",)
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    expires_at_ms: int
    def __init__(self, expires_at_ms: _Optional[int] = ...) -> None: ...

class Released(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: int
    def __init__(self, token: _Optional[int] = ...) -> None: ...

class NotHeld(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WrongToken(_message.Message):
    __slots__ = ("current_token",)
    CURRENT_TOKEN_FIELD_NUMBER: _ClassVar[int]
    current_token: int
    def __init__(self, current_token: _Optional[int] = ...) -> None: ...

class Fence(_message.Message):
    __slots__ = ("lease", "token")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    lease: str
    token: int
    def __init__(self, lease: _Optional[str] = ..., token: _Optional[int] = ...) -> None: ...

class PutRequest(_message.Message):
    __slots__ = ("key", "value", "fence", "request_id")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    fence: Fence
    request_id: RequestId
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ..., request_id: _Optional[_Union[RequestId, _Mapping]] = ...) -> None: ...

class PutResponse(_message.Message):
    __slots__ = ("applied", "written", "stale_token")
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    STALE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    applied: Applied
    written: Written
    stale_token: StaleToken
    def __init__(self, applied: _Optional[_Union[Applied, _Mapping]] = ..., written: _Optional[_Union[Written, _Mapping]] = ..., stale_token: _Optional[_Union[StaleToken, _Mapping]] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("key", "fence", "request_id")
    KEY_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    key: str
    fence: Fence
    request_id: RequestId
    def __init__(self, key: _Optional[str] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ..., request_id: _Optional[_Union[RequestId, _Mapping]] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ("applied", "deleted", "stale_token")
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    STALE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    applied: Applied
    deleted: Deleted
    stale_token: StaleToken
    def __init__(self, applied: _Optional[_Union[Applied, _Mapping]] = ..., deleted: _Optional[_Union[Deleted, _Mapping]] = ..., stale_token: _Optional[_Union[StaleToken, _Mapping]] = ...) -> None: ...

class Deleted(_message.Message):
    __slots__ = ("existed",)
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    existed: bool
    def __init__(self, existed: bool = ...) -> None: ...

class CheckTokenRequest(_message.Message):
    __slots__ = ("lease", "token")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    lease: str
    token: int
    def __init__(self, lease: _Optional[str] = ..., token: _Optional[int] = ...) -> None: ...

class CheckTokenResponse(_message.Message):
    __slots__ = ("applied", "current", "stale")
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    applied: Applied
    current: TokenCurrent
    stale: TokenStale
    def __init__(self, applied: _Optional[_Union[Applied, _Mapping]] = ..., current: _Optional[_Union[TokenCurrent, _Mapping]] = ..., stale: _Optional[_Union[TokenStale, _Mapping]] = ...) -> None: ...

class TokenCurrent(_message.Message):
    __slots__ = ("holder", "expires_at_ms")
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    holder: str
    expires_at_ms: int
    def __init__(self, holder: _Optional[str] = ..., expires_at_ms: _Optional[int] = ...) -> None: ...

class TokenStale(_message.Message):
    __slots__ = ("current_token", "holder")
    CURRENT_TOKEN_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    current_token: int
    holder: str
    def __init__(self, current_token: _Optional[int] = ..., holder: _Optional[str] = ...) -> None: ...

class Written(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StaleToken(_message.Message):
    __slots__ = ("fence",)
    FENCE_FIELD_NUMBER: _ClassVar[int]
    fence: int
    def __init__(self, fence: _Optional[int] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("applied", "value")
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    applied: Applied
    value: bytes
    def __init__(self, applied: _Optional[_Union[Applied, _Mapping]] = ..., value: _Optional[bytes] = ...) -> None: ...

class GetLeaseRequest(_message.Message):
    __slots__ = ("lease",)
    LEASE_FIELD_NUMBER: _ClassVar[int]
    lease: str
    def __init__(self, lease: _Optional[str] = ...) -> None: ...

class GetLeaseResponse(_message.Message):
    __slots__ = ("applied", "holder", "token", "expires_at_ms", "fence")
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    applied: Applied
    holder: str
    token: int
    expires_at_ms: int
    fence: int
    def __init__(self, applied: _Optional[_Union[Applied, _Mapping]] = ..., holder: _Optional[str] = ..., token: _Optional[int] = ..., expires_at_ms: _Optional[int] = ..., fence: _Optional[int] = ...) -> None: ...

class ListPage(_message.Message):
    __slots__ = ("prefix", "page_token", "limit", "serializable")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    SERIALIZABLE_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    page_token: str
    limit: int
    serializable: bool
    def __init__(self, prefix: _Optional[str] = ..., page_token: _Optional[str] = ..., limit: _Optional[int] = ..., serializable: bool = ...) -> None: ...

class ListLeasesRequest(_message.Message):
    __slots__ = ("page",)
    PAGE_FIELD_NUMBER: _ClassVar[int]
    page: ListPage
    def __init__(self, page: _Optional[_Union[ListPage, _Mapping]] = ...) -> None: ...

class ListLeasesResponse(_message.Message):
    __slots__ = ("applied", "leases", "next_page_token")
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    applied: Applied
    leases: _containers.RepeatedCompositeFieldContainer[LeaseEntry]
    next_page_token: str
    def __init__(self, applied: _Optional[_Union[Applied, _Mapping]] = ..., leases: _Optional[_Iterable[_Union[LeaseEntry, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class LeaseEntry(_message.Message):
    __slots__ = ("lease", "holder", "token", "expires_at_ms", "fence")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    lease: str
    holder: str
    token: int
    expires_at_ms: int
    fence: int
    def __init__(self, lease: _Optional[str] = ..., holder: _Optional[str] = ..., token: _Optional[int] = ..., expires_at_ms: _Optional[int] = ..., fence: _Optional[int] = ...) -> None: ...

class ListKeysRequest(_message.Message):
    __slots__ = ("page",)
    PAGE_FIELD_NUMBER: _ClassVar[int]
    page: ListPage
    def __init__(self, page: _Optional[_Union[ListPage, _Mapping]] = ...) -> None: ...

class ListKeysResponse(_message.Message):
    __slots__ = ("applied", "keys", "next_page_token")
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    applied: Applied
    keys: _containers.RepeatedCompositeFieldContainer[KeyEntry]
    next_page_token: str
    def __init__(self, applied: _Optional[_Union[Applied, _Mapping]] = ..., keys: _Optional[_Iterable[_Union[KeyEntry, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class KeyEntry(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class AdvanceRequest(_message.Message):
    __slots__ = ("ms", "request_id")
    MS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ms: int
    request_id: RequestId
    def __init__(self, ms: _Optional[int] = ..., request_id: _Optional[_Union[RequestId, _Mapping]] = ...) -> None: ...

class AdvanceResponse(_message.Message):
    __slots__ = ("applied",)
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    applied: Applied
    def __init__(self, applied: _Optional[_Union[Applied, _Mapping]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("lease", "prefix", "from_index")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    FROM_INDEX_FIELD_NUMBER: _ClassVar[int]
    lease: str
    prefix: str
    from_index: int
    def __init__(self, lease: _Optional[str] = ..., prefix: _Optional[str] = ..., from_index: _Optional[int] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ("events", "watched_to")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    WATCHED_TO_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[LeaseEvent]
    watched_to: int
    def __init__(self, events: _Optional[_Iterable[_Union[LeaseEvent, _Mapping]]] = ..., watched_to: _Optional[int] = ...) -> None: ...

class LeaseEvent(_message.Message):
    __slots__ = ("kind", "lease", "holder", "token", "expires_at_ms", "log_index", "store_time_ms")
    KIND_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    STORE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    kind: EventKind
    lease: str
    holder: str
    token: int
    expires_at_ms: int
    log_index: int
    store_time_ms: int
    def __init__(self, kind: _Optional[_Union[EventKind, str]] = ..., lease: _Optional[str] = ..., holder: _Optional[str] = ..., token: _Optional[int] = ..., expires_at_ms: _Optional[int] = ..., log_index: _Optional[int] = ..., store_time_ms: _Optional[int] = ...) -> None: ...

class SaveSnapshotRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SnapshotChunk(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: SnapshotHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[SnapshotHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class SnapshotHeader(_message.Message):
    __slots__ = ("log_index", "term", "leader_id", "store_time_ms", "state_digest", "manual_clock", "bytes", "crc32")
    LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    STORE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    STATE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    MANUAL_CLOCK_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    CRC32_FIELD_NUMBER: _ClassVar[int]
    log_index: int
    term: int
    leader_id: int
    store_time_ms: int
    state_digest: int
    manual_clock: bool
    bytes: int
    crc32: int
    def __init__(self, log_index: _Optional[int] = ..., term: _Optional[int] = ..., leader_id: _Optional[int] = ..., store_time_ms: _Optional[int] = ..., state_digest: _Optional[int] = ..., manual_clock: bool = ..., bytes: _Optional[int] = ..., crc32: _Optional[int] = ...) -> None: ...

class AddMemberRequest(_message.Message):
    __slots__ = ("id", "peer_address", "client_address")
    ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    id: int
    peer_address: str
    client_address: str
    def __init__(self, id: _Optional[int] = ..., peer_address: _Optional[str] = ..., client_address: _Optional[str] = ...) -> None: ...

class RemoveMemberRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class ListMembersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Member(_message.Message):
    __slots__ = ("id", "role", "peer_address", "client_address", "match_index")
    ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    id: int
    role: MemberRole
    peer_address: str
    client_address: str
    match_index: int
    def __init__(self, id: _Optional[int] = ..., role: _Optional[_Union[MemberRole, str]] = ..., peer_address: _Optional[str] = ..., client_address: _Optional[str] = ..., match_index: _Optional[int] = ...) -> None: ...

class MembersResponse(_message.Message):
    __slots__ = ("members", "log_index")
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[Member]
    log_index: int
    def __init__(self, members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., log_index: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeStatus]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeStatus, _Mapping]]] = ...) -> None: ...

class NodeStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeStatus(_message.Message):
    __slots__ = ("id", "address", "pid", "role", "term", "leader", "last_log_index", "applied_index", "store_time_ms", "manual_clock", "error", "snapshot_index", "purged_index", "state_digest", "peer_address", "leases", "rows", "sessions", "snapshot_bytes", "tls", "client_certificates", "authorization", "version", "protocol", "log_format", "clock_rate_ratio", "clock_odd", "clock_odd_reason", "disk_free_bytes", "disk_size_bytes", "http_address")
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LAST_LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    STORE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    MANUAL_CLOCK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    PURGED_INDEX_FIELD_NUMBER: _ClassVar[int]
    STATE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_BYTES_FIELD_NUMBER: _ClassVar[int]
    TLS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_CERTIFICATES_FIELD_NUMBER: _ClassVar[int]
    AUTHORIZATION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    LOG_FORMAT_FIELD_NUMBER: _ClassVar[int]
    CLOCK_RATE_RATIO_FIELD_NUMBER: _ClassVar[int]
    CLOCK_ODD_FIELD_NUMBER: _ClassVar[int]
    CLOCK_ODD_REASON_FIELD_NUMBER: _ClassVar[int]
    DISK_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    HTTP_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    id: int
    address: str
    pid: int
    role: Role
    term: int
    leader: int
    last_log_index: int
    applied_index: int
    store_time_ms: int
    manual_clock: bool
    error: str
    snapshot_index: int
    purged_index: int
    state_digest: int
    peer_address: str
    leases: int
    rows: int
    sessions: int
    snapshot_bytes: int
    tls: bool
    client_certificates: bool
    authorization: bool
    version: str
    protocol: int
    log_format: int
    clock_rate_ratio: float
    clock_odd: bool
    clock_odd_reason: str
    disk_free_bytes: int
    disk_size_bytes: int
    http_address: str
    def __init__(self, id: _Optional[int] = ..., address: _Optional[str] = ..., pid: _Optional[int] = ..., role: _Optional[_Union[Role, str]] = ..., term: _Optional[int] = ..., leader: _Optional[int] = ..., last_log_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., store_time_ms: _Optional[int] = ..., manual_clock: bool = ..., error: _Optional[str] = ..., snapshot_index: _Optional[int] = ..., purged_index: _Optional[int] = ..., state_digest: _Optional[int] = ..., peer_address: _Optional[str] = ..., leases: _Optional[int] = ..., rows: _Optional[int] = ..., sessions: _Optional[int] = ..., snapshot_bytes: _Optional[int] = ..., tls: bool = ..., client_certificates: bool = ..., authorization: bool = ..., version: _Optional[str] = ..., protocol: _Optional[int] = ..., log_format: _Optional[int] = ..., clock_rate_ratio: _Optional[float] = ..., clock_odd: bool = ..., clock_odd_reason: _Optional[str] = ..., disk_free_bytes: _Optional[int] = ..., disk_size_bytes: _Optional[int] = ..., http_address: _Optional[str] = ...) -> None: ...

class Grant(_message.Message):
    __slots__ = ("permission", "prefix")
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    permission: str
    prefix: str
    def __init__(self, permission: _Optional[str] = ..., prefix: _Optional[str] = ...) -> None: ...

class Binding(_message.Message):
    __slots__ = ("identity", "role")
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    identity: str
    role: str
    def __init__(self, identity: _Optional[str] = ..., role: _Optional[str] = ...) -> None: ...

class ChangePolicyRequest(_message.Message):
    __slots__ = ("enable", "disable", "put_role", "delete_role", "bind", "unbind", "add_token", "revoke_tokens")
    ENABLE_FIELD_NUMBER: _ClassVar[int]
    DISABLE_FIELD_NUMBER: _ClassVar[int]
    PUT_ROLE_FIELD_NUMBER: _ClassVar[int]
    DELETE_ROLE_FIELD_NUMBER: _ClassVar[int]
    BIND_FIELD_NUMBER: _ClassVar[int]
    UNBIND_FIELD_NUMBER: _ClassVar[int]
    ADD_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REVOKE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    enable: str
    disable: bool
    put_role: AuthRole
    delete_role: str
    bind: Binding
    unbind: Binding
    add_token: BearerToken
    revoke_tokens: str
    def __init__(self, enable: _Optional[str] = ..., disable: bool = ..., put_role: _Optional[_Union[AuthRole, _Mapping]] = ..., delete_role: _Optional[str] = ..., bind: _Optional[_Union[Binding, _Mapping]] = ..., unbind: _Optional[_Union[Binding, _Mapping]] = ..., add_token: _Optional[_Union[BearerToken, _Mapping]] = ..., revoke_tokens: _Optional[str] = ...) -> None: ...

class BearerToken(_message.Message):
    __slots__ = ("identity", "sha256")
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    identity: str
    sha256: str
    def __init__(self, identity: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...

class ChangePolicyResponse(_message.Message):
    __slots__ = ("applied",)
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    applied: Applied
    def __init__(self, applied: _Optional[_Union[Applied, _Mapping]] = ...) -> None: ...

class AuthRole(_message.Message):
    __slots__ = ("name", "grants")
    NAME_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    grants: _containers.RepeatedCompositeFieldContainer[Grant]
    def __init__(self, name: _Optional[str] = ..., grants: _Optional[_Iterable[_Union[Grant, _Mapping]]] = ...) -> None: ...

class GetPolicyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PolicyResponse(_message.Message):
    __slots__ = ("enabled", "roles", "bindings", "applied", "tokens")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    BINDINGS_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    roles: _containers.RepeatedCompositeFieldContainer[AuthRole]
    bindings: _containers.RepeatedCompositeFieldContainer[Binding]
    applied: Applied
    tokens: _containers.RepeatedCompositeFieldContainer[BearerToken]
    def __init__(self, enabled: bool = ..., roles: _Optional[_Iterable[_Union[AuthRole, _Mapping]]] = ..., bindings: _Optional[_Iterable[_Union[Binding, _Mapping]]] = ..., applied: _Optional[_Union[Applied, _Mapping]] = ..., tokens: _Optional[_Iterable[_Union[BearerToken, _Mapping]]] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("identity", "auth_enabled", "roles")
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    AUTH_ENABLED_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    identity: str
    auth_enabled: bool
    roles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, identity: _Optional[str] = ..., auth_enabled: bool = ..., roles: _Optional[_Iterable[str]] = ...) -> None: ...

class BatchRequest(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[BatchCall]
    def __init__(self, calls: _Optional[_Iterable[_Union[BatchCall, _Mapping]]] = ...) -> None: ...

class BatchCall(_message.Message):
    __slots__ = ("id", "timeout_ms", "acquire", "release", "renew", "put", "delete", "check_token", "get", "get_lease", "advance", "register", "close_session", "list_leases", "list_keys")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ACQUIRE_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    RENEW_FIELD_NUMBER: _ClassVar[int]
    PUT_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    CHECK_TOKEN_FIELD_NUMBER: _ClassVar[int]
    GET_FIELD_NUMBER: _ClassVar[int]
    GET_LEASE_FIELD_NUMBER: _ClassVar[int]
    ADVANCE_FIELD_NUMBER: _ClassVar[int]
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    CLOSE_SESSION_FIELD_NUMBER: _ClassVar[int]
    LIST_LEASES_FIELD_NUMBER: _ClassVar[int]
    LIST_KEYS_FIELD_NUMBER: _ClassVar[int]
    id: int
    timeout_ms: int
    acquire: AcquireRequest
    release: ReleaseRequest
    renew: RenewRequest
    put: PutRequest
    delete: DeleteRequest
    check_token: CheckTokenRequest
    get: GetRequest
    get_lease: GetLeaseRequest
    advance: AdvanceRequest
    register: RegisterRequest
    close_session: CloseSessionRequest
    list_leases: ListLeasesRequest
    list_keys: ListKeysRequest
    def __init__(self, id: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., acquire: _Optional[_Union[AcquireRequest, _Mapping]] = ..., release: _Optional[_Union[ReleaseRequest, _Mapping]] = ..., renew: _Optional[_Union[RenewRequest, _Mapping]] = ..., put: _Optional[_Union[PutRequest, _Mapping]] = ..., delete: _Optional[_Union[DeleteRequest, _Mapping]] = ..., check_token: _Optional[_Union[CheckTokenRequest, _Mapping]] = ..., get: _Optional[_Union[GetRequest, _Mapping]] = ..., get_lease: _Optional[_Union[GetLeaseRequest, _Mapping]] = ..., advance: _Optional[_Union[AdvanceRequest, _Mapping]] = ..., register: _Optional[_Union[RegisterRequest, _Mapping]] = ..., close_session: _Optional[_Union[CloseSessionRequest, _Mapping]] = ..., list_leases: _Optional[_Union[ListLeasesRequest, _Mapping]] = ..., list_keys: _Optional[_Union[ListKeysRequest, _Mapping]] = ...) -> None: ...

class BatchResponse(_message.Message):
    __slots__ = ("answers",)
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    answers: _containers.RepeatedCompositeFieldContainer[BatchAnswer]
    def __init__(self, answers: _Optional[_Iterable[_Union[BatchAnswer, _Mapping]]] = ...) -> None: ...

class BatchAnswer(_message.Message):
    __slots__ = ("id", "error", "acquire", "release", "renew", "put", "delete", "check_token", "get", "get_lease", "advance", "register", "close_session", "list_leases", "list_keys")
    ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ACQUIRE_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    RENEW_FIELD_NUMBER: _ClassVar[int]
    PUT_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    CHECK_TOKEN_FIELD_NUMBER: _ClassVar[int]
    GET_FIELD_NUMBER: _ClassVar[int]
    GET_LEASE_FIELD_NUMBER: _ClassVar[int]
    ADVANCE_FIELD_NUMBER: _ClassVar[int]
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    CLOSE_SESSION_FIELD_NUMBER: _ClassVar[int]
    LIST_LEASES_FIELD_NUMBER: _ClassVar[int]
    LIST_KEYS_FIELD_NUMBER: _ClassVar[int]
    id: int
    error: BatchError
    acquire: AcquireResponse
    release: ReleaseResponse
    renew: RenewResponse
    put: PutResponse
    delete: DeleteResponse
    check_token: CheckTokenResponse
    get: GetResponse
    get_lease: GetLeaseResponse
    advance: AdvanceResponse
    register: RegisterResponse
    close_session: CloseSessionResponse
    list_leases: ListLeasesResponse
    list_keys: ListKeysResponse
    def __init__(self, id: _Optional[int] = ..., error: _Optional[_Union[BatchError, _Mapping]] = ..., acquire: _Optional[_Union[AcquireResponse, _Mapping]] = ..., release: _Optional[_Union[ReleaseResponse, _Mapping]] = ..., renew: _Optional[_Union[RenewResponse, _Mapping]] = ..., put: _Optional[_Union[PutResponse, _Mapping]] = ..., delete: _Optional[_Union[DeleteResponse, _Mapping]] = ..., check_token: _Optional[_Union[CheckTokenResponse, _Mapping]] = ..., get: _Optional[_Union[GetResponse, _Mapping]] = ..., get_lease: _Optional[_Union[GetLeaseResponse, _Mapping]] = ..., advance: _Optional[_Union[AdvanceResponse, _Mapping]] = ..., register: _Optional[_Union[RegisterResponse, _Mapping]] = ..., close_session: _Optional[_Union[CloseSessionResponse, _Mapping]] = ..., list_leases: _Optional[_Union[ListLeasesResponse, _Mapping]] = ..., list_keys: _Optional[_Union[ListKeysResponse, _Mapping]] = ...) -> None: ...

class BatchError(_message.Message):
    __slots__ = ("code", "message", "reason", "indeterminate", "facts")
    class FactsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    INDETERMINATE_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    reason: str
    indeterminate: bool
    facts: _containers.ScalarMap[str, str]
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., reason: _Optional[str] = ..., indeterminate: bool = ..., facts: _Optional[_Mapping[str, str]] = ...) -> None: ...

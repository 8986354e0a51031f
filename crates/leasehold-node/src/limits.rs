//! Every size, timeout and bound of a node, in one place, with the relations between them
//! checked when the crate compiles. The public ones are what an operator or a test may need to
//! know (a flag's default, the largest message, how long a write may take); the rest are the
//! node's own. The pure core's limits on what a client may ask for (`leasehold_core::Limits`)
//! are its own crate's.

use std::time::Duration;

use crate::gather::BatchLimits;
use leasehold_core::Limits;

// ---------------------------------------------------------------------------------------------
// Raft's timing and messages.

/// How often a leader sends heartbeats (see `raft::config`).
pub(crate) const HEARTBEAT_MS: u64 = 60;

/// A follower campaigns after its leader lease (the maximum) plus a random timeout in this range
/// (once a quorum says yes to its pre-vote, a round trip).
pub const ELECTION_TIMEOUT_MIN_MS: u64 = 250;

/// The top of that range.
pub(crate) const ELECTION_TIMEOUT_MAX_MS: u64 = 400;

/// The longest a dead leader goes unreplaced without a partition: the lease, then the longest
/// random timeout; not counted: a round trip of pre-votes and one of votes, a few ms on a LAN.
pub const LONGEST_ELECTION_MS: u64 = 2 * ELECTION_TIMEOUT_MAX_MS;

/// Entries per replication message, at most (see `raft::config`).
pub(crate) const MAX_PAYLOAD_ENTRIES: u64 = 16;

/// Bytes per snapshot chunk sent to a follower.
pub(crate) const SNAPSHOT_CHUNK_BYTES: u64 = 3 * 1024 * 1024;

/// Bytes of a snapshot file written between two fdatasyncs of it (see `snapshot_file`).
pub(crate) const SNAPSHOT_SYNC_BYTES: usize = 1024 * 1024;

/// The default for `serve --snapshot-every`.
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 10_000;

/// How long a connection attempt to a peer may take before it counts as unreachable.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// How long a leader waits before it tries a peer it found unreachable again. openraft's
/// default is 500 ms: a restarted node then waited up to that for its first entries after it
/// began to listen. A try at a peer that is still down costs a refused connection, or on a
/// network at most [`CONNECT_TIMEOUT`].
pub(crate) const UNREACHABLE_RETRY: Duration = Duration::from_millis(100);

/// How often a peer that still does not answer is said so in the log again (see
/// `raft::reachability`): each failed try is not.
pub(crate) const UNREACHABLE_REMINDER: Duration = Duration::from_secs(60);

/// Idle peer lanes (see `raft::lane`) kept open to each peer: one per call in flight at once
/// (a replication stream's, and the forwarder's batches), a few to spare.
pub(crate) const MAX_IDLE_LANES: usize = 4;

/// Lanes a node serves at once on a peer port, with TLS or without: a few per peer (one per call
/// in flight, and [`MAX_IDLE_LANES`] idle); a peer's lane past these is spoken to over gRPC
/// (without TLS its greeting goes to tonic, which refuses it; under TLS it is closed before its
/// greeting, which its caller takes as a node that speaks no lanes).
pub(crate) const MAX_PEER_LANES: usize = 64;

/// Client lanes a node serves at once: each holds a task and two descriptors, where a gRPC
/// client holds one connection for all its calls; a client's lane past these is refused at
/// its greeting (by tonic) and the client speaks gRPC.
pub(crate) const MAX_CLIENT_LANES: usize = 256;

/// How long a peer that answered a lane's greeting otherwise (a node of an earlier version) is
/// spoken to over gRPC before a lane is tried again.
pub(crate) const LANE_UNSUPPORTED_RETRY: Duration = Duration::from_secs(30);

const _: () = assert!(
    3 * HEARTBEAT_MS <= ELECTION_TIMEOUT_MIN_MS,
    "a live leader's heartbeats arrive several times within any election timeout"
);

// ---------------------------------------------------------------------------------------------
// How long a request waits, and for what.

/// How long a request waits for an election to finish before answering `Unavailable`.
pub(crate) const LEADER_WAIT: Duration = Duration::from_millis(2_000);

/// How long a write or a read waits for a quorum before answering `Unavailable`.
pub(crate) const QUORUM_WAIT: Duration = Duration::from_millis(3_000);

/// The longest a node takes to answer a write itself: an election, a first stamp of the term
/// (a confirmation with a quorum), then the write's own quorum.
pub const NODE_WRITE_WORST: Duration =
    Duration::from_millis(LEADER_WAIT.as_millis() as u64 + 2 * QUORUM_WAIT.as_millis() as u64);

/// Covers the leader's own waits (for an election, 2 s; to confirm a new term, 3 s; for a
/// quorum, 3 s), with room for the hop.
pub(crate) const FORWARD_TIMEOUT: Duration = Duration::from_millis(10_000);

/// How long a leader's quorum may be silent before the leader stops taking requests: twice the
/// longest a follower that hears nothing waits before it campaigns, by when the others have most
/// likely elected another leader. Not less: openraft dates a quorum's answer by when the answered
/// message was sent, and a follower has one message in flight at a time, so a healthy leader
/// on a loaded machine can go most of a second between dated answers. The same bound says when
/// a leader reports itself not serving (`probes::health`).
pub(crate) const QUORUM_SILENCE: Duration = Duration::from_millis(2 * LONGEST_ELECTION_MS);

/// Rounds tried when too few followers answer in time, before the reads are told.
pub(crate) const READ_QUORUM_TRIES: usize = 3;

/// Leaders one forwarded write follows at most as leadership moves on while it is held (see
/// `Node::write_or_forward`); past them it is handed back to the client. Each move is an
/// election, so a client's deadline runs out long before this bound matters.
pub(crate) const LEADERS_FOLLOWED: u32 = 3;

/// How long a leader stopping on request (SIGTERM) works at handing leadership over (see
/// `node::hand_over`) before it stops anyway and leaves the others to elect a leader: well
/// inside a service manager's stop timeout (systemd's 90 s, Kubernetes' 30 s).
pub(crate) const HAND_OVER_WAIT: Duration = Duration::from_millis(2_000);

/// How often a node with TLS looks at its certificate, key and CA files for a change, which it
/// then loads (as it does at once on SIGHUP; see `tls::reload`).
pub(crate) const TLS_RELOAD_CHECK: Duration = Duration::from_secs(5);

/// How long a leader handing over waits for a caught-up voter whose clock runs with the
/// majority's before it takes one whose clock is odd (see `node::hand_over`): the right ones
/// catch up within a round trip or two, and an odd one would lead at its odd rate until it
/// stepped down in turn.
pub(crate) const HAND_OVER_TO_ODD_AFTER: Duration = Duration::from_millis(250);

/// How long a voter is given to take a hand-over's message.
pub(crate) const HAND_OVER_CALL: Duration = Duration::from_millis(500);

/// A member that does not answer in this time is reported unreachable, not waited for.
pub(crate) const PEER_STATUS_TIMEOUT: Duration = Duration::from_millis(1_000);

/// How long an added learner has to catch up before the change is given up (it stays a learner,
/// and `member add` may be run again).
pub(crate) const MEMBER_CATCH_UP: Duration = Duration::from_secs(60);

const _: () = {
    assert!(
        LEADER_WAIT.as_millis() as u64 >= 2 * LONGEST_ELECTION_MS,
        "a request waits out a whole election, twice over, before it answers no leader"
    );
    assert!(
        FORWARD_TIMEOUT.as_millis() > NODE_WRITE_WORST.as_millis(),
        "a forwarded write waits for the leader's own worst case, and the hop"
    );
    assert!(
        QUORUM_SILENCE.as_millis() < QUORUM_WAIT.as_millis(),
        "a cut-off leader gives a held write up before the write's own quorum wait ends"
    );
    assert!(
        PEER_STATUS_TIMEOUT.as_millis() >= 2 * CONNECT_TIMEOUT.as_millis(),
        "a member's status waits for a connection attempt, and the answer"
    );
    // The client's attempt timeout outlasts NODE_WRITE_WORST too: asserted in the `leasehold`
    // package, which sees both crates.
};

// ---------------------------------------------------------------------------------------------
// The store's clock: carried time, expiry ticks and retention.

/// How long a new leader waits for its peers' carried times before its first stamp. Any answer
/// only adds time a peer measured, so one that comes later is not needed for safety; the wait
/// is short, since a partitioned peer answers never and holds up the term's first write.
pub(crate) const PEER_CARRY_WAIT: Duration = Duration::from_millis(200);

/// How long an asked peer waits to apply the entry the leader's answers must count from before
/// it answers. A new leader has applied every committed entry; its followers learn the commit
/// index with its next message, a heartbeat at most later, so a peer that answered at once
/// would often name an entry a few behind, and not count.
pub(crate) const PEER_APPLY_WAIT: Duration = Duration::from_millis(120);

/// How often a leader reads its voters' clocks (see `peer_clocks`). Its stamps trail what a
/// majority's clocks measured by about this much plus a round trip ([`CLOCK_TRAIL`]).
pub(crate) const CLOCK_PROBE_LEADING: Duration = Duration::from_millis(25);

/// A leader that heard no voter's clock for longer than this stops its stamps until it does:
/// its own clock may have jumped (or the node paused), which the next reading tells. Twice the
/// trail: readings late on a loaded machine (the fault suite's: 40 ms and 80 ms here let store
/// time run at 70% of real time) must not stop it.
pub(crate) const CLOCK_UNHEARD: Duration =
    Duration::from_millis(2 * CLOCK_TRAIL.as_millis() as u64);

/// How often a node that does not lead reads its peers' clocks: enough to judge its own rate
/// within a few seconds, and for a new leader to know its own from the start.
pub(crate) const CLOCK_PROBE_FOLLOWING: Duration = Duration::from_millis(250);

/// How long a clock reading may take to come back before the probe counts it lost.
pub(crate) const CLOCK_PROBE_WAIT: Duration = Duration::from_millis(500);

/// How far behind the newest readings a leader reads the voters' clocks, so that the time they
/// allow grows smoothly between readings (see `quorum_time`): more than a probe's interval and
/// a loaded machine's round trip. The most store time may gain on real time, once, in the
/// moment a leader's clock changes rate, which the grant margin covers
/// (`leasehold_core::Limits::GRANT_MARGIN_MS`).
pub(crate) const CLOCK_TRAIL: Duration = Duration::from_millis(100);

/// Readings of a peer's clock are kept this long.
pub(crate) const CLOCK_RATE_WINDOW: Duration = Duration::from_secs(3);

/// A rate is measured over the last this much of a peer's clock (not known before): short, so
/// that a clock gone wrong is known for it soon, and long against the round trips' noise (a
/// millisecond's is a fifth of a percent).
pub(crate) const CLOCK_RATE_SPAN: Duration = Duration::from_millis(500);

/// A node whose clock's rate differs from the majority's by more than this (a tenth) is odd: it
/// is named in `status`, refuses to campaign and steps down if it leads. NTP keeps a good clock
/// within a few parts per million; a tenth is a broken one.
pub(crate) const ODD_CLOCK_RATE: f64 = 0.10;

/// Between two readings of a peer's clock, a ratio of the elapsed times beyond this (either
/// way), or a reading going back, is a jump, not a rate: the readings before it are dropped.
pub(crate) const CLOCK_JUMP_RATIO: f64 = 8.0;

/// Between two readings of a peer's clock far apart (answers lost for a while), a jump is a small
/// part of the interval, and the ratio above misses it: an interval that one clock measured this
/// much longer than the peer's known rate explains is a jump too. (A fault run saw a follower's
/// 10 s jump go unseen across a 6 s gap in one peer's readings after a partition healed, so it
/// could not tell that its own clock jumped.)
pub(crate) const CLOCK_JUMP_SECONDS: f64 = 2.0;

/// A node whose clock jumped stays odd this long after, and one whose rate was odd this long
/// after it looks right again: enough for `status` and the metrics to name it.
pub(crate) const CLOCK_ODD_REMEMBERED: Duration = Duration::from_secs(3);

/// A node whose clock was judged odd campaigns again once it has been judged right this long
/// (a few of a follower's judgements, one per [`CLOCK_PROBE_FOLLOWING`]), so that a rate near
/// the bound does not lead between two odd judgements. Short, not [`CLOCK_ODD_REMEMBERED`]:
/// after a clock fault the one follower with the whole log may be the one whose clock was
/// odd, and then no other can win a vote (the fault suite: a 2 s lease lived 4.2 s across a
/// leader's pause, which the odd follower's memory outlasted).
pub(crate) const CLOCK_ODD_NO_CAMPAIGN: Duration = Duration::from_millis(750);

/// A write answered longer than this after its stamp has the leader log a fresh stamp (a tick)
/// at once. A follower carries time from when it appended the newest stamped entry, so one that
/// appended a grant late carries the grant's time late by as much; if the cluster then goes
/// idle and the leader dies, the next term starts that much behind, and every lease lives that
/// much past its TTL (CI: a grant slow to replicate on a loaded machine, 0.7 s). The tick, sent
/// once the log moves again, lets the followers measure from it instead. Below a lease's 0.5 s
/// budget across a failover, and above what a loopback or LAN cluster's commit takes, so a
/// healthy cluster logs no tick for it.
pub(crate) const CARRY_REFRESH_AFTER: Duration = Duration::from_millis(200);

/// The expiry ticker looks again at least this often, to notice a new leadership or lease.
pub(crate) const TICK_CHECK: Duration = Duration::from_millis(100);

/// Ticks are at least this far apart: when leases fall due one after another (thousands a
/// second after a burst of acquires), one tick expires all that fell due since the last, instead
/// of a log entry, and an fsync on every node, per lease. An expiry reaches the log up to this
/// much later than it otherwise would; never earlier.
pub(crate) const TICK_MIN_GAP: Duration = Duration::from_millis(50);

/// The default of `serve --lease-retention`, in seconds: an hour of store time.
pub const DEFAULT_LEASE_RETENTION_SECS: u64 = 3_600;

const _: () = {
    assert!(
        PEER_APPLY_WAIT.as_millis() + 50 < PEER_CARRY_WAIT.as_millis(),
        "a peer's wait to apply, and the way back, fit in the leader's wait for answers"
    );
    assert!(
        PEER_CARRY_WAIT.as_millis() < LEADER_WAIT.as_millis(),
        "a new term's first write waits for carried times well within a request's wait"
    );
    assert!(
        TICK_MIN_GAP.as_millis() < TICK_CHECK.as_millis(),
        "ticks may come closer together than the ticker's idle look"
    );
    assert!(
        CLOCK_TRAIL.as_millis() <= leasehold_core::Limits::GRANT_MARGIN_MS as u128,
        "the grant margin covers at least the trail read at the old pace"
    );
};

// ---------------------------------------------------------------------------------------------
// Sizes: entries, messages, snapshots and the log's segments.

/// Payload bytes per entry, at most (by `raft::weight`), so that an entry, and a replication message
/// of `max_payload_entries` of them, stays bounded even when every request carries the largest
/// value.
pub(crate) const MAX_ENTRY_BYTES: usize = 128 * 1024;

/// How the leader gathers writes into entries.
pub(crate) const ENTRY_BATCHES: BatchLimits = BatchLimits {
    // One at a time: the writes that come meanwhile make the next entry, and each entry costs
    // every node a round of work (an fsync, a replication message, an apply) whatever it holds.
    // Three nodes on two cores, interleaved runs at 64 clients, one entry against two: put
    // through the etcd API +6 to +10 %, acquire (grant + txn) +5 to +18 %; native put +7 and
    // +12 %, fenced put +5 and +6 %, acquire +11 and +15 %; at 16 clients native put -1 and
    // +2 %, etcd put +10 and +13 %; one client's put p50 0.69-0.71 ms against 0.72-0.74.
    in_flight: 1,
    // Two while writes wait beyond a full entry: values near the largest go one to an entry,
    // and one at a time they went 5-16 % slower than two (60 KB puts at 64 clients).
    in_flight_full: 2,
    max_items: 1024,
    max_weight: MAX_ENTRY_BYTES,
    // A quorum answers in milliseconds; an entry still waiting after this is stuck behind a
    // partition or an election, and the next one goes out regardless, so that writes behind a
    // stuck entry wait at most this long for their own.
    hold: Duration::from_millis(250),
};

/// How a follower gathers the writes it forwards into batches for the leader.
pub(crate) const FORWARD_BATCHES: BatchLimits = BatchLimits {
    // Two keep the next batch on its way while the leader answers the last one (one measured
    // slower: put at 64 clients 8,496 and 7,987/s against 8,943 and 8,686/s).
    in_flight: 2,
    in_flight_full: 2,
    // A leader answers in milliseconds; a batch still waiting after this is stuck behind a
    // partition or an election, and the next one goes out regardless.
    hold: Duration::from_millis(500),
    ..ENTRY_BATCHES
};

/// How linearizable reads are gathered behind one leadership confirmation.
pub(crate) const READ_BATCHES: BatchLimits = BatchLimits {
    // One confirmation at a time: a read arriving meanwhile needs the next one anyway.
    in_flight: 1,
    in_flight_full: 1,
    max_items: usize::MAX,
    max_weight: usize::MAX,
    // A confirmation still out after this is stuck behind a partition or an election.
    hold: Duration::from_millis(500),
};

/// The largest message a peer may send or be answered with: a replication message of
/// `max_payload_entries` entries of at most `MAX_ENTRY_BYTES` each, a snapshot chunk, a
/// `ReadLog` answer, each with room to spare. Anything larger is refused before it is decoded.
pub const MAX_PEER_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

/// The largest request a client may send: a put of the largest value with the longest key and
/// lease name, with room to spare, so that a value just over its limit still gets the
/// field's own error, and a huge message is refused before it is decoded. The same over gRPC
/// and on a client lane, whose clients know it as the wire's (`lane::MAX_REQUEST_BYTES`).
pub const MAX_CLIENT_MESSAGE_BYTES: usize = leasehold_proto::lane::MAX_REQUEST_BYTES;

/// The calls one `Batch` message may carry (each message is also at most
/// [`MAX_CLIENT_MESSAGE_BYTES`]): a bigger one ends the stream, refused. Answers are gathered
/// into messages of at most as many.
pub const MAX_BATCH_CALLS_PER_MESSAGE: usize = 256;

/// The calls one `Batch` stream may have unanswered at once: past them the node reads no more of
/// the stream until answers go out, so a caller cannot queue work without bound (HTTP/2's flow
/// control holds it back). Each call is admitted as a unary one too (`--max-requests`).
pub const MAX_BATCH_UNANSWERED: usize = 1_024;

/// The bytes of keys and values after which a page of `ListKeys` ends (it holds at least one
/// row): well inside a client's largest answer (4 MiB, tonic's default).
pub const LIST_PAGE_BYTES: usize = 1024 * 1024;

/// The largest request body of the HTTP API (`serve --http-listen`): a request message at its
/// gRPC limit, in base64 and JSON.
pub(crate) const MAX_HTTP_BODY_BYTES: usize = MAX_CLIENT_MESSAGE_BYTES * 2;

/// Entries one `ReadLog` call returns at most: the log is read into memory under the index
/// lock, so a caller asking for `1..=u64::MAX` gets a bounded answer and asks again from there.
pub const READ_LOG_MAX_ENTRIES: u64 = 1_000;

/// Bytes of commands one `ReadLog` answer carries at most (by `raft::weight`): a
/// call stops early at the entry that passes it, and the caller asks again from there.
pub(crate) const READ_LOG_MAX_BYTES: usize = 2 * 1024 * 1024;

/// The largest snapshot a node receives: far above any table this store keeps in memory, and a
/// bound on what a sender can make a node allocate.
pub(crate) const MAX_SNAPSHOT_BYTES: u64 = 1 << 30;

/// The state's bytes per chunk of `SaveSnapshot`: well under a client's 4 MiB message limit.
pub(crate) const BACKUP_CHUNK_BYTES: usize = 1 << 20;

/// Backup chunks queued for a slow `snapshot save` client before the sender waits for it, so a
/// backup holds the state once and a few chunks, not a copy per chunk.
pub(crate) const BACKUP_CHUNKS_QUEUED: usize = 4;

/// A segment grows to about this size before the next one starts.
pub(crate) const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;

/// How far ahead of its records a segment's blocks are allocated and written with zeros (see
/// the log store's `allocate`), at a time: a step is one `fallocate`, up to 16 writes of 64 KiB
/// and an `fdatasync` of its own (0.8 ms at the median on this VM for a MiB; 6.8 ms for the
/// 4 MiB a step once was, when it only allocated).
pub(crate) const PREALLOCATE_BYTES: u64 = 1024 * 1024;

/// The room past its records that the flusher keeps written ahead, and that a follower's small
/// append needs before it is written where it is awaited ([`INLINE_APPEND_COMMANDS`]), so
/// that the runtime's thread never writes a step of zeros: two entries as big as the proposer
/// makes them.
pub(crate) const ROOM_KEPT_BYTES: u64 = 2 * MAX_ENTRY_BYTES as u64;

// Room is kept a step at a time, not at every write.
const _: () = assert!(2 * ROOM_KEPT_BYTES <= PREALLOCATE_BYTES);

/// A follower writes an append of at most this many commands on its own runtime thread, and
/// answers the leader from there, instead of handing it to the blocking pool's flusher and
/// hearing back from it: the two hand-offs between threads cost one client's put 25-30 µs of
/// a follower's 180 (`bench --clients 1 --connect leader`: p50 0.34 and 0.37 ms against 0.37
/// and 0.40). Blocking the runtime for an fsync costs little only while it has little else to
/// do: every append so, 16 clients' puts went 12-17 % slower and 64 clients' 7 %. The leader
/// keeps one entry in flight and puts what arrives meanwhile into the next, so an entry's size
/// says how many writers wait: with one or two, the node is nearly idle.
pub(crate) const INLINE_APPEND_COMMANDS: usize = 2;

/// A follower whose last log write (and its `fdatasync`) took longer than this hands even a
/// small append to the flusher: held up that long, the runtime would hold up everything else
/// the node serves (reads, watches, other peers' messages), where the hand-offs cost 50 µs.
/// About ten times this VM's write at p50 (0.1 to 0.15 ms).
pub(crate) const INLINE_APPEND_WRITE: std::time::Duration = std::time::Duration::from_millis(1);

/// No entry comes near this (the proposer keeps entries to about 128 KiB, or one command), and
/// no writer writes a longer one: a header that checks but says more is corruption. Half of
/// what a record's length field holds beside the record's log format (64 MiB), so that a
/// longer length still reads as the corruption it is.
pub(crate) const MAX_RECORD_BYTES: u64 = 32 * 1024 * 1024;

const _: () = {
    let replication = MAX_PAYLOAD_ENTRIES as usize * MAX_ENTRY_BYTES;
    assert!(
        2 * replication <= MAX_PEER_MESSAGE_BYTES,
        "a replication message fits"
    );
    assert!(
        2 * SNAPSHOT_CHUNK_BYTES as usize <= MAX_PEER_MESSAGE_BYTES,
        "a snapshot chunk fits"
    );
    assert!(
        2 * READ_LOG_MAX_BYTES <= MAX_PEER_MESSAGE_BYTES,
        "a ReadLog answer fits"
    );
    let put = Limits::MAX_VALUE_BYTES + Limits::MAX_KEY_BYTES + 2 * Limits::MAX_NAME_BYTES;
    assert!(
        2 * put <= MAX_CLIENT_MESSAGE_BYTES,
        "the largest valid put fits, with room"
    );
    assert!(
        MAX_PEER_MESSAGE_BYTES as u64 <= MAX_RECORD_BYTES,
        "any entry a peer can send fits in one record of the log"
    );
    assert!(
        // tonic's default limit on a message a client decodes.
        2 * BACKUP_CHUNK_BYTES <= 4 * 1024 * 1024,
        "a backup chunk fits in a client's default 4 MiB message, with room"
    );
};

// ---------------------------------------------------------------------------------------------
// Queues and what is kept in memory.

/// Requests a node works on at once by default (`serve --max-requests`), client calls only (a
/// follower's forwarded writes were admitted there, and watches have their own budget); past it a request is refused at once (RESOURCE_EXHAUSTED)
/// instead of queueing without bound. Far above what a node serves well: 64 clients keep a few
/// hundred in flight.
pub const MAX_CONCURRENT_REQUESTS: usize = 8_192;

/// The most connections one listener holds at once (see `connections`): its share of the
/// open-files limit, up to this.
pub const MAX_CONNECTIONS: usize = 16_384;

/// Descriptors kept out of the listeners' shares (or a quarter of the limit, if more): the
/// log's segments, the state and snapshot files, the peers' channels and lanes, the runtime's.
pub const FDS_KEPT: u64 = 256;

/// Descriptors held open in reserve for the data dir (`raft::descriptors`): an open of a log
/// segment, the state file or a snapshot that finds the process out of descriptors gives one
/// back and tries again.
pub const SPARE_DESCRIPTORS: usize = 4;

/// How long such an open waits for a descriptor once the spares are gone, before the node
/// gives up (openraft stops on a storage error): connections close, or an operator raises the
/// limit.
pub const DESCRIPTOR_WAIT: Duration = Duration::from_secs(30);

/// How often it tries again meanwhile.
pub const DESCRIPTOR_RETRY: Duration = Duration::from_millis(50);

/// The listeners that share the open-files limit: the client and peer planes, the HTTP API and
/// the metrics endpoint.
pub const LISTENERS: u64 = 4;

/// Watches a node serves at once by default (`serve --max-watches`), a budget apart from
/// requests: a watch is held for as long as its reader stays, so charging it to requests let
/// readers take every place a write needs (safety review 161302a, finding 4).
pub const MAX_WATCHES: usize = 4_096;

/// The most etcd events one Watch answer carries (a revision is never split, so one with
/// more keys is sent whole).
pub const ETCD_WATCH_EVENTS_PER_ANSWER: usize = 1_000;

/// The most watchers one etcd Watch stream runs at once: each is a task, so one client cannot
/// start them without bound (a stream counts as one watch of `--max-watches`).
pub const ETCD_WATCHERS_PER_STREAM: usize = 1_024;

/// How long a watcher created with `progress_notify` goes without events before it sends an
/// empty answer saying how far the keyspace has come: etcd's default.
pub const ETCD_PROGRESS_NOTIFY: Duration = Duration::from_secs(10 * 60);

/// Answers queued on an etcd stream for a client that reads slower than they come: then the
/// watchers wait, holding their place in the events.
pub const ETCD_STREAM_QUEUE: usize = 64;

/// Sessions open in the whole cluster, past which the leader refuses a registration (`serve
/// --max-sessions`): a session is replicated state kept until closed or idle for an hour, at
/// most a few KiB with its kept answers.
pub const MAX_SESSIONS: usize = 100_000;

/// Sessions one identity may hold open (`serve --max-sessions-per-identity`), so that one
/// tenant's leak cannot take every session.
pub const MAX_SESSIONS_PER_IDENTITY: usize = 10_000;

/// Leases one identity may have created and the table still keep, held or free until forgotten
/// (`serve --max-leases-per-identity`): about 200 bytes each on every replica, so a million is
/// some 200 MB, and one tenant's leak of them cannot take a node's memory.
pub const MAX_LEASES_PER_IDENTITY: usize = 1_000_000;

/// Rows one identity may have created and not deleted (`serve --max-rows-per-identity`): each
/// up to 64 KiB of value beside its key on every replica.
pub const MAX_ROWS_PER_IDENTITY: usize = 100_000;

/// Events kept at most. A watcher further behind than this is told its start was compacted.
pub(crate) const KEPT_EVENTS: usize = 65_536;

/// Entries remembered; older ones are dropped (their stamp then counts from when it was applied,
/// which is later, so less time is carried, never more).
pub(crate) const APPEND_TIMES_KEPT: usize = 8_192;

/// Events in one response at most (more when one entry has more).
pub(crate) const WATCH_EVENTS_PER_RESPONSE: usize = 512;

/// Responses queued for a slow watcher before its task waits for it.
pub(crate) const WATCH_QUEUED_RESPONSES: usize = 16;

/// How often an idle watch says how far it has looked, and checks that its node still follows
/// a leader.
pub(crate) const WATCH_IDLE_CHECK: Duration = Duration::from_secs(1);

/// A handshake that takes longer than this is dropped, so idle half-open connections do not
/// pile up.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a client connection must send within [`HANDSHAKE_TIMEOUT`] of reaching gRPC (after
/// its TLS handshake, if any): HTTP/2's connection preface is 24 bytes.
pub(crate) const GREETING_BYTES: usize = 24;

/// A client-plane HTTP/2 connection silent this long is sent a ping (hyper sends none while
/// frames arrive, so a busy connection pays nothing)...
pub(crate) const CLIENT_PING_INTERVAL: Duration = Duration::from_secs(30);

/// ...and closed if it is not answered within this: its client is gone, or holds the
/// connection without speaking HTTP/2.
pub(crate) const CLIENT_PING_TIMEOUT: Duration = Duration::from_secs(10);

/// An HTTP/JSON (or metrics) connection closes when it sends no complete request head for
/// this long: a new one, or a kept-alive one between requests. (A watch's answer streams a
/// line every [`WATCH_IDLE_CHECK`], and its request head was read long before.)
pub(crate) const HTTP_IDLE: Duration = Duration::from_secs(15);

/// How long a connection whose TLS handshake failed is kept after the node's alert, its bytes
/// read and dropped, before it is closed: closed at once with the client's first request unread,
/// it is reset, and the client reads a broken pipe where the alert said why (its certificate
/// refused). Held under [`MAX_HANDSHAKES`], as the handshake was.
pub(crate) const REFUSED_LINGER: Duration = Duration::from_millis(500);

/// The bytes read from a refused connection while it lingers, at most: past what a client
/// sends before it reads (HTTP/2's first window, 64 KiB, with its framing and TLS records), so
/// that the client's first request is read whole and the close is not a reset.
pub(crate) const REFUSED_LINGER_BYTES: usize = 128 * 1024;

/// Handshaken connections waiting for the gRPC server to take them.
pub(crate) const ACCEPTED_QUEUE: usize = 64;

/// TLS handshakes one plane runs at once. A connection past it is closed at once, so a flood
/// of connections that never finish their handshake holds this many file descriptors for at
/// most [`HANDSHAKE_TIMEOUT`] (and [`REFUSED_LINGER`] after a failed one), not one per
/// connection.
pub(crate) const MAX_HANDSHAKES: usize = 256;

/// Distinct (address, reason) pairs the refusal log remembers; past it, it forgets them all
/// and logs each again once.
pub(crate) const MAX_REFUSALS_REMEMBERED: usize = 1_024;

/// Refusals by the policy logged per minute; past it, they are counted in the metrics only.
pub(crate) const DENIALS_LOGGED_PER_MINUTE: u64 = 20;

const _: () = {
    assert!(
        WATCH_EVENTS_PER_RESPONSE < KEPT_EVENTS,
        "one watch response is a small part of the events kept"
    );
    assert!(
        ACCEPTED_QUEUE <= MAX_HANDSHAKES,
        "at most as many handshaken connections wait as handshakes run"
    );
};

// ---------------------------------------------------------------------------------------------
// Connections, background checks and logging rates.

/// A connection silent this long is probed, and dropped after [`KEEPALIVE_PROBES`] unanswered
/// probes [`KEEPALIVE_INTERVAL`] apart: a dead client's or peer's connection goes within about
/// a minute.
pub(crate) const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);

/// Time between keepalive probes.
pub(crate) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// Unanswered keepalive probes before a connection is dropped.
pub(crate) const KEEPALIVE_PROBES: u32 = 3;

/// How often health is looked at again when nothing changes (a leader's quorum ages without a
/// metrics change).
pub(crate) const HEALTH_CHECK: Duration = Duration::from_millis(250);

/// At most this often: metrics change with every applied entry under load.
pub(crate) const HEALTH_MIN_GAP: Duration = Duration::from_millis(50);

/// How long a stopping node waits for its metrics endpoint and HTTP API to end their
/// connections: a client holding a request half sent must not hold the node's exit.
pub(crate) const SIDE_SERVER_STOP: Duration = Duration::from_secs(5);

/// How long the log's purge waits for the snapshot that covers it. The wait is for an install
/// the state machine worker was handed just before: decoding and writing one file with an
/// fsync. One that has not finished in this time has failed: the purge fails with the log still
/// whole, which a restart can always recover from, and the log's next write reports it, which
/// stops the node.
pub const PURGE_WAIT: Duration = Duration::from_secs(60);

/// How often a peer refusal is logged at most.
pub(crate) const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(5);

/// How often a refusal for a changed incarnation is logged at most.
pub(crate) const INCARNATION_LOG_EVERY: Duration = Duration::from_secs(5);

const _: () = {
    assert!(
        KEEPALIVE_IDLE.as_secs() + KEEPALIVE_PROBES as u64 * KEEPALIVE_INTERVAL.as_secs() <= 60,
        "a dead connection goes within a minute"
    );
    assert!(
        HEALTH_MIN_GAP.as_millis() < HEALTH_CHECK.as_millis(),
        "health may be looked at more often than its idle look"
    );
    assert!(
        HEALTH_CHECK.as_millis() < QUORUM_SILENCE.as_millis(),
        "a leader whose quorum went silent reports itself not serving soon after"
    );
};

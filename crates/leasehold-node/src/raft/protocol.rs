//! The peer handshake (issue 41, item 8): what a node speaks, announced on every peer message
//! it sends and every reply it gives, so that a cluster can be upgraded one node at a time.
//!
//! Each node names, under [`PROTOCOL_KEY`], its protocol version, the newest log format it
//! reads (`leasehold_core::format`), the features it serves beyond its protocol's, and its
//! build's version. Every node notes what each peer last announced ([`Protocols`]). From that:
//!
//! - a leader logs an operation only once every member (voters and learners) reads its format
//!   ([`Protocols::agreed_format`]), and uses a new peer message only once every node it
//!   concerns (the voters, so far) names its feature ([`Protocols::all_announce`]): new kinds
//!   stay off until the last of them is upgraded;
//! - a peer message says the format of the log data it carries, under [`FORMAT_KEY`] when it
//!   is newer than 1, and a node that receives one of a format it does not read refuses it,
//!   saying which format it met and what to do ([`check_format`]), instead of guessing at bytes
//!   it cannot read;
//! - a node answers in what its asker reads: so far every answer is of format 1.
//!
//! Protocol 2 is 0.2.0, the first build that announces itself. A peer that announces nothing
//! is older: protocol 1, format 1, which 0.2.0 still speaks to for a data dir's sake but not
//! in a mixed cluster (upgrading from before 0.2.0 takes a full restart; the data dir is kept).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use leasehold_core::format::{Format, FORMAT_1, LOG_FORMAT};
use leasehold_proto::wire::{CLOCK_READING_FEATURE, HAND_OVER_FEATURE};
pub use leasehold_proto::wire::{FORMAT_KEY, PROTOCOL_KEY};
use tonic::metadata::{MetadataMap, MetadataValue};

use crate::NodeId;

/// This build's protocol version: 2 since 0.2.0, the first with the handshake.
pub const PROTOCOL: u32 = 2;

/// The features this build serves beyond its protocol's. A feature is named here when it adds
/// a peer message, and used toward a peer only once every node the message concerns names it
/// (every voter, for both so far).
pub const FEATURES: &[&str] = &[HAND_OVER_FEATURE, CLOCK_READING_FEATURE];

/// The most features an announcement is read with; the rest are ignored.
const MAX_FEATURES: usize = 32;

/// The most peers whose announcements a node keeps: more than any cluster's members.
const MAX_PEERS_HEARD: usize = 64;

/// What a node announced of itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announced {
    /// Its protocol version ([`PROTOCOL`] for this build).
    pub protocol: u32,
    /// The newest log format it reads.
    pub format: Format,
    /// The features it serves beyond its protocol's ([`FEATURES`] for this build).
    pub features: Vec<String>,
    /// Its build's version, for people (`status`, the log); nothing is decided on it.
    pub version: String,
}

impl Announced {
    /// This build's announcement.
    pub fn ours() -> Announced {
        Announced {
            protocol: PROTOCOL,
            format: LOG_FORMAT,
            features: FEATURES.iter().map(|f| f.to_string()).collect(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }

    /// What a peer that announces nothing speaks: a build from before 0.2.0.
    pub fn before_handshake() -> Announced {
        Announced {
            protocol: 1,
            format: FORMAT_1,
            features: Vec::new(),
            version: "before 0.2.0".to_owned(),
        }
    }

    /// As it travels: `protocol=2; format=1; version=0.2.0; features=a,b`.
    pub fn to_header(&self) -> String {
        format!(
            "protocol={}; format={}; version={}; features={}",
            self.protocol,
            self.format,
            self.version,
            self.features.join(",")
        )
    }

    /// An announcement from its header: unknown keys are skipped (a later build may say more),
    /// a missing or unreadable protocol or format refused.
    pub fn parse(header: &str) -> Result<Announced, String> {
        let mut protocol = None;
        let mut format = None;
        let mut features = Vec::new();
        let mut version = String::new();
        for part in header.split(';') {
            let Some((key, value)) = part.trim().split_once('=') else {
                continue;
            };
            match key {
                "protocol" => protocol = value.parse().ok(),
                "format" => format = value.parse().ok(),
                "version" => version = value.chars().take(64).collect(),
                "features" => {
                    features = (value.split(','))
                        .filter(|f| !f.is_empty())
                        .take(MAX_FEATURES)
                        .map(|f| f.chars().take(64).collect())
                        .collect()
                }
                _ => {}
            }
        }
        match (protocol, format) {
            (Some(protocol), Some(format)) => Ok(Announced {
                protocol,
                format,
                features,
                version,
            }),
            _ => Err(format!("an unreadable {PROTOCOL_KEY}: {header:?}")),
        }
    }
}

/// This build's announcement, on a message or a reply.
pub fn announce(metadata: &mut MetadataMap) {
    static OURS: OnceLock<MetadataValue<tonic::metadata::Ascii>> = OnceLock::new();
    let value = OURS.get_or_init(|| {
        MetadataValue::try_from(Announced::ours().to_header()).expect("the announcement is ASCII")
    });
    metadata.insert(PROTOCOL_KEY, value.clone());
}

/// What `metadata` announces; a build from before 0.2.0 if nothing.
pub fn announced(metadata: &MetadataMap) -> Result<Announced, String> {
    match metadata.get(PROTOCOL_KEY).map(|v| v.to_str()) {
        None => Ok(Announced::before_handshake()),
        Some(Ok(header)) => Announced::parse(header),
        Some(Err(_)) => Err(format!("a {PROTOCOL_KEY} that is not ASCII")),
    }
}

/// The log format of `entry`: its operations' newest; format 1 for Raft's own entries.
pub fn entry_format(entry: &openraft::Entry<super::TypeConfig>) -> Format {
    match &entry.payload {
        openraft::EntryPayload::Normal(batch) => batch.format(),
        _ => FORMAT_1,
    }
}

/// Marks a message as carrying log data of `format`; nothing for format 1, which every build
/// reads.
pub fn mark_format(metadata: &mut MetadataMap, format: Format) {
    if format > FORMAT_1 {
        metadata.insert(FORMAT_KEY, MetadataValue::from(u32::from(format)));
    }
}

/// Refuses a peer message whose data is of a format newer than `readable` (this build's
/// [`LOG_FORMAT`] for entries and operations, its `TABLE_FORMAT` for a snapshot's table): why,
/// and what to do.
pub fn check_format(metadata: &MetadataMap, readable: Format) -> Result<(), String> {
    let format = match metadata.get(FORMAT_KEY).map(|v| v.to_str()) {
        None => return Ok(()),
        Some(Ok(value)) => value
            .parse::<u32>()
            .map_err(|_| format!("a peer sent an unreadable {FORMAT_KEY}: {value:?}"))?,
        Some(Err(_)) => return Err(format!("a peer sent a {FORMAT_KEY} that is not ASCII")),
    };
    if format <= u32::from(readable) {
        return Ok(());
    }
    Err(format!(
        "a peer sent log format {format}, and this build ({}) reads formats up to \
         {readable}: this node cannot apply what the cluster logs. Upgrade it to the \
         cluster's version (a leader sends a format only once every member announced it, so a \
         node was downgraded after the cluster began to use it)",
        env!("CARGO_PKG_VERSION"),
    ))
}

/// What this node last heard each peer announce.
#[derive(Clone, Default)]
pub struct Protocols {
    heard: Arc<Mutex<BTreeMap<NodeId, Heard>>>,
    /// What each peer last announced, kept when it is forgotten: its features (see
    /// [`Protocols::all_announce`]) and its format (see [`Protocols::agreed_format`]).
    last: Arc<Mutex<BTreeMap<NodeId, Announced>>>,
}

/// One peer's announcement, and its header as it came: every message repeats it, and an
/// unchanged header is compared, not parsed again, on the replication path.
struct Heard {
    header: Vec<u8>,
    announced: Announced,
}

impl Protocols {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, Heard>> {
        self.heard.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes what `metadata`, from node `id`, announces; a change is logged.
    pub fn heard(&self, id: NodeId, metadata: &MetadataMap) {
        let header = metadata.get(PROTOCOL_KEY).map_or(&[][..], |v| v.as_bytes());
        let mut heard = self.lock();
        if heard.get(&id).is_some_and(|h| h.header == header) {
            return;
        }
        // Without TLS any caller may claim an id: only so many are kept.
        if !heard.contains_key(&id) && heard.len() >= MAX_PEERS_HEARD {
            return;
        }
        let Ok(announced) = announced(metadata) else {
            return;
        };
        tracing::info!(
            peer = id,
            protocol = announced.protocol,
            format = announced.format,
            version = %announced.version,
            "peer announced its protocol"
        );
        let header = header.to_vec();
        let mut last = self.last();
        if last.contains_key(&id) || last.len() < MAX_PEERS_HEARD {
            last.insert(id, announced.clone());
        }
        heard.insert(id, Heard { header, announced });
    }

    fn last(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, Announced>> {
        self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets what every peer not among `members` (removed from the cluster) last announced:
    /// a new member must not find the table full.
    pub fn keep_announced_of(&self, members: impl Fn(NodeId) -> bool) {
        self.last().retain(|id, _| members(*id));
    }

    /// Forgets node `id`'s header: it failed to answer, and may come back as another build.
    /// What it last announced stands until it announces again: its features (see
    /// [`Protocols::all_announce`]) and its format (see [`Protocols::agreed_format`]).
    pub fn forget(&self, id: NodeId) {
        self.lock().remove(&id);
    }

    /// What node `id` last announced, if it was heard from.
    pub fn of(&self, id: NodeId) -> Option<Announced> {
        self.lock().get(&id).map(|h| h.announced.clone())
    }

    /// The newest log format every one of `members` reads (voters and learners: both apply the
    /// log): this build's for `me`, what each other member last announced, format 1 for one
    /// not heard from yet (every build reads it). With it, the members that hold it below
    /// this build's, for the refusal to name.
    ///
    /// A member that stopped answering counts by what it last announced. Counting it as format
    /// 1 refused every write of a newer format while one member was down (etcd's writes and
    /// keep-alives, at format 3: every etcd lease ran out across one node's crash). A member
    /// that comes back as an older build (a downgrade past a format in use) refuses the
    /// entries it cannot read and says so, as it would for those logged before it went down.
    pub fn agreed_format(
        &self,
        me: NodeId,
        members: impl IntoIterator<Item = NodeId>,
    ) -> (Format, Vec<(NodeId, Format)>) {
        let last = self.last();
        let mut agreed = LOG_FORMAT;
        let mut behind = Vec::new();
        for id in members.into_iter().filter(|id| *id != me) {
            let format = last.get(&id).map_or(FORMAT_1, |a| a.format);
            agreed = agreed.min(format);
            if format < LOG_FORMAT {
                behind.push((id, format));
            }
        }
        (agreed, behind)
    }

    /// The members that do not read `format` yet, if some do not: what refuses an operation
    /// of that format (`FORMAT_NOT_AGREED`). `None` when every member reads it.
    pub fn behind_for(
        &self,
        me: NodeId,
        members: impl IntoIterator<Item = NodeId>,
        format: Format,
    ) -> Option<Vec<(NodeId, Format)>> {
        let (agreed, behind) = self.agreed_format(me, members);
        (format > agreed).then_some(behind)
    }

    /// Whether every one of `members` but `me` announced `feature`, in what it announced last:
    /// a member that stopped answering is still counted by it. A feature is a peer message,
    /// and one that cannot be reached fails it harmlessly; forgetting what it serves would
    /// switch the feature off among all the others while one member is down (the clocks'
    /// readings, for one: a leader then stamped by its own clock alone). A member that comes
    /// back as an older build fails the messages it does not know until its first Raft
    /// message announces it.
    pub fn all_announce(
        &self,
        me: NodeId,
        members: impl IntoIterator<Item = NodeId>,
        feature: &str,
    ) -> bool {
        let last = self.last();
        members.into_iter().filter(|id| *id != me).all(|id| {
            (last.get(&id)).is_some_and(|theirs| theirs.features.iter().any(|f| f == feature))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(header: &str) -> MetadataMap {
        let mut metadata = MetadataMap::new();
        metadata.insert(PROTOCOL_KEY, MetadataValue::try_from(header).unwrap());
        metadata
    }

    #[test]
    fn an_announcement_reads_back_as_it_was_made_and_a_later_builds_extra_keys_are_skipped() {
        let mut metadata = MetadataMap::new();
        announce(&mut metadata);
        assert_eq!(announced(&metadata).unwrap(), Announced::ours());
        let later = "protocol=3; format=2; version=0.3.0; features=a,b; quorum_clock=yes";
        let read = announced(&from(later)).unwrap();
        assert_eq!((read.protocol, read.format), (3, 2));
        assert_eq!(read.features, ["a", "b"]);
        assert!(announced(&from("format=1")).is_err(), "no protocol");
        assert_eq!(
            announced(&MetadataMap::new()).unwrap(),
            Announced::before_handshake()
        );
    }

    #[test]
    fn the_agreed_format_is_the_oldest_a_member_reads_and_a_silent_member_counts_as_format_1() {
        let protocols = Protocols::default();
        protocols.heard(2, &from("protocol=3; format=9; version=9"));
        let (agreed, behind) = protocols.agreed_format(1, [1, 2]);
        assert_eq!((agreed, behind), (LOG_FORMAT, vec![]));
        // Node 3 has not been heard from: only format 1 is safe to send it.
        let (agreed, _) = protocols.agreed_format(1, [1, 2, 3]);
        assert_eq!(agreed, FORMAT_1);
        // Format 1 is never refused; a newer one is, until every member announces it.
        assert_eq!(protocols.behind_for(1, [1, 2, 3], FORMAT_1), None);
        protocols.heard(3, &from("protocol=2; format=1; version=0.2.0"));
        let behind = protocols.behind_for(1, [1, 2, 3], LOG_FORMAT).unwrap();
        assert_eq!(
            behind,
            vec![(3, FORMAT_1)],
            "node 3 named, as it reads format 1"
        );
        protocols.heard(3, &from(&Announced::ours().to_header()));
        assert_eq!(protocols.behind_for(1, [1, 2, 3], LOG_FORMAT), None);
        assert!(!protocols.all_announce(1, [1, 2], "x"));
        protocols.heard(2, &from("protocol=3; format=9; version=9; features=x"));
        assert!(protocols.all_announce(1, [1, 2], "x"));
        assert!(!protocols.all_announce(1, [1, 2, 3], "x"));
    }

    #[test]
    fn a_peer_that_stops_answering_keeps_its_features_and_format_until_it_announces_others() {
        let protocols = Protocols::default();
        protocols.heard(2, &from("protocol=3; format=2; version=9; features=x"));
        protocols.forget(2);
        assert_eq!(protocols.of(2), None, "its header is forgotten");
        assert!(protocols.all_announce(1, [1, 2], "x"), "its features stand");
        assert_eq!(
            protocols.agreed_format(1, [1, 2]).0,
            2,
            "its format stands: one member down does not refuse the formats in use"
        );
        protocols.heard(2, &from("protocol=2; format=1; version=0.2.0"));
        assert!(
            !protocols.all_announce(1, [1, 2], "x"),
            "it came back as an older build"
        );
        assert_eq!(protocols.agreed_format(1, [1, 2]).0, FORMAT_1);
    }

    #[test]
    fn a_message_of_a_newer_format_is_refused_naming_it() {
        let mut metadata = MetadataMap::new();
        assert!(
            check_format(&metadata, LOG_FORMAT).is_ok(),
            "unmarked: format 1"
        );
        mark_format(&mut metadata, LOG_FORMAT);
        assert!(check_format(&metadata, LOG_FORMAT).is_ok());
        mark_format(&mut metadata, LOG_FORMAT + 1);
        let refused = check_format(&metadata, LOG_FORMAT).unwrap_err();
        assert!(
            refused.contains(&format!("log format {}", LOG_FORMAT + 1)),
            "{refused}"
        );
        assert!(refused.contains("Upgrade"), "{refused}");
    }
}

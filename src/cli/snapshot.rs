//! `leasehold snapshot save FILE` and `leasehold snapshot restore FILE --data-dir DIR --id N
//! --peers ...`: a backup of the applied state, and a new cluster made from it.
//!
//! The file: a first line `leasehold-snapshot 1`, a second line with the header as one JSON
//! object (log index, term, leader, store time, state digest, clock, length, CRC-32), then the
//! state's bytes. Restore checks the length, the CRC-32 and the digest before it writes
//! anything.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{ClientOpts, Exit};
use crate::raft::{restore_data_dir, ClockMode, SavedAt};

const MAGIC: &str = "leasehold-snapshot 1";

/// `snapshot restore --gap`'s default: a billion grants of one lease, or sessions, after the
/// save, which no cluster reaches; tokens stay far from u64's end.
pub const DEFAULT_GAP: u64 = 1_000_000_000;

#[derive(clap::Subcommand)]
pub enum SnapshotCmd {
    /// Write a consistent snapshot of the cluster's state, taken by the leader at a committed
    /// index, to FILE.
    Save { file: PathBuf },
    /// Prepare a data dir from which a new cluster starts with the snapshot's rows, leases,
    /// tokens and store time. Run it once per node of the new cluster, with the same --peers.
    Restore {
        file: PathBuf,
        /// The new node's data dir: absent or empty.
        #[arg(long)]
        data_dir: PathBuf,
        /// The new node's id: one of the ids in --peers.
        #[arg(long)]
        id: u64,
        /// The new cluster's voters, as `serve --peers` takes them.
        #[arg(long, value_parser = super::serve::parse_peers)]
        peers: BTreeMap<u64, String>,
        /// How far every token, fence and session id moves on, past what the old cluster may
        /// have handed out after the save: it must have granted fewer than this per lease, and
        /// opened fewer sessions. Sessions do not carry over; clients open new ones. Give every
        /// node of the new cluster the same --gap: their states must be the same.
        #[arg(long, default_value_t = DEFAULT_GAP)]
        gap: u64,
    },
}

/// The file's header line.
#[derive(Serialize, Deserialize)]
struct Header {
    log_index: u64,
    term: u64,
    leader_id: u64,
    store_time_ms: u64,
    state_digest: u64,
    manual_clock: bool,
    bytes: u64,
    crc32: u32,
}

pub async fn run(opts: &ClientOpts, command: SnapshotCmd) -> anyhow::Result<Exit> {
    match command {
        SnapshotCmd::Save { file } => save(opts, &file).await,
        SnapshotCmd::Restore {
            file,
            data_dir,
            id,
            peers,
            gap,
        } => restore(&file, &data_dir, id, &peers, gap).await,
    }
}

async fn save(opts: &ClientOpts, file: &Path) -> anyhow::Result<Exit> {
    let saved = opts.one_shot_client()?.save_snapshot().await?;
    let h = saved.header;
    let header = Header {
        log_index: h.log_index,
        term: h.term,
        leader_id: h.leader_id,
        store_time_ms: h.store_time_ms,
        state_digest: h.state_digest,
        manual_clock: h.manual_clock,
        bytes: h.bytes,
        crc32: h.crc32,
    };
    // Whole or not at all: written beside, flushed to disk, then renamed over.
    let tmp = file.with_extension("partial");
    let write = || -> std::io::Result<()> {
        let mut out = std::fs::File::create(&tmp)?;
        writeln!(out, "{MAGIC}")?;
        writeln!(out, "{}", serde_json::to_string(&header)?)?;
        out.write_all(&saved.data)?;
        out.sync_all()?;
        std::fs::rename(&tmp, file)
    };
    write().map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    println!(
        "saved the state at log index {} (store time {}, digest {:016x}, {} bytes) to {}",
        header.log_index,
        super::commands::seconds(header.store_time_ms),
        header.state_digest,
        header.bytes,
        file.display()
    );
    Ok(Exit::Ok)
}

/// The header and the state of a snapshot file, checked whole.
fn read(file: &Path) -> anyhow::Result<(Header, Vec<u8>)> {
    let bytes = std::fs::read(file).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let not_one = || anyhow::anyhow!("{} is not a Leasehold snapshot file", file.display());
    let mut lines = bytes.splitn(3, |b| *b == b'\n');
    if lines.next() != Some(MAGIC.as_bytes()) {
        return Err(not_one());
    }
    let header: Header = serde_json::from_slice(lines.next().ok_or_else(not_one)?)
        .map_err(|e| anyhow::anyhow!("{}: its header: {e}", file.display()))?;
    let state = lines.next().unwrap_or_default().to_vec();
    if state.len() as u64 != header.bytes || crc32fast::hash(&state) != header.crc32 {
        anyhow::bail!(
            "{} is damaged: its state has {} bytes and CRC-32 {:08x}, the header says {} and \
             {:08x}",
            file.display(),
            state.len(),
            crc32fast::hash(&state),
            header.bytes,
            header.crc32
        );
    }
    let table = crate::raft::decode_table(&state)
        .map_err(|e| anyhow::anyhow!("{}: its state does not decode: {e}", file.display()))?;
    let digest = table.digest();
    // A backup saved by an earlier build may name the digest as that build defined it.
    if digest != header.state_digest && !table.older_digests().contains(&header.state_digest) {
        anyhow::bail!(
            "{}: its state's digest is {digest:016x}, the header says {:016x}",
            file.display(),
            header.state_digest
        );
    }
    Ok((header, state))
}

async fn restore(
    file: &Path,
    data_dir: &Path,
    id: u64,
    peers: &BTreeMap<u64, String>,
    gap: u64,
) -> anyhow::Result<Exit> {
    let (header, state) = read(file)?;
    let at = SavedAt {
        log_index: header.log_index,
        term: header.term,
        leader_id: header.leader_id,
    };
    let digest = restore_data_dir(data_dir, id, peers, at, state, gap)
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    crate::node::check_clock_mode(data_dir, ClockMode::from_manual(header.manual_clock))?;
    println!(
        "restored the state at log index {} into {} for node {id}, tokens and session ids {gap} \
         on (digest {digest:016x}); start it with `leasehold serve --id {id} --data-dir {} \
         --peers ...` and the same --peers{}",
        header.log_index,
        data_dir.display(),
        data_dir.display(),
        if header.manual_clock {
            " and --manual-clock"
        } else {
            ""
        }
    );
    Ok(Exit::Ok)
}

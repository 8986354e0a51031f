//! The fault suite's deterministic layer: the nodes of one cluster in one process, on tokio's
//! paused clock, talking through a router that the test controls: seeded partitions, delays,
//! dropped messages, crashes and power losses. Time only moves when every task waits, so a
//! schedule of many virtual seconds runs in a fraction of a real one, and hundreds of seeds run
//! in CI.
//!
//! Each node is the product's `node::Node` (its leader clock stamping every write, the proposer,
//! the forwarder, the read path with its boot wait, and the expiry ticker) around openraft with
//! Leasehold's state machine. Only the transports are the test's: Raft messages and forwarded
//! write batches go through the router (a `RaftNetwork` and a `PeerLink`), and the log is kept
//! in memory (the segment-file store has its own crash tests and the real-process suite),
//! surviving a crash as a disk would. Clients record a history that the checkers judge against
//! the log, in real (here, virtual) time as well as store time; one of them checks that store
//! time never gains on the clients' clock. Besides single faults, the nemesis composes them: a
//! node cut off across the others' power loss, and a leader killed while a member's log is
//! stalled (as during a snapshot install).
//!
//! `LEASEHOLD_SIM_SEEDS=N` runs N seeds (default 200); `LEASEHOLD_SIM_SEED=S` runs only seed S.
//! A failing seed is printed, and replays: everything random follows the seed (the router's
//! choices, openraft's election timeouts through `raft::runtime`, tokio's own `select!` order
//! through its seeded runtime), and every task runs on one thread on the virtual clock,
//! snapshot files included. Add a seed to `schedules::REGRESSION_SEEDS` once its bug is fixed.
//!
//! `cargo test -p leasehold-node sim::` runs it. It lives in the node crate, so it builds the
//! node from the same parts `serve` does (`node::start`) and reaches what only the crate sees.

// A failing seed is a reproduction only if it replays, and it replays only on a runtime whose
// own draws are seeded (`Builder::rng_seed`, behind `tokio_unstable`). `.cargo/config.toml` sets
// the cfg; an explicit RUSTFLAGS replaces that setting, and then the simulation refuses to build
// rather than run unseeded.
#[cfg(not(tokio_unstable))]
compile_error!(
    "the simulation needs `--cfg tokio_unstable` (set in .cargo/config.toml; add it to an \
     explicit RUSTFLAGS)"
);

// The support, each file on the ones before it.
mod clients;
mod cluster;
mod disk;
mod peer_calls;
mod router;

// The tests.
mod elections;
mod lease_life;
mod schedules;

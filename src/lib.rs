pub mod lease;
pub mod proto;
pub mod raft;

//! The peer plane: what members say to each other. The gate that lets only members through
//! (`gate`), the Raft service members call (`raft_service`; its lanes are served by
//! `node::lanes`, which the client port's lanes share), and this node's calls to its peers over
//! gRPC (`link`: forwarded writes and reads, carried time, status; `status`: a member's own view).

pub(crate) mod gate;
pub(crate) mod link;
pub(crate) mod raft_service;
pub(crate) mod status;

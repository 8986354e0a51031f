//! The peer plane: what members say to each other outside a client's call. The gate that lets
//! only members through (`gate`), the Raft service members call (`raft_service`; its lanes are served by
//! `node::lanes`), and the calls this
//! node makes to its peers (`link`: forwarded writes and reads; `status`: a member's own view).

pub(crate) mod gate;
pub(crate) mod link;
pub(crate) mod raft_service;
pub(crate) mod status;

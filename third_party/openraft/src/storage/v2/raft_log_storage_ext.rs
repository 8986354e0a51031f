use anyerror::AnyError;
use openraft_macros::add_async_trait;

use crate::raft_state::LogIOId;
use crate::storage::LogFlushed;
use crate::storage::RaftLogStorage;
use crate::type_config::TypeConfigExt;
use crate::OptionalSend;
use crate::RaftTypeConfig;
use crate::StorageError;
use crate::StorageIOError;
use crate::Vote;

/// Extension trait for RaftLogStorage to provide utility methods.
///
/// All methods in this trait are provided with default implementation.
#[add_async_trait]
pub trait RaftLogStorageExt<C>: RaftLogStorage<C>
where C: RaftTypeConfig
{
    /// Blocking mode append log entries to the storage.
    ///
    /// It blocks until the callback is called by the underlying storage implementation.
    async fn blocking_append<I>(&mut self, entries: I) -> Result<(), StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // Leasehold patch: the callback and its wait shared with `blocking_append_awaited`.
        let (callback, saved) = awaited_callback::<C>();
        self.append(entries, callback).await?;
        saved.await
    }

    /// Leasehold patch: [`blocking_append`](Self::blocking_append) through
    /// [`append_awaited`](RaftLogStorage::append_awaited), as a follower appends.
    async fn blocking_append_awaited<I>(&mut self, entries: I) -> Result<(), StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let (callback, saved) = awaited_callback::<C>();
        self.append_awaited(entries, callback).await?;
        saved.await
    }
}

/// Leasehold patch: a callback for an append, and what waits until it is called.
fn awaited_callback<C: RaftTypeConfig>() -> (
    LogFlushed<C>,
    impl std::future::Future<Output = Result<(), StorageError<C::NodeId>>> + OptionalSend,
) {
    let (tx, rx) = C::oneshot::<Result<LogIOId<C::NodeId>, std::io::Error>>();

    // dummy log_io_id
    let log_io_id = LogIOId::<C::NodeId>::new(Vote::<C::NodeId>::default(), None);

    let saved = async move {
        rx.await
            .map_err(|e| StorageIOError::write_logs(AnyError::error(e)))?
            .map_err(|e| StorageIOError::write_logs(AnyError::error(e)))?;
        Ok(())
    };
    (LogFlushed::<C>::new(log_io_id, tx), saved)
}

impl<C, T> RaftLogStorageExt<C> for T
where
    T: RaftLogStorage<C>,
    C: RaftTypeConfig,
{
}

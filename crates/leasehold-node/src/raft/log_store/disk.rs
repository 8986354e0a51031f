//! The file-system calls the log store makes, behind a seam: the real ones in production, and in
//! tests a simulated disk that loses power (`sim_disk`). Each method is one system call (two for
//! `sync_dir`: open the directory, fsync it) so that the store costs what it did before the seam,
//! and so that a test can crash the store at every call.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use crate::raft::descriptors::retrying;

/// How to open a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Open {
    /// It must exist; keep its bytes.
    Existing,
    /// Create it if missing, and empty it.
    Truncated,
}

pub(super) trait Disk: Send + Sync {
    /// Creates `dir` and any missing parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Makes the directory's entries (files created, renamed, removed) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// The names of the entries of `dir`.
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    fn open(&self, path: &Path, how: Open) -> io::Result<Arc<dyn DiskFile>>;
    /// Replaces `to` with `from`, atomically; both in one directory.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
}

/// An open file, read and written at offsets.
pub(super) trait DiskFile: Send + Sync {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Allocates the file's blocks up to `len`, growing it with zeros if it is shorter
    /// (`fallocate`; nothing where the platform has none). A write into allocated blocks
    /// changes no length, so its `fdatasync` need not write the file's length with the data.
    fn allocate(&self, len: u64) -> io::Result<()>;
    /// Makes the bytes and the length durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// Makes the bytes and all metadata durable (`fsync`).
    fn sync_all(&self) -> io::Result<()>;
}

/// `Spared(disk)`: `disk`, with every call that opens a descriptor tried again while the
/// process is short of them (`raft::descriptors`), so that a passing `EMFILE` never becomes
/// the storage error that stops openraft. The log store wraps whatever disk it is given.
pub(super) struct Spared(pub Arc<dyn Disk>);

impl Disk for Spared {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.0.create_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        retrying(&dir.display(), || self.0.sync_dir(dir))
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        retrying(&dir.display(), || self.0.read_dir(dir))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        retrying(&path.display(), || self.0.read(path))
    }

    fn open(&self, path: &Path, how: Open) -> io::Result<Arc<dyn DiskFile>> {
        retrying(&path.display(), || self.0.open(path, how))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.0.rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.0.remove_file(path)
    }
}

/// The real file system.
pub(super) struct StdDisk;

impl Disk for StdDisk {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            // A name that is not UTF-8 is nothing the store wrote.
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn open(&self, path: &Path, how: Open) -> io::Result<Arc<dyn DiskFile>> {
        let truncated = how == Open::Truncated;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(truncated)
            .truncate(truncated)
            .open(path)?;
        Ok(Arc::new(file))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
}

impl DiskFile for File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }

    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        FileExt::write_all_at(self, bytes, offset)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }

    #[cfg(target_os = "linux")]
    fn allocate(&self, len: u64) -> io::Result<()> {
        match rustix::fs::fallocate(self, rustix::fs::FallocateFlags::empty(), 0, len) {
            // A file system without it (some network ones) only loses the speed.
            Err(rustix::io::Errno::OPNOTSUPP) => Ok(()),
            result => Ok(result?),
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn allocate(&self, _len: u64) -> io::Result<()> {
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        File::sync_data(self)
    }

    fn sync_all(&self) -> io::Result<()> {
        File::sync_all(self)
    }
}

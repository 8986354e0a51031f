//! A disk in memory that loses power: what it keeps of the writes and directory changes not yet
//! synced is what a real disk may keep, and the tests of the log store crash it at every call.
//!
//! Every file keeps its durable bytes apart from the writes and length changes made since its
//! last sync; every directory keeps its durable entries apart from the creations, renames and
//! removals made since its last sync. A power loss keeps the durable state and, of the rest:
//! - of each file's unsynced changes, those before some point in their order, and of the change
//!   at that point, if a write, a prefix of its bytes, then perhaps garbage to the end of the
//!   4 KiB block being written, then perhaps zeros to the end of the write (the length reached
//!   the disk, the blocks did not);
//! - of each directory's unsynced changes, any subset (each rename is atomic): a file system
//!   may make unsynced directory changes durable in any order.
//!
//! Not modelled: losing a directory's own creation (`create_dir_all` is durable at once; the
//! store syncs the parent anyway), the later blocks of a write reaching the disk without the
//! earlier ones, writes to the wrong place, and bits that rot at rest.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use leasehold_check::Rng;

use super::disk::{Disk, DiskFile, Open};

const BLOCK_BYTES: u64 = 4096;

#[derive(Clone)]
pub(super) struct SimDisk {
    world: Arc<Mutex<World>>,
}

#[derive(Clone, Default)]
struct World {
    dirs: BTreeMap<PathBuf, Dir>,
    files: Vec<SimFileState>,
    /// File-system calls made since the count was last reset.
    calls: u64,
    /// The call during which the power goes: it takes effect, then it and every later call
    /// fail.
    power_off_at: Option<u64>,
    powered_off: bool,
}

#[derive(Clone, Default)]
struct Dir {
    durable: BTreeMap<String, usize>,
    live: BTreeMap<String, usize>,
    unsynced: Vec<DirChange>,
}

#[derive(Clone)]
enum DirChange {
    Link(String, usize),
    Unlink(String),
    /// Atomic: `to` names the file, and `from` no longer does.
    Rename {
        from: String,
        to: String,
        file: usize,
    },
}

#[derive(Clone, Default)]
struct SimFileState {
    durable: Vec<u8>,
    live: Vec<u8>,
    unsynced: Vec<FileChange>,
}

#[derive(Clone)]
enum FileChange {
    Write { at: u64, bytes: Vec<u8> },
    SetLen(u64),
}

/// What a power loss keeps of the unsynced changes.
#[derive(Clone, Copy, Debug)]
pub(super) enum Keep {
    /// Nothing.
    Nothing,
    /// Everything, as if the process alone had died.
    Everything,
    /// A choice drawn from this seed.
    Seeded(u64),
}

fn split(path: &Path) -> (PathBuf, String) {
    let dir = path.parent().unwrap_or(Path::new("")).to_owned();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    (dir, name)
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file", path.display()),
    )
}

fn apply_file(bytes: &mut Vec<u8>, change: &FileChange) {
    match change {
        FileChange::Write { at, bytes: data } => {
            let end = *at as usize + data.len();
            if bytes.len() < end {
                bytes.resize(end, 0);
            }
            bytes[*at as usize..end].copy_from_slice(data);
        }
        FileChange::SetLen(len) => bytes.resize(*len as usize, 0),
    }
}

fn apply_dir(entries: &mut BTreeMap<String, usize>, change: &DirChange) {
    match change {
        DirChange::Link(name, file) => {
            entries.insert(name.clone(), *file);
        }
        DirChange::Unlink(name) => {
            entries.remove(name);
        }
        DirChange::Rename { from, to, file } => {
            entries.insert(to.clone(), *file);
            if entries.get(from) == Some(file) {
                entries.remove(from);
            }
        }
    }
}

impl SimFileState {
    /// What a power loss keeps of this file.
    fn survivor(&self, keep: Keep, rng: &mut Rng) -> Vec<u8> {
        let mut bytes = self.durable.clone();
        let kept = match keep {
            Keep::Nothing => 0,
            Keep::Everything => self.unsynced.len(),
            Keep::Seeded(_) => rng.below(self.unsynced.len() as u64 + 1) as usize,
        };
        for change in &self.unsynced[..kept] {
            apply_file(&mut bytes, change);
        }
        let (Keep::Seeded(_), Some(FileChange::Write { at, bytes: data })) =
            (keep, self.unsynced.get(kept))
        else {
            return bytes;
        };
        // The write the power cut: a prefix of it, then garbage in the block it was in, then
        // zeros where the file grew but no block came.
        let end = at + data.len() as u64;
        let cut = at + rng.below(data.len() as u64 + 1);
        let mut torn = data[..(cut - at) as usize].to_vec();
        if rng.coin() {
            let block_end = (cut / BLOCK_BYTES + 1) * BLOCK_BYTES;
            let garbage = block_end.min(end) - cut;
            torn.extend((0..garbage).map(|_| rng.bits() as u8));
        }
        if rng.coin() {
            torn.resize(data.len(), 0);
        }
        apply_file(
            &mut bytes,
            &FileChange::Write {
                at: *at,
                bytes: torn,
            },
        );
        bytes
    }
}

impl SimDisk {
    pub(super) fn new() -> Self {
        SimDisk {
            world: Arc::new(Mutex::new(World::default())),
        }
    }

    fn world(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts calls from zero again; the power goes during call `at` (counted from zero), if
    /// given.
    pub(super) fn reset_calls(&self, power_off_at: Option<u64>) {
        let mut world = self.world();
        world.calls = 0;
        world.power_off_at = power_off_at;
    }

    pub(super) fn calls(&self) -> u64 {
        self.world().calls
    }

    /// The disk as it comes back after the power went now: the durable state and what `keep`
    /// says of the rest. This disk is left as it was.
    pub(super) fn after_power_loss(&self, keep: Keep) -> SimDisk {
        let world = self.world();
        let mut rng = Rng(match keep {
            Keep::Seeded(seed) => seed,
            _ => 0,
        });
        let files = world
            .files
            .iter()
            .map(|file| {
                let bytes = file.survivor(keep, &mut rng);
                SimFileState {
                    durable: bytes.clone(),
                    live: bytes,
                    unsynced: Vec::new(),
                }
            })
            .collect();
        let dirs = world
            .dirs
            .iter()
            .map(|(path, dir)| {
                let mut entries = dir.durable.clone();
                for change in &dir.unsynced {
                    let kept = match keep {
                        Keep::Nothing => false,
                        Keep::Everything => true,
                        Keep::Seeded(_) => rng.coin(),
                    };
                    if kept {
                        apply_dir(&mut entries, change);
                    }
                }
                let dir = Dir {
                    durable: entries.clone(),
                    live: entries,
                    unsynced: Vec::new(),
                };
                (path.clone(), dir)
            })
            .collect();
        SimDisk {
            world: Arc::new(Mutex::new(World {
                dirs,
                files,
                ..World::default()
            })),
        }
    }
}

impl World {
    /// Counts a call and tells whether it runs; the caller fails it after its effect if the
    /// power went during it.
    fn call(&mut self) -> io::Result<()> {
        if self.powered_off {
            return Err(io::Error::other("the power is off"));
        }
        if self.power_off_at == Some(self.calls) {
            self.powered_off = true;
        }
        self.calls += 1;
        Ok(())
    }

    /// The call's result: what it returned, unless the power went during it.
    fn finish<T>(&self, result: io::Result<T>) -> io::Result<T> {
        if self.powered_off {
            return Err(io::Error::other("the power went during the call"));
        }
        result
    }

    fn dir(&mut self, dir: &Path) -> io::Result<&mut Dir> {
        self.dirs.get_mut(dir).ok_or_else(|| not_found(dir))
    }

    fn lookup(&mut self, path: &Path) -> io::Result<usize> {
        let (dir, name) = split(path);
        self.dir(&dir)?
            .live
            .get(&name)
            .copied()
            .ok_or_else(|| not_found(path))
    }

    fn change_dir(&mut self, dir: &Path, change: DirChange) -> io::Result<()> {
        let dir = self.dir(dir)?;
        apply_dir(&mut dir.live, &change);
        dir.unsynced.push(change);
        Ok(())
    }

    fn change_file(&mut self, file: usize, change: FileChange) {
        let file = &mut self.files[file];
        apply_file(&mut file.live, &change);
        file.unsynced.push(change);
    }

    fn sync_file(&mut self, file: usize) {
        let file = &mut self.files[file];
        file.durable = file.live.clone();
        file.unsynced.clear();
    }
}

impl Disk for SimDisk {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut world = self.world();
        world.call()?;
        for dir in dir.ancestors() {
            world.dirs.entry(dir.to_owned()).or_default();
        }
        world.finish(Ok(()))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut world = self.world();
        world.call()?;
        let result = world.dir(dir).map(|dir| {
            dir.durable = dir.live.clone();
            dir.unsynced.clear();
        });
        world.finish(result)
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut world = self.world();
        world.call()?;
        let names = world.dir(dir).map(|d| d.live.keys().cloned().collect());
        world.finish(names)
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut world = self.world();
        world.call()?;
        let bytes = world
            .lookup(path)
            .map(|file| world.files[file].live.clone());
        world.finish(bytes)
    }

    fn open(&self, path: &Path, how: Open) -> io::Result<Arc<dyn DiskFile>> {
        let mut world = self.world();
        world.call()?;
        let file = match (world.lookup(path), how) {
            (Ok(file), Open::Existing) => Ok(file),
            (Ok(file), Open::Truncated) => {
                world.change_file(file, FileChange::SetLen(0));
                Ok(file)
            }
            (Err(e), Open::Existing) => Err(e),
            (Err(_), Open::Truncated) => {
                let file = world.files.len();
                world.files.push(SimFileState::default());
                let (dir, name) = split(path);
                world
                    .change_dir(&dir, DirChange::Link(name, file))
                    .map(|()| file)
            }
        };
        let file = world.finish(file)?;
        Ok(Arc::new(SimFile {
            world: self.world.clone(),
            file,
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut world = self.world();
        world.call()?;
        let (dir, from_name) = split(from);
        let (to_dir, to_name) = split(to);
        assert_eq!(dir, to_dir, "the store renames within its directory");
        let result = world.lookup(from).and_then(|file| {
            let change = DirChange::Rename {
                from: from_name,
                to: to_name,
                file,
            };
            world.change_dir(&dir, change)
        });
        world.finish(result)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut world = self.world();
        world.call()?;
        let (dir, name) = split(path);
        let result = world
            .lookup(path)
            .and_then(|_| world.change_dir(&dir, DirChange::Unlink(name)));
        world.finish(result)
    }
}

struct SimFile {
    world: Arc<Mutex<World>>,
    file: usize,
}

impl SimFile {
    fn world(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl DiskFile for SimFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut world = self.world();
        world.call()?;
        let bytes = &world.files[self.file].live;
        let result = match bytes.get(offset as usize..offset as usize + buf.len()) {
            Some(read) => {
                buf.copy_from_slice(read);
                Ok(())
            }
            None => Err(io::ErrorKind::UnexpectedEof.into()),
        };
        world.finish(result)
    }

    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        let mut world = self.world();
        world.call()?;
        let change = FileChange::Write {
            at: offset,
            bytes: bytes.to_vec(),
        };
        world.change_file(self.file, change);
        world.finish(Ok(()))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut world = self.world();
        world.call()?;
        world.change_file(self.file, FileChange::SetLen(len));
        world.finish(Ok(()))
    }

    /// A length change, as `fallocate` is to the file system: the blocks it allocates read as
    /// zeros, and a power loss may keep the new length or not until the next sync.
    fn allocate(&self, len: u64) -> io::Result<()> {
        let mut world = self.world();
        world.call()?;
        if (world.files[self.file].live.len() as u64) < len {
            world.change_file(self.file, FileChange::SetLen(len));
        }
        world.finish(Ok(()))
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut world = self.world();
        world.call()?;
        world.sync_file(self.file);
        world.finish(Ok(()))
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(disk: &SimDisk, path: &str) -> io::Result<Vec<u8>> {
        disk.read(Path::new(path))
    }

    #[test]
    fn only_what_was_synced_is_sure_to_survive() {
        let disk = SimDisk::new();
        disk.create_dir_all(Path::new("/d")).unwrap();
        let a = disk.open(Path::new("/d/a"), Open::Truncated).unwrap();
        a.write_all_at(b"synced", 0).unwrap();
        a.sync_data().unwrap();
        disk.sync_dir(Path::new("/d")).unwrap();
        a.write_all_at(b" and not", 6).unwrap();
        let b = disk.open(Path::new("/d/b"), Open::Truncated).unwrap();
        b.write_all_at(b"b", 0).unwrap();
        b.sync_data().unwrap();

        let after = disk.after_power_loss(Keep::Nothing);
        assert_eq!(read(&after, "/d/a").unwrap(), b"synced");
        assert!(
            read(&after, "/d/b").is_err(),
            "its directory entry was never synced"
        );
        let after = disk.after_power_loss(Keep::Everything);
        assert_eq!(read(&after, "/d/a").unwrap(), b"synced and not");
        assert_eq!(read(&after, "/d/b").unwrap(), b"b");
        for seed in 0..200 {
            let after = disk.after_power_loss(Keep::Seeded(seed));
            let a = read(&after, "/d/a").unwrap();
            assert!(a.starts_with(b"synced") && a.len() <= 14, "{a:?}");
        }
    }

    #[test]
    fn the_power_goes_during_the_chosen_call_and_everything_after_fails() {
        let disk = SimDisk::new();
        disk.create_dir_all(Path::new("/d")).unwrap();
        let a = disk.open(Path::new("/d/a"), Open::Truncated).unwrap();
        disk.reset_calls(Some(1));
        a.write_all_at(b"one", 0).unwrap();
        assert!(a.sync_data().is_err(), "the power went during it");
        assert!(a.write_all_at(b"two", 3).is_err());
        assert_eq!(disk.calls(), 2, "a call after the power went is never made");
        // The sync took effect before the power went; the directory entry was never synced.
        let world = disk.world();
        assert_eq!(world.files[0].durable, b"one");
        assert!(world.dirs[Path::new("/d")].durable.is_empty());
    }
}

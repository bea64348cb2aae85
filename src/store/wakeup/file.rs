//! SQLite's side lock: an exclusive `flock` on a file beside the database.

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::path::PathBuf;
use tokio::sync::oneshot;

use super::side_lock::SideLock;

/// An exclusive `flock` on a file beside the SQLite database. A blocking wait runs on a
/// thread of its own; one that is given up on lets go of the lock as soon as it gets it.
pub(super) struct FileLock {
    pub(super) path: PathBuf,
    pub(super) held: Option<Flock<File>>,
}

impl FileLock {
    fn open(&self) -> Result<File, String> {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.path)
            .map_err(|error| format!("cannot open {}: {error}", self.path.display()))
    }
}

impl SideLock for FileLock {
    async fn try_take(&mut self) -> Result<bool, String> {
        if self.held.is_some() {
            return Ok(true);
        }
        match Flock::lock(self.open()?, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => {
                self.held = Some(locked);
                Ok(true)
            }
            Err((_, Errno::EWOULDBLOCK)) => Ok(false),
            Err((_, errno)) => Err(format!("flock {}: {errno}", self.path.display())),
        }
    }

    async fn take(&mut self) -> Result<bool, String> {
        if self.held.is_some() {
            return Ok(true);
        }
        let file = self.open()?;
        let (sender, taken) = oneshot::channel();
        // Not tokio's blocking pool: a wait may outlive the runtime's shutdown.
        std::thread::Builder::new()
            .name("leaderd-wake".to_owned())
            .spawn(move || {
                // Dropped (and so let go of) if nobody waits any more.
                let _ = sender.send(Flock::lock(file, FlockArg::LockExclusive));
            })
            .map_err(|error| format!("cannot start a thread: {error}"))?;
        match taken.await {
            Ok(Ok(locked)) => {
                self.held = Some(locked);
                Ok(true)
            }
            Ok(Err((_, errno))) => Err(format!("flock {}: {errno}", self.path.display())),
            Err(_) => Err("the waiting thread ended".to_owned()),
        }
    }

    async fn give_back(&mut self) -> Result<(), String> {
        self.held = None;
        Ok(())
    }

    async fn ping(&mut self) -> Result<(), String> {
        Ok(())
    }

    fn reset(&mut self) {
        self.held = None;
    }

    async fn unshared(&mut self) -> Result<Option<String>, String> {
        Ok(None)
    }

    fn kind(&self) -> &'static str {
        "a flock beside the database file"
    }
}

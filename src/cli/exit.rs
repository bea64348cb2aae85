//! The exit status of each outcome, one constant each (sysexits.h where it has one).

/// Configuration errors (sysexits.h EX_CONFIG).
pub const EXIT_CONFIG: u8 = 78;
/// A file or socket leaderd must make cannot be (sysexits.h EX_CANTCREAT): `run`,
/// `check-config`: the status file's directory takes no file, or http.listen's address
/// cannot be bound; `lock --metrics-file` in a directory that is not there.
pub const EXIT_CANT_CREATE: u8 = 73;
/// The database could not be reached or used (sysexits.h EX_UNAVAILABLE).
pub const EXIT_UNAVAILABLE: u8 = 69;
/// `lock`: someone else holds the lock (sysexits.h EX_TEMPFAIL: try again later).
pub const EXIT_LOCK_HELD: u8 = 75;
/// `lock`: the lock was lost while the command ran, and the command was stopped.
pub const EXIT_LOCK_LOST: u8 = 76;
/// `status --local`: this node follows a live leader (or no leader, as far as it knows).
pub const EXIT_FOLLOWER: u8 = 1;
/// `status --local`: no valid status: unknown role, a stale or missing file.
pub const EXIT_STATUS_UNKNOWN: u8 = 3;
/// `lock --hold-at-most`: COMMAND ran too long and was stopped (as timeout(1) exits).
pub const EXIT_TIMED_OUT: u8 = 124;
/// `lock`: an invalid lock name (a usage error, as clap reports its own).
pub const EXIT_USAGE: u8 = 2;

//! Tests that mount, and tests that make mount namespaces, must not
//! overlap: a new mount namespace copies every mount present when it is
//! made, so a tmpfs a holders test mounted on its stage, copied into
//! another test's namespace (`unshare --mount`, `--mount-proc`, bwrap, a
//! thread's `unshare(CLONE_NEWNS)`), outlives its own unmount there, and
//! the holders test then sees its stage still held (as it is: the scan is
//! right, the tests must not overlap). In one test binary every file's
//! tests run beside every other's, so the lock is shared here.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static MOUNTS: RwLock<()> = RwLock::new(());

/// Held while a test makes a mount in the shared namespace and checks
/// what holds it: no new mount namespace is made meanwhile.
pub fn mounting() -> RwLockWriteGuard<'static, ()> {
    MOUNTS.write().unwrap_or_else(|e| e.into_inner())
}

/// Held while a test's mount namespace lives (several may at once).
pub fn new_namespace() -> RwLockReadGuard<'static, ()> {
    MOUNTS.read().unwrap_or_else(|e| e.into_inner())
}

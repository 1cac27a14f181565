//! Tests that mount, and tests that make mount namespaces, must not
//! overlap: a new mount namespace copies every mount present when it is
//! made, so a tmpfs a holders test mounted on its stage, copied into
//! another test's namespace (`unshare --mount`, `--mount-proc`, bwrap, a
//! thread's `unshare(CLONE_NEWNS)`), outlives its own unmount there, and
//! the holders test then sees its stage still held (as it is: the scan is
//! right, the tests must not overlap). In one test binary every file's
//! tests run beside every other's, so the lock is shared here.

use std::ffi::CString;
use std::path::Path;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::harness::{pid_ns_required, skip_outside_pid_ns, uid};

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

/// Gives this test's thread (and every process it starts from now on) a
/// mount namespace of its own, every mount private in it, for a FUSE
/// mount (`stuck.rs`, `fuse.rs`). Returns the lock that keeps tests that
/// mount in the shared namespace from running meanwhile
/// ([`new_namespace`]), or `None` when this is not root in a private PID
/// namespace with `/dev/fuse` (the test then skips).
pub fn private_mount_ns(what: &str) -> Option<RwLockReadGuard<'static, ()>> {
    if skip_outside_pid_ns(what) {
        return None;
    }
    if uid() != 0 || !Path::new("/dev/fuse").exists() {
        assert!(
            !pid_ns_required() || uid() != 0,
            "{what}: root without /dev/fuse (modprobe fuse, or mknod /dev/fuse c 10 229)"
        );
        eprintln!("SKIPPED {what}: needs root and /dev/fuse");
        return None;
    }
    let ns = new_namespace();
    // SAFETY: unshare(CLONE_NEWNS) gives this thread its own mount
    // namespace (and fs_struct); other threads are not affected.
    assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNS) }, 0, "unshare");
    let root = CString::new("/").unwrap();
    // SAFETY: valid C strings; every mount made private in the new
    // namespace, so nothing propagates out of it.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "mount --make-rprivate /");
    Some(ns)
}

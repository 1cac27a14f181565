//! Loop devices whose backing file is a tree entry.
//!
//! A bound loop device has `/sys/block/loopN/loop/backing_file`. Its backing
//! inode is asked of the device itself (`LOOP_GET_STATUS64`: `lo_device`,
//! `lo_inode`), so a backing file renamed since it was bound still matches;
//! where `/dev/loopN` cannot be opened, the backing file named in sysfs is
//! `statx`ed instead (and the device named as unreadable when that fails).

use std::ffi::CString;
use std::os::fd::AsRawFd;

use super::statx;
use super::tree::Tree;
use super::{bounded, LoopHold, Unreadable};

const LOOP_GET_STATUS64: libc::c_ulong = 0x4C05;

/// `struct loop_info64` (linux/loop.h).
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// The kernel's `huge_encode_dev` as `makedev`.
fn decode_dev(d: u64) -> u64 {
    let major = ((d & 0xfff00) >> 8) as u32;
    let minor = ((d & 0xff) | ((d >> 12) & 0xfff00)) as u32;
    libc::makedev(major, minor)
}

/// `(dev, ino)` of the backing file, asked of the device.
fn backing_of(device: &str) -> std::io::Result<(u64, u64)> {
    let f = std::fs::File::open(format!("/dev/{device}"))?;
    // SAFETY: loop_info64 is plain data, all zeroes valid.
    let mut info: LoopInfo64 = unsafe { std::mem::zeroed() };
    // SAFETY: f is an open loop device; the ioctl writes one loop_info64
    // into `info`, which lives for the call.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), LOOP_GET_STATUS64, &mut info) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((decode_dev(info.lo_device), info.lo_inode))
}

/// Every bound loop device backed by a tree entry, and those not readable.
pub fn holds(tree: &Tree) -> (Vec<LoopHold>, Vec<Unreadable>) {
    let (mut out, mut unreadable) = (Vec::new(), Vec::new());
    let dir = match std::fs::read_dir("/sys/block") {
        Ok(d) => d,
        // No sysfs here: loop devices cannot be listed; say so.
        Err(e) => {
            unreadable.push(Unreadable {
                pid: 0,
                what: "/sys/block".to_string(),
                error: e.to_string(),
            });
            return (out, unreadable);
        }
    };
    let mut names: Vec<String> = dir
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("loop"))
        .collect();
    names.sort();
    for name in names {
        let Ok(file) = std::fs::read(format!("/sys/block/{name}/loop/backing_file")) else {
            continue; // not bound
        };
        let file = file.strip_suffix(b"\n").unwrap_or(&file).to_vec();
        let key = match backing_of(&name) {
            Ok(k) => Some(k),
            Err(_) => CString::new(file.strip_suffix(b" (deleted)").unwrap_or(&file))
                .ok()
                .and_then(|c| statx::path(&c, false).ok())
                .map(|st| st.key()),
        };
        let Some(key) = key else {
            unreadable.push(Unreadable {
                pid: 0,
                what: name.clone(),
                error: "neither the device nor its backing file could be read".to_string(),
            });
            continue;
        };
        let found = match tree.root_of(key) {
            Some(root) => Some((root, false)),
            None if tree.devs.contains(&key.0) => tree.unlinked_in(&file).map(|r| (r, true)),
            None => None,
        };
        let Some((root, deleted)) = found else {
            continue;
        };
        out.push(LoopHold {
            root,
            device: name,
            backing_file: bounded(&file),
            deleted,
        });
    }
    (out, unreadable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_device_encoding_decodes() {
        assert_eq!(decode_dev(0xfd01), libc::makedev(0xfd, 1));
        assert_eq!(
            decode_dev((7 << 8) | 0x12 | (0x345 << 20)),
            libc::makedev(7, 0x34512)
        );
        assert_eq!(std::mem::size_of::<LoopInfo64>(), 232);
    }
}

//! A log read in passes through the one descriptor [`open_log`] gave, and
//! never by its path again: verify's pass and each pass that shows what
//! verify judged (`rea-audit report`'s drawings and table, `rea-audit
//! show`'s lines) read it from its start, and each hashes and counts every
//! byte it reads. What is shown is trusted only when every pass read the
//! very bytes verify judged (the same SHA-256 of the whole stream, the same
//! length), the file's state did not change from the open to the last
//! check (fstat: device, inode, size, mtime) and the path still
//! names that file. An edit in place, an append to a finished log, a file
//! renamed over the path: each is caught, between passes or during one
//! ([`Log::changed`]), and the caller says the log changed (exit status 3).
//!
//! A log its watchdog is still writing grows while it is read, and that
//! is no change to what is shown: every pass after verify's reads exactly
//! the bytes verify's read (no more), and when verify found the log
//! unfinished (`incomplete`: no receipt yet, or a record half written), a
//! file that only grew past them is still the one verify judged
//! ([`Log::grew`] says by how much, for the caller to say so). A finished
//! log never grows: for it, growth is a change.

use std::fs::{File, Metadata};
use std::io::{self, Read, Seek};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::audit::reader::{open_log, OpenError};
use crate::log::writer::MAX_LINE;

/// What one pass read: its length, its lines, the SHA-256 of it all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pass {
    pub bytes: u64,
    pub newlines: u64,
    digest: [u8; 32],
}

/// The log's bytes as a pass reads them, hashed and counted on the way.
pub struct Tee<'a> {
    f: &'a File,
    /// Bytes this pass may still read (`None`: up to the end of the file).
    left: Option<u64>,
    hash: Sha256,
    bytes: u64,
    newlines: u64,
    failed: Option<io::Error>,
}

impl Read for Tee<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = match self.left {
            Some(left) => buf.len().min(usize::try_from(left).unwrap_or(usize::MAX)),
            None => buf.len(),
        };
        match self.f.read(&mut buf[..want]) {
            Ok(n) => {
                let got = &buf[..n];
                self.hash.update(got);
                self.bytes += n as u64;
                if let Some(left) = &mut self.left {
                    *left -= n as u64;
                }
                self.newlines += got.iter().filter(|&&b| b == b'\n').count() as u64;
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
            Err(e) => {
                self.failed = Some(io::Error::new(e.kind(), e.to_string()));
                Err(e)
            }
        }
    }
}

/// The file's state that any write or replacement changes. Not its
/// ctime: a hard link, a chmod or a chown (a backup tool's, an operator's)
/// moves it with the bytes unchanged, and the passes' digests already
/// prove what each read. A write whose mtime was set back is caught by a
/// later pass reading other bytes; after the last pass it no longer
/// touches what was shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
}

impl Stamp {
    fn of(m: &Metadata) -> Stamp {
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
        }
    }
}

/// The open log and what its passes read.
pub struct Log {
    f: File,
    path: PathBuf,
    meta: Metadata,
    opened: Stamp,
    first: Option<Pass>,
    /// The first difference found between passes.
    differs: Option<String>,
}

impl Log {
    /// Opens the log the one way every command reads one (`O_NONBLOCK`, a
    /// regular file or nothing).
    pub fn open(path: &Path) -> Result<Log, OpenError> {
        let f = open_log(path)?;
        let meta = f.metadata().map_err(OpenError::Io)?;
        Ok(Log {
            f,
            path: path.to_path_buf(),
            opened: Stamp::of(&meta),
            meta,
            first: None,
            differs: None,
        })
    }

    /// The file's metadata at the open.
    pub fn meta(&self) -> &Metadata {
        &self.meta
    }

    /// The log's first bytes, up to the line cap and one more (enough to
    /// hold its first line), read without moving the descriptor.
    pub fn start(&self) -> io::Result<Vec<u8>> {
        let mut out = vec![0u8; MAX_LINE + 1];
        let mut got = 0;
        while got < out.len() {
            match self.f.read_at(&mut out[got..], got as u64) {
                Ok(0) => break,
                Ok(n) => {
                    got += n;
                    if out[got - n..got].contains(&b'\n') {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        out.truncate(got);
        Ok(out)
    }

    /// One pass over the log from its start: the first (verify's) to the
    /// end of the file, each later one over the bytes the first read and
    /// no more (so that a log still being written reads the same in every
    /// pass). `read` reads from the reader it is given (what it leaves
    /// unread is read here, so that the pass covers every byte). `Err` is
    /// an error reading the log; `read`'s own result is returned as it is.
    pub fn pass<T>(&mut self, read: impl FnOnce(&mut Tee<'_>) -> T) -> io::Result<T> {
        if self.first.is_some() {
            (&self.f).rewind()?;
        }
        let mut tee = Tee {
            f: &self.f,
            left: self.first.as_ref().map(|p| p.bytes),
            hash: Sha256::new(),
            bytes: 0,
            newlines: 0,
            failed: None,
        };
        let out = read(&mut tee);
        if let Some(e) = tee.failed.take() {
            return Err(e);
        }
        io::copy(&mut tee, &mut io::sink())?;
        let pass = Pass {
            bytes: tee.bytes,
            newlines: tee.newlines,
            digest: tee.hash.finalize().into(),
        };
        match &self.first {
            None => self.first = Some(pass),
            Some(first) if self.differs.is_none() && *first != pass => {
                self.differs = Some(if first.bytes != pass.bytes {
                    format!(
                        "verify read {} bytes, a later reading {}",
                        first.bytes, pass.bytes
                    )
                } else {
                    format!(
                        "verify read {} bytes, a later reading the same number of other bytes",
                        first.bytes
                    )
                });
            }
            Some(_) => {}
        }
        Ok(out)
    }

    /// What the first pass (verify's) read.
    pub fn first(&self) -> Option<&Pass> {
        self.first.as_ref()
    }

    /// Why what the passes read cannot be taken for one state of the log:
    /// they differ, or the file changed (or its path now names another
    /// file) since the open. `still_written`: verify found the log
    /// unfinished (its exit status 2), so a file that only grew past the
    /// bytes verify read is its writer appending, not a change. `None`:
    /// every pass read the same bytes, and the file is as it was (or, still
    /// written, it only grew: [`Log::grew`]).
    pub fn changed(&self, still_written: bool) -> Option<String> {
        if let Some(why) = &self.differs {
            return Some(why.clone());
        }
        let now = match self.f.metadata() {
            Ok(m) => Stamp::of(&m),
            Err(e) => return Some(format!("it could not be looked at again: {e}")),
        };
        let judged = self.first.as_ref().map_or(self.opened.size, |p| p.bytes);
        let grew_only = still_written
            && (now.dev, now.ino) == (self.opened.dev, self.opened.ino)
            && now.size >= judged
            && judged >= self.opened.size;
        if now != self.opened && !grew_only {
            return Some(if now.size != self.opened.size {
                format!(
                    "its size went from {} to {} bytes",
                    self.opened.size, now.size
                )
            } else {
                "it was written to (its modification time moved)".into()
            });
        }
        match std::fs::metadata(&self.path) {
            Ok(m) if m.dev() == now.dev && m.ino() == now.ino => None,
            Ok(_) => Some("its path now names another file".into()),
            Err(e) => Some(format!("its path no longer leads to it: {e}")),
        }
    }

    /// The log grew past what verify read: `(judged, now)`, the bytes
    /// verify read and the file's size now. Only meaningful where
    /// [`Log::changed`] said `None` for a log still written; `None` when
    /// it did not grow (or cannot be looked at).
    fn grew(&self) -> Option<(u64, u64)> {
        let judged = self.first.as_ref()?.bytes;
        let now = self.f.metadata().ok()?.len();
        (now > judged).then_some((judged, now))
    }

    /// [`Log::changed`] and [`Log::grew`] looked at together, once: what
    /// the caller says at the end of its reading.
    pub fn ending(&self, still_written: bool) -> Ending {
        match (self.changed(still_written), self.grew()) {
            (Some(why), _) => Ending::Changed(why),
            (None, Some((judged, now))) => Ending::Grew { judged, now },
            (None, None) => Ending::Still,
        }
    }
}

/// How a reading ended (see [`Log::ending`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Every pass read the bytes verify judged; the file is as it was.
    Still,
    /// The same, for a log still being written that grew from `judged`
    /// bytes (what verify read, and all that was shown) to `now`.
    Grew { judged: u64, now: u64 },
    /// What was shown cannot be taken for what verify judged: why.
    Changed(String),
}

//! The staging directory as the run left it: the inventory the watchdog
//! recorded (`staging_inventoried`: identity, entries, bytes, digest, the
//! sockets, FIFOs and devices named), the receipt's copy of it (what
//! `verify --staging` compares), the private temp root's inventory and
//! removal, and the holder scan at close, when recorded.

use std::fmt::Write as _;

use super::html::{row, text};
use crate::audit::people::cut;
use crate::kinds::watchdog::{
    Event, HoldersScanned, Receipt, StagingInventoried, TempEntry, TempRootInventoried,
    TempRootRemoved,
};

/// Entries of a listing shown (the record keeps at most its own few).
const LISTED: usize = 64;

#[derive(Default)]
pub struct Staging {
    inventoried: Option<StagingInventoried>,
    receipt: Option<StagingInventoried>,
    sealed: bool,
    temp: Option<TempRootInventoried>,
    temp_removed: Option<TempRootRemoved>,
    holders: Option<HoldersScanned>,
}

fn entries(out: &mut String, es: &[TempEntry], truncated: bool) {
    if es.is_empty() {
        return;
    }
    out.push_str("<ul class=\"entries\">\n");
    for e in es.iter().take(LISTED) {
        let _ = writeln!(
            out,
            "<li><code>{}</code> {} ({} bytes)</li>",
            text(&cut(&e.path, 300)),
            text(&e.kind),
            e.size
        );
    }
    if truncated || es.len() > LISTED {
        out.push_str("<li class=\"note\">... more (the inventory's digest covers them all)</li>\n");
    }
    out.push_str("</ul>\n");
}

fn inventory(out: &mut String, s: &StagingInventoried) {
    out.push_str("<table class=\"facts\">\n");
    let id = &s.identity;
    row(out, "path", &format!("<code>{}</code>", text(&id.path)));
    row(
        out,
        "identity",
        &format!(
            "dev {}, inode {}, uid {}, mode {:04o}",
            id.dev,
            id.ino,
            id.uid,
            id.mode & 0o7777
        ),
    );
    row(
        out,
        "inventory",
        &format!(
            "{} entries, {} bytes",
            s.inventory.entries, s.inventory.bytes
        ),
    );
    row(
        out,
        "digest",
        &format!("<code>{}</code>", text(&s.inventory.digest)),
    );
    out.push_str("</table>\n");
    if !s.special.is_empty() {
        out.push_str("<p>Sockets, FIFOs, devices and mount points in the stage:</p>\n");
        entries(out, &s.special, s.special_truncated);
    }
}

impl Staging {
    pub fn note(&mut self, ev: &Event) {
        match ev {
            Event::StagingInventoried(s) if self.inventoried.is_none() => {
                self.inventoried = Some(s.clone())
            }
            Event::TempRootInventoried(t) if self.temp.is_none() => self.temp = Some(t.clone()),
            Event::TempRootRemoved(t) if self.temp_removed.is_none() => {
                self.temp_removed = Some(t.clone())
            }
            Event::HoldersScanned(h) if self.holders.is_none() => self.holders = Some(h.clone()),
            Event::Receipt(Receipt { staging, .. }) if !self.sealed => {
                self.sealed = true;
                self.receipt = staging.clone();
            }
            _ => {}
        }
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        match (&self.inventoried, &self.receipt) {
            (None, None) => s.push_str("<p>No staging directory was inventoried.</p>\n"),
            (Some(i), r) => {
                inventory(&mut s, i);
                match r {
                    Some(r) if r == i => s.push_str(
                        "<p>The receipt names this very inventory: <code>rea-audit verify \
--staging DIR</code> checks the directory against it.</p>\n",
                    ),
                    Some(r) => {
                        s.push_str("<p class=\"untrusted-note\">The receipt's staging differs from the record above:</p>\n");
                        inventory(&mut s, r);
                    }
                    None if self.sealed => s.push_str(
                        "<p class=\"untrusted-note\">The receipt names no staging directory.</p>\n",
                    ),
                    None => {
                        s.push_str("<p class=\"note\">No receipt: the log is not sealed.</p>\n")
                    }
                }
            }
            (None, Some(r)) => {
                s.push_str("<p>The receipt's staging (no staging_inventoried record):</p>\n");
                inventory(&mut s, r);
            }
        }
        if let Some(t) = &self.temp {
            s.push_str("<h3>Private temp root</h3>\n<table class=\"facts\">\n");
            row(&mut s, "path", &format!("<code>{}</code>", text(&t.path)));
            row(
                &mut s,
                "inventory",
                &format!(
                    "{} entries, {} bytes, digest <code>{}</code>",
                    t.inventory.entries,
                    t.inventory.bytes,
                    text(&t.inventory.digest)
                ),
            );
            if let Some(r) = &self.temp_removed {
                let detail = if r.detail.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", text(&r.detail))
                };
                row(&mut s, "removed", &format!("{}{detail}", r.removed));
            }
            s.push_str("</table>\n");
            entries(&mut s, &t.listing, t.truncated);
        }
        s.push_str("<h3>Holder scan at close</h3>\n");
        match &self.holders {
            None => s.push_str("<p>Not recorded.</p>\n"),
            Some(HoldersScanned::Failed { error }) => {
                let _ = writeln!(
                    s,
                    "<p class=\"untrusted-note\">Could not scan: {}</p>",
                    text(error)
                );
            }
            Some(HoldersScanned::Scanned(h)) => {
                let _ = writeln!(
                    s,
                    "<p>{}: {} processes and {} mount namespaces looked at in {} ms.</p>",
                    if h.held() { "<b>HELD</b>" } else { "Not held" },
                    h.processes,
                    h.mount_namespaces,
                    h.elapsed_us / 1000
                );
                s.push_str("<ul>\n");
                for r in h.roots.iter().take(LISTED) {
                    let _ = writeln!(
                        s,
                        "<li><code>{}</code>: {} entries, {} holder(s)</li>",
                        text(&r.path),
                        r.entries,
                        r.held
                    );
                }
                for f in crate::holders::text::findings(h).iter().take(LISTED) {
                    let _ = writeln!(
                        s,
                        "<li class=\"untrusted-note\">{}</li>",
                        text(&cut(f, 400))
                    );
                }
                s.push_str("</ul>\n");
            }
        }
        s
    }
}

//! `rea-watchdog recover --help`: the refusals in the order they are checked,
//! what recovery does otherwise, and its exit statuses.

/// `rea-watchdog recover --help`: what recovery checks and does.
pub const HELP: &str = "\
After a lost watchdog (SIGKILLed, crashed) its action's cgroup outlives it:
deeper descendants may still run there. recover is the operator's explicit
recovery. It checks, in order, and refuses (exit 2, nothing killed; the
reason code on stderr, and in NEW when NEW can be created) when:
  log_unreadable     LOG cannot be read
  log_tampered       LOG's chain is broken or a record is not the writer's
                     (a torn last line or a missing receipt is fine)
  log_sealed         LOG has its receipt: nothing to recover
  no_run_started     LOG names no watchdog
  watchdog_alive     LOG's watchdog (pid and start time) still lives
  watchdog_unknown   whether it lives cannot be told
  no_group           LOG's action ran without a cgroup (--contain none):
                     recovery needs containment; see rea-audit reconcile LOG
  group_gone         the recorded group no longer exists
  group_recreated    its directory now has another inode (made again under
                     the same name): another group, never touched
  group_unreachable  it cannot be looked at (not a rea- group on cgroup2)
  recoverer_in_group this process is itself in the group
  new_log_exists     NEW already exists (never overwritten; not recorded)
  new_log_in_stage   NEW would be inside the stage (not created; not recorded)
Then it freezes the group (cgroup.freeze 1, at most 5 s for frozen 1),
records the frozen group's members (pid, start time, uid, comm, whether
the environment carries the run's REA_RUN_ID), and refuses, thawing the
group, when:
  freeze_failed      the group could not be frozen
  members_unproven   members cannot be checked (cgroup.procs unreadable,
                     members outside this PID namespace)
  foreign_member     a member is not the action's: membership is not
                     ownership (anyone who may write the group's
                     cgroup.procs can put a stranger in it); a member
                     counts only if it started after the run's watchdog
                     and its environment carries REA_RUN_ID=<run>. Each
                     foreign one is named with what failed:
                     started_before_run, no_run_id, environ_unreadable
                     (start_time_unreadable); stdout's foreign_members
                     lists them. A zombie or a member that exited during
                     the check does not count (a zombie runs nothing).
                     Move them out (write each pid to another group's
                     cgroup.procs) or end them, then recover again.
Otherwise it writes
cgroup.kill to the group opened by its recorded inode, waits at most 5 s
(a constant) for populated 0, removes the group, inventories the stage
(--staging DIR, else the one LOG recorded), looks for live processes still
carrying the run's REA_RUN_ID, and seals NEW: a hash-chained log whose first
record names LOG's run and its last intact seq and head. LOG is never
written; its own verdict stays retain. stdout: one JSON line (outcome,
reasons, audit_log, head, recorded, killed, foreign_members, log_run,
log_intact_seq, log_intact_head). Run it in the PID namespace the watchdog ran in.

Exit status: 0 recovered (group emptied and removed, nothing of the run
left); 1 it ran but is not proven (kill_failed, still_populated,
group_not_removed, scan_failed, run_processes_left); 2 refused, nothing
killed; 3 NEW could not be written (stderr says whether cgroup.kill had
been written); 125 usage.

Example:
  rea-audit reconcile /w/audit.jsonl --staging /srv/stage     # running, exit 5
  rea-watchdog recover /w/audit.jsonl --audit-log /w/recovery.jsonl \\
      --staging /srv/stage
  rea-audit verify /w/recovery.jsonl --staging /srv/stage     # delete_allowed";

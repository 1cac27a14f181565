//! `rea-watchdog --help`'s closing section: every subcommand's exit
//! statuses in one place.

/// The exit statuses of every subcommand.
pub const EXIT_HELP: &str = "\
Exit status:
  run     0 sealed with a positive receipt, 1 sealed negative or unsealed,
          125 could not start (nothing was launched)
  exec    ARGV's status (128+N if killed by signal N); 124 the action was
          stopped (deadline, orphans, excess output...); 128+N a signal N to
          the watchdog stopped it (130 for Ctrl-C); 125 rea-watchdog's own
          failure; 126 ARGV cannot be executed; 127 ARGV not found
  timeout coreutils' timeout(1): the command's status, 124 timed out, 125,
          126, 127, 137 when KILL was needed (rea-watchdog timeout --help)
  submit  the job's status; 124 stopped; 125 refused or error; 126/127
  stop    0 stopped and quiescent, 1 stopped without proof, 125 error
  close   0 positive receipt, 1 negative, 125 error
  recover 0 recovered, 1 ran but not proven, 2 refused (nothing killed),
          3 the recovery log could not be written, 125 usage";

//! The replay's rule for how a stop's ask may end (docs/stop.md, and
//! timeout's spans): beside `mod.rs`, which calls it on `ask_ended`.

use crate::audit::people::word;
use crate::kinds::watchdog::{AskEnd, AskEnded, AskSpan, Bounds, StopReason};

/// Why `a` cannot end the ask of a run whose first stop was for `first`,
/// if it cannot. The span is the run's `bounds.ask` for a deadline stop and
/// half the grace for any other (the watchdog's rule: timeout's long ask
/// is for a time-out only); only half the grace ends by `half_grace`, only
/// timeout's `-k` by `kill_after`, and neither before its time (1 ms of
/// rounding allowed). `leaders_exited` and `ask_failed` end any span.
pub fn impossible_end(a: &AskEnded, bounds: &Bounds, first: StopReason) -> Option<String> {
    let span = match first {
        StopReason::Deadline => bounds.ask,
        _ => AskSpan::HalfGrace,
    };
    let early = |due: u64| a.after_ms + 1 < due;
    match (a.reason, span) {
        (AskEnd::HalfGrace, AskSpan::HalfGrace) if early(bounds.term_grace_ms / 2) => {
            Some(format!(
                "ask_ended half_grace after {} ms, before half the {} ms grace",
                a.after_ms, bounds.term_grace_ms
            ))
        }
        (AskEnd::KillAfter, AskSpan::KillAfterMs(ms)) if early(ms) => Some(format!(
            "ask_ended kill_after after {} ms, before the {ms} ms of -k",
            a.after_ms
        )),
        (AskEnd::HalfGrace, AskSpan::UntilExit | AskSpan::KillAfterMs(_))
        | (AskEnd::KillAfter, AskSpan::HalfGrace | AskSpan::UntilExit) => Some(format!(
            "ask_ended {} in a stop whose ask lasts {}",
            word(&a.reason),
            match span {
                AskSpan::HalfGrace => "half the grace".to_string(),
                AskSpan::UntilExit => "until the leaders exit".to_string(),
                AskSpan::KillAfterMs(ms) => format!("until -k {ms} ms"),
            }
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(ask: AskSpan) -> Bounds {
        Bounds {
            action_deadline_ms: Some(1000),
            term_grace_ms: 500,
            kill_bound_ms: 3000,
            output_cap: None,
            ask,
        }
    }

    fn end(reason: AskEnd, after_ms: u64) -> AskEnded {
        AskEnded {
            reason,
            after_ms,
            leaders_left: 1,
        }
    }

    #[test]
    fn each_span_ends_only_its_own_way() {
        use AskEnd::*;
        use StopReason::{Deadline, Signal};
        let half = bounds(AskSpan::HalfGrace);
        let until = bounds(AskSpan::UntilExit);
        let k = bounds(AskSpan::KillAfterMs(2000));
        // Possible.
        assert_eq!(impossible_end(&end(HalfGrace, 250,), &half, Deadline), None);
        assert_eq!(impossible_end(&end(HalfGrace, 249), &half, Signal), None);
        assert_eq!(impossible_end(&end(KillAfter, 2000), &k, Deadline), None);
        assert_eq!(impossible_end(&end(HalfGrace, 300), &k, Signal), None);
        for span in [&half, &until, &k] {
            for reason in [LeadersExited, AskFailed] {
                assert_eq!(impossible_end(&end(reason, 0), span, Deadline), None);
            }
        }
        // Impossible.
        assert!(impossible_end(&end(HalfGrace, 100), &half, Deadline).is_some());
        assert!(impossible_end(&end(KillAfter, 100), &k, Deadline).is_some());
        assert!(impossible_end(&end(KillAfter, 5000), &half, Deadline).is_some());
        assert!(impossible_end(&end(KillAfter, 5000), &k, Signal).is_some());
        assert!(impossible_end(&end(HalfGrace, 300), &until, Deadline).is_some());
        assert!(impossible_end(&end(HalfGrace, 300), &k, Deadline).is_some());
        assert!(impossible_end(&end(KillAfter, 5000), &until, Deadline).is_some());
    }
}

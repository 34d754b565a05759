//! Waiting for the owner's approval (cli.md §4.3 step 6, canon-wire.md §1.4): sleep the poll
//! interval (3 s), then `GET /agents/status/{requestId}`, until the status is `approved` or
//! `rejected` or the limit (300 s) has passed; the poll that starts before the limit is the last.
//!
//! What the operator sees meanwhile: with stdout on a terminal, one live line drawn by indicatif,
//! `  ⠂ Waiting for approval in the Canon app… 0:42 elapsed (up to 5:00)`, cleared when the wait
//! ends; otherwise the reference's plain progress, one `.` per pending poll, and a newline at the
//! end, so logs stay plain. SIGINT ends the wait at once ([`Cancelled`]); the pending
//! registration stays on disk, so the next run resumes the same request.

use std::time::{Duration, Instant};

use canon_transport::{CanonClient, TransportError};
use canon_wire::types::{RegistrationStatus, RegistrationTicket};

use super::console::{Cancelled, Console};

/// The poll interval of canon-wire.md §1.4.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_secs(3);
/// The approval limit of canon-wire.md §1.4.
pub(crate) const APPROVAL_TIMEOUT: Duration = Duration::from_secs(300);

/// How the wait ended.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// `approved`, with the poll response (key, agent id and name).
    Approved(RegistrationStatus),
    /// `rejected`.
    Rejected,
    /// No verdict within the limit.
    TimedOut,
    /// A poll failed (the wait stops at the first failure, as the reference does).
    Failed(TransportError),
}

/// The wait's timing: [`POLL_INTERVAL`] and [`APPROVAL_TIMEOUT`] unless a test shortened them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub(crate) interval: Duration,
    pub(crate) timeout: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            interval: POLL_INTERVAL,
            timeout: APPROVAL_TIMEOUT,
        }
    }
}

/// What the operator sees while waiting.
enum Progress {
    /// One `.` per pending poll.
    Dots,
    /// The live line.
    Line(indicatif::ProgressBar),
}

impl Progress {
    fn start(console: &Console, timing: Timing) -> Progress {
        if !console.stdout_is_terminal() {
            return Progress::Dots;
        }
        let limit = clock(timing.timeout);
        let template = format!(
            "  {{spinner}} Waiting for approval in the Canon app… {{clock}} elapsed (up to {limit})"
        );
        let style = indicatif::ProgressStyle::with_template(&template).map(|style| {
            style.with_key(
                "clock",
                |state: &indicatif::ProgressState, out: &mut dyn std::fmt::Write| {
                    let _ = out.write_str(&clock(state.elapsed()));
                },
            )
        });
        let Ok(style) = style else {
            return Progress::Dots;
        };
        let line =
            indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stdout())
                .with_style(style);
        line.enable_steady_tick(Duration::from_millis(120));
        Progress::Line(line)
    }

    fn pending(&self, console: &mut Console) {
        match self {
            Progress::Dots => console.write("."),
            Progress::Line(line) => line.tick(),
        }
    }

    /// Ends the progress output: the newline after the dots, or the live line cleared.
    fn end(self, console: &mut Console) {
        match self {
            Progress::Dots => console.blank(),
            Progress::Line(line) => line.finish_and_clear(),
        }
    }
}

/// `M:SS`.
fn clock(duration: Duration) -> String {
    let secs = duration.as_secs();
    format!("{}:{:02}", secs / 60, secs % 60)
}

/// Polls `ticket` until a verdict, the limit, a failed poll, or SIGINT. The progress output is
/// ended before this returns: the dots get their newline (cancelling adds its own, as the
/// reference's `print()` before `Canon setup cancelled.` does), the live line is cleared.
pub(crate) async fn wait(
    console: &mut Console,
    client: &CanonClient,
    ticket: &RegistrationTicket,
    timing: Timing,
) -> Result<Verdict, Cancelled> {
    let progress = Progress::start(console, timing);
    let outcome = poll_until_verdict(console, client, ticket, timing, &progress).await;
    match (&outcome, progress) {
        (Err(Cancelled), Progress::Dots) => {}
        (_, progress) => progress.end(console),
    }
    outcome
}

async fn poll_until_verdict(
    console: &mut Console,
    client: &CanonClient,
    ticket: &RegistrationTicket,
    timing: Timing,
    progress: &Progress,
) -> Result<Verdict, Cancelled> {
    let deadline = Instant::now() + timing.timeout;
    while Instant::now() < deadline {
        console
            .or_cancel(tokio::time::sleep(timing.interval))
            .await?;
        let status = match console.or_cancel(client.poll_registration(ticket)).await? {
            Ok(status) => status,
            Err(error) => return Ok(Verdict::Failed(error)),
        };
        match status.status.as_str() {
            "approved" => return Ok(Verdict::Approved(status)),
            "rejected" => return Ok(Verdict::Rejected),
            // An absent status reads as pending, as in the reference.
            "pending" | "" => progress.pending(console),
            _ => {}
        }
    }
    Ok(Verdict::TimedOut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_is_minutes_and_seconds() {
        assert_eq!(clock(Duration::from_secs(0)), "0:00");
        assert_eq!(clock(Duration::from_secs(42)), "0:42");
        assert_eq!(clock(Duration::from_secs(300)), "5:00");
        assert_eq!(clock(Duration::from_millis(61_900)), "1:01");
    }
}

//! Wall time and peak resident memory of a child process, for the benches
//! that compare routeval with a peer in the same run.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const MIB: f64 = 1024.0 * 1024.0;

pub struct Measurement {
    pub wall: Duration,
    pub peak_rss_bytes: u64,
}

/// Runs `command` to completion, capturing stdout, and reads its peak RSS.
#[expect(clippy::zombie_processes, reason = "the child is reaped by wait4")]
pub fn measure(mut command: Command) -> (Measurement, Vec<u8>) {
    let start = Instant::now();
    let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
    let mut output = Vec::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut output)
        .unwrap();
    let (status, peak_rss_bytes) = wait_with_peak_rss(child.id());
    let wall = start.elapsed();
    assert!(status == 0, "{command:?} exited with status {status}");
    (
        Measurement {
            wall,
            peak_rss_bytes,
        },
        output,
    )
}

#[expect(unsafe_code, reason = "wait4 is how a parent reads a child's peak RSS")]
fn wait_with_peak_rss(pid: u32) -> (i32, u64) {
    let mut status = 0;
    // SAFETY: rusage is plain old data, and wait4 writes only through the two
    // valid pointers it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid as i32, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid as i32, "wait4 failed");
    (libc::WEXITSTATUS(status), usage.ru_maxrss as u64 * 1024)
}

pub fn median_seconds(measurements: &[Measurement]) -> f64 {
    let mut seconds: Vec<f64> = measurements.iter().map(|m| m.wall.as_secs_f64()).collect();
    seconds.sort_by(f64::total_cmp);
    seconds[seconds.len() / 2]
}

pub fn peak_mib(measurements: &[Measurement]) -> f64 {
    measurements.iter().map(|m| m.peak_rss_bytes).max().unwrap() as f64 / MIB
}

//! The two reporters of the stages' events, chosen by the global
//! `--progress` and `--quiet`: progress bars on stderr (on a terminal), or
//! one JSON line per event for CI logs. Messages (notes, warnings, errors)
//! print either way; `--quiet` hides the bars, as `--progress none` does.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::events::{EVENTS_SCHEMA_VERSION, Event, Reporter};

/// How progress shows on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProgressArg {
    /// Bars when stderr is a terminal, else nothing.
    Auto,
    /// Bars, redrawn a few times a second.
    Bar,
    /// One JSON object per event and line (`schema_version`, `event`, ...).
    Json,
    /// Nothing but messages.
    None,
}

/// The flags every command takes.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// No progress bars (as `--progress none`); notes, warnings and errors
    /// still print.
    #[arg(long, short, global = true)]
    pub quiet: bool,

    /// How progress shows on stderr.
    #[arg(long, global = true, value_enum, value_name = "HOW", default_value_t = ProgressArg::Auto)]
    pub progress: ProgressArg,
}

impl OutputArgs {
    /// The reporter these flags choose.
    pub fn reporter(&self) -> Arc<dyn Reporter> {
        match self.progress {
            ProgressArg::Json => Arc::new(JsonLines::new()),
            ProgressArg::Bar => Arc::new(Bars::new(!self.quiet)),
            ProgressArg::Auto => Arc::new(Bars::new(
                !self.quiet && std::io::IsTerminal::is_terminal(&std::io::stderr()),
            )),
            ProgressArg::None => Arc::new(Bars::new(false)),
        }
    }
}

/// A lane's bar and when its work began, by stage and lane.
type Lanes = HashMap<(&'static str, String), (ProgressBar, Instant)>;

/// A bar per lane, on stderr, with messages printed above the bars.
#[derive(Debug)]
struct Bars {
    multi: MultiProgress,
    visible: bool,
    lanes: Mutex<Lanes>,
}

impl Bars {
    fn new(visible: bool) -> Bars {
        let target = if visible {
            ProgressDrawTarget::stderr_with_hz(4)
        } else {
            ProgressDrawTarget::hidden()
        };
        Bars {
            multi: MultiProgress::with_draw_target(target),
            visible,
            lanes: Mutex::new(HashMap::new()),
        }
    }
}

impl Reporter for Bars {
    fn report(&self, event: Event) {
        match event {
            Event::Message { level, text, .. } => {
                self.multi.suspend(|| eprintln!("{}{text}", level.prefix()));
            }
            // Hidden bars cost nothing: the events that draw them are dropped.
            _ if !self.visible => {}
            Event::Planned { stage, lane, total } => {
                let style = ProgressStyle::with_template(
                    "{prefix:>8} [{bar:28}] {pos}/{len} {msg} eta {eta}",
                )
                .expect("a valid template")
                .progress_chars("=> ");
                let bar = self.multi.add(ProgressBar::new(total));
                bar.set_style(style);
                bar.set_prefix(lane.clone());
                let mut lanes = self.lanes.lock().expect("never poisoned");
                lanes.insert((stage, lane), (bar, Instant::now()));
            }
            Event::Progress {
                stage,
                lane,
                done,
                total,
                errors,
                last_error,
                retries,
                cost_usd,
                ..
            } => {
                let lanes = self.lanes.lock().expect("never poisoned");
                if let Some((bar, started)) = lanes.get(&(stage, lane)) {
                    let elapsed = started.elapsed().max(Duration::from_millis(1));
                    bar.set_length(total);
                    bar.set_position(done);
                    let why = last_error.map_or(String::new(), |kind| format!(" (last: {kind})"));
                    bar.set_message(format!(
                        "errors {errors}{why} retries {retries} {:.0} req/s ${cost_usd:.4}",
                        done as f64 / elapsed.as_secs_f64(),
                    ));
                }
            }
            Event::Finished { stage, lane } => {
                let mut lanes = self.lanes.lock().expect("never poisoned");
                if let Some((bar, _)) = lanes.remove(&(stage, lane)) {
                    bar.finish_and_clear();
                }
            }
        }
    }
}

/// One JSON line per event on stderr; a lane's progress at most four times
/// a second, and always its last.
#[derive(Debug)]
struct JsonLines {
    last_progress: Mutex<HashMap<(&'static str, String), Instant>>,
}

impl JsonLines {
    fn new() -> JsonLines {
        JsonLines {
            last_progress: Mutex::new(HashMap::new()),
        }
    }
}

#[derive(Serialize)]
struct Line<'a> {
    schema_version: u32,
    #[serde(flatten)]
    event: &'a Event,
}

impl Reporter for JsonLines {
    fn report(&self, event: Event) {
        if let Event::Progress {
            stage,
            lane,
            done,
            total,
            ..
        } = &event
        {
            let mut last = self.last_progress.lock().expect("never poisoned");
            let now = Instant::now();
            let key = (*stage, lane.clone());
            let due = last
                .get(&key)
                .is_none_or(|at| now.duration_since(*at) >= Duration::from_millis(250));
            if !(due || done >= total) {
                return;
            }
            last.insert(key, now);
        }
        let line = Line {
            schema_version: EVENTS_SCHEMA_VERSION,
            event: &event,
        };
        let text = serde_json::to_string(&line).expect("events serialise");
        let _ = writeln!(std::io::stderr().lock(), "{text}");
    }
}

//! serve's log: one line on stderr for each thing an operator must know of
//! (an upstream that failed, a breaker that opened or closed, a retry budget
//! that refused, an expired config, records that cannot be written, a
//! reload, the shutdown) and, with `--log-requests`, one per request. JSON
//! lines (`schema_version`, `time`, `level`, `event`, `message`, then the
//! event's fields) when stderr is not a terminal, a line for a person when
//! it is. A line names its request by id where there is one, and never
//! carries a key or a prompt.
//!
//! Lines are written by a thread of their own behind a bounded queue: a
//! slow reader of stderr never holds a request up, and a line that finds
//! the queue full is dropped and counted (`routeval_log_lines_dropped_total`).

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use serde_json::{Map, Value};

/// The version of serve's JSON log lines.
pub const LOG_SCHEMA_VERSION: u32 = 1;

/// Lines waiting for the log thread; past it they are dropped and counted.
const QUEUE: usize = 8192;

/// How the lines read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// JSON lines, for a collector.
    Json,
    /// `time LEVEL event: message key=value…`, for a person.
    Human,
}

impl LogFormat {
    /// JSON unless stderr is a terminal.
    pub fn detect() -> LogFormat {
        if std::io::stderr().is_terminal() {
            LogFormat::Human
        } else {
            LogFormat::Json
        }
    }
}

/// How much a line matters; `--quiet` keeps warnings and errors only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Info,
    Warn,
    Error,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
}

/// What `--log-format`, `--log-requests` and `--quiet` chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogSettings {
    pub format: LogFormat,
    /// One line per request.
    pub requests: bool,
    /// Lines below this are not written.
    pub least: Level,
}

enum Message {
    Line(String),
    /// Answered once every line before it is written.
    Flush(mpsc::Sender<()>),
}

/// serve's log; cheap to share, written by its own thread.
#[derive(Debug)]
pub struct Log {
    settings: LogSettings,
    sender: mpsc::SyncSender<Message>,
    pub dropped: AtomicU64,
}

impl Log {
    /// A log writing to stderr from a thread it starts.
    pub fn to_stderr(settings: LogSettings) -> Log {
        let (sender, receiver) = mpsc::sync_channel::<Message>(QUEUE);
        std::thread::Builder::new()
            .name("serve-log".to_owned())
            .spawn(move || {
                let stderr = std::io::stderr();
                for message in receiver {
                    match message {
                        Message::Line(line) => {
                            let mut out = stderr.lock();
                            let _ = out.write_all(line.as_bytes());
                            let _ = out.flush();
                        }
                        Message::Flush(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            })
            .expect("a thread for the log");
        Log {
            settings,
            sender,
            dropped: AtomicU64::new(0),
        }
    }

    /// Whether a request gets a line of its own.
    pub fn logs_requests(&self) -> bool {
        self.settings.requests && self.settings.least == Level::Info
    }

    /// A line about `event` at `level`, saying `message`; add fields, then
    /// [`Line::emit`].
    pub fn event(&self, level: Level, event: &'static str, message: impl Into<String>) -> Line<'_> {
        let wanted = level >= self.settings.least;
        let mut fields = Map::new();
        if wanted {
            fields.insert("schema_version".to_owned(), Value::from(LOG_SCHEMA_VERSION));
            fields.insert("time".to_owned(), Value::from(now_rfc3339_ms()));
            fields.insert("level".to_owned(), Value::from(level.name()));
            fields.insert("event".to_owned(), Value::from(event));
            fields.insert("message".to_owned(), Value::from(message.into()));
        }
        Line {
            log: self,
            wanted,
            fields,
        }
    }

    /// Waits until every line so far is on stderr.
    pub fn flush(&self) {
        let (done, written) = mpsc::channel();
        if self.sender.send(Message::Flush(done)).is_ok() {
            let _ = written.recv();
        }
    }

    fn send(&self, fields: &Map<String, Value>) {
        let line = match self.settings.format {
            LogFormat::Json => {
                let mut line = serde_json::to_string(fields).expect("JSON serialises");
                line.push('\n');
                line
            }
            LogFormat::Human => human(fields),
        };
        if self.sender.try_send(Message::Line(line)).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// One line being made.
#[derive(Debug)]
#[must_use = "a line is written by emit"]
pub struct Line<'a> {
    log: &'a Log,
    wanted: bool,
    fields: Map<String, Value>,
}

impl Line<'_> {
    /// Adds a field; `None` leaves it out.
    pub fn field(mut self, name: &str, value: impl Into<Value>) -> Self {
        if self.wanted {
            let value = value.into();
            if !value.is_null() {
                self.fields.insert(name.to_owned(), value);
            }
        }
        self
    }

    pub fn emit(self) {
        if self.wanted {
            self.log.send(&self.fields);
        }
    }
}

/// `time LEVEL event: message key=value…`.
fn human(fields: &Map<String, Value>) -> String {
    let text = |name: &str| fields.get(name).and_then(Value::as_str).unwrap_or("");
    let mut line = format!(
        "{} {:>5} {}: {}",
        text("time"),
        text("level").to_uppercase(),
        text("event"),
        text("message")
    );
    for (name, value) in fields {
        if matches!(
            name.as_str(),
            "schema_version" | "time" | "level" | "event" | "message"
        ) {
            continue;
        }
        match value {
            Value::String(text) => line.push_str(&format!(" {name}={text:?}")),
            other => line.push_str(&format!(" {name}={other}")),
        }
    }
    line.push('\n');
    line
}

/// Now as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn now_rfc3339_ms() -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = crate::clock::format_rfc3339(since.as_secs() as i64);
    format!(
        "{}.{:03}Z",
        seconds.trim_end_matches('Z'),
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_human_line_reads_in_order_and_quotes_text() {
        let mut fields = Map::new();
        for (name, value) in [
            ("schema_version", Value::from(1)),
            ("time", Value::from("2026-12-03T12:00:00.000Z")),
            ("level", Value::from("warn")),
            ("event", Value::from("breaker_opened")),
            ("message", Value::from("route \"a\" is failing")),
            ("route", Value::from("a")),
            ("opens", Value::from(2)),
        ] {
            fields.insert(name.to_owned(), value);
        }
        assert_eq!(
            human(&fields),
            "2026-12-03T12:00:00.000Z  WARN breaker_opened: route \"a\" is failing opens=2 route=\"a\"\n"
        );
    }

    #[test]
    fn time_has_milliseconds() {
        let time = now_rfc3339_ms();
        assert_eq!(time.len(), "2026-12-03T12:00:00.000Z".len(), "{time}");
        assert!(crate::clock::parse_timestamp_ms(&time).is_some(), "{time}");
    }
}

//! Upstreams that misbehave on purpose, written for the serve tests: a
//! plain HTTP/1.1 server on loopback whose every answer is scripted by the
//! test (any status, headers and bytes, with pauses between them), and
//! which keeps what each request said.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a request to the upstream said.
#[derive(Debug, Clone)]
pub struct Received {
    /// The request line and headers, as sent.
    pub head: String,
    pub body: Vec<u8>,
}

impl Received {
    /// A header's value (names compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().to_owned())
        })
    }
}

/// One step of an answer: bytes to write, or a pause.
#[derive(Debug, Clone)]
pub enum Step {
    Send(Vec<u8>),
    Pause(Duration),
}

/// How the upstream answers a request: its steps, then the connection
/// closes.
pub type Script = Arc<dyn Fn(&Received) -> Vec<Step> + Send + Sync>;

/// A running scripted upstream; stopped when dropped.
pub struct ScriptedUpstream {
    pub port: u16,
    pub received: Arc<Mutex<Vec<Received>>>,
    stop: Arc<AtomicBool>,
}

impl ScriptedUpstream {
    pub fn start(script: impl Fn(&Received) -> Vec<Step> + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let script: Script = Arc::new(script);
        let (kept, stopping) = (received.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let (script, kept) = (script.clone(), kept.clone());
                std::thread::spawn(move || answer(stream, &script, &kept));
            }
        });
        ScriptedUpstream {
            port,
            received,
            stop,
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    pub fn requests(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

impl Drop for ScriptedUpstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn answer(stream: TcpStream, script: &Script, kept: &Mutex<Vec<Received>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let end = line == "\r\n";
        head.push_str(&line);
        if end {
            break;
        }
    }
    let length = head
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let request = Received { head, body };
    kept.lock().unwrap().push(request.clone());
    let mut stream = stream;
    for step in script(&request) {
        match step {
            Step::Send(bytes) => {
                if stream.write_all(&bytes).is_err() {
                    return;
                }
                let _ = stream.flush();
            }
            Step::Pause(pause) => std::thread::sleep(pause),
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// A whole HTTP/1.1 response: `status` (e.g. `"200 OK"`), extra header
/// lines, and the body with its length.
pub fn response(status: &str, headers: &[&str], content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for header in headers {
        head.push_str(header);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// The head of a streamed (SSE) response whose body ends when the
/// connection closes.
pub fn sse_head() -> Vec<u8> {
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n".to_vec()
}

/// One chat-completion chunk as an SSE event.
pub fn sse_chunk(content: &str, finish: Option<&str>) -> Vec<u8> {
    let chunk = serde_json::json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": 1_764_000_000,
        "model": "scripted-model",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}],
    });
    format!("data: {chunk}\n\n").into_bytes()
}

/// An upstream's answer to any request: a whole completion saying
/// `Hello`.
pub fn answers_hello(_: &Received) -> Vec<Step> {
    vec![Step::Send(response(
        "200 OK",
        &[],
        "application/json",
        &completion("Hello"),
    ))]
}

/// A whole non-streamed chat completion saying `content`.
pub fn completion(content: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 1_764_000_000,
        "model": "scripted-model",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": "stop",
        }],
        "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
    }))
    .unwrap()
}

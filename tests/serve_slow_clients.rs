//! `routeval serve` against clients that go slowly on purpose, through the
//! binary: a tenant that trickles its uploads a byte at a time, and a
//! client that stops reading the answer it streams. Neither may hold more
//! than its own slots, nor hold them past serve's deadlines; each is
//! recorded, its upstream call cancelled.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{
    EU_KEY, KEY, Pipeline, Received, ScriptedUpstream, Served, Step, completion, response,
    served_records, signed_single_with, sse_chunk, sse_head, start_serve, status_of, write_keys,
};

/// The demo's predictive table for `base_url`, with `extra` TOML after
/// it, gated and signed as `name`.
fn signed_with(base_url: &str, name: &str, extra: &str) -> std::path::PathBuf {
    signed_single_with(Pipeline::shared(), base_url, name, None, extra)
}

/// serve of `config` with `flags`, its keys and records in `directory`.
fn serve(config: &Path, directory: &Path, flags: &[&str]) -> Served {
    let pipeline = Pipeline::shared();
    let keys = directory.join("keys.toml");
    write_keys(&keys);
    start_serve(
        config,
        &pipeline.out.join("keys/demo.key.pub"),
        &pipeline.out.join("router.bin"),
        &keys,
        &directory.join("records"),
        flags,
    )
}

fn address_of(served: &Served) -> String {
    served.url("").trim_start_matches("http://").to_owned()
}

fn head(key: &str, id: &str, length: usize) -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: serve\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\nx-request-id: {id}\r\n\r\n"
    )
}

/// A client that announces a 1,000-byte body and sends it a byte every
/// 200 ms, as a slow or hostile uploader does: the status serve answered
/// with, once it answered.
fn trickle(address: &str, id: &str) -> u16 {
    let mut client = TcpStream::connect(address).unwrap();
    client.write_all(head(KEY, id, 1000).as_bytes()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let give_up = Instant::now() + Duration::from_secs(60);
    let mut answer = Vec::new();
    let mut buffer = [0u8; 1024];
    while Instant::now() < give_up {
        match client.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => {
                answer.extend_from_slice(&buffer[..read]);
                if answer.windows(4).any(|window| window == b"\r\n\r\n") {
                    break;
                }
            }
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                // Serve has not answered: one more byte of the body.
                let _ = client.write_all(b" ");
            }
            Err(_) => break,
        }
    }
    status_of(&String::from_utf8_lossy(&answer))
}

fn record_of<'a>(records: &'a [Value], id: &str) -> &'a Value {
    records
        .iter()
        .find(|record| record["id"] == id)
        .unwrap_or_else(|| panic!("no record of {id}: {records:?}"))
}

#[test]
fn a_tenant_trickling_its_uploads_holds_its_own_slots_only_until_the_body_deadline() {
    let upstream = ScriptedUpstream::start(|_: &Received| {
        vec![Step::Send(response(
            "200 OK",
            &[],
            "application/json",
            &completion("hi"),
        ))]
    });
    // The demo tenant may have two requests in flight; serve ten in all.
    let config = signed_with(
        &upstream.base_url(),
        "slow-uploads",
        "\n[serving.tenants.demo]\nmax_in_flight = 2\n",
    );
    let directory = tempfile::tempdir().unwrap();
    let served = serve(
        &config,
        directory.path(),
        &["--max-in-flight", "10", "--body-timeout-ms", "2000"],
    );
    let address = address_of(&served);
    let tricklers: Vec<_> = (0..12)
        .map(|number| {
            let address = address.clone();
            let id = format!("trickle-{number}");
            std::thread::spawn(move || (id.clone(), trickle(&address, &id)))
        })
        .collect();
    // While the demo tenant trickles, another tenant is answered.
    std::thread::sleep(Duration::from_millis(500));
    let other = curl_post(&served, EU_KEY, "other-tenant");
    assert!(other.starts_with("HTTP/1.1 200"), "{other}");
    let answers: Vec<(String, u16)> = tricklers
        .into_iter()
        .map(|trickler| trickler.join().unwrap())
        .collect();
    let timed_out: Vec<&String> = answers
        .iter()
        .filter(|(_, status)| *status == 408)
        .map(|(id, _)| id)
        .collect();
    let refused = answers.iter().filter(|(_, status)| *status == 429).count();
    assert_eq!(timed_out.len(), 2, "{answers:?}");
    assert_eq!(refused, 10, "{answers:?}");
    // A stop while an upload trickles ends with the body's deadline.
    let last = {
        let address = address.clone();
        std::thread::spawn(move || trickle(&address, "trickle-at-stop"))
    };
    std::thread::sleep(Duration::from_millis(300));
    served.stop();
    assert_eq!(last.join().unwrap(), 408);
    let records = served_records(
        &directory.path().join("records"),
        &["id", "reason", "status", "finish_reason"],
    );
    for id in timed_out
        .into_iter()
        .chain(std::iter::once(&"trickle-at-stop".to_owned()))
    {
        let record = record_of(&records, id);
        assert_eq!(record["status"], "timeout", "{record}");
        assert_eq!(record["finish_reason"], "body_timeout", "{record}");
        assert_eq!(record["reason"], "bad-request", "{record}");
    }
    let by_tenant_limit = records
        .iter()
        .filter(|record| record["reason"] == "admission:tenant")
        .count();
    assert_eq!(by_tenant_limit, 10, "{records:?}");
    assert_eq!(record_of(&records, "other-tenant")["status"], "ok");
    assert_eq!(upstream.requests().len(), 1, "only the other tenant's call");
}

/// A chat request by curl, as `key`, with id `id`: the response.
fn curl_post(served: &Served, key: &str, id: &str) -> String {
    let body = json!({"model": "support-assistant",
                      "messages": [{"role": "user", "content": "hello"}]});
    let output = std::process::Command::new("curl")
        .args(["-s", "-i", "--max-time", "20"])
        .args(["-H", &format!("Authorization: Bearer {key}")])
        .args(["-H", &format!("x-request-id: {id}")])
        .args(["-d", &body.to_string()])
        .arg(served.url("/v1/chat/completions"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// An upstream that streams an endless answer as fast as it is taken to
/// a request that says "stream on", and says when its stream was cut
/// (serve cancelled the call); any other request gets a short answer.
fn endless_upstream() -> (String, mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    let (cut, cuts) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let cut = cut.clone();
            std::thread::spawn(move || answer_endlessly(stream, &cut));
        }
    });
    (base_url, cuts)
}

fn answer_endlessly(mut stream: TcpStream, cut: &mpsc::Sender<()>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap();
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    if !String::from_utf8_lossy(&body).contains("stream on") {
        let mut answer = sse_head();
        answer.extend(sse_chunk("hi", Some("stop")));
        answer.extend(b"data: [DONE]\n\n");
        let _ = stream.write_all(&answer);
        return;
    }
    let _ = stream.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
    );
    let event = format!(
        "data: {}\n\n",
        json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [{"index": 0, "delta": {"content": "word ".repeat(1600)}, "finish_reason": null}]})
    );
    let until = Instant::now() + Duration::from_secs(120);
    while Instant::now() < until {
        if stream.write_all(event.as_bytes()).is_err() {
            let _ = cut.send(());
            return;
        }
    }
}

#[test]
fn a_client_that_stops_reading_its_stream_ends_at_the_total_deadline_with_its_call_and_slot() {
    let (base_url, cuts) = endless_upstream();
    let config = signed_with(&base_url, "stalled-reader", "");
    let directory = tempfile::tempdir().unwrap();
    let served = serve(
        &config,
        directory.path(),
        &["--max-in-flight", "1", "--total-timeout-ms", "3000"],
    );
    let address = address_of(&served);
    let body = json!({"model": "support-assistant", "stream": true,
                      "messages": [{"role": "user", "content": "stream on"}]})
    .to_string();
    let mut stalled = TcpStream::connect(&address).unwrap();
    write!(stalled, "{}{body}", head(KEY, "stalled-reader", body.len())).unwrap();
    // The answer begins; the client reads its head and then no more.
    let mut first = [0u8; 64];
    stalled.read_exact(&mut first).unwrap();
    assert!(first.starts_with(b"HTTP/1.1 200"));
    // By the total deadline the upstream call is cancelled, though the
    // client still holds its connection.
    cuts.recv_timeout(Duration::from_secs(30))
        .expect("serve cancelled the upstream call of a client that stopped reading");
    // Its slot is given back: the next request is admitted.
    let next = curl_post(&served, KEY, "after-the-stall");
    assert!(next.starts_with("HTTP/1.1 200"), "{next}");
    // And its connection is closed: what the client had not read, then
    // the end.
    stalled
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut rest = Vec::new();
    let ended = match stalled.read_to_end(&mut rest) {
        Ok(_) => true,
        Err(error) => error.kind() == ErrorKind::ConnectionReset,
    };
    assert!(ended, "serve kept the stalled client's connection open");
    served.stop();
    let records = served_records(
        &directory.path().join("records"),
        &["id", "reason", "status", "finish_reason"],
    );
    let record = record_of(&records, "stalled-reader");
    assert_eq!(record["status"], "timeout", "{record}");
    assert_eq!(record["finish_reason"], "client_stalled", "{record}");
    assert_eq!(record_of(&records, "after-the-stall")["status"], "ok");
}

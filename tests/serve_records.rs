//! serve's records under the faults users meet, through the binary: a
//! `kill -9` under load on a disk whose syncs are slow (strace delays every
//! `fdatasync` by a second), and a real full disk (a small tmpfs filled by
//! the test, then given room again). What a client was answered is
//! recorded, within the documented bound, and a disk that fills is loud
//! and then written again by itself.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{
    KEY, Pipeline, Received, ScriptedUpstream, Served, Step, completion, log_events, response,
    routeval, served_records, signed_single, write_keys,
};

/// `routeval serve` of a config signed for `upstream` (as `name`), as a
/// command.
fn serve_for(upstream: &ScriptedUpstream, name: &str, directory: &Path) -> Command {
    let config = signed_single(Pipeline::shared(), &upstream.base_url(), name, None);
    serve_of(&config, directory)
}

/// `routeval serve` of `config`, with its keys and records in `directory`.
fn serve_of(config: &Path, directory: &Path) -> Command {
    let pipeline = Pipeline::shared();
    let keys = directory.join("keys.toml");
    write_keys(&keys);
    pipeline.serve_demo(config, &keys, &directory.join("records"))
}

/// A route that answers at once, and fails at once a request that says
/// "fail".
fn instant_answers() -> ScriptedUpstream {
    ScriptedUpstream::start(|received: &Received| {
        if String::from_utf8_lossy(&received.body).contains("fail") {
            let error = json!({"error": {"message": "the model failed", "type": "server_error"}});
            return vec![Step::Send(response(
                "500 Internal Server Error",
                &[],
                "application/json",
                error.to_string().as_bytes(),
            ))];
        }
        vec![Step::Send(response(
            "200 OK",
            &[],
            "application/json",
            &completion("hi"),
        ))]
    })
}

/// One chat request with id `id`: whether its whole 200 answer came.
fn answered(address: &str, id: &str) -> bool {
    answered_as(address, id, Asked::Answer)
}

/// What a client of the kill test asks for, and so what it is answered:
/// an answer, a route's error passed on, a refusal of its body, a refusal
/// of its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Asked {
    Answer,
    RouteError,
    BadRequest,
    UnknownModel,
}

impl Asked {
    const ALL: [Asked; 4] = [
        Asked::Answer,
        Asked::RouteError,
        Asked::BadRequest,
        Asked::UnknownModel,
    ];

    fn body(self) -> String {
        match self {
            Asked::Answer => json!({"model": "support-assistant",
                                    "messages": [{"role": "user", "content": "hello"}]}),
            Asked::RouteError => json!({"model": "support-assistant",
                                        "messages": [{"role": "user", "content": "fail"}]}),
            Asked::BadRequest => json!({"model": "support-assistant", "messages": "hello"}),
            Asked::UnknownModel => json!({"model": "no-such-model",
                                          "messages": [{"role": "user", "content": "hello"}]}),
        }
        .to_string()
    }

    fn status(self) -> &'static str {
        match self {
            Asked::Answer => "200",
            Asked::RouteError => "500",
            Asked::BadRequest => "400",
            Asked::UnknownModel => "404",
        }
    }
}

/// One request with id `id` on a connection of its own: whether its whole
/// response came with the status `asked` gets (a chunked body's last chunk,
/// or as many bytes as its length said).
fn answered_as(address: &str, id: &str, asked: Asked) -> bool {
    let Ok(mut client) = TcpStream::connect(address) else {
        return false;
    };
    let _ = client.set_read_timeout(Some(Duration::from_secs(20)));
    let body = asked.body();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: serve\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nx-request-id: {id}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if client.write_all(head.as_bytes()).is_err() || client.write_all(body.as_bytes()).is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let _ = client.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    let Some((head, body)) = answer.split_once("\r\n\r\n") else {
        return false;
    };
    if !head.starts_with(&format!("HTTP/1.1 {}", asked.status())) {
        return false;
    }
    let head = head.to_ascii_lowercase();
    match head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
    {
        Some(length) => length.trim().parse::<usize>() == Ok(body.len()),
        None => head.contains("transfer-encoding: chunked") && body.ends_with("\r\n0\r\n\r\n"),
    }
}

fn address_of(served: &Served) -> String {
    served.url("").trim_start_matches("http://").to_owned()
}

/// The ids of every record in `records`.
fn recorded_ids(records: &Path) -> BTreeSet<String> {
    served_records(records, &["id"])
        .into_iter()
        .map(|record| record["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Whether this machine lets the test do `what` (root, strace, mount);
/// skipped elsewhere, a failure under CI.
/// `inner` run under strace with its `-e` expressions (`filters`).
fn under_strace(inner: &Command, filters: &[&str]) -> Command {
    let mut traced = Command::new("strace");
    traced.args(["-f", "-qq", "--seccomp-bpf", "-o", "/dev/null"]);
    for filter in filters {
        traced.args(["-e", filter]);
    }
    traced.arg(inner.get_program()).args(inner.get_args());
    for (name, value) in inner.get_envs() {
        if let Some(value) = value {
            traced.env(name, value);
        }
    }
    traced
}

/// The pid of serve itself, strace's child.
fn traced_pid(served: &Served) -> String {
    let children = Command::new("pgrep")
        .args(["-P", &served.pid().to_string()])
        .output()
        .unwrap()
        .stdout;
    let pid = String::from_utf8(children).unwrap().trim().to_owned();
    assert!(!pid.is_empty(), "no serve under strace");
    pid
}

/// Whether strace runs here; says the test was skipped if not.
fn strace_runs() -> bool {
    let runs = Command::new("strace")
        .arg("-V")
        .output()
        .is_ok_and(|out| out.status.success());
    can("strace", runs)
}

fn can(what: &str, works: bool) -> bool {
    if works {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{what} is needed under CI"
    );
    eprintln!("skipped: {what} is not available here");
    false
}

/// `kill -9` of serve (started with `flags`) under a load of 32 clients
/// asking for every kind of response in turn, on a disk whose every
/// `fdatasync` takes a second, once `kill_after` requests were answered:
/// the requests answered whole, and of them those with no record after a
/// restart rolled what the killed serve left.
fn kill_under_load(name: &str, flags: &[&str], kill_after: usize) -> (Vec<String>, Vec<String>) {
    let upstream = instant_answers();
    let directory = tempfile::tempdir().unwrap();
    let config = signed_single(Pipeline::shared(), &upstream.base_url(), name, None);
    let mut command = serve_of(&config, directory.path());
    command.args(flags);
    let served = Served::start(&mut under_strace(
        &command,
        &["trace=fdatasync", "inject=fdatasync:delay_exit=1000000"],
    ));
    let address = address_of(&served);
    let answered_ids = Arc::new(Mutex::new(Vec::new()));
    let stop_at = Instant::now() + Duration::from_secs(40);
    let clients: Vec<_> = (0..32)
        .map(|client| {
            let (address, answered_ids) = (address.clone(), answered_ids.clone());
            std::thread::spawn(move || {
                for number in 0usize.. {
                    if Instant::now() >= stop_at {
                        break;
                    }
                    let asked = Asked::ALL[(client + number) % Asked::ALL.len()];
                    let id = format!("load-{client}-{number}-{asked:?}");
                    if answered_as(&address, &id, asked) {
                        answered_ids.lock().unwrap().push(id);
                    } else {
                        break;
                    }
                }
            })
        })
        .collect();
    let until = Instant::now() + Duration::from_secs(35);
    while answered_ids.lock().unwrap().len() < kill_after && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    // serve itself, the tracer's child, is killed: no chance to flush.
    Command::new("kill")
        .args(["-KILL", &traced_pid(&served)])
        .status()
        .unwrap();
    for client in clients {
        client.join().unwrap();
    }
    drop(served);
    let answered_ids = answered_ids.lock().unwrap().clone();
    assert!(
        answered_ids.len() >= kill_after,
        "only {} answered",
        answered_ids.len()
    );
    // A restart rolls what the killed serve left.
    let restarted = Served::start(&mut serve_of(&config, directory.path()));
    restarted.stop();
    let recorded = recorded_ids(&directory.path().join("records"));
    let lost: Vec<String> = answered_ids
        .iter()
        .filter(|id| !recorded.contains(*id))
        .cloned()
        .collect();
    for asked in Asked::ALL {
        let kind = format!("-{asked:?}");
        println!(
            "kill -9 under load ({name}), fdatasync 1 s, {asked:?} ({}): {} answered, {} without a record",
            asked.status(),
            answered_ids.iter().filter(|id| id.ends_with(&kind)).count(),
            lost.iter().filter(|id| id.ends_with(&kind)).count(),
        );
    }
    (answered_ids, lost)
}

#[test]
fn a_kill_under_load_on_a_slow_disk_loses_at_most_the_documented_window_whatever_the_status() {
    if !strace_runs() {
        return;
    }
    let (answered, lost) = kill_under_load("records-kill", &[], 900);
    for asked in Asked::ALL {
        let kind = format!("-{asked:?}");
        assert!(
            answered.iter().filter(|id| id.ends_with(&kind)).count() > 100,
            "{asked:?} was asked for"
        );
    }
    assert!(
        lost.len() as u64 <= routeval::serve::MAX_UNCOMMITTED,
        "{} of {} answered requests have no record",
        lost.len(),
        answered.len()
    );
}

#[test]
fn with_acknowledged_records_a_kill_under_load_loses_no_answered_requests_record() {
    if !strace_runs() {
        return;
    }
    let flags = ["--records-durability", "acknowledged"];
    let (answered, lost) = kill_under_load("records-kill-acknowledged", &flags, 400);
    assert!(
        lost.is_empty(),
        "{} of {} answered requests have no record: {lost:?}",
        lost.len(),
        answered.len()
    );
}

/// A tmpfs of `size` mounted at `at` for the test, unmounted when dropped.
struct SmallDisk {
    at: PathBuf,
}

impl SmallDisk {
    fn mount(at: &Path, size: &str) -> Option<SmallDisk> {
        std::fs::create_dir_all(at).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        can("mounting a tmpfs", mounted).then(|| SmallDisk { at: at.to_owned() })
    }

    /// Fills the disk with a file of the test's own; its path.
    fn fill(&self) -> PathBuf {
        let filler = self.at.join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 16 << 10];
        while file.write_all(&block).is_ok() {}
        let _ = file.sync_all();
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

fn get(address: &str, path: &str) -> String {
    let mut client = TcpStream::connect(address).unwrap();
    write!(
        client,
        "GET {path} HTTP/1.1\r\nHost: serve\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    client.read_to_string(&mut answer).unwrap();
    answer
}

fn metric(address: &str, name: &str) -> f64 {
    get(address, "/metrics")
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name}"))
        .parse()
        .unwrap()
}

/// Polls `ready` for up to ten seconds.
fn within_ten_seconds(mut ready: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if ready() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

#[test]
fn a_full_disk_is_loud_at_once_and_recording_resumes_when_it_has_room() {
    let root = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(&root.path().join("disk"), "1m") else {
        return;
    };
    let upstream = instant_answers();
    let mut command = serve_for(&upstream, "records-full", &disk.at);
    let served = Served::start(&mut command);
    let address = address_of(&served);
    for number in 0..10 {
        assert!(answered(&address, &format!("before-{number}")));
    }
    assert!(within_ten_seconds(|| metric(
        &address,
        "routeval_records_pending"
    ) == 0.0));
    let filler = disk.fill();
    for number in 0..40 {
        assert!(
            answered(&address, &format!("full-{number}")),
            "answered while full"
        );
    }
    // The volume is every replica's: this one still answers, so it stays
    // ready, and says what is wrong.
    assert!(within_ten_seconds(
        || get(&address, "/readyz").contains("alarm: the records cannot be written")
    ));
    let ready = get(&address, "/readyz");
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    assert!(
        ready.contains("part-000001.jsonl") && ready.contains("No space left"),
        "{ready}"
    );
    assert_eq!(metric(&address, "routeval_records_writable"), 0.0);
    assert!(metric(&address, "routeval_records_write_errors_total") >= 1.0);
    std::fs::remove_file(filler).unwrap();
    assert!(within_ten_seconds(|| {
        let ready = get(&address, "/readyz");
        ready.starts_with("HTTP/1.1 200") && !ready.contains("alarm")
    }));
    for number in 0..20 {
        assert!(answered(&address, &format!("after-{number}")));
    }
    let log = served.stop_with_log();
    let failed = log_events(&log, "records_write_failed");
    assert!(
        !failed.is_empty()
            && failed.iter().all(|line| line["level"] == "error"
                && line["file"]
                    .as_str()
                    .unwrap()
                    .ends_with("part-000001.jsonl")
                && line["error"].as_str().unwrap().contains("No space left")),
        "{log}"
    );
    let resumed = log_events(&log, "records_resumed");
    assert_eq!(resumed.len(), 1, "{log}");
    assert_eq!(resumed[0]["dropped"], 0, "{log}");
    let recorded = recorded_ids(&disk.at.join("records"));
    let expected: BTreeSet<String> = (0..10)
        .map(|n| format!("before-{n}"))
        .chain((0..40).map(|n| format!("full-{n}")))
        .chain((0..20).map(|n| format!("after-{n}")))
        .collect();
    assert_eq!(recorded, expected);
    let lines = served_records(&disk.at.join("records"), &["status"]);
    assert!(lines.iter().all(|record| record["status"] == json!("ok")));
    assert_eq!(lines.len(), 70, "each request once: {lines:?}");
}

#[test]
fn with_records_fail_closed_a_full_disk_refuses_requests_until_it_has_room() {
    let root = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(&root.path().join("disk"), "1m") else {
        return;
    };
    let upstream = instant_answers();
    let mut command = serve_for(&upstream, "records-closed", &disk.at);
    command.args(["--records-fail", "closed"]);
    let served = Served::start(&mut command);
    let address = address_of(&served);
    assert!(answered(&address, "before"));
    let filler = disk.fill();
    // The journal's last page may hold a record or two more; the requests
    // after them find the disk full.
    let mut number = 0;
    assert!(within_ten_seconds(|| {
        number += 1;
        answered(&address, &format!("finds-it-full-{number}"));
        get(&address, "/readyz").starts_with("HTTP/1.1 503")
    }));
    assert!(!answered(&address, "refused"));
    std::fs::remove_file(filler).unwrap();
    assert!(within_ten_seconds(|| answered(&address, "after")));
    served.stop();
    let reasons: Vec<Value> = served_records(&disk.at.join("records"), &["id", "reason"]);
    let refused = reasons
        .iter()
        .find(|record| record["id"] == "refused")
        .unwrap();
    assert_eq!(refused["reason"], "records-failing");
}

#[test]
fn a_link_planted_where_the_journal_goes_is_never_written_through() {
    let upstream = instant_answers();
    let directory = tempfile::tempdir().unwrap();
    let served = Served::start(&mut serve_for(&upstream, "records-link", directory.path()));
    let address = address_of(&served);
    // Someone else's file, linked where serve's first journal will go.
    let theirs = directory.path().join("theirs.txt");
    std::fs::write(&theirs, "not serve's\n").unwrap();
    std::os::unix::fs::symlink(&theirs, directory.path().join("records/part-000001.jsonl"))
        .unwrap();
    assert!(answered(&address, "linked"));
    assert!(within_ten_seconds(
        || get(&address, "/readyz").contains("alarm: the records cannot be written")
    ));
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "not serve's\n");
    drop(served);
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "not serve's\n");
}

/// Sets `path`'s permission bits.
fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_records_directory_it_may_not_write_keeps_every_record_until_it_may() {
    // Root passes every permission check: serve runs as `nobody`, so a
    // chmod of its records directory is an EACCES it meets for real.
    let root_here = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| String::from_utf8_lossy(&output.stdout).trim() == "0");
    let setpriv = Command::new("setpriv").arg("--version").output().is_ok();
    if !can(
        "root and setpriv, to run serve as nobody",
        root_here && setpriv,
    ) {
        return;
    }
    let upstream = instant_answers();
    let pipeline = Pipeline::shared();
    let config = signed_single(pipeline, &upstream.base_url(), "records-eacces", None);
    // Everything serve reads, where nobody can read it.
    let directory = tempfile::tempdir().unwrap();
    let at = directory.path();
    chmod(at, 0o755);
    let copy = |from: &Path, name: &str| {
        let to = at.join(name);
        std::fs::copy(from, &to).unwrap();
        chmod(&to, 0o755);
        to
    };
    let binary = copy(&crate::common::binary(), "routeval");
    let config_copy = copy(&config, "route-config.v1.json");
    copy(
        &routeval::routes::signature_path(&config),
        "route-config.v1.json.minisig",
    );
    let pubkey = copy(&pipeline.out.join("keys/demo.key.pub"), "demo.key.pub");
    let router = copy(&pipeline.out.join("router.bin"), "router.bin");
    let keys = at.join("keys.toml");
    write_keys(&keys);
    chmod(&keys, 0o644);
    let records = at.join("records");
    std::fs::create_dir(&records).unwrap();
    let owned = Command::new("chown")
        .args(["65534:65534"])
        .arg(&records)
        .status()
        .unwrap();
    assert!(owned.success());
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&binary)
        .arg("serve")
        .arg("--config")
        .arg(&config_copy)
        .arg("--pubkey")
        .arg(&pubkey)
        .arg("--router")
        .arg(&router)
        .arg("--keys")
        .arg(&keys)
        .arg("--records")
        .arg(&records)
        .args(["--listen", "127.0.0.1:0", "--roll-records", "5"])
        .env("ROUTEVAL_SIM_KEY", "unused");
    let served = Served::start(&mut command);
    let address = address_of(&served);
    let mut sent = Vec::new();
    let mut ask = |id: String| {
        assert!(answered(&address, &id), "{id} was not answered");
        sent.push(id);
    };
    // One commit per record: the first five roll into a part, and the
    // sixth goes into a second journal, which serve makes while it can.
    let committed = || within_ten_seconds(|| metric(&address, "routeval_records_pending") == 0.0);
    for number in 0..6 {
        ask(format!("before-{number}"));
        assert!(committed());
    }
    assert!(records.join("part-000002.jsonl").exists());
    // Its records directory may no longer be written: no part can roll,
    // but the journal it has open takes every record.
    chmod(&records, 0o555);
    for number in 0..20 {
        ask(format!("denied-{number}"));
    }
    assert!(committed(), "the journal it has open takes every record");
    chmod(&records, 0o755);
    for number in 0..5 {
        ask(format!("after-{number}"));
    }
    let log = served.stop_with_log();
    let failed = log_events(&log, "records_roll_failed");
    assert!(!failed.is_empty(), "{log}");
    for line in &failed {
        assert!(
            line["message"]
                .as_str()
                .unwrap()
                .contains("Permission denied")
                && line["file"].as_str().unwrap().contains("/records/part-"),
            "{line}"
        );
    }
    // Every answered request is recorded, once.
    let rows = served_records(&records, &["id"]);
    let ids: Vec<String> = rows
        .iter()
        .map(|row| row["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), sent.len(), "{ids:?}");
    assert_eq!(
        ids.into_iter().collect::<BTreeSet<_>>(),
        sent.into_iter().collect::<BTreeSet<_>>()
    );
}

#[test]
fn a_stop_sent_the_moment_serve_says_where_it_listens_is_graceful() {
    // An orchestrator may stop a pod the moment it is up (a rollout that
    // was superseded). strace holds serve for 300 ms after each write, so
    // the stop arrives right after serve announced its address: its
    // handler must already be in place, or the default action kills it
    // with its records unrolled.
    if !strace_runs() {
        return;
    }
    let upstream = instant_answers();
    let config = signed_single(
        Pipeline::shared(),
        &upstream.base_url(),
        "records-stopped-at-once",
        None,
    );
    for signals in [["TERM"].as_slice(), &["HUP", "TERM"]] {
        let directory = tempfile::tempdir().unwrap();
        let served = Served::start(&mut under_strace(
            &serve_of(&config, directory.path()),
            &["trace=write", "inject=write:delay_exit=300000"],
        ));
        let pid = traced_pid(&served);
        for signal in signals {
            Command::new("kill")
                .args([&format!("-{signal}"), &pid])
                .status()
                .unwrap();
        }
        // strace exits as serve did.
        let log = served.wait_with_log();
        assert_eq!(log_events(&log, "stopped").len(), 1, "{signals:?}: {log}");
    }
}

/// The names of the record parts in `records`.
fn part_names(records: &Path) -> BTreeSet<String> {
    std::fs::read_dir(records)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("part-"))
        .collect()
}

#[test]
fn parts_shipped_away_are_never_named_again_after_a_restart() {
    let upstream = instant_answers();
    let directory = tempfile::tempdir().unwrap();
    let records = directory.path().join("records");
    let shipped = directory.path().join("bucket");
    std::fs::create_dir(&shipped).unwrap();
    let mut command = serve_for(&upstream, "records-shipped", directory.path());
    command.args(["--roll-records", "2"]);
    let mut ids = BTreeSet::new();
    for round in 0..3 {
        let served = Served::start(&mut command);
        let address = address_of(&served);
        for request in 0..5 {
            let id = format!("ship-{round}-{request}");
            assert!(answered(&address, &id), "{id}");
            ids.insert(id);
        }
        served.stop();
        // As an operator ships rolled parts to a bucket: moved out, and
        // never overwritten there.
        for name in part_names(&records) {
            let target = shipped.join(&name);
            assert!(!target.exists(), "round {round}: {name} was named again");
            std::fs::rename(records.join(&name), target).unwrap();
        }
    }
    assert!(
        part_names(&shipped).len() >= 3,
        "{:?}",
        part_names(&shipped)
    );
    assert_eq!(recorded_ids(&shipped), ids);
}

#[test]
fn a_client_id_that_ends_like_an_attempt_or_a_hedge_copy_is_still_its_requests_decision() {
    let upstream = instant_answers();
    let directory = tempfile::tempdir().unwrap();
    let records = directory.path().join("records");
    let served = Served::start(&mut serve_for(
        &upstream,
        "records-spoofed-ids",
        directory.path(),
    ));
    let address = address_of(&served);
    let ids = ["client-attempt-1", "client-hedge-1", "client-plain"];
    for id in ids {
        assert!(answered(&address, id), "{id}");
    }
    served.stop();
    let out = directory.path().join("labels.jsonl");
    routeval()
        .args(["sample", "--label-share", "1", "--seed", "1", "--records"])
        .arg(&records)
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let drawn: BTreeSet<String> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|line| {
            let row: Value = serde_json::from_str(line).unwrap();
            row["record_id"].as_str().unwrap().to_owned()
        })
        .collect();
    let expected: BTreeSet<String> = ids.iter().map(|id| (*id).to_owned()).collect();
    assert_eq!(drawn, expected);
}

/// The Parquet parts in `records` now.
fn parquet_parts(records: &Path) -> usize {
    std::fs::read_dir(records)
        .unwrap()
        .filter(|entry| {
            entry
                .as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|extension| extension == "parquet")
        })
        .count()
}

#[test]
fn the_journal_rolls_by_size_and_by_age_not_only_by_count() {
    let upstream = instant_answers();
    // By size: parts of about 20 KB, some thirty records each.
    let by_size = tempfile::tempdir().unwrap();
    let served = Served::start(
        serve_for(&upstream, "records-roll-size", by_size.path()).args(["--roll-bytes", "20000"]),
    );
    let address = address_of(&served);
    for number in 0..100 {
        assert!(answered(&address, &format!("sized-{number}")));
    }
    let records = by_size.path().join("records");
    let listing = || {
        std::fs::read_dir(&records)
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                format!(
                    "{:?} {}",
                    entry.file_name(),
                    entry.metadata().unwrap().len()
                )
            })
            .collect::<Vec<_>>()
    };
    assert!(
        within_ten_seconds(|| parquet_parts(&records) >= 2),
        "100 records of about 650 bytes in fewer than three journals under --roll-bytes 20000: {:?}",
        listing()
    );
    served.stop();
    assert_eq!(recorded_ids(&records).len(), 100);
    // By age: a quiet serve's journal rolls at its first commit past the age.
    let by_age = tempfile::tempdir().unwrap();
    let served = Served::start(
        serve_for(&upstream, "records-roll-age", by_age.path()).args(["--roll-age-s", "1"]),
    );
    let address = address_of(&served);
    assert!(answered(&address, "early"));
    let records = by_age.path().join("records");
    assert_eq!(parquet_parts(&records), 0);
    std::thread::sleep(Duration::from_millis(1_200));
    assert!(answered(&address, "late"));
    assert!(
        within_ten_seconds(|| parquet_parts(&records) >= 1),
        "the journal older than --roll-age-s did not roll"
    );
    served.stop();
    assert_eq!(
        recorded_ids(&records),
        BTreeSet::from(["early".to_owned(), "late".to_owned()])
    );
}

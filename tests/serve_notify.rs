//! serve under systemd's `Type=notify`, through the binary: it tells the
//! socket `NOTIFY_SOCKET` names that it is ready once it listens (with its
//! pid and the config it serves), what it serves after a reload, and that it
//! drains when stopped; a unit whose socket is gone still serves.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use crate::common::{
    Pipeline, ScriptedUpstream, Served, Step, completion, response, signed_single, write_keys,
};

/// The next notification on `socket`, within 10 s.
fn next(socket: &UnixDatagram) -> String {
    let mut buffer = [0u8; 4096];
    let read = socket
        .recv(&mut buffer)
        .expect("a notification within 10 s");
    String::from_utf8(buffer[..read].to_vec()).unwrap()
}

fn answering() -> ScriptedUpstream {
    ScriptedUpstream::start(|_| {
        vec![Step::Send(response(
            "200 OK",
            &[],
            "application/json",
            &completion("ok"),
        ))]
    })
}

/// serve of `config`, its keys and records in `directory`, with
/// `NOTIFY_SOCKET` set to `socket`.
fn serve_notifying(
    config: &std::path::Path,
    directory: &std::path::Path,
    socket: &std::path::Path,
) -> Served {
    let keys = directory.join("keys.toml");
    write_keys(&keys);
    let mut command = Pipeline::shared().serve_demo(config, &keys, &directory.join("records"));
    command.env("NOTIFY_SOCKET", socket);
    Served::start(&mut command)
}

/// The status `path` answers with.
fn status(served: &Served, path: &str) -> String {
    let probe = std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(served.url(path))
        .output()
        .unwrap();
    String::from_utf8_lossy(&probe.stdout).into_owned()
}

#[test]
fn serve_notifies_systemd_when_ready_reloaded_and_stopping() {
    let pipeline = Pipeline::shared();
    let upstream = answering();
    let v1 = signed_single(pipeline, &upstream.base_url(), "notify-v1", None);
    let v2 = signed_single(pipeline, &upstream.base_url(), "notify-v2", Some(&v1));
    let directory = tempfile::tempdir().unwrap();
    let live = directory.path().join("route-config.json");
    std::fs::copy(&v1, &live).unwrap();
    std::fs::copy(
        routeval::routes::signature_path(&v1),
        routeval::routes::signature_path(&live),
    )
    .unwrap();
    let socket_path = directory.path().join("notify");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let served = serve_notifying(&live, directory.path(), &socket_path);

    let ready = next(&socket);
    assert!(ready.starts_with("READY=1\n"), "{ready}");
    assert!(
        ready.contains(&format!("MAINPID={}\n", served.pid())),
        "{ready}"
    );
    assert!(
        ready.contains("STATUS=serving support-assistant ("),
        "{ready}"
    );
    assert!(ready.contains(" version 1)\n"), "{ready}");
    // Ready means answering: the probe is up when systemd hears it.
    assert_eq!(status(&served, "/healthz"), "200");

    // The next version: its signature first, then the config in one rename.
    let staged = directory.path().join("staged.json");
    std::fs::copy(
        routeval::routes::signature_path(&v2),
        routeval::routes::signature_path(&live),
    )
    .unwrap();
    std::fs::copy(&v2, &staged).unwrap();
    std::fs::rename(&staged, &live).unwrap();
    let reloaded = next(&socket);
    assert!(
        reloaded.starts_with("STATUS=serving support-assistant ("),
        "{reloaded}"
    );
    assert!(reloaded.contains(" version 2)"), "{reloaded}");

    served.signal("TERM");
    let stopping = next(&socket);
    assert!(stopping.starts_with("STOPPING=1\n"), "{stopping}");
    served.wait_with_log();
}

#[test]
fn a_notification_socket_that_is_gone_changes_nothing() {
    let pipeline = Pipeline::shared();
    let upstream = answering();
    let config = signed_single(pipeline, &upstream.base_url(), "notify-gone", None);
    let directory = tempfile::tempdir().unwrap();
    let served = serve_notifying(
        &config,
        directory.path(),
        &directory.path().join("no-such-socket"),
    );
    assert_eq!(status(&served, "/readyz"), "200");
    served.stop();
}

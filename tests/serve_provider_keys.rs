//! Rotating an upstream provider's key without a restart, through the
//! binary: `serve --provider-keys` read from a file of lines (systemd's
//! `EnvironmentFile=` form) and from a directory swapped the way a mounted
//! Kubernetes Secret is updated; the upstream sees the new key on the next
//! request, a same-length rotation that keeps the file's time is seen, a
//! broken file is refused with the old key serving on, and a file that does
//! not name a route's variable stops serve from starting.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{
    Pipeline, ScriptedUpstream, Served, Step, ask_with, completion, log_events, response,
    signed_single, write_keys,
};

/// An upstream answering every call, and the config signed for it.
fn upstream_and_config(name: &str) -> (ScriptedUpstream, std::path::PathBuf) {
    let upstream = ScriptedUpstream::start(|_| {
        vec![Step::Send(response(
            "200 OK",
            &[],
            "application/json",
            &completion("answered"),
        ))]
    });
    let config = signed_single(Pipeline::shared(), &upstream.base_url(), name, None);
    (upstream, config)
}

fn serve_with(config: &Path, directory: &Path, provider_keys: &Path) -> Served {
    let keys = directory.join("keys.toml");
    write_keys(&keys);
    let mut command = Pipeline::shared().serve_demo(config, &keys, &directory.join("records"));
    command.arg("--provider-keys").arg(provider_keys);
    Served::start(&mut command)
}

/// One chat request through serve; its status.
fn ask(served: &Served, id: &str) -> u16 {
    ask_with(served, id, "where is my invoice", &[])
}

/// The key the upstream saw on its latest call.
fn last_key(upstream: &ScriptedUpstream) -> String {
    upstream
        .requests()
        .last()
        .expect("a call")
        .header("authorization")
        .expect("an Authorization header")
}

/// Waits until `/metrics` counts `count` provider-key reloads with
/// `outcome`.
fn wait_for_reloads(served: &Served, outcome: &str, count: u32) {
    let line = format!("routeval_provider_keys_reloads_total{{outcome=\"{outcome}\"}} {count}\n");
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = Command::new("curl")
            .args(["-s", "--max-time", "5"])
            .arg(served.url("/metrics"))
            .output()
            .unwrap();
        let metrics = String::from_utf8_lossy(&metrics.stdout).into_owned();
        if metrics.contains(&line) {
            return;
        }
        assert!(Instant::now() < until, "no {line} in {metrics}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_rotated_provider_key_is_used_without_a_restart_and_a_broken_file_is_refused() {
    let (upstream, config) = upstream_and_config("provider-keys-file");
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("provider-keys.env");
    std::fs::write(
        &file,
        "# rotated by the vault agent\nROUTEVAL_SIM_KEY=sk-first-aaaa\n",
    )
    .unwrap();
    let written_at = std::fs::metadata(&file).unwrap().modified().unwrap();
    let served = serve_with(&config, directory.path(), &file);
    assert_eq!(ask(&served, "before"), 200);
    // The file's variable, not the environment's (serve_demo sets one,
    // which --provider-keys puts out of use).
    assert_eq!(last_key(&upstream), "Bearer sk-first-aaaa");

    // A key of the same length, the file's time put back as a
    // configuration tool restores it: the content changed, so it is seen.
    std::fs::write(&file, "ROUTEVAL_SIM_KEY=sk-other-bbbb\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(written_at)
        .unwrap();
    wait_for_reloads(&served, "applied", 1);
    assert_eq!(ask(&served, "after"), 200);
    assert_eq!(last_key(&upstream), "Bearer sk-other-bbbb");

    // A file that no longer names the routes' variable, then one that does
    // not parse, are refused: the running key stays.
    std::fs::write(&file, "SOME_OTHER_KEY=sk-nothing\n").unwrap();
    wait_for_reloads(&served, "refused", 1);
    assert_eq!(ask(&served, "refused-missing"), 200);
    assert_eq!(last_key(&upstream), "Bearer sk-other-bbbb");
    std::fs::write(&file, "ROUTEVAL_SIM_KEY=sk-third-cccc\nnot a line\n").unwrap();
    wait_for_reloads(&served, "refused", 2);
    assert_eq!(ask(&served, "refused-broken"), 200);
    assert_eq!(last_key(&upstream), "Bearer sk-other-bbbb");

    let log = served.stop_with_log();
    let applied = log_events(&log, "provider_keys_reloaded");
    assert_eq!(applied.len(), 1, "{log}");
    assert_eq!(applied[0]["routes"], "large,small", "{log}");
    let refused: Vec<String> = log_events(&log, "provider_keys_reload_refused")
        .iter()
        .map(|line| line["message"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(refused.len(), 2, "{log}");
    assert!(
        refused[0].contains("ROUTEVAL_SIM_KEY (api_key_env) is not in --provider-keys"),
        "{log}"
    );
    assert!(refused[1].contains("line 2: expected NAME=VALUE"), "{log}");
    // Never a key in the log.
    assert!(!log.contains("sk-"), "{log}");
}

#[test]
fn a_secret_volume_swapped_in_place_rotates_the_key() {
    let (upstream, config) = upstream_and_config("provider-keys-secret");
    let directory = tempfile::tempdir().unwrap();
    // A Secret volume as the kubelet lays it out: each key a symlink into
    // `..data`, itself a symlink to a timestamped directory swapped whole.
    let mount = directory.path().join("secret");
    let first = mount.join("..2026_12_07_first");
    std::fs::create_dir_all(&first).unwrap();
    std::fs::write(first.join("ROUTEVAL_SIM_KEY"), "sk-from-the-secret-1\n").unwrap();
    std::os::unix::fs::symlink("..2026_12_07_first", mount.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/ROUTEVAL_SIM_KEY", mount.join("ROUTEVAL_SIM_KEY")).unwrap();
    let served = serve_with(&config, directory.path(), &mount);
    assert_eq!(ask(&served, "before"), 200);
    assert_eq!(last_key(&upstream), "Bearer sk-from-the-secret-1");

    let second = mount.join("..2026_12_07_second");
    std::fs::create_dir_all(&second).unwrap();
    std::fs::write(second.join("ROUTEVAL_SIM_KEY"), "sk-from-the-secret-2\n").unwrap();
    std::os::unix::fs::symlink("..2026_12_07_second", mount.join("..data_tmp")).unwrap();
    std::fs::rename(mount.join("..data_tmp"), mount.join("..data")).unwrap();
    wait_for_reloads(&served, "applied", 1);
    assert_eq!(ask(&served, "after"), 200);
    assert_eq!(last_key(&upstream), "Bearer sk-from-the-secret-2");
    served.stop_with_log();
}

#[test]
fn a_provider_keys_file_without_the_routes_variable_stops_serve_and_its_check() {
    let (_upstream, config) = upstream_and_config("provider-keys-missing");
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("provider-keys.env");
    std::fs::write(&file, "SOME_OTHER_KEY=sk-nothing\n").unwrap();
    let keys = directory.path().join("keys.toml");
    write_keys(&keys);
    for check in [false, true] {
        let mut command =
            Pipeline::shared().serve_demo(&config, &keys, &directory.path().join("records"));
        // The environment has the variable; with --provider-keys it is not
        // read.
        command.arg("--provider-keys").arg(&file);
        if check {
            command.arg("--check");
        }
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(2), "check {check}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(&format!(
                "the variable ROUTEVAL_SIM_KEY (api_key_env) is not in --provider-keys {}",
                file.display()
            )),
            "check {check}: {stderr}"
        );
    }
}

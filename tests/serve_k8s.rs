//! `ci/k8s-serve.yaml` as the kubelet would run it: the container's
//! arguments parse as `routeval serve`, every file they name is one the
//! ConfigMap mounts, the probes and the Service reach the port serve
//! listens on; and serve, started with those very arguments on a mount laid
//! out as the kubelet lays out a ConfigMap (files behind a `..data` link),
//! becomes ready and reloads the next signed version when the link is
//! swapped, with no signal.

use std::path::Path;
use std::process::Command;

use clap::Parser;

use crate::common::{
    Pipeline, Served, base_url, binary, log_events, repo, signed_single, start_sim, write_keys,
};

fn manifest() -> String {
    std::fs::read_to_string(repo().join("ci/k8s-serve.yaml")).unwrap()
}

/// The items of the first `- item` list that follows the line `key:`.
fn list_after(text: &str, key: &str) -> Vec<String> {
    let mut lines = text.lines().skip_while(|line| line.trim() != key).skip(1);
    let mut items = Vec::new();
    for line in lines.by_ref() {
        let Some(item) = line.trim().strip_prefix("- ") else {
            break;
        };
        items.push(item.trim_matches('"').to_owned());
    }
    items
}

/// The value of the first `key: value` line after the line `after`.
fn value_after(text: &str, after: &str, key: &str) -> String {
    text.lines()
        .skip_while(|line| line.trim() != after)
        .find_map(|line| line.trim().strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no {key} after {after}"))
        .trim_matches('"')
        .to_owned()
}

fn flag<'a>(args: &'a [String], name: &str) -> &'a str {
    let index = args.iter().position(|arg| arg == name).unwrap();
    &args[index + 1]
}

/// The files the ConfigMap volume mounts: its items' paths.
fn mounted_files(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter_map(|line| line.strip_prefix("path: "))
        .map(str::to_owned)
        .collect()
}

fn get(url: &str) -> (String, String) {
    let output = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", url])
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.to_owned(), body.to_owned())
}

/// One generation of the mounted ConfigMap: the files under `..NAME`, each
/// linked from the mount's top through `..data`, as the kubelet writes
/// them; the `..data` link swapped in one rename.
fn publish(mount: &Path, generation: &str, files: &[(String, Vec<u8>)]) {
    let directory = mount.join(format!("..{generation}"));
    std::fs::create_dir_all(&directory).unwrap();
    for (name, bytes) in files {
        std::fs::write(directory.join(name), bytes).unwrap();
        let top = mount.join(name);
        if std::fs::symlink_metadata(&top).is_err() {
            std::os::unix::fs::symlink(format!("..data/{name}"), &top).unwrap();
        }
    }
    let staged = mount.join("..data_tmp");
    std::os::unix::fs::symlink(format!("..{generation}"), &staged).unwrap();
    std::fs::rename(&staged, mount.join("..data")).unwrap();
}

#[test]
fn the_kubernetes_deployment_serves_and_reloads_a_swapped_configmap() {
    let text = manifest();
    let args = list_after(&text, "args:");
    assert_eq!(args[0], "serve");
    let pod = "routeval-serve-7d9f-abcde";
    let expanded: Vec<String> = args
        .iter()
        .map(|arg| arg.replace("$(POD_NAME)", pod))
        .collect();
    let mut argv = vec!["routeval".to_owned()];
    argv.extend(expanded.iter().cloned());
    routeval::cli::Cli::try_parse_from(&argv).unwrap_or_else(|error| panic!("{error}"));
    // Every file serve reads is mounted from the ConfigMap; the records
    // are on the records volume, one directory per pod.
    let config_mount = value_after(&text, "- name: config", "mountPath");
    let records_mount = value_after(&text, "- name: records", "mountPath");
    let mounted = mounted_files(&text);
    for name in ["--config", "--pubkey", "--router", "--keys"] {
        let file = flag(&expanded, name)
            .strip_prefix(&format!("{config_mount}/"))
            .unwrap_or_else(|| panic!("{name} is not under {config_mount}"));
        assert!(mounted.iter().any(|path| path == file), "{name} {file}");
    }
    let config_file = flag(&expanded, "--config").rsplit('/').next().unwrap();
    assert!(mounted.contains(&format!("{config_file}.minisig")));
    assert_eq!(
        flag(&expanded, "--records"),
        format!("{records_mount}/{pod}")
    );
    let port = flag(&expanded, "--listen").rsplit(':').next().unwrap();
    assert_eq!(value_after(&text, "ports:", "containerPort"), port);
    assert_eq!(value_after(&text, "readinessProbe:", "path"), "/readyz");
    assert_eq!(value_after(&text, "readinessProbe:", "port"), port);
    assert_eq!(value_after(&text, "livenessProbe:", "path"), "/healthz");
    assert_eq!(value_after(&text, "kind: Service", "targetPort"), port);

    // The same arguments, on a mount laid out as the kubelet lays it out.
    let pipeline = Pipeline::new();
    let sim = start_sim(
        &repo().join("datasets/demo/prompts.jsonl"),
        routeval::upstream_sim::SimSettings::default(),
    );
    let v1 = signed_single(&pipeline, &base_url(&sim), "v1", None);
    let v2 = signed_single(&pipeline, &base_url(&sim), "v2", Some(&v1));
    let keys = pipeline.path("keys.toml");
    write_keys(&keys);
    let files_of = |config: &Path| -> Vec<(String, Vec<u8>)> {
        let read = |path: &Path| std::fs::read(path).unwrap();
        let by_flag = |name: &str, source: &Path| {
            let file = flag(&expanded, name).rsplit('/').next().unwrap().to_owned();
            (file, read(source))
        };
        vec![
            by_flag("--config", config),
            (
                format!("{config_file}.minisig"),
                read(&routeval::routes::signature_path(config)),
            ),
            by_flag("--pubkey", &pipeline.out.join("keys/demo.key.pub")),
            by_flag("--router", &pipeline.out.join("router.bin")),
            by_flag("--keys", &keys),
        ]
    };
    let mount = pipeline.path("etc-routeval");
    publish(&mount, "2026_12_01_v1", &files_of(&v1));
    let records = pipeline.path("records-volume");
    let local: Vec<String> = expanded
        .iter()
        .map(|arg| {
            arg.replace(&config_mount, mount.to_str().unwrap())
                .replace(&records_mount, records.to_str().unwrap())
                .replace("0.0.0.0:8090", "127.0.0.1:0")
        })
        .collect();
    let served = Served::start(
        Command::new(binary())
            .args(&local)
            .env("ROUTEVAL_SIM_KEY", "unused-by-serve-sim"),
    );
    assert_eq!(get(&served.url("/readyz")).0, "200");
    assert_eq!(get(&served.url("/healthz")).0, "200");
    // `kubectl apply` of the next version: the kubelet swaps `..data`.
    publish(&mount, "2026_12_01_v2", &files_of(&v2));
    let reloaded = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        get(&served.url("/readyz")).1.contains("version 2")
    });
    let log = served.stop_with_log();
    assert!(reloaded, "version 2 was not served after the swap: {log}");
    let reloaded_lines = log_events(&log, "config_reloaded");
    assert_eq!(reloaded_lines.len(), 1, "{log}");
    assert_eq!(reloaded_lines[0]["config_version"], 2, "{log}");
    assert!(records.join(pod).join(".routeval-serve.lock").exists());
}

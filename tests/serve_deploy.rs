//! Running `routeval serve` outside Kubernetes, as `ci/` ships it: the
//! systemd unit (checked by `systemd-analyze verify`, then its `ExecStart`
//! run as written on a directory laid out as the unit names), the deploy
//! recipe `ci/deploy-config.sh` (a release switched in one rename, so serve
//! never refuses a half-copied config), and the Containerfile of the image
//! the Kubernetes manifest runs (built where a container engine runs, else
//! checked against the repository).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use clap::Parser;

use crate::common::{
    Pipeline, Served, base_url, binary, deploy, log_events, ready_at, repo, signed_single,
    start_sim, write_keys,
};

/// The unit's `ExecStart`, its continuation lines joined, split into words.
fn exec_start(unit: &str) -> Vec<String> {
    let joined = unit.replace("\\\n", " ");
    let line = joined
        .lines()
        .find_map(|line| line.strip_prefix("ExecStart="))
        .expect("the unit has an ExecStart");
    line.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn the_systemd_unit_verifies_and_serves_what_the_deploy_recipe_switches_to() {
    let unit = std::fs::read_to_string(repo().join("ci/routeval-serve.service")).unwrap();
    for hardening in [
        "DynamicUser=yes",
        "ProtectSystem=strict",
        "ReadWritePaths=/var/lib/routeval",
        "NoNewPrivileges=yes",
    ] {
        assert!(unit.lines().any(|line| line == hardening), "no {hardening}");
    }
    let words = exec_start(&unit);
    assert_eq!(words[0], "/usr/local/bin/routeval");
    let mut argv = vec!["routeval".to_owned()];
    argv.extend(words[1..].iter().cloned());
    routeval::cli::Cli::try_parse_from(&argv).unwrap_or_else(|error| panic!("{error}"));

    // systemd's own check, on the unit with this build as its binary: it
    // warns about any key it does not know, and any command it cannot run.
    let directory = tempfile::tempdir().unwrap();
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok()
    {
        let checked = directory.path().join("routeval-serve.service");
        std::fs::write(
            &checked,
            unit.replace("/usr/local/bin/routeval", binary().to_str().unwrap()),
        )
        .unwrap();
        let output = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&checked)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && stderr.trim().is_empty(),
            "{stderr}"
        );
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "systemd-analyze is missing; .ci/run installs systemd"
        );
        eprintln!("skipped systemd-analyze verify: not installed");
    }

    // /etc/routeval and /var/lib/routeval as the unit names them, under a
    // directory of the test's own, deployed by root and served, as the
    // unit serves, by a user of its own: the state directory is its
    // (`StateDirectory=`), everything else root's.
    let pipeline = Pipeline::shared();
    let sim = start_sim(
        &repo().join("datasets/demo/prompts.jsonl"),
        routeval::upstream_sim::SimSettings::default(),
    );
    let base_url = base_url(&sim);
    let v1 = signed_single(pipeline, &base_url, "systemd-v1", None);
    let v2 = signed_single(pipeline, &base_url, "systemd-v2", Some(&v1));
    std::fs::set_permissions(
        directory.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let etc = directory.path().join("etc/routeval");
    let state = directory.path().join("var/lib/routeval");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let user = unit_user(&state);
    std::fs::copy(
        pipeline.out.join("keys/demo.key.pub"),
        etc.join("routeval.pub"),
    )
    .unwrap();
    write_keys(&etc.join("keys.toml"));
    let live = etc.join("live");
    let pubkey = etc.join("routeval.pub");
    let router = pipeline.out.join("router.bin");
    // A config that pins the router is not deployed without it, nor with
    // another file in its place.
    let (deployed, stderr) = deploy(&v1, &live, &pubkey, None);
    assert!(
        !deployed && stderr.contains("pins a built-in router"),
        "{stderr}"
    );
    let (deployed, stderr) = deploy(&v1, &live, &pubkey, Some(&etc.join("keys.toml")));
    assert!(
        !deployed && stderr.contains("is not the router"),
        "{stderr}"
    );
    assert!(!live.exists());
    let (deployed, stderr) = deploy(&v1, &live, &pubkey, Some(&router));
    assert!(deployed, "{stderr}");
    let args: Vec<String> = words[1..]
        .iter()
        .map(|word| {
            word.replace("/etc/routeval", etc.to_str().unwrap())
                .replace("/var/lib/routeval", state.to_str().unwrap())
                .replace("127.0.0.1:8090", "127.0.0.1:0")
        })
        .collect();
    let binary = user.binary(directory.path());
    let served = Served::start(
        user.command(&binary)
            .args(&args)
            .env("ROUTEVAL_SIM_KEY", "unused-by-serve-sim"),
    );
    assert!(ready_at(&served, 1));
    // The next version, with no router given: the live one goes on.
    let (deployed, stderr) = deploy(&v2, &live, &pubkey, None);
    assert!(deployed, "{stderr}");
    assert!(ready_at(&served, 2), "version 2 was not served");
    // A release is never replaced, and what does not follow is not
    // switched to.
    let (redeployed, stderr) = deploy(&v2, &live, &pubkey, None);
    assert!(!redeployed, "{stderr}");
    let (back, stderr) = deploy(&v1, &live, &pubkey, Some(&router));
    assert!(!back && stderr.contains("verification failed"), "{stderr}");
    // ExecReload.
    served.signal("HUP");
    std::thread::sleep(Duration::from_millis(500));
    let log = served.stop_with_log();
    assert!(
        log_events(&log, "config_reload_refused").is_empty(),
        "{log}"
    );
    assert_eq!(log_events(&log, "config_reloaded").len(), 1, "{log}");
    assert_eq!(log_events(&log, "config_unchanged").len(), 1, "{log}");
    assert!(state.join("records/.routeval-serve.lock").exists());
}

/// Who runs the unit's `ExecStart` here: `nobody`, as systemd's dynamic
/// user would be (no access to root's files but what is world-readable),
/// when the test runs as root, which CI does; else this user.
enum UnitUser {
    Nobody,
    Itself,
}

/// The unit's user, the state directory made its own.
fn unit_user(state: &Path) -> UnitUser {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| output.stdout.starts_with(b"0\n"));
    if !root {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs the tests as root, so the unit runs as another user"
        );
        eprintln!("not root: the unit's ExecStart runs as this user");
        return UnitUser::Itself;
    }
    std::os::unix::fs::chown(state, Some(65534), Some(65534)).unwrap();
    UnitUser::Nobody
}

impl UnitUser {
    /// The binary where the unit's user may run it: a copy beside the
    /// test's files (the build's may be under a home only root enters).
    fn binary(&self, directory: &Path) -> PathBuf {
        match self {
            UnitUser::Itself => binary(),
            UnitUser::Nobody => {
                let copy = directory.join("routeval");
                std::fs::copy(binary(), &copy).unwrap();
                copy
            }
        }
    }

    fn command(&self, binary: &Path) -> Command {
        match self {
            UnitUser::Itself => Command::new(binary),
            UnitUser::Nobody => {
                let mut command = Command::new("setpriv");
                command
                    .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                    .arg(binary);
                command
            }
        }
    }
}

/// The instructions of a Containerfile: (keyword, rest), continuation lines
/// joined, comments dropped.
fn instructions(text: &str) -> Vec<(String, String)> {
    text.replace("\\\n", " ")
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (keyword, rest) = line.split_once(' ').unwrap_or((line, ""));
            (keyword.to_owned(), rest.trim().to_owned())
        })
        .collect()
}

/// Whether a container engine answers here.
fn engine() -> Option<&'static str> {
    ["podman", "docker"].into_iter().find(|engine| {
        Command::new(engine)
            .arg("info")
            .output()
            .is_ok_and(|output| output.status.success())
    })
}

#[test]
fn the_containerfile_builds_the_image_the_kubernetes_manifest_runs() {
    let containerfile = repo().join("ci/Containerfile");
    let text = std::fs::read_to_string(&containerfile).unwrap();
    let steps = instructions(&text);
    let known = [
        "FROM",
        "WORKDIR",
        "COPY",
        "RUN",
        "USER",
        "EXPOSE",
        "STOPSIGNAL",
        "ENTRYPOINT",
        "CMD",
    ];
    for (keyword, rest) in &steps {
        assert!(known.contains(&keyword.as_str()), "{keyword} {rest}");
    }
    let froms: Vec<&String> = steps
        .iter()
        .filter(|(keyword, _)| keyword == "FROM")
        .map(|(_, rest)| rest)
        .collect();
    assert_eq!(froms.len(), 2, "a build stage and a slim image");
    assert!(froms[1].contains("-slim"), "{}", froms[1]);
    // The build's Rust is at least the crate's rust-version.
    let manifest: toml::Value =
        toml::from_str(&std::fs::read_to_string(repo().join("Cargo.toml")).unwrap()).unwrap();
    let rust_version = manifest["package"]["rust-version"].as_str().unwrap();
    let image_rust = froms[0]
        .split(':')
        .nth(1)
        .and_then(|tag| tag.split('-').next())
        .unwrap();
    let parse = |version: &str| -> Vec<u64> {
        version
            .split('.')
            .map(|part| part.parse().unwrap())
            .collect()
    };
    assert!(
        parse(image_rust) >= parse(rust_version),
        "{image_rust} < {rust_version}"
    );

    // What the build copies in holds every file cargo reads: the declared
    // targets, and the demo's inputs the binary embeds.
    let copied: Vec<PathBuf> = steps
        .iter()
        .filter(|(keyword, rest)| keyword == "COPY" && !rest.starts_with("--from"))
        .flat_map(|(_, rest)| {
            let words: Vec<&str> = rest.split_whitespace().collect();
            words[..words.len() - 1]
                .iter()
                .map(PathBuf::from)
                .collect::<Vec<_>>()
        })
        .collect();
    for path in &copied {
        assert!(
            repo().join(path).exists(),
            "COPY {}: missing",
            path.display()
        );
    }
    let covered = |needed: &str| {
        copied
            .iter()
            .any(|path| Path::new(needed).starts_with(path))
    };
    let mut needed = vec!["src/main.rs".to_owned()];
    for kind in ["bench", "test"] {
        for target in manifest[kind].as_array().into_iter().flatten() {
            let name = target["name"].as_str().unwrap();
            needed.push(
                target
                    .get("path")
                    .and_then(toml::Value::as_str)
                    .map_or_else(|| format!("benches/{name}.rs"), str::to_owned),
            );
        }
    }
    let embedded = std::fs::read_to_string(repo().join("src/cli/demo_inputs.rs")).unwrap();
    needed.extend(
        embedded
            .split("embedded!(\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .filter(|path| !path.contains('$'))
            .map(str::to_owned),
    );
    assert!(needed.len() > 10, "{needed:?}");
    for path in &needed {
        assert!(covered(path), "{path} is not copied into the build");
    }

    // The image is the one the manifest runs: its entrypoint, its port, a
    // user without privileges, and the version it is tagged with.
    let last = |keyword: &str| {
        steps
            .iter()
            .rev()
            .find(|(their, _)| their == keyword)
            .map(|(_, rest)| rest.clone())
            .unwrap_or_else(|| panic!("no {keyword}"))
    };
    assert_eq!(last("ENTRYPOINT"), "[\"routeval\"]");
    assert_ne!(last("USER").split(':').next(), Some("0"));
    assert!(!last("USER").starts_with("root"));
    let k8s = std::fs::read_to_string(repo().join("ci/k8s-serve.yaml")).unwrap();
    assert!(k8s.contains(&format!("containerPort: {}", last("EXPOSE"))));
    assert!(k8s.contains("command: [\"routeval\"]"));
    let version = manifest["package"]["version"].as_str().unwrap();
    assert!(
        k8s.contains(&format!("routeval:{version}\n")),
        "the manifest's image is not tagged {version}"
    );

    let Some(engine) = engine() else {
        eprintln!(
            "skipped the image build: no container engine answers (podman info, docker info)"
        );
        return;
    };
    let tag = format!("routeval-test:{version}");
    let built = Command::new(engine)
        .args(["build", "-f"])
        .arg(&containerfile)
        .args(["-t", &tag])
        .arg(repo())
        .status()
        .unwrap();
    assert!(built.success());
    let ran = Command::new(engine)
        .args(["run", "--rm", &tag, "--version"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&ran.stdout).contains(version),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
}

#[test]
fn the_deploy_recipe_switches_only_to_what_serve_check_accepts() {
    let pipeline = Pipeline::shared();
    let config = signed_single(pipeline, "http://127.0.0.1:9/v1", "recipe-check", None);
    let directory = tempfile::tempdir().unwrap();
    let live = directory.path().join("live");
    let keys = directory.path().join("keys.toml");
    write_keys(&keys);
    let serve_flags = format!(
        "--keys {} --records {}",
        keys.display(),
        directory.path().join("records").display()
    );
    let recipe = |key_set: bool| {
        let mut command = Command::new(repo().join("ci/deploy-config.sh"));
        command
            .arg(&config)
            .arg(&live)
            .arg(pipeline.out.join("keys/demo.key.pub"))
            .arg(pipeline.out.join("router.bin"))
            .env("ROUTEVAL", binary())
            .env("ROUTEVAL_SERVE_FLAGS", &serve_flags);
        if key_set {
            command.env("ROUTEVAL_SIM_KEY", "a-key");
        } else {
            command.env_remove("ROUTEVAL_SIM_KEY");
        }
        command.output().unwrap()
    };
    // The routes' key variable is not set where serve would run: serve
    // would refuse the release, so nothing is switched and nothing is left.
    let refused = recipe(false);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("ROUTEVAL_SIM_KEY")
            && stderr.contains("serve --check refused")
            && stderr.contains("nothing was deployed"),
        "{stderr}"
    );
    assert!(!live.exists());
    let releases = directory.path().join("releases");
    assert_eq!(std::fs::read_dir(&releases).unwrap().count(), 0);
    // With it set, the check passes and the release goes live.
    let deployed = recipe(true);
    let stdout = String::from_utf8_lossy(&deployed.stdout);
    assert_eq!(deployed.status.code(), Some(0), "{deployed:?}");
    assert!(stdout.contains("(serve --check passed)"), "{stdout}");
    assert!(live.join("route-config.json").exists());
    // The check wrote nothing into the records directory serve will use.
    assert!(!directory.path().join("records").exists());
}

//! `ci/k8s-serve.yaml` as Kubernetes and the kubelet would take it: every
//! object passes Kubernetes' own schemas (strict, at the oldest release the
//! manifest names), and so does the ConfigMap serve reads, within the 1 MiB
//! an object may hold; the container's arguments parse as `routeval serve`,
//! every file they name is one the ConfigMap mounts or the init container
//! copies, the probes and the Service reach the port serve listens on, the
//! records claim is the one the manifest defines; and serve, started with
//! those very arguments on a mount laid out as the kubelet lays out a
//! ConfigMap (files behind a `..data` link), becomes ready and reloads the
//! next signed version when the link is swapped, with no signal.

use std::path::Path;
use std::process::Command;

use clap::Parser;
use serde_json::Value;

use crate::common::{
    Pipeline, Served, base_url, binary, log_events, python_named_by, repo, signed_single,
    start_sim, write_keys,
};

fn manifest() -> String {
    std::fs::read_to_string(repo().join("ci/k8s-serve.yaml")).unwrap()
}

/// The manifest's object of `kind`.
fn object<'a>(documents: &'a [Value], kind: &str) -> &'a Value {
    documents
        .iter()
        .find(|document| document["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in ci/k8s-serve.yaml"))
}

/// The entry of `list` whose `name` is `name`.
fn named<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["name"] == name)
        .unwrap_or_else(|| panic!("nothing named {name} in {list}"))
}

fn text(value: &Value) -> &str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("not text: {value}"))
}

fn flag<'a>(args: &'a [String], name: &str) -> &'a str {
    let index = args.iter().position(|arg| arg == name).unwrap();
    &args[index + 1]
}

/// The volume `container` mounts at the directory holding `file`, and the
/// file's name within it.
fn volume_of<'a>(container: &'a Value, file: &'a str) -> (&'a str, &'a str) {
    container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|mount| {
            let name = file.strip_prefix(&format!("{}/", text(&mount["mountPath"])))?;
            Some((text(&mount["name"]), name))
        })
        .unwrap_or_else(|| panic!("{file} is on no volume the container mounts"))
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

/// The serve container's arguments with the pod's name put in, and the
/// manifest's static promises about them checked: every file serve reads
/// comes from the ConfigMap or the router the init container copies, the
/// records are the claim's, one directory per pod, the probes and the
/// Service reach serve's port, and a stop has time to finish.
struct Deployment {
    args: Vec<String>,
    config_mount: String,
    router_mount: String,
    records_mount: String,
    provider_keys_mount: String,
}

fn deployment(pod: &str) -> Deployment {
    let documents = crate::common::actions::yaml_documents(&manifest());
    let pod_spec = &object(&documents, "Deployment")["spec"]["template"]["spec"];
    let serve = named(&pod_spec["containers"], "serve");
    let args: Vec<String> = serve["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|arg| text(arg).replace("$(POD_NAME)", pod))
        .collect();
    assert_eq!(args[0], "serve");
    let mut argv = vec!["routeval".to_owned()];
    argv.extend(args.iter().cloned());
    routeval::cli::Cli::try_parse_from(&argv).unwrap_or_else(|error| panic!("{error}"));
    let volumes = &pod_spec["volumes"];
    let mount_of =
        |volume: &str| text(&named(&serve["volumeMounts"], volume)["mountPath"]).to_owned();
    // The config, its signature, the public key and the keys: ConfigMap
    // items.
    let items: Vec<&str> = named(volumes, "config")["configMap"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| text(&item["path"]))
        .collect();
    for name in ["--config", "--pubkey", "--keys"] {
        let (volume, file) = volume_of(serve, flag(&args, name));
        assert_eq!(volume, "config", "{name}");
        assert!(
            items.contains(&file),
            "{name}: {file} is not a ConfigMap item"
        );
    }
    let config_file = flag(&args, "--config").rsplit('/').next().unwrap();
    assert!(items.contains(&format!("{config_file}.minisig").as_str()));
    // The providers' keys: a Secret's volume, read whole, so the kubelet's
    // updates reach serve (a subPath mount would never be updated).
    let provider_keys = flag(&args, "--provider-keys").to_owned();
    let secret_mount = serve["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|mount| mount["mountPath"] == provider_keys)
        .expect("--provider-keys is a mounted directory");
    assert!(secret_mount.get("subPath").is_none());
    let secret_volume = named(volumes, text(&secret_mount["name"]));
    assert!(secret_volume["secret"]["secretName"].is_string());
    assert!(serve.get("env").is_none_or(|env| {
        !env.as_array()
            .unwrap()
            .iter()
            .any(|variable| variable["valueFrom"]["secretKeyRef"].is_object())
    }));
    // The router: on a volume of the pod's own that the init container
    // fills with exactly that file.
    let router_flag = flag(&args, "--router").to_owned();
    let (volume, file) = volume_of(serve, &router_flag);
    assert!(named(volumes, volume)["emptyDir"].is_object(), "{volume}");
    let init = pod_spec["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|init| {
            init["volumeMounts"]
                .as_array()
                .is_some_and(|mounts| mounts.iter().any(|mount| mount["name"] == volume))
        })
        .expect("an init container fills the router's volume");
    let init_mount = text(&named(&init["volumeMounts"], volume)["mountPath"]);
    let copy: Vec<&str> = init["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(text)
        .collect();
    assert_eq!(copy[0], "cp");
    assert_eq!(copy.last().unwrap(), &format!("{init_mount}/{file}"));
    // Records: the claim the manifest defines, a directory per pod.
    let claim = text(&named(volumes, "records")["persistentVolumeClaim"]["claimName"]);
    assert_eq!(
        object(&documents, "PersistentVolumeClaim")["metadata"]["name"],
        claim
    );
    assert_eq!(
        flag(&args, "--records"),
        format!("{}/{pod}", mount_of("records"))
    );
    let port: u64 = flag(&args, "--listen")
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(serve["ports"][0]["containerPort"], port);
    // /metrics on its own port, which the Service does not expose.
    let admin: u64 = flag(&args, "--admin-listen")
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(serve["ports"][1]["name"], "admin");
    assert_eq!(serve["ports"][1]["containerPort"], admin);
    let service_ports = object(&documents, "Service")["spec"]["ports"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        service_ports
            .iter()
            .all(|exposed| exposed["targetPort"] != admin && exposed["targetPort"] != "admin"),
        "{service_ports:?}"
    );
    assert_eq!(serve["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(serve["readinessProbe"]["httpGet"]["port"], port);
    assert_eq!(serve["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(
        object(&documents, "Service")["spec"]["ports"][0]["targetPort"],
        port
    );
    // A stop: the endpoints drop the pod during the preStop sleep, then
    // serve has its total timeout (600 s by default) to finish.
    let sleep = serve["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_u64()
        .unwrap();
    let grace = pod_spec["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(grace >= sleep + 600, "{grace} s of grace");
    assert!(serve["resources"]["limits"]["memory"].is_string());
    Deployment {
        args,
        config_mount: mount_of("config"),
        router_mount: mount_of(volume),
        records_mount: mount_of("records"),
        provider_keys_mount: provider_keys,
    }
}

#[test]
fn the_kubernetes_deployment_serves_and_reloads_a_swapped_configmap() {
    let pod = "routeval-serve-7d9f-abcde";
    let Deployment {
        args: expanded,
        config_mount,
        router_mount,
        records_mount,
        provider_keys_mount,
    } = deployment(pod);
    let config_file = flag(&expanded, "--config").rsplit('/').next().unwrap();

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
            by_flag("--keys", &keys),
        ]
    };
    let mount = pipeline.path("etc-routeval");
    publish(&mount, "2026_12_01_v1", &files_of(&v1));
    // What the init container copied.
    let router = pipeline.path("router-volume");
    std::fs::create_dir_all(&router).unwrap();
    std::fs::copy(
        pipeline.out.join("router.bin"),
        router.join(flag(&expanded, "--router").rsplit('/').next().unwrap()),
    )
    .unwrap();
    let records = pipeline.path("records-volume");
    // The Secret's volume, holding the variable the demo's routes name.
    let secret = pipeline.path("secret-volume");
    let key_file = |key: &str| vec![("ROUTEVAL_SIM_KEY".to_owned(), key.as_bytes().to_vec())];
    publish(&secret, "2026_12_01_first", &key_file("sk-first"));
    let admin = {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        free.local_addr().unwrap().to_string()
    };
    let local: Vec<String> = expanded
        .iter()
        .map(|arg| {
            arg.replace(&config_mount, mount.to_str().unwrap())
                .replace(&router_mount, router.to_str().unwrap())
                .replace(&records_mount, records.to_str().unwrap())
                .replace(&provider_keys_mount, secret.to_str().unwrap())
                .replace("0.0.0.0:8090", "127.0.0.1:0")
                .replace("0.0.0.0:9090", &admin)
        })
        .collect();
    // No key in the environment: the pod has none.
    let served = Served::start(
        Command::new(binary())
            .args(&local)
            .env_remove("ROUTEVAL_SIM_KEY"),
    );
    assert_eq!(get(&served.url("/readyz")).0, "200");
    assert_eq!(get(&served.url("/healthz")).0, "200");
    assert_eq!(
        get(&served.url("/metrics")).0,
        "404",
        "off the traffic port"
    );
    // `kubectl apply` of the next version: the kubelet swaps `..data`.
    publish(&mount, "2026_12_01_v2", &files_of(&v2));
    let reloaded = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        get(&served.url("/readyz")).1.contains("version 2")
    });
    // A key rotated in the Secret: the kubelet swaps its volume's `..data`.
    publish(&secret, "2026_12_01_second", &key_file("sk-second"));
    let rotated = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        get(&format!("http://{admin}/metrics"))
            .1
            .contains("routeval_provider_keys_reloads_total{outcome=\"applied\"} 1")
    });
    let log = served.stop_with_log();
    assert!(reloaded, "version 2 was not served after the swap: {log}");
    assert!(rotated, "the rotated key was not taken: {log}");
    assert_eq!(log_events(&log, "provider_keys_reloaded").len(), 1, "{log}");
    let reloaded_lines = log_events(&log, "config_reloaded");
    assert_eq!(reloaded_lines.len(), 1, "{log}");
    assert_eq!(reloaded_lines[0]["config_version"], 2, "{log}");
    assert!(records.join(pod).join(".routeval-serve.lock").exists());
}

/// The oldest Kubernetes the manifest says it runs on (its preStop `sleep`).
const OLDEST: &str = "1.30.0";

/// ConfigMaps, like every object, hold at most 1 MiB.
const OBJECT_LIMIT: u64 = 1 << 20;

#[test]
fn the_manifests_and_the_configmap_pass_kubernetes_schemas_within_object_limits() {
    let Some(python) = python_named_by("ROUTEVAL_TEST_K8S_PYTHON", "kubernetes-validate") else {
        return;
    };
    let validator = Path::new(&python).with_file_name("kubernetes-validate");
    let validate = |file: &Path, version: &str| {
        let output = Command::new(&validator)
            .args(["--strict", "--quiet", "-k", version])
            .arg(file)
            .output()
            .unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned()
                + &String::from_utf8_lossy(&output.stderr),
        )
    };
    for manifest in ["ci/k8s-serve.yaml", "ci/k8s-indexed-job.yaml"] {
        let (valid, said) = validate(&repo().join(manifest), OLDEST);
        assert!(valid, "{manifest}: {said}");
    }
    // The preStop sleep is not in 1.28's API (1.29 has it behind an alpha
    // gate, on from 1.30): the header's floor is real.
    let (valid, said) = validate(&repo().join("ci/k8s-serve.yaml"), "1.28.0");
    assert!(!valid && said.contains("sleep"), "{said}");

    // The ConfigMap the Deployment mounts, as `kubectl create configmap
    // routeval-serve --from-file=…` makes it from the demo's files.
    let pipeline = Pipeline::shared();
    let config = signed_single(pipeline, "http://127.0.0.1:9/v1", "k8s-configmap", None);
    let keys = pipeline.path("k8s-configmap-keys.toml");
    write_keys(&keys);
    let Deployment { args, .. } = deployment("routeval-serve-0");
    let name_of = |flag_name: &str| {
        flag(&args, flag_name)
            .rsplit('/')
            .next()
            .unwrap()
            .to_owned()
    };
    let read = |path: &Path| std::fs::read_to_string(path).unwrap();
    let data = serde_json::json!({
        name_of("--config"): read(&config),
        format!("{}.minisig", name_of("--config")): read(&routeval::routes::signature_path(&config)),
        name_of("--pubkey"): read(&pipeline.out.join("keys/demo.key.pub")),
        name_of("--keys"): read(&keys),
    });
    let config_map = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "routeval-serve"},
        "data": data,
    });
    let file = pipeline.path("k8s-configmap.json");
    std::fs::write(&file, serde_json::to_vec(&config_map).unwrap()).unwrap();
    let (valid, said) = validate(&file, OLDEST);
    assert!(valid, "{said}");
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(size < OBJECT_LIMIT / 16, "the ConfigMap is {size} bytes");
    // The router alone is past the limit: it comes from its own image.
    let router = std::fs::metadata(pipeline.out.join("router.bin"))
        .unwrap()
        .len();
    assert!(router > OBJECT_LIMIT, "the router is {router} bytes");
    let containerfile = read(&repo().join("ci/Containerfile.router"));
    assert!(
        containerfile
            .lines()
            .any(|line| line == "COPY router.bin /router.bin")
    );
}

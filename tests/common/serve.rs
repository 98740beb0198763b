//! Serving helpers shared by the serve tests: the demo's pipeline gated for
//! serve, serve started on a free port, its keys, requests by curl, and a
//! Parquet column read as JSON values.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Float64Type};
use serde_json::{Value, json};

use super::{binary, repo, routeval};

pub const KEY: &str = "sk-serve-test-0123456789";
pub const EU_KEY: &str = "sk-serve-test-eu-tenant";
pub const NOWHERE_KEY: &str = "sk-serve-test-nowhere";

/// A column of a Parquet table as text, numbers or booleans, by name.
pub fn column(path: &Path, name: &str) -> Vec<Value> {
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let mut values = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        let array = batch
            .column_by_name(name)
            .unwrap_or_else(|| panic!("{}: no column {name}", path.display()));
        for index in 0..array.len() {
            values.push(if array.is_null(index) {
                Value::Null
            } else {
                match array.data_type() {
                    DataType::Boolean => json!(array.as_boolean().value(index)),
                    DataType::Utf8 => json!(array.as_string::<i32>().value(index)),
                    DataType::LargeUtf8 => json!(array.as_string::<i64>().value(index)),
                    _ => {
                        let cast = arrow::compute::cast(array, &DataType::Float64).unwrap();
                        json!(cast.as_primitive::<Float64Type>().value(index))
                    }
                }
            });
        }
    }
    values
}

/// The status code of an HTTP response's text (`curl -i`'s, or read off
/// the socket).
pub fn status_of(response: &str) -> u16 {
    response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {response:?}"))
}

/// A running `routeval serve`, killed if a test fails with it running.
pub struct Served {
    child: Option<Child>,
    pid: u32,
    address: String,
}

impl Served {
    /// Starts `command` (a `routeval serve`) and reads the address its
    /// first line names.
    pub fn start(command: &mut Command) -> Served {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let address = line
            .trim()
            .rsplit_once("http://")
            .map(|(_, rest)| rest.trim_end_matches("/v1").to_owned())
            .unwrap_or_else(|| {
                let mut stderr = String::new();
                std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr)
                    .unwrap();
                panic!("serve did not start: {line}{stderr}")
            });
        Served {
            pid: child.id(),
            child: Some(child),
            address,
        }
    }

    /// The process started: serve, or what runs it (a shell, strace).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// SIGTERM, as an operator stops it: it must exit 0 having rolled its
    /// records.
    pub fn stop(self) {
        self.stop_with_log();
    }

    /// [`Served::stop`], returning what serve wrote to stderr.
    pub fn stop_with_log(self) -> String {
        self.signal("TERM");
        self.wait_with_log()
    }

    /// Waits for serve to exit, stopped by a signal sent some other way;
    /// it must exit 0. What serve wrote to stderr.
    pub fn wait_with_log(mut self) -> String {
        let mut child = self.child.take().expect("running");
        let status = child.wait().unwrap();
        let mut log = String::new();
        if let Some(mut stderr) = child.stderr.take() {
            std::io::Read::read_to_string(&mut stderr, &mut log).unwrap();
        }
        assert!(status.success(), "serve stopped with {status}: {log}");
        log
    }

    /// `curl -i` of a chat request with `key` and the slice header: the
    /// response's head and body as text.
    pub fn post(&self, key: &str, slice: &str, body: &Value, flags: &[&str]) -> String {
        let output = Command::new("curl")
            .args(["-s", "-i"])
            .args(flags)
            .arg("-H")
            .arg(format!("Authorization: Bearer {key}"))
            .args([
                "-H",
                &format!("x-routeval-slice: {slice}"),
                "-d",
                &body.to_string(),
            ])
            .arg(self.url("/v1/chat/completions"))
            .output()
            .unwrap();
        String::from_utf8(output.stdout).unwrap()
    }

    pub fn signal(&self, name: &str) {
        let pid = self
            .child
            .as_ref()
            .map_or_else(|| self.pid.to_string(), |child| child.id().to_string());
        Command::new("kill")
            .args([&format!("-{name}"), &pid])
            .status()
            .unwrap();
    }
}

impl Drop for Served {
    /// A test that failed leaves no server behind.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// serve's log as the JSON lines it writes when stderr is not a terminal;
/// every line must be one, with the fields every line has.
pub fn log_lines(log: &str) -> Vec<Value> {
    log.lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("a log line that is not JSON ({error}): {line}"));
            for field in ["schema_version", "time", "level", "event", "message"] {
                assert!(value.get(field).is_some(), "no {field} in {line}");
            }
            assert_eq!(value["schema_version"], 1, "{line}");
            value
        })
        .collect()
}

/// The lines of `log` about `event`.
pub fn log_events(log: &str, event: &str) -> Vec<Value> {
    log_lines(log)
        .into_iter()
        .filter(|line| line["event"] == event)
        .collect()
}

/// Runs `ci/deploy-config.sh NEW LIVE PUBKEY` with this build as
/// `routeval`: whether it deployed, and its stderr.
pub fn deploy(new: &Path, live: &Path, pubkey: &Path, router: Option<&Path>) -> (bool, String) {
    let output = Command::new(repo().join("ci/deploy-config.sh"))
        .arg(new)
        .arg(live)
        .arg(pubkey)
        .args(router)
        .env("ROUTEVAL", binary())
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `/readyz` once it names `version`, within ten seconds.
pub fn ready_at(served: &Served, version: u64) -> bool {
    (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let output = Command::new("curl")
            .args(["-s", "--max-time", "5"])
            .arg(served.url("/readyz"))
            .output()
            .unwrap();
        // `ready: ID version N`, and after a refused reload `; refused …`.
        let said = String::from_utf8_lossy(&output.stdout).into_owned();
        said.contains(&format!("version {version}\n"))
            || said.contains(&format!("version {version};"))
    })
}

/// The value of response header `name` in `curl -i` output.
pub fn header_of(response: &str, name: &str) -> String {
    response
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{name}: ")))
        .unwrap_or_else(|| panic!("no {name} in {response}"))
        .trim()
        .to_owned()
}

/// `routeval serve` on a free port, with the routes' key variable set.
pub fn serve_command(
    config: &Path,
    pubkey: &Path,
    router: &Path,
    keys: &Path,
    records: &Path,
) -> Command {
    let mut command = Command::new(binary());
    command
        .arg("serve")
        .arg("--config")
        .arg(config)
        .arg("--pubkey")
        .arg(pubkey)
        .arg("--router")
        .arg(router)
        .arg("--keys")
        .arg(keys)
        .arg("--records")
        .arg(records)
        .args(["--listen", "127.0.0.1:0"])
        .env("ROUTEVAL_SIM_KEY", "unused-by-serve-sim");
    command
}

/// Starts serve; its first line names the address it listens on.
pub fn start_serve(
    config: &Path,
    pubkey: &Path,
    router: &Path,
    keys: &Path,
    records: &Path,
    extra: &[&str],
) -> Served {
    Served::start(serve_command(config, pubkey, router, keys, records).args(extra))
}

pub fn write_keys(path: &Path) {
    let digest = |key: &str| routeval::digest::sha256_hex(key.as_bytes());
    let mut text = String::new();
    for (key, tenant) in [
        (KEY, "demo"),
        (EU_KEY, "eu-tenant"),
        (NOWHERE_KEY, "nowhere"),
    ] {
        text.push_str(&format!(
            "[[keys]]\nsha256 = \"{}\"\ntenant = \"{tenant}\"\n\n",
            digest(key)
        ));
    }
    std::fs::write(path, text).unwrap();
}

/// The demo's candidates pointed at `base_url`, gated on `results`.
pub struct Pipeline {
    directory: tempfile::TempDir,
    pub out: PathBuf,
    /// The scores the full router gives every prompt: what serve computes.
    pub full: PathBuf,
}

impl Pipeline {
    pub fn new() -> Pipeline {
        Pipeline::new_in(tempfile::tempdir().unwrap())
    }

    /// One pipeline for every test of the binary that needs only its
    /// outputs (each test gates its own config under a name of its own),
    /// under the target's temporary directory.
    pub fn shared() -> &'static Pipeline {
        static SHARED: std::sync::OnceLock<Pipeline> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| {
            Pipeline::new_in(tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap())
        })
    }

    fn new_in(directory: tempfile::TempDir) -> Pipeline {
        let out = directory.path().join("demo");
        routeval()
            .current_dir(repo())
            .args(["demo", "--out"])
            .arg(&out)
            .arg("--report")
            .arg(directory.path().join("report"))
            .assert()
            .success();
        // The scores the full router gives every prompt: what serve computes.
        let full = directory.path().join("full-scores.parquet");
        routeval()
            .args(["router", "score", "--router"])
            .arg(out.join("router.bin"))
            .arg("--results")
            .arg(out.join("graded-scored.parquet"))
            .arg("--out")
            .arg(&full)
            .args(["--into", "router_score"])
            .assert()
            .success();
        Pipeline {
            directory,
            out,
            full,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.directory.path().join(name)
    }

    /// `routeval gate --target TARGET` of `tables` on the demo's results,
    /// with its predictive calibration, its router pinned and its key,
    /// [`serve_command`] of `config` with the demo's public key and router.
    pub fn serve_demo(&self, config: &Path, keys: &Path, records: &Path) -> Command {
        serve_command(
            config,
            &self.out.join("keys/demo.key.pub"),
            &self.out.join("router.bin"),
            keys,
            records,
        )
    }

    /// into `out`; more flags may follow.
    pub fn gate_pinned(&self, tables: &[&Path], target: &str, out: &Path) -> assert_cmd::Command {
        self.gate_calibrated(tables, target, out, "predictive")
    }

    /// [`Pipeline::gate_pinned`] with the demo's calibration `name`
    /// (`predictive`, `predictive-three-tier`, `cascade`).
    pub fn gate_calibrated(
        &self,
        tables: &[&Path],
        target: &str,
        out: &Path,
        name: &str,
    ) -> assert_cmd::Command {
        let mut command = routeval();
        command
            .args(["gate", "--target", target, "--candidates"])
            .args(tables)
            .arg("--results")
            .arg(self.out.join("graded-scored.parquet"))
            .arg("--calibration")
            .arg(self.out.join(format!("calibration-{name}.json")))
            .arg("--router")
            .arg(self.out.join("router.bin"))
            .arg("--key")
            .arg(self.out.join("keys/demo.key"))
            .arg("--out")
            .arg(out);
        command
    }

    /// Gates `candidate` (its routes pointed at `base_url`) on `results`
    /// into `name`; the gate's report.
    pub fn gate(&self, candidate: &str, base_url: &str, results: &Path, name: &str) -> Value {
        let text = std::fs::read_to_string(repo().join("datasets/demo/routes").join(candidate))
            .unwrap()
            .replace("http://127.0.0.1:8089/v1", base_url);
        let table = self.path(&format!("{name}-{candidate}"));
        std::fs::write(&table, text).unwrap();
        let mut command = routeval();
        command
            .args(["gate", "--candidates"])
            .arg(&table)
            .arg("--results")
            .arg(results)
            .arg("--calibration");
        for calibration in ["cascade", "predictive", "predictive-three-tier"] {
            command.arg(self.out.join(format!("calibration-{calibration}.json")));
        }
        command
            .args(["--target", "0.8", "--router"])
            .arg(self.out.join("router.bin"))
            .arg("--rubrics")
            .arg(repo().join("rubrics"))
            .arg("--key")
            .arg(self.out.join("keys/demo.key"))
            .arg("--out")
            .arg(self.path(name));
        let output = command.output().unwrap();
        assert!(
            output.status.code().unwrap() < 2,
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&std::fs::read(self.path(name).join("gate-report.json")).unwrap())
            .unwrap()
    }
}

/// The demo's predictive table, its routes at `base_url`: with `threshold`,
/// that one threshold for every slice and unnamed slices served by it
/// (`unknown_slice = "global"`); without, its thresholds from calibration.
pub fn demo_predictive(threshold: Option<f64>, base_url: &str) -> String {
    let text = std::fs::read_to_string(repo().join("datasets/demo/routes/predictive.toml"))
        .unwrap()
        .replace("http://127.0.0.1:8089/v1", base_url);
    match threshold {
        Some(threshold) => text
            .replace(
                "thresholds_from_calibration = true",
                &format!("thresholds = {{ \"*\" = {threshold} }}"),
            )
            .replace(
                "unknown_slice = \"strongest\"",
                "unknown_slice = \"global\"",
            ),
        None => text,
    }
}

/// Sends each of `requests` (id, slice, prompt) to serve as a chat
/// request under its own id, sixteen at a time: each id's answering route.
pub fn ask_all(served: &Served, requests: &[(String, String, String)]) -> BTreeMap<String, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = routeval::client::http_client(16).unwrap();
    let url = served.url("/v1/chat/completions");
    runtime.block_on(async {
        let mut routes = BTreeMap::new();
        for chunk in requests.chunks(16) {
            let answers = chunk.iter().map(|(id, slice, prompt)| {
                let request = client
                    .post(&url)
                    .bearer_auth(KEY)
                    .header("x-routeval-slice", slice)
                    .header("x-request-id", id)
                    .json(&json!({
                        "model": "support-assistant",
                        "messages": [{"role": "user", "content": prompt}],
                        "max_tokens": 16,
                    }))
                    .send();
                async move {
                    let response = request.await.unwrap();
                    assert_eq!(response.status(), 200);
                    let route = response.headers()["x-routeval-route"]
                        .to_str()
                        .unwrap()
                        .to_owned();
                    response.bytes().await.unwrap();
                    (id.clone(), route)
                }
            });
            routes.extend(futures_util::future::join_all(answers).await);
        }
        routes
    })
}

/// The threshold a signed two-tier predictive config gives `slice`.
pub fn signed_threshold(config: &Value, slice: &str) -> f64 {
    let thresholds = &config["table"]["policy"]["predictive"]["thresholds"];
    let value = thresholds["slices"]
        .get(slice)
        .unwrap_or(&thresholds["default"]);
    match value {
        Value::String(text) if text == "inf" => f64::INFINITY,
        other => other
            .as_f64()
            .unwrap_or_else(|| panic!("not a threshold: {other}")),
    }
}

/// Every prompt of the demo's dataset: (id, slice, prompt).
pub fn demo_prompts() -> Vec<(String, String, String)> {
    std::fs::read_to_string(repo().join("datasets/demo/prompts.jsonl"))
        .unwrap()
        .lines()
        .map(|line| {
            let row: Value = serde_json::from_str(line).unwrap();
            (
                row["id"].as_str().unwrap().to_owned(),
                row["slice"].as_str().unwrap().to_owned(),
                row["prompt"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// A one-route config signed for these tests, pointed at `base_url`, with
/// a constraint: the EU tenant may only be served from the EU.
pub fn signed_single(
    pipeline: &Pipeline,
    base_url: &str,
    name: &str,
    baseline: Option<&Path>,
) -> PathBuf {
    signed_single_with(pipeline, base_url, name, baseline, "")
}

/// [`signed_single`] of the table with `extra` TOML after it (a
/// `[serving.tenants]` block, say).
pub fn signed_single_with(
    pipeline: &Pipeline,
    base_url: &str,
    name: &str,
    baseline: Option<&Path>,
    extra: &str,
) -> PathBuf {
    let text = std::fs::read_to_string(repo().join("datasets/demo/routes/predictive.toml"))
        .unwrap()
        .replace("http://127.0.0.1:8089/v1", base_url)
        .replace(
            "model = \"sim-large-2026-11-01\"\nregion = \"local\"",
            "model = \"sim-large-2026-11-01\"\nregion = \"eu\"",
        )
        + "\n[constraints.eu-tenant]\nregions = [\"eu\"]\n\n[constraints.nowhere]\nregions = [\"mars\"]\n"
        + extra;
    let table = pipeline.path(&format!("{name}.toml"));
    std::fs::write(&table, text).unwrap();
    let out = pipeline.path(name);
    let mut command = gate_single(pipeline, &table, &out, None, true);
    if let Some(baseline) = baseline {
        command.arg("--baseline").arg(baseline);
    }
    command.assert().success();
    let version = if baseline.is_some() { 2 } else { 1 };
    out.join(format!("route-config.v{version}.json"))
}

/// `routeval gate` of `table` (TOML text, written as `NAME.toml`), unpinned,
/// signed with the demo's key: `NAME/route-config.v1.json`.
pub fn signed_table(pipeline: &Pipeline, name: &str, table: &str) -> PathBuf {
    let path = pipeline.path(&format!("{name}.toml"));
    std::fs::write(&path, table).unwrap();
    let out = pipeline.path(name);
    gate_single(pipeline, &path, &out, None, false)
        .assert()
        .success();
    out.join("route-config.v1.json")
}

/// `routeval gate` of a table [`signed_single`] wrote (`NAME.toml`) into
/// `out`, signed with `key` (the demo's when `None`), with `--router` when
/// `pinned`; more flags may follow.
pub fn gate_single(
    pipeline: &Pipeline,
    table: &Path,
    out: &Path,
    key: Option<&Path>,
    pinned: bool,
) -> assert_cmd::Command {
    let mut command = routeval();
    command
        .args([
            "gate",
            "--allow-unknown-slices",
            "--target",
            "0.8",
            "--candidates",
        ])
        .arg(table)
        .arg("--results")
        .arg(pipeline.out.join("graded-scored.parquet"))
        .arg("--calibration")
        .arg(pipeline.out.join("calibration-predictive.json"))
        .arg("--key")
        .arg(key.map_or_else(|| pipeline.out.join("keys/demo.key"), Path::to_owned))
        .arg("--out")
        .arg(out);
    if pinned {
        command.arg("--router").arg(pipeline.out.join("router.bin"));
    }
    command
}

/// The demo's `large` route on `base_url` allowing `rpm`, with `breaker`
/// (TOML lines of the route) after it.
fn large_route(base_url: &str, breaker: &str, rpm: u64) -> String {
    format!(
        r#"[[routes]]
name = "large"
provider = "routeval-sim"
base_url = "{base_url}"
api_key_env = "ROUTEVAL_SIM_KEY"
model = "sim-large-2026-11-01"
region = "local"
tier = "large"
prompt_variant = "support-demo-v1"
price_input_per_mtok = 3.0
price_output_per_mtok = 15.0
rpm = {rpm}
tpm = 40000000
{breaker}
"#
    )
}

/// The demo's `large` route alone on `base_url`, with `breaker` (TOML
/// lines of the route) and no fallback.
pub fn one_route(base_url: &str, breaker: &str) -> String {
    format!(
        "logical_model = \"support-assistant\"\n\n{}[policy.single]\nroute = \"large\"\n\n[serving]\nunknown_slice = \"global\"\n",
        large_route(base_url, breaker, 20_000)
    )
}

/// The demo's one-route table falling back to a backup route (sim-small,
/// on its own serve-sim), and optionally a breaker; both routes allow `rpm`
/// (the gate wants a fallback that can absorb its primary's limit).
pub fn falling_back(primary: &str, backup: &str, breaker: &str, rpm: u64) -> String {
    format!(
        r#"logical_model = "support-assistant"

{large}[[routes]]
name = "backup"
provider = "routeval-sim"
base_url = "{backup}"
api_key_env = "ROUTEVAL_SIM_KEY"
model = "sim-small-2026-11-01"
region = "local"
tier = "small"
prompt_variant = "support-demo-v1"
price_input_per_mtok = 0.15
price_output_per_mtok = 0.60
rpm = {rpm}
tpm = 100000000

[[fallbacks]]
route = "large"
to = ["backup"]

[policy.single]
route = "large"

[serving]
unknown_slice = "global"
"#,
        large = large_route(primary, breaker, rpm)
    )
}

/// Every record serve wrote into `records` (its Parquet parts, after it
/// stopped), as JSON objects of the columns `names`.
pub fn served_records(records: &Path, names: &[&str]) -> Vec<Value> {
    let mut parts: Vec<PathBuf> = std::fs::read_dir(records)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "parquet"))
        .collect();
    parts.sort();
    let mut rows = Vec::new();
    for part in parts {
        let columns: Vec<Vec<Value>> = names.iter().map(|name| column(&part, name)).collect();
        for index in 0..columns[0].len() {
            let mut row = serde_json::Map::new();
            for (name, values) in names.iter().zip(&columns) {
                row.insert((*name).to_owned(), values[index].clone());
            }
            rows.push(Value::Object(row));
        }
    }
    rows
}

/// A chat request named `id` asking `content`, by curl, with the demo's
/// client key and more `headers`: its status.
pub fn ask_with(served: &Served, id: &str, content: &str, headers: &[String]) -> u16 {
    let body = json!({
        "model": "support-assistant",
        "messages": [{"role": "user", "content": content}],
    });
    let mut command = Command::new("curl");
    command
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "20",
        ])
        .args(["-H", &format!("Authorization: Bearer {KEY}")])
        .args(["-H", &format!("x-request-id: {id}")]);
    for header in headers {
        command.args(["-H", header]);
    }
    let output = command
        .args(["-d", &body.to_string()])
        .arg(served.url("/v1/chat/completions"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).parse().unwrap()
}

//! A LiteLLM export loaded into a real LiteLLM `Router`.

use std::path::Path;

/// Loads `export` into LiteLLM; skipped without `ROUTEVAL_TEST_PYTHON`,
/// a failure under CI.
pub fn loads_into_litellm(export: &Path) {
    let Some(python) =
        crate::common::test_python(&format!("loading {} into LiteLLM", export.display()))
    else {
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/litellm_load.py");
    let output = std::process::Command::new(python)
        .arg(script)
        .arg(export)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "LiteLLM refused {}:\n{stdout}\n{stderr}",
        export.display()
    );
    assert!(stdout.contains("model names"), "{stdout}");
}

/// What LiteLLM, with the export's own `router_settings` and every
/// deployment made to fail, says of calls to `model`: `failed N before the
/// cooldown` or `never cooled down`; `None` without `ROUTEVAL_TEST_PYTHON`.
pub fn cooldown_of(export: &Path, model: &str) -> Option<String> {
    let python = crate::common::test_python(&format!(
        "failing {model} of {} in LiteLLM",
        export.display()
    ))?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/litellm_cooldown.py");
    let output = std::process::Command::new(python)
        .arg(script)
        .arg(export)
        .arg(model)
        .env("LITELLM_LOG", "CRITICAL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(stdout.lines().last().unwrap_or_default().to_owned())
}

/// A real LiteLLM proxy (`litellm --config`), with the capture callbacks
/// of `tests/fixtures/litellm_capture.py`; killed when dropped.
pub struct Proxy {
    child: std::process::Child,
    pub url: String,
    python: std::ffi::OsString,
    pub capture: std::path::PathBuf,
}

/// The Python of a venv with `litellm[proxy]`; skipped without
/// `ROUTEVAL_TEST_PROXY_PYTHON`, a failure under CI.
pub fn proxy_python(what: &str) -> Option<std::ffi::OsString> {
    crate::common::python_named_by("ROUTEVAL_TEST_PROXY_PYTHON", what)
}

pub const PROXY_KEY: &str = "sk-litellm-proxy-test-master";

impl Proxy {
    /// Starts the proxy on `export` (the gate's LiteLLM YAML) plus the
    /// capture callbacks and a master key, with `env` set, and waits until
    /// it answers.
    pub fn start(
        python: &std::ffi::OsStr,
        export: &Path,
        directory: &Path,
        env: &[(&str, &str)],
    ) -> Proxy {
        std::fs::create_dir_all(directory).unwrap();
        let config = directory.join("proxy.yaml");
        let callbacks = "  callbacks: [\"litellm_capture.spend\", \"litellm_capture.standard\"]\n";
        let export = std::fs::read_to_string(export).unwrap();
        let mut text = if export.contains("\nlitellm_settings:\n") {
            export.replacen(
                "\nlitellm_settings:\n",
                &format!("\nlitellm_settings:\n{callbacks}"),
                1,
            )
        } else {
            format!("{export}litellm_settings:\n{callbacks}")
        };
        text.push_str(&format!(
            "general_settings:\n  master_key: \"{PROXY_KEY}\"\n"
        ));
        std::fs::write(&config, text).unwrap();
        let capture = directory.join("capture");
        std::fs::create_dir_all(&capture).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let litellm = Path::new(python).with_file_name("litellm");
        let log = std::fs::File::create(directory.join("proxy.log")).unwrap();
        let mut command = std::process::Command::new(litellm);
        command
            .arg("--config")
            .arg(&config)
            .args([
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--num_workers",
                "1",
            ])
            .env(
                "PYTHONPATH",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"),
            )
            .env("ROUTEVAL_CAPTURE_DIR", &capture)
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        for (name, value) in env {
            command.env(name, value);
        }
        let child = command.spawn().unwrap();
        let proxy = Proxy {
            child,
            url: format!("http://127.0.0.1:{port}"),
            python: python.to_owned(),
            capture,
        };
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_secs(120) {
            let output = std::process::Command::new("curl")
                .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
                .arg(format!("{}/health/liveliness", proxy.url))
                .output()
                .unwrap();
            if output.stdout == b"200" {
                return proxy;
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        panic!(
            "the LiteLLM proxy did not start: {}",
            std::fs::read_to_string(directory.join("proxy.log")).unwrap_or_default()
        );
    }

    /// Sends `count` requests for `model` (every other one streamed),
    /// `concurrency` at a time, cycling through `prompts`, with the OpenAI
    /// client; appends what the client saw to `out`, tagged `phase`.
    pub fn drive(
        &self,
        model: &str,
        prompts: &Path,
        phase: &str,
        count: usize,
        concurrency: usize,
        out: &Path,
    ) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/litellm_drive.py");
        let output = std::process::Command::new(&self.python)
            .arg(script)
            .arg(format!("{}/v1", self.url))
            .args([PROXY_KEY, model])
            .arg(prompts)
            .args([phase, &count.to_string(), &concurrency.to_string()])
            .arg(out)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Lines of a capture file (`spend.jsonl`, `standard.jsonl`) so far.
    pub fn captured(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.capture.join(name))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

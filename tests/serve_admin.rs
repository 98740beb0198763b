//! serve's operator surfaces apart from its traffic: `--admin-listen` takes
//! `/metrics` (tenants, routes, spend) off the traffic port and serves it
//! with the probes on an address of its own; OpenTelemetry's standard
//! variables say where traces go, which are sampled and under what service
//! name, read by a real OTLP decoder; a bad one stops the start.

use std::path::Path;
use std::process::Command;

use serde_json::json;

use crate::common::otlp::Collector;
use crate::common::{
    KEY, Pipeline, ScriptedUpstream, Served, answers_hello, ask_with, log_events, proxy_python,
    signed_single, status_of, write_keys,
};

/// serve of `config` as `command` is changed, its keys and records in
/// `directory`.
fn serve_command(config: &Path, directory: &Path) -> Command {
    let keys = directory.join("keys.toml");
    write_keys(&keys);
    Pipeline::shared().serve_demo(config, &keys, &directory.join("records"))
}

/// A loopback address no one listens on now.
fn free_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// `curl -i` of `url` with `headers`: the response's head and body.
fn get(url: &str, headers: &[&str]) -> String {
    let mut command = Command::new("curl");
    command.args(["-s", "-i", "--max-time", "10"]);
    for header in headers {
        command.args(["-H", header]);
    }
    String::from_utf8(command.arg(url).output().unwrap().stdout).unwrap()
}

#[test]
fn metrics_move_to_the_admin_listener_with_the_probes_and_leave_the_traffic_port() {
    let upstream = ScriptedUpstream::start(answers_hello);
    let config = signed_single(
        Pipeline::shared(),
        &upstream.base_url(),
        "admin-split",
        None,
    );
    let directory = tempfile::tempdir().unwrap();
    let admin = free_address();
    let served =
        Served::start(serve_command(&config, directory.path()).args(["--admin-listen", &admin]));
    assert_eq!(ask_with(&served, "admin-1", "Hi", &[]), 200);
    let traffic_metrics = get(&served.url("/metrics"), &[]);
    let admin_metrics = get(&format!("http://{admin}/metrics"), &[]);
    let admin_ready = get(&format!("http://{admin}/readyz"), &[]);
    let admin_health = get(&format!("http://{admin}/healthz"), &[]);
    // A client key opens nothing on the admin address.
    let admin_models = get(
        &format!("http://{admin}/v1/models"),
        &[&format!("Authorization: Bearer {KEY}")],
    );
    let traffic_ready = get(&served.url("/readyz"), &[]);
    let log = served.stop_with_log();
    assert_eq!(status_of(&traffic_metrics), 404, "{traffic_metrics}");
    assert!(!traffic_metrics.contains("routeval_"), "{traffic_metrics}");
    assert_eq!(status_of(&admin_metrics), 200, "{admin_metrics}");
    assert!(
        admin_metrics.contains("routeval_build_info{")
            && admin_metrics.contains("routeval_requests_total{"),
        "{admin_metrics}"
    );
    assert_eq!(status_of(&admin_ready), 200, "{admin_ready}");
    assert!(admin_ready.contains("ready: "), "{admin_ready}");
    assert_eq!(status_of(&admin_health), 200, "{admin_health}");
    assert_eq!(status_of(&admin_models), 404, "{admin_models}");
    // The load balancer's probes stay where the traffic is.
    assert_eq!(status_of(&traffic_ready), 200, "{traffic_ready}");
    let listening = log_events(&log, "admin_listening");
    assert_eq!(listening.len(), 1, "{log}");
    assert_eq!(listening[0]["admin_listen"], json!(admin));

    // An address that cannot be listened on stops the start, naming it.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    let output = serve_command(&config, tempfile::tempdir().unwrap().path())
        .args(["--admin-listen", &taken])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("--admin-listen {taken}: cannot listen")),
        "{stderr}"
    );
}

/// A serve traced by OpenTelemetry's variables `env` (and no flag), its
/// three requests: one with no trace context, one whose client sampled
/// its trace, one whose client did not.
fn traced_by_variables(
    collector: &Collector,
    config: &Path,
    env: &[(&str, &str)],
) -> Vec<serde_json::Value> {
    let directory = tempfile::tempdir().unwrap();
    let mut command = serve_command(config, directory.path());
    command.env(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        format!("http://127.0.0.1:{}", collector.port),
    );
    command.envs(env.iter().copied());
    let served = Served::start(&mut command);
    let sampled = "00-11111111111111111111111111111111-2222222222222222-01";
    let unsampled = "00-33333333333333333333333333333333-4444444444444444-00";
    assert_eq!(ask_with(&served, "no-context", "Hi", &[]), 200);
    for (id, parent) in [("sampled", sampled), ("unsampled", unsampled)] {
        let header = format!("traceparent: {parent}");
        assert_eq!(ask_with(&served, id, "Hi", &[header]), 200);
    }
    served.stop();
    collector
        .spans()
        .into_iter()
        .filter(|span| span["name"] == "POST /v1/chat/completions")
        .collect()
}

#[test]
fn opentelemetrys_variables_say_where_traces_go_which_are_sampled_and_whose_they_are() {
    let Some(python) = proxy_python("serve's OTLP traces decoded by opentelemetry-proto") else {
        return;
    };
    let upstream = ScriptedUpstream::start(answers_hello);
    let config = signed_single(Pipeline::shared(), &upstream.base_url(), "admin-otel", None);
    let directory = tempfile::tempdir().unwrap();
    let collector = Collector::start(&python, directory.path());
    // The parent decides; a request without one is kept with probability 0.
    let roots = traced_by_variables(
        &collector,
        &config,
        &[
            ("OTEL_SERVICE_NAME", "gateway-eu"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0"),
        ],
    );
    let ids: Vec<&serde_json::Value> = roots
        .iter()
        .map(|span| &span["attributes"]["routeval.request_id"])
        .collect();
    assert_eq!(ids, vec![&json!("sampled")], "{roots:#?}");
    assert_eq!(roots[0]["trace_id"], "11111111111111111111111111111111");
    assert_eq!(roots[0]["path"], "/v1/traces");
    assert_eq!(roots[0]["service"], "gateway-eu");
    // always_on traces all three, whatever the clients decided, under
    // serve's own name.
    let roots = traced_by_variables(&collector, &config, &[("OTEL_TRACES_SAMPLER", "always_on")]);
    let mut ids: Vec<String> = roots
        .iter()
        .filter(|span| span["service"] == "routeval-serve")
        .map(|span| {
            span["attributes"]["routeval.request_id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, ["no-context", "sampled", "unsampled"], "{roots:#?}");

    // A sampler or protocol serve cannot honour stops the start, naming the
    // variable, rather than tracing otherwise than asked.
    for (variable, value, named) in [
        (
            "OTEL_TRACES_SAMPLER",
            "jaeger_remote",
            "--trace-sampler (OTEL_TRACES_SAMPLER)",
        ),
        ("OTEL_TRACES_SAMPLER_ARG", "1.5", "OTEL_TRACES_SAMPLER_ARG"),
        (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "grpc",
            "OTEL_EXPORTER_OTLP_PROTOCOL \"grpc\"",
        ),
    ] {
        let mut command = serve_command(&config, tempfile::tempdir().unwrap().path());
        command
            .env(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{}", collector.port),
            )
            .env("OTEL_TRACES_SAMPLER", "traceidratio")
            .env(variable, value);
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{variable}: {stderr}");
        assert!(stderr.contains(named), "{variable}: {stderr}");
    }
}

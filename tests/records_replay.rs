//! Request records in, gateway policies replayed: DOMAIN.md's brown-out
//! through the CLI, the breaker calibrated and carried into the signed
//! config and the LiteLLM export, hedging by prompt length, the importers
//! on real-shaped logs, and bad rows.

use std::path::Path;

use routeval::schema::FallbackDocument;
use routeval::schema::HedgeDocument;

use crate::common::table_with_fallback;
use crate::common::write_day;
use crate::common::{example_results, routeval};

/// DOMAIN.md's brown-out: 20 requests of `primary`, one second apart.
const BROWN_OUT_S: [f64; 20] = [
    0.4, 0.5, 0.4, 9.0, 12.0, 14.0, 13.0, 11.0, 10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 0.5, 0.4, 0.4,
    0.5, 0.4,
];

fn write_brown_out(path: &Path) {
    let lines: Vec<String> = BROWN_OUT_S
        .iter()
        .enumerate()
        .map(|(index, seconds)| {
            serde_json::json!({
                "id": format!("r{index:02}"),
                "timestamp": format!("2026-11-30T12:00:{index:02}Z"),
                "slice": "support",
                "logical_model": "support-fast",
                "route": "primary",
                "model": "gpt-4o-2024-08-06",
                "reason": "routed-large",
                "status": "ok",
                "input_tokens": 1200,
                "output_tokens": 300,
                "ttft_ms": seconds * 1000.0,
                "total_ms": seconds * 1000.0 + 2000.0,
                "cost_usd": 0.0081,
            })
            .to_string()
        })
        .collect();
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

fn fallback_document(args: &[&std::ffi::OsStr]) -> FallbackDocument {
    let output = routeval()
        .args(["replay", "fallback", "--json"])
        .args(args)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn the_brown_out_costs_26_3_s_with_the_breaker_and_111_5_s_without() {
    let directory = tempfile::tempdir().unwrap();
    let records = directory.path().join("records.jsonl");
    write_brown_out(&records);
    let flags: Vec<&std::ffi::OsStr> = vec![
        "--records".as_ref(),
        records.as_os_str(),
        "--route".as_ref(),
        "primary".as_ref(),
        "--deadline-ms".as_ref(),
        "3000".as_ref(),
        "--open-after".as_ref(),
        "3".as_ref(),
        "--open-ms".as_ref(),
        "5000".as_ref(),
        "--fallback-ttft-ms".as_ref(),
        "900".as_ref(),
    ];
    let document = fallback_document(&flags);
    assert_eq!(document.schema_version, 3);
    assert_eq!(document.records.rows, 20);
    let policy = |name: &str| {
        document
            .policies
            .iter()
            .find(|policy| policy.name == name)
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    let breaker = policy("slow-first-token-breaker");
    assert_eq!(breaker.total_wait_s, 26.3);
    assert_eq!(policy("no-breaker").total_wait_s, 111.5);
    // Requests 4-6 and the failed probe (11) wait the deadline; eight more
    // go straight to the fallback while the breaker is open.
    assert_eq!(breaker.deadline_fallbacks, 4);
    assert_eq!(breaker.fallback_requests, 12);
    assert_eq!(breaker.extra_requests, 4);
    // Request 6 reaches the fallback when its deadline passes (8 s), in the
    // second request 9 is sent straight there.
    assert_eq!(breaker.peak_fallback_per_s, 2);
    assert_eq!(breaker.failed_after_first_token, 0);
    // Counting errors alone never opens on slowness.
    assert_eq!(policy("errors-breaker").total_wait_s, 111.5);

    // A breaker that learns of a late first token only when the deadline
    // passes is slower to open: requests already sent pay it too.
    let mut later = flags.clone();
    later.extend([
        std::ffi::OsStr::new("--learning"),
        std::ffi::OsStr::new("at-outcome"),
    ]);
    let realistic = fallback_document(&later);
    let breaker = &realistic.policies[2];
    assert!(breaker.total_wait_s > 26.3 && breaker.total_wait_s < 111.5);
    assert!(breaker.deadline_fallbacks > 4);

    let value = serde_json::to_value(&document).unwrap();
    let missing = crate::common::undocumented_keys(
        "## fallback.json",
        &[
            &value,
            &value["policies"][2],
            &value["policies"][2]["breaker"],
        ],
    );
    assert!(missing.is_empty(), "not in docs/schema.md: {missing:?}");

    // The text form names the policies.
    let text = routeval()
        .args(["replay", "fallback"])
        .args(&flags)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("slow-first-token-breaker") && stdout.contains("26.3"));
}

#[test]
fn the_calibrated_breaker_lands_in_the_route_table_the_signed_config_and_litellm() {
    let directory = tempfile::tempdir().unwrap();
    let records = directory.path().join("day.jsonl");
    write_day(&records);
    let routes = table_with_fallback(directory.path());
    let written = directory.path().join("routes-with-breaker.toml");
    let document = fallback_document(&[
        "--records".as_ref(),
        records.as_os_str(),
        "--route".as_ref(),
        "primary".as_ref(),
        "--fallback".as_ref(),
        "backup".as_ref(),
        "--routes".as_ref(),
        routes.as_os_str(),
        "--calibrate".as_ref(),
        "--write-routes".as_ref(),
        written.as_os_str(),
    ]);
    let calibration = document.calibration.as_ref().unwrap();
    let chosen = calibration.chosen.as_ref().unwrap();
    let value = serde_json::to_value(&document).unwrap();
    let missing = crate::common::undocumented_keys(
        "## fallback.json",
        &[&value["calibration"], &value["calibration"]["chosen"]],
    );
    assert!(missing.is_empty(), "not in docs/schema.md: {missing:?}");
    // The chosen point is the best admissible one and no neighbour beats it.
    for point in calibration.points.iter().filter(|point| point.admissible) {
        assert!(chosen.p95_wait_s <= point.p95_wait_s, "{point:?}");
        if chosen.p95_wait_s == point.p95_wait_s && chosen.p99_wait_s == point.p99_wait_s {
            assert!(chosen.total_wait_s <= point.total_wait_s, "{point:?}");
        }
    }
    assert!(!calibration.neighbours.is_empty());
    assert!(chosen.fallback_share <= 0.2);
    let no_breaker = &document.policies[0];
    assert!(chosen.p95_wait_s < no_breaker.p95_wait_s);
    // The fallback's capacity comes from the table: 600 rpm = 10 per second.
    assert_eq!(document.fallback_capacity_per_s, Some(10.0));

    let text = std::fs::read_to_string(&written).unwrap();
    assert!(text.starts_with("# The primary and its fallback"), "{text}");
    let table = routeval::routes::RouteTable::load(&written).unwrap();
    let breaker = table.routes[0].breaker.unwrap();
    assert_eq!(
        breaker.first_token_deadline_ms,
        chosen.first_token_deadline_ms
    );
    assert_eq!(breaker.open_after, chosen.open_after);
    assert!(table.routes[1].breaker.is_none());

    // The gate signs it with the breaker, and the export maps it.
    let key = directory.path().join("k.key");
    routeval()
        .args(["keygen", "--out"])
        .arg(&key)
        .assert()
        .code(0);
    let out = directory.path().join("dist");
    routeval()
        .args(["gate", "--target", "0.9", "--candidates"])
        .arg(&written)
        .arg("--results")
        .arg(example_results())
        .arg("--key")
        .arg(&key)
        .arg("--out")
        .arg(&out)
        .assert()
        .code(0);
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("route-config.v1.json")).unwrap()).unwrap();
    let signed = &config["table"]["routes"][0]["breaker"];
    assert_eq!(
        signed["first_token_deadline_ms"].as_f64(),
        Some(chosen.first_token_deadline_ms),
        "{config}"
    );
    assert_eq!(signed["open_after"], chosen.open_after);
    routeval()
        .arg("verify")
        .arg(out.join("route-config.v1.json"))
        .arg("--pubkey")
        .arg(key.with_extension("key.pub"))
        .assert()
        .code(0);
    let export = out.join("route-config.v1.litellm.yaml");
    let yaml = std::fs::read_to_string(&export).unwrap();
    // What LiteLLM cannot carry out exactly is said, in the file and the
    // gate's report.
    assert!(yaml.contains("as near as LiteLLM comes"), "{yaml}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("gate-report.json")).unwrap()).unwrap();
    assert!(
        report["candidates"][0]["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|warning| warning
                .as_str()
                .unwrap()
                .contains("breaker only approximately")),
        "{report}"
    );
    assert!(
        yaml.contains(&format!(
            "stream_timeout: {}",
            chosen.first_token_deadline_ms / 1000.0
        )),
        "{yaml}"
    );
    assert!(yaml.contains(&format!("allowed_fails: {}", chosen.open_after - 1)));
    assert!(yaml.contains("cooldown_time: 5"), "{yaml}");
    crate::common::loads_into_litellm(&export);
    // A real LiteLLM Router with the exported settings cools the route
    // down after as many failures as the breaker opens on.
    let primary = format!("{}/{}", table.logical_model, table.routes[0].name);
    if let Some(cooldown) = crate::common::cooldown_of(&export, &primary) {
        assert_eq!(
            cooldown,
            format!("failed {} before the cooldown", chosen.open_after),
            "{yaml}"
        );
    }

    // Written again, the breaker is replaced, not repeated.
    let again = directory.path().join("again.toml");
    routeval()
        .args(["replay", "fallback", "--records"])
        .arg(&records)
        .args(["--route", "primary", "--fallback", "backup", "--calibrate"])
        .args(["--max-fallback-share", "0.5", "--routes"])
        .arg(&written)
        .arg("--write-routes")
        .arg(&again)
        .assert()
        .code(0);
    let twice = std::fs::read_to_string(&again).unwrap();
    assert_eq!(twice.matches("[routes.breaker]").count(), 1, "{twice}");
    routeval::routes::RouteTable::load(&again).unwrap();

    // The table is never written over itself.
    let before = std::fs::read(&again).unwrap();
    routeval()
        .args(["replay", "fallback", "--records"])
        .arg(&records)
        .args([
            "--route",
            "primary",
            "--fallback",
            "backup",
            "--calibrate",
            "--routes",
        ])
        .arg(&again)
        .arg("--write-routes")
        .arg(&again)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("--write-routes"));
    assert_eq!(std::fs::read(&again).unwrap(), before);
}

#[test]
fn hedging_pays_for_short_prompts_and_not_for_long_ones() {
    let directory = tempfile::tempdir().unwrap();
    let records = directory.path().join("records.csv");
    let mut text =
        String::from("id,timestamp,slice,route,status,input_tokens,output_tokens,ttft_ms\n");
    for index in 0..3000 {
        let long = index % 4 == 0;
        let (input, ttft) = if long {
            (24_000, 4000.0 + f64::from(index % 11) * 100.0)
        } else if index % 20 == 1 {
            (400, 6000.0)
        } else {
            (400, 250.0 + f64::from(index % 9) * 10.0)
        };
        text.push_str(&format!(
            "q{index},{},chat,primary,ok,{input},150,{ttft}\n",
            1_764_504_000_000u64 + index as u64 * 250
        ));
    }
    std::fs::write(&records, text).unwrap();
    let output = routeval()
        .args(["replay", "hedge", "--json", "--records"])
        .arg(&records)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let document: HedgeDocument = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(document.schema_version, 1);
    let value = serde_json::to_value(&document).unwrap();
    let missing = crate::common::undocumented_keys("## hedge.json", &[&value, &value["rows"][0]]);
    assert!(missing.is_empty(), "not in docs/schema.md: {missing:?}");
    let row = |q: f64, bucket: &str| {
        document
            .rows
            .iter()
            .find(|row| row.delay_quantile == q && row.bucket == bucket)
            .unwrap()
    };
    let short = row(0.5, "<1k");
    let long = row(0.5, ">=16k");
    assert!(
        short.p95_ttft_ms[1] < short.p95_ttft_ms[0] / 2.0,
        "{short:?}"
    );
    assert!(long.extra_input_share > 0.9 && short.extra_input_share < long.extra_input_share);
    assert!(
        long.p95_ms_saved_per_k_extra_input.unwrap()
            < short.p95_ms_saved_per_k_extra_input.unwrap()
    );
}

/// Rows as LiteLLM's `LiteLLM_SpendLogs` holds them (its documented
/// columns), one failed.
const LITELLM_JSONL: &str = r#"{"request_id":"chatcmpl-1","call_type":"acompletion","api_key":"88dc28d0f0","spend":0.00042,"total_tokens":1450,"prompt_tokens":1200,"completion_tokens":250,"startTime":"2026-11-30T12:00:00.000000","endTime":"2026-11-30T12:00:02.500000","completionStartTime":"2026-11-30T12:00:00.420000","model":"gpt-4o-mini-2024-07-18","model_id":"a1b2c3","model_group":"support-fast","api_base":"https://api.openai.com/v1","user":"u-7","metadata":{"user_api_key_team_alias":"acme","usage_object":{"prompt_tokens_details":{"cached_tokens":1024}}},"cache_hit":"False","cache_key":"","request_tags":["support"],"team_id":"team-acme","end_user":"","requester_ip_address":"","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Where is my order?"}],"response":{"id":"chatcmpl-1","model":"gpt-4o-mini-2024-07-18","choices":[{"finish_reason":"stop","index":0,"message":{"role":"assistant","content":"It ships today."}}]},"status":"success"}
{"request_id":"chatcmpl-2","call_type":"acompletion","api_key":"88dc28d0f0","spend":0.0,"total_tokens":0,"prompt_tokens":0,"completion_tokens":0,"startTime":"2026-11-30T12:00:01.000000","endTime":"2026-11-30T12:00:04.000000","completionStartTime":null,"model":"gpt-4o-2024-08-06","model_id":"d4e5f6","model_group":"support-fast","api_base":"https://api.openai.com/v1","user":"u-8","metadata":{"user_api_key_team_alias":"acme"},"cache_hit":"False","cache_key":"","request_tags":[],"team_id":"team-acme","end_user":"","requester_ip_address":"","messages":[],"response":{},"status":"failure"}
"#;

fn import(from: &str, input: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    routeval()
        .args(["records", "import", "--from", from, "--input"])
        .arg(input)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

/// The records of a written table, through the reader every command uses.
fn records_of(path: &Path) -> Vec<routeval::records::Record<'static>> {
    let mut records = Vec::new();
    routeval::records::for_each_record(
        path,
        &routeval::records::FieldNames::default(),
        |_, record| {
            records.push(record.clone().into_owned());
            Ok(())
        },
    )
    .unwrap();
    records
}

#[test]
fn litellm_spend_logs_and_openai_log_lines_import_as_records() {
    let directory = tempfile::tempdir().unwrap();
    let spend = directory.path().join("spend.jsonl");
    std::fs::write(&spend, LITELLM_JSONL).unwrap();
    let out = directory.path().join("litellm.parquet");
    let output = import("litellm", &spend, &out, &[]);
    assert!(output.status.success(), "{output:?}");
    let records = records_of(&out);
    assert_eq!(records.len(), 2);
    let first = &records[0];
    assert_eq!(first.id, "chatcmpl-1");
    assert_eq!(first.slice, "team-acme");
    assert_eq!(first.route, "a1b2c3");
    assert_eq!(first.logical_model.as_deref(), Some("support-fast"));
    assert_eq!(first.model.as_deref(), Some("gpt-4o-mini-2024-07-18"));
    assert_eq!(first.ttft_ms, Some(420.0));
    assert_eq!(first.total_ms, Some(2500.0));
    assert_eq!(first.input_tokens, Some(1200));
    assert_eq!(first.cached_input_tokens, Some(1024));
    assert_eq!(first.output_tokens, Some(250));
    assert_eq!(first.cost_usd, Some(0.00042));
    assert_eq!(first.finish_reason.as_deref(), Some("stop"));
    assert_eq!(first.prompt.as_deref(), Some("Where is my order?"));
    assert_eq!(first.status, routeval::records::Status::Ok);
    assert_eq!(
        first.timestamp_ms,
        routeval::records::parse_timestamp("2026-11-30T12:00:00Z").unwrap()
    );
    assert_eq!(records[1].status, routeval::records::Status::Error);
    assert_eq!(records[1].ttft_ms, None);

    // The same rows as a CSV export, the JSON columns as text, sliced by
    // a key of the metadata.
    let csv = directory.path().join("spend.csv");
    let mut writer = csv::Writer::from_path(&csv).unwrap();
    let columns = [
        "request_id",
        "startTime",
        "endTime",
        "completionStartTime",
        "model",
        "model_id",
        "model_group",
        "spend",
        "prompt_tokens",
        "completion_tokens",
        "metadata",
        "status",
    ];
    writer.write_record(columns).unwrap();
    for line in LITELLM_JSONL.lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        let cells: Vec<String> = columns
            .iter()
            .map(|column| match &row[*column] {
                serde_json::Value::Null => String::new(),
                serde_json::Value::String(text) => text.clone(),
                other => other.to_string(),
            })
            .collect();
        writer.write_record(&cells).unwrap();
    }
    writer.flush().unwrap();
    let from_csv = directory.path().join("litellm-csv.parquet");
    let output = import(
        "litellm",
        &csv,
        &from_csv,
        &["--slice-field", "metadata.user_api_key_team_alias"],
    );
    assert!(output.status.success(), "{output:?}");
    let csv_records = records_of(&from_csv);
    assert_eq!(csv_records[0].slice, "acme");
    assert_eq!(csv_records[0].ttft_ms, Some(420.0));
    assert_eq!(csv_records[0].cached_input_tokens, Some(1024));

    // OpenAI-style request/response lines.
    let log = directory.path().join("openai.jsonl");
    let lines = [
        serde_json::json!({
            "request": {"model": "gpt-4o-mini-2024-07-18", "user": "tenant-a",
                        "messages": [{"role": "user", "content": "Reset my password"}]},
            "response": {"id": "chatcmpl-9", "object": "chat.completion", "created": 1_764_504_000,
                         "model": "gpt-4o-mini-2024-07-18",
                         "choices": [{"index": 0, "finish_reason": "length",
                                      "message": {"role": "assistant", "content": "Go to"}}],
                         "usage": {"prompt_tokens": 40, "completion_tokens": 16,
                                   "prompt_tokens_details": {"cached_tokens": 0}}},
            "ttft_ms": 180.0, "latency_ms": 900.0
        }),
        serde_json::json!({
            "request": {"model": "gpt-4o-2024-08-06", "user": "tenant-b", "messages": []},
            "id": "req-10", "timestamp": "2026-11-30T12:00:05Z",
            "error": {"status": 429, "message": "Rate limit reached"}
        }),
    ];
    let text: Vec<String> = lines.iter().map(ToString::to_string).collect();
    std::fs::write(&log, text.join("\n") + "\n").unwrap();
    let out = directory.path().join("openai.parquet");
    let output = import("openai-log", &log, &out, &[]);
    assert!(output.status.success(), "{output:?}");
    let records = records_of(&out);
    assert_eq!(records[0].id, "chatcmpl-9");
    assert_eq!(records[0].slice, "tenant-a");
    assert_eq!(records[0].timestamp_ms, 1_764_504_000_000);
    assert_eq!(records[0].finish_reason.as_deref(), Some("length"));
    assert_eq!(records[0].total_ms, Some(900.0));
    assert_eq!(records[1].status, routeval::records::Status::RateLimited);

    // Generic: a table of the fields under other names.
    let generic = directory.path().join("generic.csv");
    std::fs::write(
        &generic,
        "req,at,tenant,deployment,http_status,first_token\nx1,2026-11-30T12:00:00Z,acme,eu,200,350\nx2,1764504001000,acme,eu,503,\n",
    )
    .unwrap();
    let out = directory.path().join("generic.parquet");
    let output = import(
        "generic",
        &generic,
        &out,
        &[
            "--map",
            "id=req,timestamp=at,slice=tenant,route=deployment,status=http_status,ttft_ms=first_token",
        ],
    );
    assert!(output.status.success(), "{output:?}");
    let records = records_of(&out);
    assert_eq!(records[1].timestamp_ms, 1_764_504_001_000);
    assert_eq!(records[1].status, routeval::records::Status::Error);
    assert_eq!(records[0].ttft_ms, Some(350.0));
}

#[test]
fn bad_records_are_one_line_with_file_line_and_field_exit_2_nothing_written() {
    let directory = tempfile::tempdir().unwrap();
    let out = directory.path().join("out.parquet");
    let good = serde_json::json!({
        "id": "a", "timestamp": 1_764_504_000_000u64, "slice": "s", "route": "r",
        "status": "ok", "ttft_ms": 100.0
    });
    let cases: Vec<(&str, serde_json::Value, &str, &str)> = vec![
        (
            "generic",
            serde_json::json!({"timestamp": 1, "slice": "s", "route": "r", "status": "ok"}),
            "line 2, field \"id\": missing",
            "",
        ),
        (
            "generic",
            serde_json::json!({"id": "b", "timestamp": "last tuesday", "slice": "s", "route": "r", "status": "ok"}),
            "line 2, field \"timestamp\"",
            "",
        ),
        (
            "generic",
            serde_json::json!({"id": "b", "timestamp": 1, "slice": "s", "route": "r", "status": "maybe"}),
            "line 2, field \"status\"",
            "",
        ),
        (
            "generic",
            serde_json::json!({"id": "b", "timestamp": 1, "slice": "s", "route": "r", "status": "ok", "ttft_ms": -4}),
            "line 2, field \"ttft_ms\"",
            "",
        ),
        (
            "generic",
            serde_json::json!({"id": "b", "timestamp": 1, "slice": "s", "route": "r", "status": "ok", "input_tokens": 10, "cached_input_tokens": 20}),
            "line 2, field \"cached_input_tokens\"",
            "",
        ),
        (
            "litellm",
            serde_json::json!({"request_id": "b", "startTime": "2026-11-30T12:00:00", "model": "m", "team_id": "t", "prompt_tokens": 2.5}),
            "line 2, field \"prompt_tokens\"",
            "",
        ),
        (
            "litellm",
            serde_json::json!({"request_id": "b", "startTime": "2026-11-30T12:00:00", "model": "m"}),
            "line 2, field \"team_id\": missing",
            "",
        ),
        (
            "openai-log",
            serde_json::json!({"request": {"model": "m", "user": "u"}, "response": {"id": "x"}}),
            "line 2, field \"timestamp\"",
            "",
        ),
        // The importers make the reader's checks on what they convert.
        (
            "litellm",
            serde_json::json!({"request_id": "b", "startTime": "2026-11-30T12:00:00", "model": "m", "team_id": "t", "spend": -0.5}),
            "line 2, field \"cost_usd\": -0.5 is not a non-negative number",
            "",
        ),
        (
            "litellm",
            serde_json::json!({"request_id": "b", "startTime": "2026-11-30T12:00:05", "completionStartTime": "2026-11-30T12:00:09", "endTime": "2026-11-30T12:00:06", "model": "m", "team_id": "t"}),
            "line 2, field \"ttft_ms\": first token at 4000 ms after the end at 1000 ms",
            "",
        ),
        (
            "litellm",
            serde_json::json!({"request_id": "b", "startTime": "2026-11-30T12:00:00", "model": "m", "team_id": "t", "prompt_tokens": 1e300}),
            "line 2, field \"prompt_tokens\"",
            "",
        ),
        (
            "openai-log",
            serde_json::json!({"request": {"model": "m", "user": "u"}, "response": {"id": "z", "created": 1}, "ttft_ms": -3}),
            "line 2, field \"ttft_ms\": -3 is not a non-negative number",
            "",
        ),
        // Ids are unique in a record table, in every format.
        (
            "generic",
            serde_json::json!({"id": "a", "timestamp": 2, "slice": "s", "route": "r", "status": "ok"}),
            "line 2, field \"id\": \"a\" is also the id of line 1; ids are unique",
            "",
        ),
        (
            "litellm",
            serde_json::json!({"request_id": "a", "startTime": "2026-11-30T12:00:01", "model": "m", "team_id": "t"}),
            "line 2, field \"id\": \"a\" is also the id of line 1",
            "",
        ),
        (
            "openai-log",
            serde_json::json!({"request": {"model": "m", "user": "u"}, "response": {"id": "y", "created": 2}}),
            "line 2, field \"id\": \"y\" is also the id of line 1",
            "",
        ),
    ];
    for (from, bad, expected, _) in cases {
        let input = directory.path().join("in.jsonl");
        let first = if from == "generic" {
            good.to_string()
        } else if from == "litellm" {
            serde_json::json!({"request_id": "a", "startTime": "2026-11-30T12:00:00", "model": "m", "team_id": "t"}).to_string()
        } else {
            serde_json::json!({"request": {"model": "m", "user": "u"}, "response": {"id": "y", "created": 1}}).to_string()
        };
        std::fs::write(&input, format!("{first}\n{bad}\n")).unwrap();
        let output = import(from, &input, &out, &[]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{from} {bad}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("in.jsonl"), "{stderr}");
        assert!(stderr.contains(expected), "{expected} not in {stderr}");
        assert!(!out.exists(), "nothing written for {bad}");
        assert_eq!(
            std::fs::read_dir(directory.path()).unwrap().count(),
            1,
            "no temporary file is left"
        );
    }
    // A replay refuses an answered record with no first-token time.
    let input = directory.path().join("in.jsonl");
    let no_ttft =
        serde_json::json!({"id": "b", "timestamp": 2, "slice": "s", "route": "r", "status": "ok"});
    std::fs::write(&input, format!("{good}\n{no_ttft}\n")).unwrap();
    let output = routeval()
        .args(["replay", "fallback", "--records"])
        .arg(&input)
        .args(["--route", "r", "--fallback-ttft-ms", "900"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("line 2, field \"ttft_ms\": missing"),
        "{stderr}"
    );
    // Nor does it invent the waits of a route every request was moved
    // past by an open breaker.
    let moved: Vec<String> = (0..3)
        .map(|index| {
            serde_json::json!({"id": format!("m{index}"), "timestamp": index, "slice": "s", "route": "backup", "status": "ok", "ttft_ms": 40, "reason": "fallback:breaker"})
                .to_string()
        })
        .collect();
    let only_moved = directory.path().join("moved.jsonl");
    std::fs::write(&only_moved, moved.join("\n")).unwrap();
    let output = routeval()
        .args(["replay", "fallback", "--records"])
        .arg(&only_moved)
        .args(["--route", "r", "--fallback", "backup"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("moved.jsonl")
            && stderr
                .contains("no request was sent to the route \"r\" (--route): every one of its 3"),
        "{stderr}"
    );
    // The output may not be the records themselves.
    let output = routeval()
        .args(["records", "import", "--from", "generic", "--input"])
        .arg(&input)
        .arg("--out")
        .arg(&input)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(std::fs::read_to_string(&input).unwrap().contains("\"b\""));
}

#[test]
fn the_breaker_search_keeps_within_the_retry_budget_and_the_fallbacks_rpm() {
    let directory = tempfile::tempdir().unwrap();
    let records = directory.path().join("day.jsonl");
    write_day(&records);
    let routes = table_with_fallback(directory.path());
    let search = |budget: &str, written: &std::path::Path| {
        fallback_document(&[
            "--records".as_ref(),
            records.as_os_str(),
            "--route".as_ref(),
            "primary".as_ref(),
            "--fallback".as_ref(),
            "backup".as_ref(),
            "--routes".as_ref(),
            routes.as_os_str(),
            "--calibrate".as_ref(),
            "--max-fallback-share".as_ref(),
            "0.5".as_ref(),
            "--retry-budget".as_ref(),
            budget.as_ref(),
            "--write-routes".as_ref(),
            written.as_os_str(),
        ])
    };
    let loose = search("0.5", &directory.path().join("loose.toml"));
    let calibration = loose.calibration.as_ref().unwrap();
    assert_eq!(loose.schema_version, 3);
    assert_eq!(calibration.retry_budget, Some(0.5));
    assert_eq!(calibration.fallback_capacity_per_s, Some(10.0));
    let loose_choice = calibration.chosen.clone().unwrap();
    // A budget below what that choice spends: the search must pick another
    // point within it, or none.
    let budget = loose_choice.extra_share / 2.0;
    assert!(budget > 0.0, "{loose_choice:?}");
    for point in &calibration.points {
        let within = point.fallback_share <= 0.5
            && point.extra_share <= 0.5
            && point.peak_fallback_per_s as f64 <= 10.0;
        assert_eq!(point.admissible, within, "{point:?}");
    }
    let tight_written = directory.path().join("tight.toml");
    let output = routeval()
        .args(["replay", "fallback", "--json", "--records"])
        .arg(&records)
        .args(["--route", "primary", "--fallback", "backup", "--routes"])
        .arg(&routes)
        .args([
            "--calibrate",
            "--max-fallback-share",
            "0.5",
            "--retry-budget",
        ])
        .arg(budget.to_string())
        .arg("--write-routes")
        .arg(&tight_written)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    match output.status.code() {
        Some(0) => {
            let tight: routeval::schema::FallbackDocument =
                serde_json::from_slice(&output.stdout).unwrap();
            let chosen = tight.calibration.unwrap().chosen.unwrap();
            assert!(chosen.extra_share <= budget, "{chosen:?}");
            assert!(chosen.peak_fallback_per_s as f64 <= 10.0, "{chosen:?}");
            let table = routeval::routes::RouteTable::load(&tight_written).unwrap();
            assert_eq!(
                table.routes[0].breaker.unwrap().open_after,
                chosen.open_after
            );
        }
        _ => {
            assert!(stderr.contains("no breaker keeps within"), "{stderr}");
            assert!(!tight_written.exists());
        }
    }
}

#[test]
fn the_breaker_is_written_into_any_spelling_of_the_table_and_nothing_else_changes() {
    let directory = tempfile::tempdir().unwrap();
    let records = directory.path().join("day.jsonl");
    write_day(&records);
    let plain = std::fs::read_to_string(table_with_fallback(directory.path())).unwrap();
    // Spelled as people write TOML: a spaced header, a name without spaces,
    // an old breaker followed by the next route's comment, CRLF endings.
    let spelled = plain
        .replace("[[routes]]", "[[ routes ]]")
        .replacen("name = \"primary\"", "name=\"primary\"", 1)
        .replacen(
            "rpm = 600\ntpm = 30000000\n\n[[ routes ]]\nname = \"backup\"",
            "rpm = 600\ntpm = 30000000\n\n[routes.breaker]\nfirst_token_deadline_ms = 99999\nopen_after = 9\nopen_ms = 1\n\n# The backup, in Frankfurt.\n[[ routes ]]\nname = \"backup\"",
            1,
        )
        .replace('\n', "\r\n");
    assert!(spelled.contains("[[ routes ]]") && spelled.contains("open_after = 9"));
    let source = directory.path().join("spelled.toml");
    std::fs::write(&source, &spelled).unwrap();
    let replay = |extra: &[&std::ffi::OsStr]| {
        routeval()
            .args(["replay", "fallback", "--records"])
            .arg(&records)
            .args(["--route", "primary", "--fallback", "backup", "--calibrate"])
            .args(["--max-fallback-share", "0.5", "--routes"])
            .arg(&source)
            .args(extra)
            .output()
            .unwrap()
    };
    let written = directory.path().join("written.toml");
    let output = replay(&["--write-routes".as_ref(), written.as_os_str()]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&written).unwrap();
    assert!(
        !text.replace("\r\n", "").contains('\n'),
        "a line lost its CRLF"
    );
    assert!(
        text.contains("# The backup, in Frankfurt.\r\n[[ routes ]]"),
        "{text}"
    );
    assert!(text.contains("[[ routes ]]\r\nname=\"primary\""), "{text}");
    assert_eq!(text.matches("[routes.breaker]").count(), 1, "{text}");
    assert!(!text.contains("open_after = 9"), "{text}");
    let table = routeval::routes::RouteTable::load(&written).unwrap();
    assert!(table.routes[0].breaker.is_some() && table.routes[1].breaker.is_none());
    // Every other line is as it was.
    let kept = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|line| {
                !line.contains("breaker")
                    && !line.starts_with("first_token")
                    && !line.starts_with("open_")
            })
            .map(str::to_owned)
            .filter(|line| !line.trim().is_empty())
            .collect()
    };
    assert_eq!(kept(&text), kept(&spelled));
    // The table and --out named twice, one of them as ./: refused, nothing written.
    let twice = directory.path().join("twice.toml");
    let dotted = directory.path().join(".").join("twice.toml");
    let output = replay(&[
        "--write-routes".as_ref(),
        twice.as_os_str(),
        "--out".as_ref(),
        dotted.as_os_str(),
    ]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!twice.exists());
    // An --out that cannot be written leaves the table unwritten too.
    let lost = directory.path().join("lost.toml");
    let output = replay(&[
        "--write-routes".as_ref(),
        lost.as_os_str(),
        "--out".as_ref(),
        directory
            .path()
            .join("no-such-dir/fallback.json")
            .as_os_str(),
    ]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!lost.exists(), "the table was written though --out failed");
}

/// Rows as a real LiteLLM proxy writes them for a deployment reached under
/// its own group: the application's model is the original group, the model
/// carries its provider, and a failure's first token is its end.
#[test]
fn litellm_rows_of_a_deployment_read_as_the_request_was() {
    let directory = tempfile::tempdir().unwrap();
    let spend = directory.path().join("spend.jsonl");
    let row = |id: &str, status: &str, first: &str, model: &str| {
        format!(
            r#"{{"request_id":"{id}","spend":0.0,"prompt_tokens":10,"completion_tokens":0,"startTime":"2026-11-30T12:00:00.000000","endTime":"2026-11-30T12:00:01.500000","completionStartTime":"{first}","model":"{model}","model_id":"support-assistant/small","model_group":"support-assistant/small","team_id":"acme","metadata":{{"original_model_group":"support-assistant"}},"status":"{status}"}}"#
        )
    };
    let text = [
        row(
            "failed",
            "failure",
            "2026-11-30T12:00:01.500000",
            "openai/sim-small-2026-11-01",
        ),
        row(
            "answered",
            "success",
            "2026-11-30T12:00:00.300000",
            "meta-llama/Llama-3.1-8B-Instruct",
        ),
    ]
    .join("\n");
    std::fs::write(&spend, text + "\n").unwrap();
    let out = directory.path().join("records.parquet");
    let output = import("litellm", &spend, &out, &[]);
    assert!(output.status.success(), "{output:?}");
    let records = records_of(&out);
    let failed = &records[0];
    assert_eq!(failed.logical_model.as_deref(), Some("support-assistant"));
    assert_eq!(failed.model.as_deref(), Some("sim-small-2026-11-01"));
    assert_eq!(failed.ttft_ms, None, "no first token was measured");
    assert_eq!(failed.total_ms, Some(1500.0));
    let answered = &records[1];
    assert_eq!(answered.ttft_ms, Some(300.0));
    // A first part that is no LiteLLM provider is part of the name.
    assert_eq!(
        answered.model.as_deref(),
        Some("meta-llama/Llama-3.1-8B-Instruct")
    );
}

/// The proxy writes its own names where the provider's model was (the
/// alias `support-assistant/large`, the logical model): the served model is
/// the deployment's. A non-streamed answer's first token is its end, which
/// LiteLLM did not measure: no first token is recorded.
#[test]
fn litellm_names_in_response_model_and_unmeasured_first_tokens_are_not_taken() {
    let directory = tempfile::tempdir().unwrap();
    let spend = directory.path().join("spend.jsonl");
    let row = |id: &str, first: &str, answered_as: &str| {
        format!(
            r#"{{"request_id":"{id}","spend":0.001,"prompt_tokens":10,"completion_tokens":5,"startTime":"2026-11-30T12:00:00.000000","endTime":"2026-11-30T12:00:01.500000","completionStartTime":"{first}","model":"openai/sim-large-2026-11-01","model_id":"support-assistant/large","model_group":"support-assistant/large","team_id":"acme","metadata":{{"original_model_group":"support-assistant"}},"response":{{"model":"{answered_as}"}},"status":"success"}}"#
        )
    };
    let text = [
        row(
            "alias",
            "2026-11-30T12:00:00.250000",
            "support-assistant/large",
        ),
        row("logical", "2026-11-30T12:00:00.250000", "support-assistant"),
        row(
            "provider",
            "2026-11-30T12:00:00.250000",
            "sim-large-2026-11-01-b",
        ),
        row(
            "whole",
            "2026-11-30T12:00:01.500000",
            "sim-large-2026-11-01",
        ),
    ]
    .join("\n");
    std::fs::write(&spend, text + "\n").unwrap();
    let out = directory.path().join("records.parquet");
    let output = import("litellm", &spend, &out, &[]);
    assert!(output.status.success(), "{output:?}");
    let records = records_of(&out);
    let models: Vec<Option<&str>> = records
        .iter()
        .map(|record| record.model.as_deref())
        .collect();
    assert_eq!(
        models,
        [
            Some("sim-large-2026-11-01"),
            Some("sim-large-2026-11-01"),
            Some("sim-large-2026-11-01-b"),
            Some("sim-large-2026-11-01"),
        ],
        "the provider's model where it is one, else the deployment's"
    );
    let first_tokens: Vec<Option<f64>> = records.iter().map(|record| record.ttft_ms).collect();
    assert_eq!(first_tokens, [Some(250.0), Some(250.0), Some(250.0), None]);
    assert!(records.iter().all(|record| record.total_ms == Some(1500.0)));
}

/// A request that failed in every attempt leaves only its attempts' rows
/// (`ID-attempt-0`, `ID-attempt-1`) and none of its own: it is one record,
/// the last attempt's, from the first attempt's start, with all they spent.
#[test]
fn litellm_attempts_with_no_row_of_their_request_are_one_request() {
    let directory = tempfile::tempdir().unwrap();
    let spend = directory.path().join("spend.jsonl");
    let row = |id: &str, start: &str, end: &str, spend: f64| {
        format!(
            r#"{{"request_id":"{id}","spend":{spend},"prompt_tokens":10,"completion_tokens":0,"startTime":"2026-11-30T12:00:{start}","endTime":"2026-11-30T12:00:{end}","completionStartTime":"2026-11-30T12:00:{end}","model":"openai/sim-large-2026-11-01","model_id":"support-assistant/large","model_group":"support-assistant/large","team_id":"acme","metadata":{{"original_model_group":"support-assistant","error_information":{{"error_code":"500"}}}},"status":"failure"}}"#
        )
    };
    let answered = r#"{"request_id":"ok-1","spend":0.002,"prompt_tokens":10,"completion_tokens":5,"startTime":"2026-11-30T12:00:05.000000","endTime":"2026-11-30T12:00:06.000000","completionStartTime":"2026-11-30T12:00:05.200000","model":"openai/sim-large-2026-11-01","model_id":"support-assistant/large","model_group":"support-assistant/large","team_id":"acme","metadata":{"original_model_group":"support-assistant"},"status":"success"}"#;
    let text = [
        row("lost-attempt-1", "01.000000", "02.500000", 0.003),
        answered.to_owned(),
        row("lost-attempt-0", "00.000000", "00.800000", 0.001),
    ]
    .join("\n");
    std::fs::write(&spend, text + "\n").unwrap();
    let out = directory.path().join("records.parquet");
    let output = import("litellm", &spend, &out, &[]);
    assert!(output.status.success(), "{output:?}");
    let records = records_of(&out);
    let ids: Vec<&str> = records.iter().map(|record| record.id.as_ref()).collect();
    assert_eq!(ids, ["lost", "ok-1"], "one record per request");
    let lost = &records[0];
    assert_eq!(lost.status, routeval::records::Status::Error);
    assert_eq!(lost.cost_usd, Some(0.004), "both attempts' spend");
    assert_eq!(
        lost.total_ms,
        Some(2500.0),
        "from the first attempt's start"
    );
    assert_eq!(lost.ttft_ms, None);
    assert_eq!(records[1].cost_usd, Some(0.002));
}

/// With the signed config the export came from, LiteLLM's deployment ids
/// read back as routes under the logical model; a billed retry attempt is
/// folded into its request (its spend added, no record of its own); a row
/// that fell back says so; a missing slice names where else a tenant is.
#[test]
fn litellm_deployments_attempts_and_fallbacks_read_back_through_the_config() {
    let (workspace, config) = crate::common::deployed();
    let spend = workspace.path("spend.jsonl");
    let row = |id: &str, deployment: &str, spend: f64, metadata: &str| {
        format!(
            r#"{{"request_id":"{id}","spend":{spend},"prompt_tokens":10,"completion_tokens":5,"startTime":"2026-11-30T12:00:00.000000","endTime":"2026-11-30T12:00:01.000000","completionStartTime":"2026-11-30T12:00:00.200000","model":"openai/gpt-4o-2024-08-06","model_id":"{deployment}","model_group":"{deployment}","team_id":"acme","metadata":{metadata},"status":"success"}}"#
        )
    };
    let text = [
        row("r1", "support-fast/large", 0.002, "{}"),
        row("r1-attempt-1", "support-fast/large", 0.001, "{}"),
        row(
            "r2",
            "support-fast/large-backup",
            0.003,
            r#"{"attempted_fallbacks":1,"original_model_group":"support-fast"}"#,
        ),
        row("r3", "support-fast#mini", 0.0005, "{}").replace(
            r#""status":"success""#,
            r#""status":"success","messages":"{}","proxy_server_request":{"model":"support-fast","messages":[{"role":"user","content":"Where is my order?"}]}"#,
        ),
    ]
    .join("\n");
    std::fs::write(&spend, text + "\n").unwrap();
    let out = workspace.path("records.parquet");
    let output = import("litellm", &spend, &out, &["--config", &config]);
    assert!(output.status.success(), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stdout)
            .contains("imported 3 request records (1 billed retry attempts folded"),
        "{output:?}"
    );
    let records = records_of(&out);
    let routes: Vec<&str> = records.iter().map(|record| record.route.as_ref()).collect();
    assert_eq!(routes, ["large", "large-backup", "mini"]);
    assert!(
        records
            .iter()
            .all(|record| record.logical_model.as_deref() == Some("support-fast"))
    );
    assert_eq!(records[0].cost_usd, Some(0.002 + 0.001));
    assert_eq!(
        records[1].reason,
        Some(routeval::records::Reason::Fallback(
            routeval::records::Move::Error
        ))
    );
    assert_eq!(records[2].reason, None);
    // The prompt a proxy kept under proxy_server_request.
    assert_eq!(records[2].prompt.as_deref(), Some("Where is my order?"));
    assert_eq!(records[0].prompt, None);

    // Without team_id, the error says where else a tenant is found.
    let untagged = workspace.path("untagged.jsonl");
    std::fs::write(
        &untagged,
        row("r9", "support-fast/large", 0.0, "{}").replace(r#""team_id":"acme","#, "") + "\n",
    )
    .unwrap();
    let output = import(
        "litellm",
        &untagged,
        &workspace.path("untagged.parquet"),
        &[],
    );
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("team_id") && stderr.contains("metadata.spend_logs_metadata"),
        "{stderr}"
    );
    assert!(!workspace.path("untagged.parquet").exists());
}

#[test]
fn a_failure_litellm_logged_under_its_response_id_and_its_call_id_is_one_record() {
    let directory = tempfile::tempdir().unwrap();
    let failed = LITELLM_JSONL.lines().nth(1).unwrap();
    let call_id = "0e7b1f3c-5a1d-4c55-9a7e-2f0d4f6b8c11";
    // The failed request, twice: under the call id and as `chatcmpl-` it.
    let twice = [
        failed.replace("\"chatcmpl-2\"", &format!("\"{call_id}\"")),
        failed.replace("\"chatcmpl-2\"", &format!("\"chatcmpl-{call_id}\"")),
    ];
    // A success whose id only looks like a doubled one stays its own.
    let answered = LITELLM_JSONL.lines().next().unwrap().replace(
        "\"request_id\":\"chatcmpl-1\"",
        &format!("\"request_id\":\"chatcmpl-{call_id}-ok\""),
    );
    let spend = directory.path().join("doubled.jsonl");
    std::fs::write(
        &spend,
        [answered.as_str(), &twice[0], &twice[1]].join("\n") + "\n",
    )
    .unwrap();
    let out = directory.path().join("doubled.parquet");
    let output = import("litellm", &spend, &out, &[]);
    assert!(output.status.success(), "{output:?}");
    let ids: Vec<String> = records_of(&out)
        .iter()
        .map(|record| record.id.to_string())
        .collect();
    assert_eq!(ids, [format!("chatcmpl-{call_id}-ok"), call_id.to_owned()]);
}

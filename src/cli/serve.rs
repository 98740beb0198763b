//! `routeval serve`.

use std::io::Write;
use std::net::SocketAddr;
use std::num::{NonZeroU64, NonZeroUsize};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::reporter::{OutputArgs, ProgressArg};
use crate::exit_codes::Outcome;
use crate::serve::{
    BudgetSettings, ConnectionLimits, CorsOrigins, DEFAULT_MAX_BODY_BYTES, Durability, Limits,
    LogFormat, LogLevel, LogSettings, RecordsPrompts, Roll, ServeOptions, Sources, StartExpired,
    Timeouts, TraceSampling, TraceSettings, check, default_max_connections, serve,
};
use crate::units::{Positive, Proportion};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The signed route config to serve (`route-config.vN.json`, its
    /// `.minisig` beside it).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,

    /// The public key the config must verify with (a file or the key).
    #[arg(long, value_name = "KEY")]
    pub pubkey: String,

    /// The built-in router the config pins by sha256 (predictive configs
    /// scored by it).
    #[arg(long, value_name = "FILE")]
    pub router: Option<PathBuf>,

    /// The upstream providers' keys: a file of `NAME=VALUE` lines or a
    /// directory of one file per variable (a mounted Secret). The routes'
    /// `api_key_env` variables are read from it instead of the environment,
    /// again on SIGHUP and whenever its content changes, so a rotated key is
    /// used without a restart.
    #[arg(long, value_name = "PATH")]
    pub provider_keys: Option<PathBuf>,

    /// The clients: a TOML file of `[[keys]]` with each key's sha256, its
    /// tenant and optionally its slice.
    #[arg(long, value_name = "FILE")]
    pub keys: PathBuf,

    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8090")]
    pub listen: SocketAddr,

    /// Where one record per request goes: a JSON-lines journal rolled into
    /// Parquet parts, read as it is by drift --records, replay and sample.
    #[arg(long, value_name = "DIR")]
    pub records: PathBuf,

    /// Honour the slice a request claims (the config's slice header, metadata
    /// field or user field), for a serve behind a gateway that sets it;
    /// without it a request's slice is its key's. Constraints always follow
    /// the key's tenant.
    #[arg(long)]
    pub trust_slice_header: bool,

    /// Once the config expires, refuse requests (503) rather than keep
    /// serving it while reporting not ready.
    #[arg(long)]
    pub strict_expiry: bool,

    /// Load and check everything a start would (the config's signature,
    /// expiry, version and router pin, the routes' key variables, the
    /// shadow, the keys file, the records directory), say what would be
    /// served, and exit 0, or 2 with what a start would refuse; listen on
    /// nothing and write nothing. Run it before a deploy points serve at a
    /// new config.
    #[arg(long)]
    pub check: bool,

    /// A start (a restart) on a config that has expired: `refuse` exits 2;
    /// `start` serves it as a running serve serves an expired config
    /// (`/readyz` not ready; requests answered unless --strict-expiry).
    #[arg(long, value_name = "WHAT", default_value = "refuse", value_parser = ["start", "refuse"])]
    pub expired: String,

    /// With --expired refuse: a start within this many seconds of the
    /// config's expiry still serves it (as --expired start would), so a
    /// pod restarted just after expiry does not crash-loop; later starts
    /// are refused. 0 refuses at once.
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    pub expired_grace_s: u64,

    /// The largest request body read; larger ones get 413.
    #[arg(long, value_name = "BYTES", default_value_t = NonZeroUsize::new(DEFAULT_MAX_BODY_BYTES).expect("a limit above 0"))]
    pub max_body_bytes: NonZeroUsize,

    /// A request's body must arrive whole within this of its arrival, or
    /// the request gets 408 and its slots are given back: a client that
    /// trickles its upload cannot hold them.
    #[arg(long, value_name = "MS", default_value = "30000")]
    pub body_timeout_ms: NonZeroU64,

    /// Records per Parquet part: the journal rolls after this many.
    #[arg(long, value_name = "N", default_value = "100000")]
    pub roll_records: NonZeroU64,

    /// The journal also rolls once it holds this many bytes.
    #[arg(long, value_name = "BYTES", default_value = "268435456")]
    pub roll_bytes: NonZeroU64,

    /// The journal also rolls at its first commit this long after it was
    /// begun, so a quiet serve's records reach a Parquet part (and a bucket
    /// sync) within the hour.
    #[arg(long, value_name = "S", default_value = "3600")]
    pub roll_age_s: NonZeroU64,

    /// Remove the records' rolled Parquet parts once they are this many
    /// days old (checked at start and after each roll); only serve's own
    /// `part-NNNNNN.parquet` files are ever removed. Kept for ever by
    /// default.
    #[arg(long, value_name = "DAYS")]
    pub records_retain_days: Option<NonZeroU64>,

    /// While the records cannot be written (a full disk): `open` answers
    /// requests and keeps their records in memory (up to 100,000), `closed`
    /// refuses them with 503. Either way `/readyz` is not ready.
    #[arg(long, value_name = "MODE", default_value = "open", value_parser = ["open", "closed"])]
    pub records_fail: String,

    /// What an answer's end waits for: `bounded` (the default) waits for
    /// its record's commit only while more than 256 records wait for one,
    /// so a kill loses at most 256 answered requests' records;
    /// `acknowledged` always waits, so a kill loses none while the records
    /// can be written (docs/serve.md, "What a kill can lose").
    #[arg(long, value_name = "MODE", default_value = "bounded", value_parser = ["bounded", "acknowledged"])]
    pub records_durability: String,

    /// Requests answered at once; more get 429 with Retry-After, never a
    /// queue.
    #[arg(long, value_name = "N", default_value = "4096")]
    pub max_in_flight: NonZeroUsize,

    /// Client connections open at once. At the bound a new connection
    /// closes the one quiet the longest with no request in flight, or is
    /// closed itself if every connection has one. Default: half the
    /// process's open-file limit less 64, between 16 and 16,384.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<NonZeroUsize>,

    /// A connection must send a whole request head within this, or it is
    /// closed.
    #[arg(long, value_name = "MS", default_value = "10000")]
    pub header_read_timeout_ms: NonZeroU64,

    /// A connection with no request in flight that sends and receives
    /// nothing for this long is closed.
    #[arg(long, value_name = "MS", default_value = "60000")]
    pub idle_timeout_ms: NonZeroU64,

    /// Requests one route answers at once; more get 429 with Retry-After.
    #[arg(long, value_name = "N", default_value = "1024")]
    pub max_in_flight_per_route: NonZeroUsize,

    /// A route that gives no first byte within this gets the client a 504.
    #[arg(long, value_name = "MS", default_value = "30000")]
    pub first_token_timeout_ms: NonZeroU64,

    /// An answer that gives no byte for this long after its first is ended
    /// with an error the client sees (never another model's text).
    #[arg(long, value_name = "MS", default_value = "30000")]
    pub stall_timeout_ms: NonZeroU64,

    /// No request is answered for longer than this from its arrival.
    #[arg(long, value_name = "MS", default_value = "600000")]
    pub total_timeout_ms: NonZeroU64,

    /// Extra calls (a fallback after a failed attempt) allowed, as a share
    /// of the requests of the last --retry-budget-window-s.
    #[arg(long, value_name = "SHARE", default_value = "0.1")]
    pub retry_budget: Proportion,

    /// The retry budget's sliding window.
    #[arg(long, value_name = "S", default_value = "10")]
    pub retry_budget_window_s: Positive,

    /// A candidate signed config (verified as --config is) decided for
    /// every request and recorded beside it (`shadow_*`), never served.
    #[arg(long, value_name = "FILE")]
    pub shadow: Option<PathBuf>,

    /// Extra calls always allowed per window, however few the requests.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub retry_budget_min: u64,

    /// What a request's record keeps of its conversation (`prompt`,
    /// `messages`): `none` (the default: no prompt is stored unless asked);
    /// `redacted`, with keys, tokens and assigned passwords replaced by
    /// `[redacted]` (the rules `sample` applies); or `full`. drift's score
    /// tests and `sample` need the prompts.
    #[arg(long, value_name = "WHAT", default_value = "none", value_parser = ["full", "redacted", "none"])]
    pub records_prompts: String,

    /// How serve logs on stderr: `json` lines, `human` lines, or `auto`
    /// (human on a terminal, else JSON; `--progress json` means JSON).
    #[arg(long, value_name = "FORMAT", default_value = "auto", value_parser = ["auto", "json", "human"])]
    pub log_format: String,

    /// The least level logged: `info` (every event), `warn` or `error`.
    /// Without it, `--quiet` means `warn`.
    #[arg(long, value_name = "LEVEL", value_parser = ["info", "warn", "error"])]
    pub log_level: Option<String>,

    /// A log line per request (its id, slice, tenant, route, reason,
    /// status, times, tokens and cost; never its prompt).
    #[arg(long)]
    pub log_requests: bool,

    /// Export an OpenTelemetry trace per request to this OTLP/HTTP traces
    /// URL (e.g. `http://collector:4318/v1/traces`): the request, its
    /// decision, each upstream attempt and the verifier. Off by default;
    /// without the flag, `OTEL_EXPORTER_OTLP_ENDPOINT` (with `/v1/traces`
    /// added) turns it on, and `OTEL_SDK_DISABLED=true` off.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", value_name = "URL", value_parser = crate::client::parse_http_url)]
    pub otlp_endpoint: Option<String>,

    /// Which requests are traced: `parentbased_always_on` (the default: the
    /// client's `traceparent` decides, else every request), `always_on`,
    /// `always_off`, `traceidratio`, `parentbased_always_off` or
    /// `parentbased_traceidratio`, as OpenTelemetry names them.
    #[arg(long, env = "OTEL_TRACES_SAMPLER", value_name = "SAMPLER")]
    pub trace_sampler: Option<String>,

    /// The share of traces the `traceidratio` samplers keep, 0 to 1
    /// (default 1).
    #[arg(long, env = "OTEL_TRACES_SAMPLER_ARG", value_name = "RATIO")]
    pub trace_sampler_arg: Option<String>,

    /// Also listen here for `/metrics`, `/healthz` and `/readyz` only, and
    /// stop serving `/metrics` on --listen: its tenants, routes and spend
    /// stay off the traffic port.
    #[arg(long, value_name = "ADDR")]
    pub admin_listen: Option<SocketAddr>,

    /// A browser origin (`https://app.example.com`) whose scripts may call
    /// serve, repeated for more, or `*` alone for any: its preflights are
    /// answered before the key is asked for, and its answers say which
    /// headers it may read. None by default.
    #[arg(long = "cors-origin", value_name = "ORIGIN", value_parser = parse_cors_origin)]
    pub cors_origins: Vec<String>,
}

/// Where traces go and which, from the flags and OpenTelemetry's standard
/// variables (the flags' own, read by clap, and the rest here): `None`
/// when nothing asks for traces or `OTEL_SDK_DISABLED` is `true`.
fn trace_settings(
    endpoint: Option<String>,
    sampler: Option<&str>,
    sampler_arg: Option<&str>,
) -> anyhow::Result<Option<TraceSettings>> {
    let variable = |name: &str| {
        std::env::var(name)
            .ok()
            .filter(|value| !value.trim().is_empty())
    };
    if variable("OTEL_SDK_DISABLED").is_some_and(|value| value.trim().eq_ignore_ascii_case("true"))
    {
        return Ok(None);
    }
    let endpoint = match (endpoint, variable("OTEL_EXPORTER_OTLP_ENDPOINT")) {
        (Some(endpoint), _) => endpoint,
        (None, Some(base)) => {
            let endpoint = format!("{}/v1/traces", base.trim().trim_end_matches('/'));
            crate::client::parse_http_url(&endpoint).map_err(|problem| {
                anyhow::anyhow!("OTEL_EXPORTER_OTLP_ENDPOINT {base:?}: {problem}")
            })?
        }
        (None, None) => return Ok(None),
    };
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(protocol) = variable(name)
            && protocol.trim() != "http/protobuf"
        {
            anyhow::bail!(
                "{name} {protocol:?}: serve exports traces over OTLP/HTTP, http/protobuf only"
            );
        }
    }
    let sampling = match sampler {
        Some(name) => TraceSampling::parse(name, sampler_arg).map_err(anyhow::Error::msg)?,
        None => TraceSampling::default(),
    };
    Ok(Some(TraceSettings { endpoint, sampling }))
}

/// One `--cors-origin`, checked as the list is.
fn parse_cors_origin(value: &str) -> Result<String, String> {
    CorsOrigins::parse(&[value.to_owned()]).map(|_| value.to_owned())
}

impl ServeArgs {
    fn options(self, output: &OutputArgs) -> anyhow::Result<ServeOptions> {
        Ok(ServeOptions {
            cors_origins: CorsOrigins::parse(&self.cors_origins).map_err(anyhow::Error::msg)?,
            tracing: trace_settings(
                self.otlp_endpoint,
                self.trace_sampler.as_deref(),
                self.trace_sampler_arg.as_deref(),
            )?,
            admin_listen: self.admin_listen,
            sources: Sources {
                config: self.config,
                router: self.router,
                env: std::env::vars().collect(),
                provider_keys: self.provider_keys,
            },
            public_key: self.pubkey,
            keys: self.keys,
            listen: self.listen,
            records: self.records,
            trust_slice_header: self.trust_slice_header,
            strict_expiry: self.strict_expiry,
            max_body_bytes: self.max_body_bytes.get(),
            body_timeout: Duration::from_millis(self.body_timeout_ms.get()),
            roll: Roll {
                records: self.roll_records.get(),
                bytes: self.roll_bytes.get(),
                age: Duration::from_secs(self.roll_age_s.get()),
                retain: self
                    .records_retain_days
                    .map(|days| Duration::from_secs(days.get().saturating_mul(86_400))),
            },
            records_fail_closed: self.records_fail == "closed",
            records_durability: if self.records_durability == "acknowledged" {
                Durability::Acknowledged
            } else {
                Durability::Bounded
            },
            start_expired: if self.expired == "start" {
                StartExpired::Always
            } else {
                StartExpired::Within {
                    grace_s: self.expired_grace_s,
                }
            },
            limits: Limits {
                total: self.max_in_flight.get(),
                per_route: self.max_in_flight_per_route.get(),
            },
            connections: ConnectionLimits {
                max_connections: self
                    .max_connections
                    .map_or_else(default_max_connections, NonZeroUsize::get),
                header_read_timeout: Duration::from_millis(self.header_read_timeout_ms.get()),
                idle_timeout: Duration::from_millis(self.idle_timeout_ms.get()),
            },
            timeouts: Timeouts {
                first_token: Duration::from_millis(self.first_token_timeout_ms.get()),
                stall: Duration::from_millis(self.stall_timeout_ms.get()),
                total: Duration::from_millis(self.total_timeout_ms.get()),
            },
            budget: BudgetSettings {
                share: self.retry_budget.get(),
                window_ms: self.retry_budget_window_s.get() * 1e3,
                min_per_window: self.retry_budget_min,
            },
            shadow: self.shadow,
            records_prompts: match self.records_prompts.as_str() {
                "redacted" => RecordsPrompts::Redacted,
                "none" => RecordsPrompts::None,
                _ => RecordsPrompts::Full,
            },
            log: log_settings(
                &self.log_format,
                self.log_requests,
                self.log_level.as_deref(),
                output,
            ),
        })
    }
}

/// `--log-format`, `--log-requests`, `--log-level`, and the global
/// `--progress` and `--quiet`, as the log's settings.
fn log_settings(
    format: &str,
    requests: bool,
    level: Option<&str>,
    output: &OutputArgs,
) -> LogSettings {
    LogSettings {
        format: match (format, output.progress) {
            ("json", _) | ("auto", ProgressArg::Json) => LogFormat::Json,
            ("human", _) => LogFormat::Human,
            _ => LogFormat::detect(),
        },
        requests,
        least: match level {
            Some("error") => LogLevel::Error,
            Some("warn") => LogLevel::Warn,
            Some(_) => LogLevel::Info,
            None if output.quiet => LogLevel::Warn,
            None => LogLevel::Info,
        },
    }
}

pub fn run(args: ServeArgs, output: &OutputArgs) -> anyhow::Result<Outcome> {
    let checking = args.check;
    let options = args.options(output)?;
    if checking {
        let checked = check(&options)?;
        let deployed = &checked.deployed;
        let shadow = checked
            .shadow_version
            .map_or_else(String::new, |version| format!(", shadow version {version}"));
        println!(
            "ok: serve would start on {} ({} version {}, sha256 {}{shadow}), {} keys, records in {}",
            deployed.config.table.logical_model,
            deployed.config.config_id,
            deployed.config.version,
            deployed.sha256,
            checked.keys,
            options.records.display()
        );
        return Ok(Outcome::Passed);
    }
    serve(&options, |address, deployed| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "serving {} ({} version {}, sha256 {}) on http://{address}/v1",
            deployed.config.table.logical_model,
            deployed.config.config_id,
            deployed.config.version,
            deployed.sha256
        );
        let _ = out.flush();
    })?;
    Ok(Outcome::Passed)
}

#[cfg(test)]
mod tests {
    use crate::serve::BudgetSettings;
    use clap::Parser;

    use super::{OutputArgs, ServeArgs};

    /// `routeval serve`'s line: the global flags and serve's own.
    #[derive(Debug, Parser)]
    struct ServeLine {
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[test]
    fn flags_become_options() {
        let line = ServeLine::try_parse_from([
            "serve",
            "--config",
            "c.json",
            "--pubkey",
            "k.pub",
            "--keys",
            "keys.toml",
            "--records",
            "rec",
            "--trust-slice-header",
            "--listen",
            "127.0.0.1:0",
        ])
        .unwrap();
        let options = line.serve.options(&line.output).unwrap();
        assert_eq!(options.sources.config, std::path::PathBuf::from("c.json"));
        assert!(options.trust_slice_header && !options.strict_expiry);
        assert_eq!(options.max_body_bytes, crate::serve::DEFAULT_MAX_BODY_BYTES);
        assert_eq!(options.roll.records, 100_000);
        assert_eq!(options.roll.bytes, 256 << 20);
        assert_eq!(options.roll.age, std::time::Duration::from_secs(3600));
        assert_eq!(
            options.limits,
            crate::serve::Limits {
                total: 4096,
                per_route: 1024
            }
        );
        assert_eq!(
            options.connections.header_read_timeout,
            std::time::Duration::from_secs(10)
        );
        assert_eq!(
            options.connections.idle_timeout,
            std::time::Duration::from_secs(60)
        );
        assert!(options.connections.max_connections >= 16);
        assert_eq!(
            options.budget,
            BudgetSettings {
                share: 0.1,
                window_ms: 10_000.0,
                min_per_window: 3
            }
        );
    }

    #[test]
    fn a_zero_limit_or_deadline_or_a_url_not_http_is_refused_where_it_is_parsed() {
        let base = ["serve", "--config", "c.json", "--pubkey", "k.pub"];
        for (flag, value, message) in [
            (
                "--max-in-flight",
                "0",
                "error: invalid value '0' for '--max-in-flight <N>': number would be zero for non-zero type",
            ),
            (
                "--first-token-timeout-ms",
                "0",
                "error: invalid value '0' for '--first-token-timeout-ms <MS>': number would be zero for non-zero type",
            ),
            (
                "--max-body-bytes",
                "0",
                "error: invalid value '0' for '--max-body-bytes <BYTES>': number would be zero for non-zero type",
            ),
            (
                "--retry-budget-window-s",
                "0",
                "error: invalid value '0' for '--retry-budget-window-s <S>': 0: expected a number above 0",
            ),
            (
                "--otlp-endpoint",
                "collector:4318",
                "error: invalid value 'collector:4318' for '--otlp-endpoint <URL>': collector:4318: an http:// or https:// URL with a host",
            ),
        ] {
            let argv = base.iter().copied().chain([flag, value]);
            let error = ServeLine::try_parse_from(argv).unwrap_err().to_string();
            assert_eq!(error.lines().next(), Some(message), "{flag}");
        }
    }
}

//! serve's traces: with `--otlp-endpoint`, an OpenTelemetry trace per
//! request, exported over OTLP/HTTP (protobuf) in batches: the request's
//! span (a child of the client's `traceparent`, when it sent one), with a
//! span for the decision, each upstream attempt up to its first byte (the
//! route, a hedge's copy, the fallback), and the verifier. Each call
//! upstream carries the `traceparent` of its attempt's span. Without
//! `--otlp-endpoint` nothing is traced, and the client's `traceparent` and
//! `tracestate` are passed upstream as they came.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{Bytes, HeaderExtractor, HeaderInjector, HttpClient, HttpError};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, Tracer};

use crate::records::Record;

/// The W3C trace context headers.
const PROPAGATED: [&str; 2] = ["traceparent", "tracestate"];

/// Which requests are traced: OpenTelemetry's samplers, as
/// `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` name them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TraceSampling {
    AlwaysOn,
    AlwaysOff,
    /// This share of traces, by trace id.
    Ratio(f64),
    /// The client's sampling decision where it sent a `traceparent`, else
    /// the inner rule.
    ParentBased(Root),
}

/// A parent-based sampler's rule for a request with no parent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Root {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
}

impl Default for TraceSampling {
    /// OpenTelemetry's default, `parentbased_always_on`.
    fn default() -> Self {
        TraceSampling::ParentBased(Root::AlwaysOn)
    }
}

impl TraceSampling {
    /// The sampler `name` with its `arg` (the ratio of the `traceidratio`
    /// ones, 1 when absent, as the specification says); an unknown name or
    /// a ratio outside [0, 1] is refused, never read as another sampler.
    pub fn parse(name: &str, arg: Option<&str>) -> Result<TraceSampling, String> {
        let ratio = || {
            match arg {
            None => Ok(1.0),
            Some(text) => text
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|ratio| (0.0..=1.0).contains(ratio))
                .ok_or_else(|| {
                    format!("--trace-sampler-arg (OTEL_TRACES_SAMPLER_ARG) {text:?}: a ratio from 0 to 1")
                }),
        }
        };
        Ok(match name.trim() {
            "always_on" => TraceSampling::AlwaysOn,
            "always_off" => TraceSampling::AlwaysOff,
            "traceidratio" => TraceSampling::Ratio(ratio()?),
            "parentbased_always_on" => TraceSampling::ParentBased(Root::AlwaysOn),
            "parentbased_always_off" => TraceSampling::ParentBased(Root::AlwaysOff),
            "parentbased_traceidratio" => TraceSampling::ParentBased(Root::Ratio(ratio()?)),
            other => {
                return Err(format!(
                    "--trace-sampler (OTEL_TRACES_SAMPLER) {other:?}: one of always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio"
                ));
            }
        })
    }

    fn sampler(self) -> Sampler {
        let root = |root: Root| match root {
            Root::AlwaysOn => Sampler::AlwaysOn,
            Root::AlwaysOff => Sampler::AlwaysOff,
            Root::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
        };
        match self {
            TraceSampling::AlwaysOn => Sampler::AlwaysOn,
            TraceSampling::AlwaysOff => Sampler::AlwaysOff,
            TraceSampling::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
            TraceSampling::ParentBased(inner) => Sampler::ParentBased(Box::new(root(inner))),
        }
    }
}

/// Where traces go and which are sent.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// An OTLP/HTTP traces URL (`http://collector:4318/v1/traces`).
    pub endpoint: String,
    pub sampling: TraceSampling,
}

/// The exporter and the tracer of a serve that traces.
#[derive(Debug)]
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: Tracer,
}

impl Tracing {
    /// Traces exported as `settings` say, sent by `runtime`. The service is
    /// `routeval-serve` unless `OTEL_SERVICE_NAME` or
    /// `OTEL_RESOURCE_ATTRIBUTES` names it; the resource carries
    /// `OTEL_RESOURCE_ATTRIBUTES`.
    pub fn start(
        settings: &TraceSettings,
        runtime: tokio::runtime::Handle,
    ) -> anyhow::Result<Tracing> {
        let endpoint = settings.endpoint.as_str();
        let client = OnRuntime {
            runtime,
            http: crate::client::proxy_client(4)?,
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_endpoint(endpoint)
            .with_timeout(Duration::from_secs(10))
            .build()
            .map_err(|error| anyhow::anyhow!("--otlp-endpoint {endpoint}: {error}"))?;
        let mut resource = Resource::builder()
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
        let named = std::env::var_os("OTEL_SERVICE_NAME").is_some()
            || std::env::var("OTEL_RESOURCE_ATTRIBUTES")
                .is_ok_and(|attributes| attributes.contains("service.name="));
        if !named {
            resource = resource.with_service_name("routeval-serve");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(settings.sampling.sampler())
            .with_resource(resource.build())
            .build();
        let tracer = provider.tracer("routeval");
        Ok(Tracing { provider, tracer })
    }

    /// Exports what is left; called before the runtime that sends it stops.
    pub fn shutdown(&self) -> anyhow::Result<()> {
        self.provider
            .shutdown()
            .map_err(|error| anyhow::anyhow!("--otlp-endpoint: the last traces: {error}"))
    }
}

/// The OTLP exporter's HTTP client: serve's own, sending on serve's
/// runtime (the exporter's batches are sent from a thread of their own).
#[derive(Debug)]
struct OnRuntime {
    runtime: tokio::runtime::Handle,
    http: reqwest::Client,
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<Bytes>,
    ) -> Result<opentelemetry_http::Response<Bytes>, HttpError> {
        let http = self.http.clone();
        let (parts, body) = request.into_parts();
        let sent = self.runtime.spawn(async move {
            let response = http
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body)
                .send()
                .await?;
            let status = response.status();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, body))
        });
        let (status, body) = sent.await??;
        Ok(opentelemetry_http::Response::builder()
            .status(status)
            .body(body)?)
    }
}

/// A request's trace: its span where serve traces, and the client's trace
/// context to pass on.
#[derive(Debug, Clone, Default)]
pub struct RequestTrace {
    traced: Option<(Tracer, Context)>,
    /// The client's `traceparent` and `tracestate`, as they came.
    client: Vec<(HeaderName, HeaderValue)>,
}

/// A trace is no part of what a record says.
impl PartialEq for RequestTrace {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl RequestTrace {
    /// The trace of a request whose headers are `headers`: a span named
    /// `name`, a child of the client's span, where serve traces.
    pub fn begin(tracing: Option<&Tracing>, headers: &HeaderMap, name: &'static str) -> Self {
        let client = PROPAGATED
            .iter()
            .filter_map(|name| {
                let value = headers.get(*name)?;
                Some((HeaderName::from_static(name), value.clone()))
            })
            .collect();
        let traced = tracing.map(|tracing| {
            let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
            let span = tracing
                .tracer
                .span_builder(name)
                .with_kind(SpanKind::Server)
                .start_with_context(&tracing.tracer, &parent);
            (tracing.tracer.clone(), parent.with_span(span))
        });
        RequestTrace { traced, client }
    }

    /// A span under the request's, started now; `attributes` are made
    /// only where serve traces.
    pub fn child(
        &self,
        name: &'static str,
        kind: SpanKind,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> ChildSpan<'_> {
        let traced = self.traced.as_ref().map(|(tracer, context)| {
            let span = tracer
                .span_builder(name)
                .with_kind(kind)
                .with_attributes(attributes())
                .start_with_context(tracer, context);
            context.with_span(span)
        });
        ChildSpan {
            request: self,
            traced,
        }
    }

    /// Ends the request's span with what its record says, and the tenant
    /// of its key.
    pub fn finish(&self, record: &Record<'_>, tenant: Option<&str>) {
        let Some((_, context)) = &self.traced else {
            return;
        };
        let span = context.span();
        let mut attributes = vec![
            KeyValue::new("routeval.request_id", record.id.to_string()),
            KeyValue::new("routeval.slice", record.slice.to_string()),
            KeyValue::new("routeval.route", record.route.to_string()),
            KeyValue::new("routeval.status", record.status.name()),
        ];
        let optional: [(&str, Option<opentelemetry::Value>); 11] = [
            (
                "routeval.reason",
                record
                    .reason
                    .as_ref()
                    .map(|reason| reason.to_string().into()),
            ),
            (
                "routeval.config_version",
                record.config_version.map(|version| (version as i64).into()),
            ),
            (
                "gen_ai.request.model",
                record
                    .logical_model
                    .as_ref()
                    .map(|model| model.to_string().into()),
            ),
            (
                "routeval.tenant",
                tenant.map(|tenant| tenant.to_owned().into()),
            ),
            (
                "gen_ai.response.model",
                record.model.as_ref().map(|model| model.to_string().into()),
            ),
            ("routeval.score", record.score.map(Into::into)),
            ("routeval.ttft_ms", record.ttft_ms.map(Into::into)),
            (
                "gen_ai.usage.input_tokens",
                record.input_tokens.map(|tokens| (tokens as i64).into()),
            ),
            (
                "gen_ai.usage.output_tokens",
                record.output_tokens.map(|tokens| (tokens as i64).into()),
            ),
            ("routeval.cost_usd", record.cost_usd.map(Into::into)),
            (
                "routeval.finish_reason",
                record
                    .finish_reason
                    .as_ref()
                    .map(|ending| ending.to_string().into()),
            ),
        ];
        attributes.extend(
            optional
                .into_iter()
                .filter_map(|(key, value)| Some(KeyValue::new(key, value?))),
        );
        span.set_attributes(attributes);
        if record.status != crate::records::Status::Ok {
            let reason = record.reason.as_ref().map(ToString::to_string);
            span.set_status(Status::error(format!(
                "{} ({})",
                record.status.name(),
                reason.unwrap_or_default()
            )));
        }
        span.end();
    }
}

/// A span under a request's (the decision, an upstream attempt, the
/// verifier), ended by [`ChildSpan::end`].
#[derive(Debug)]
pub struct ChildSpan<'a> {
    request: &'a RequestTrace,
    traced: Option<Context>,
}

impl ChildSpan<'_> {
    /// The trace context a call made for this span carries upstream: its
    /// own, or where serve does not trace, the client's.
    pub fn headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        let Some(context) = &self.traced else {
            return self.request.client.clone();
        };
        let mut headers = HeaderMap::new();
        TraceContextPropagator::new().inject_context(context, &mut HeaderInjector(&mut headers));
        headers
            .into_iter()
            .filter_map(|(name, value)| Some((name?, value)))
            .collect()
    }

    /// Ends the span with `attributes` (made only where serve traces), and
    /// as an error if `error` says one.
    pub fn end(self, attributes: impl FnOnce() -> Vec<KeyValue>, error: Option<String>) {
        let Some(context) = self.traced else {
            return;
        };
        let span = context.span();
        span.set_attributes(attributes());
        if let Some(error) = error {
            span.set_status(Status::error(error));
        }
        span.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sampler_name_is_read_and_anything_else_refused() {
        assert_eq!(
            TraceSampling::parse("parentbased_traceidratio", Some("0.25")),
            Ok(TraceSampling::ParentBased(Root::Ratio(0.25)))
        );
        assert_eq!(
            TraceSampling::parse("traceidratio", None),
            Ok(TraceSampling::Ratio(1.0))
        );
        assert_eq!(
            TraceSampling::parse("always_off", Some("ignored")),
            Ok(TraceSampling::AlwaysOff)
        );
        for (name, arg) in [
            ("traceidratio", Some("1.5")),
            ("traceidratio", Some("half")),
            ("jaeger_remote", None),
            ("", None),
        ] {
            let refused = TraceSampling::parse(name, arg).unwrap_err();
            assert!(refused.starts_with("--trace-sampler"), "{refused}");
        }
    }
}

//! An OTLP/HTTP traces receiver for serve's trace tests: a Python HTTP
//! server that decodes each export with the OpenTelemetry project's own
//! protobuf classes and writes every span as a JSON line.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// An OTLP/HTTP traces receiver: a Python HTTP server that decodes each
/// export with the OpenTelemetry project's own protobuf classes
/// (`opentelemetry-proto`) and writes every span as a JSON line.
const COLLECTOR: &str = r#"
import http.server, json, sys
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest, ExportTraceServiceResponse)
out = open(sys.argv[1], "a")
class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes = {a.key: getattr(a.value, a.value.WhichOneof("value"))
                                  for a in span.attributes}
                    out.write(json.dumps({
                        "path": self.path, "content_type": self.headers["content-type"],
                        "service": resource.get("service.name"),
                        "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(), "name": span.name,
                        "kind": span.kind, "status": span.status.code,
                        "start": span.start_time_unix_nano, "end": span.end_time_unix_nano,
                        "attributes": attributes}) + "\n")
        out.flush()
        payload = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// The running receiver, killed when dropped.
pub struct Collector {
    child: std::process::Child,
    pub port: u16,
    spans: std::path::PathBuf,
}

impl Collector {
    pub fn start(python: &std::ffi::OsStr, directory: &Path) -> Collector {
        let spans = directory.join("spans.jsonl");
        let (child, line) =
            crate::common::first_line(Command::new(python).args(["-c", COLLECTOR]).arg(&spans));
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("no port: {line:?}"));
        Collector { child, port, spans }
    }

    pub fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.spans)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

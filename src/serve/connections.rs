//! The connection layer under serve's routes: accepting, bounding and
//! closing client connections, so that no client can hold serve with
//! connections that never finish a request.
//!
//! - A request head must arrive whole within `--header-read-timeout-ms`
//!   (a connection that sends one byte, or half a request line, is closed).
//! - A connection with no request in flight and no byte read or written for
//!   `--idle-timeout-ms` is closed.
//! - At most `--max-connections` are open at once. A connection accepted at
//!   the bound makes room by closing the connection that has been quiet the
//!   longest among those with no request in flight; if every open
//!   connection has a request in flight, the new one is closed at once.
//!   Either way a client over the bound is answered in microseconds and
//!   never waits behind the others.
//!
//! axum's own `serve` installs no timer in hyper, so hyper's header-read
//! timeout never fires there; this loop is axum's, with the timer and the
//! bounds added.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tower_service::Service;

use super::log::{Level, Log};

/// How many client connections serve keeps, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
}

/// The default of `--max-connections`: half the descriptors the process may
/// open (every proxied request holds an upstream connection too), less a
/// reserve for the records, the config and the listener; at least 16 and
/// at most 16,384.
pub fn default_max_connections() -> usize {
    let descriptors = open_file_limit().unwrap_or(1024);
    (descriptors.saturating_sub(64) / 2).clamp(16, 16_384) as usize
}

/// The soft limit on open descriptors, from `/proc/self/limits`.
pub(super) fn open_file_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What the accept loop knows of one open connection.
#[derive(Debug)]
struct Activity {
    /// Requests whose response has not yet been sent whole.
    in_flight: AtomicUsize,
    /// The last byte read or written, ms after the loop started.
    last_ms: AtomicU64,
    /// Asked to close to make room for a new connection.
    evicted: AtomicBool,
    wake: Notify,
}

impl Activity {
    fn touch(&self, epoch: Instant) {
        self.last_ms
            .store(epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn quiet_since_ms(&self) -> u64 {
        self.last_ms.load(Ordering::Relaxed)
    }

    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }
}

/// The open connections, by number.
#[derive(Debug, Default)]
struct Open {
    connections: Mutex<HashMap<u64, Arc<Activity>>>,
    closed: Notify,
}

impl Open {
    fn len(&self) -> usize {
        self.connections.lock().expect("unpoisoned").len()
    }

    /// Closes the connection quiet the longest with no request in flight;
    /// false if every connection is busy.
    fn evict_one(&self) -> bool {
        let connections = self.connections.lock().expect("unpoisoned");
        let quietest = connections
            .values()
            .filter(|activity| !activity.busy() && !activity.evicted.load(Ordering::Relaxed))
            .min_by_key(|activity| activity.quiet_since_ms());
        match quietest {
            Some(activity) => {
                activity.evicted.store(true, Ordering::Relaxed);
                activity.wake.notify_one();
                true
            }
            None => false,
        }
    }

    fn remove(&self, number: u64) {
        self.connections.lock().expect("unpoisoned").remove(&number);
        self.closed.notify_waiters();
    }
}

/// A client socket that notes every byte read or written.
struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
    epoch: Instant,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buffer.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(context, buffer);
        if buffer.filled().len() > before {
            self.activity.touch(self.epoch);
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(context, bytes);
        if matches!(polled, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.touch(self.epoch);
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffers: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(context, buffers);
        if matches!(polled, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.touch(self.epoch);
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(context)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(context)
    }
}

/// A request's hold on its connection: closing it ends the connection,
/// for a request that must end and cannot say so in its response (a
/// client that stopped reading its answer).
#[derive(Debug, Clone)]
pub struct Hangup(Arc<Activity>);

impl Hangup {
    /// Closes the connection now, whatever it is sending.
    pub fn now(&self) {
        self.0.evicted.store(true, Ordering::Relaxed);
        self.0.wake.notify_one();
    }
}

/// A request counted in flight on its connection until its response is
/// sent whole, or it is dropped unanswered (the client went away).
struct Counted(Arc<Activity>);

impl Counted {
    fn new(activity: Arc<Activity>) -> Counted {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        Counted(activity)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request counted while it is sent.
struct InFlight {
    body: Body,
    _counted: Counted,
}

impl hyper::body::Body for InFlight {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(context)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// The client connections open now, as `/metrics` counts them.
#[derive(Debug, Clone, Default)]
pub struct OpenConnections(Arc<Open>);

impl OpenConnections {
    pub fn count(&self) -> usize {
        self.0.len()
    }
}

/// Serves `router` on `listener` until `stop` resolves, then lets every
/// request in flight finish; `open` counts its connections.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    (limits, open): (ConnectionLimits, OpenConnections),
    stop: impl std::future::Future<Output = ()>,
    log: &Log,
) {
    let open = open.0;
    let mut accept_failures_told: Option<Instant> = None;
    let (stopping, _) = tokio::sync::watch::channel(false);
    let epoch = Instant::now();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    tokio::pin!(stop);
    let mut number = 0u64;
    loop {
        let stream = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of descriptors, most likely: the connections
                    // already open go on; accepting resumes shortly. Said
                    // once a second at most, not at every try.
                    if accept_failures_told.is_none_or(|told| told.elapsed() >= Duration::from_secs(1)) {
                        accept_failures_told = Some(Instant::now());
                        log.event(Level::Error, "accept_failed", format!("cannot accept a connection: {error}"))
                            .field("open_connections", open.len())
                            .emit();
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if open.len() >= limits.max_connections && !open.evict_one() {
            drop(stream);
            continue;
        }
        // Each response's head and body are written apart: without
        // NODELAY, Nagle's algorithm holds the second until the client's
        // delayed ACK, 40 ms later.
        let _ = stream.set_nodelay(true);
        number = number.saturating_add(1);
        let activity = Arc::new(Activity {
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(epoch.elapsed().as_millis() as u64),
            evicted: AtomicBool::new(false),
            wake: Notify::new(),
        });
        open.connections
            .lock()
            .expect("unpoisoned")
            .insert(number, activity.clone());
        let connection = Connection {
            number,
            activity,
            epoch,
            open: open.clone(),
            stopping: stopping.subscribe(),
            idle_timeout: limits.idle_timeout,
        };
        tokio::spawn(connection.run(stream, builder.clone(), router.clone()));
    }
    drop(listener);
    log.event(
        Level::Info,
        "stopping",
        "asked to stop: no new connections; the requests in flight are answered",
    )
    .field("open_connections", open.len())
    .emit();
    stopping.send_replace(true);
    loop {
        let closed = open.closed.notified();
        if open.len() == 0 {
            break;
        }
        closed.await;
    }
}

/// One client connection's task.
struct Connection {
    number: u64,
    activity: Arc<Activity>,
    epoch: Instant,
    open: Arc<Open>,
    stopping: tokio::sync::watch::Receiver<bool>,
    idle_timeout: Duration,
}

impl Connection {
    async fn run(
        mut self,
        stream: TcpStream,
        builder: hyper::server::conn::http1::Builder,
        router: axum::Router,
    ) {
        let io = Watched {
            stream,
            activity: self.activity.clone(),
            epoch: self.epoch,
        };
        let activity = self.activity.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            let counted = Counted::new(activity.clone());
            request.extensions_mut().insert(Hangup(activity.clone()));
            let mut router = router.clone();
            async move {
                let response = router
                    .call(request.map(Body::new))
                    .await
                    .unwrap_or_else(|never| match never {});
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    Body::new(InFlight {
                        body,
                        _counted: counted,
                    })
                }))
            }
        });
        let connection = builder.serve_connection(TokioIo::new(io), service);
        tokio::pin!(connection);
        let check = self
            .idle_timeout
            .div_f64(4.0)
            .max(Duration::from_millis(50));
        let mut stopping = false;
        loop {
            tokio::select! {
                _ = connection.as_mut() => break,
                () = self.activity.wake.notified() => break,
                _ = self.stopping.wait_for(|stop| *stop), if !stopping => {
                    stopping = true;
                    connection.as_mut().graceful_shutdown();
                }
                () = tokio::time::sleep(check) => {
                    let now_ms = self.epoch.elapsed().as_millis() as u64;
                    let quiet = Duration::from_millis(
                        now_ms.saturating_sub(self.activity.quiet_since_ms()),
                    );
                    if !self.activity.busy() && quiet >= self.idle_timeout {
                        break;
                    }
                }
            }
        }
        self.open.remove(self.number);
    }
}

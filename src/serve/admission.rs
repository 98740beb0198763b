//! Admission: a bounded number of requests in flight in total and per
//! route. A request beyond either bound is refused at once with a 429 and
//! `Retry-After`, never queued: under overload the admitted requests keep
//! their latency and memory stays bounded. A slot is held until the answer's
//! last byte has gone (or the client left).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The bounds, from `--max-in-flight` and `--max-in-flight-per-route`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub total: usize,
    pub per_route: usize,
}

/// Requests in flight, in total and per route.
#[derive(Debug)]
pub struct Admission {
    limits: Limits,
    total: Arc<AtomicUsize>,
    routes: Mutex<HashMap<String, Arc<AtomicUsize>>>,
}

/// Which bound refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    Total,
    Route,
}

impl Full {
    /// The reason the request's record gives.
    pub fn reason(self) -> &'static str {
        match self {
            Full::Total => "admission:total",
            Full::Route => "admission:route",
        }
    }
}

/// A slot, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    counter: Arc<AtomicUsize>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::AcqRel);
    }
}

fn take(counter: &Arc<AtomicUsize>, limit: usize) -> Option<Slot> {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            (held < limit).then_some(held + 1)
        })
        .ok()
        .map(|_| Slot {
            counter: counter.clone(),
        })
}

impl Admission {
    pub fn new(limits: Limits) -> Admission {
        Admission {
            limits,
            total: Arc::new(AtomicUsize::new(0)),
            routes: Mutex::new(HashMap::new()),
        }
    }

    /// A slot of the total, or `Full::Total`.
    pub fn request(&self) -> Result<Slot, Full> {
        take(&self.total, self.limits.total).ok_or(Full::Total)
    }

    /// A slot of `route`, or `Full::Route`.
    pub fn route(&self, route: &str) -> Result<Slot, Full> {
        let counter = {
            let mut routes = self.routes.lock().expect("unpoisoned");
            match routes.get(route) {
                Some(counter) => counter.clone(),
                None => routes.entry(route.to_owned()).or_default().clone(),
            }
        };
        take(&counter, self.limits.per_route).ok_or(Full::Route)
    }

    /// Requests in flight now, for `/metrics`.
    pub fn in_flight(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_bounded_and_given_back() {
        let admission = Admission::new(Limits {
            total: 2,
            per_route: 1,
        });
        let first = admission.request().unwrap();
        let second = admission.request().unwrap();
        assert_eq!(admission.request().unwrap_err(), Full::Total);
        drop(first);
        let _third = admission.request().unwrap();
        let small = admission.route("small").unwrap();
        assert_eq!(admission.route("small").unwrap_err(), Full::Route);
        let _large = admission.route("large").unwrap();
        drop(small);
        assert!(admission.route("small").is_ok());
        drop(second);
        assert_eq!(admission.in_flight(), 1);
    }
}

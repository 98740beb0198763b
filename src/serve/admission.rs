//! Admission: a bounded number of requests in flight in total, per route
//! and (where the signed config names a limit) per tenant, and a tenant's
//! tokens per minute. A request beyond either bound is refused at once with a 429 and
//! `Retry-After`, never queued: under overload the admitted requests keep
//! their latency and memory stays bounded. A slot is held until the answer's
//! last byte has gone (or the client left).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::policy::MinuteWindows;
use crate::records::{Bound, Reason};
use crate::routes::TenantLimit;

/// The entry of `key`, made on first use without copying the key after.
fn entry<'a, T: Default>(map: &'a mut HashMap<String, T>, key: &str) -> &'a mut T {
    if !map.contains_key(key) {
        map.insert(key.to_owned(), T::default());
    }
    map.get_mut(key).expect("inserted above")
}

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
    tenants: Mutex<HashMap<String, Arc<AtomicUsize>>>,
    tenant_tokens: Mutex<MinuteWindows>,
}

/// Which bound refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    Total,
    Route,
    /// The tenant's `max_in_flight`.
    Tenant,
    /// The tenant's `tpm`.
    TenantTokens,
}

impl Full {
    /// The reason the request's record gives.
    pub fn reason(self) -> Reason {
        Reason::Admission(match self {
            Full::Total => Bound::Total,
            Full::Route => Bound::Route,
            Full::Tenant => Bound::Tenant,
            Full::TenantTokens => Bound::TenantTokens,
        })
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
            (held < limit).then(|| held.saturating_add(1))
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
            tenants: Mutex::new(HashMap::new()),
            tenant_tokens: Mutex::new(MinuteWindows::default()),
        }
    }

    /// A slot of the total, or `Full::Total`.
    pub fn request(&self) -> Result<Slot, Full> {
        take(&self.total, self.limits.total).ok_or(Full::Total)
    }

    /// A slot of `route`, or `Full::Route`.
    pub fn route(&self, route: &str) -> Result<Slot, Full> {
        let counter = entry(&mut self.routes.lock().expect("unpoisoned"), route).clone();
        take(&counter, self.limits.per_route).ok_or(Full::Route)
    }

    /// A slot of `tenant`'s requests in flight, where its limit bounds
    /// them; taken before the request's body is read, since the key alone
    /// names the tenant.
    pub fn tenant_slot(&self, tenant: &str, limit: TenantLimit) -> Result<Option<Slot>, Full> {
        let Some(most) = limit.max_in_flight else {
            return Ok(None);
        };
        let counter = entry(&mut self.tenants.lock().expect("unpoisoned"), tenant).clone();
        take(&counter, most as usize).map(Some).ok_or(Full::Tenant)
    }

    /// `tokens` reserved in `tenant`'s minute, where its limit bounds them;
    /// or `Full::TenantTokens`, reserving nothing.
    pub fn tenant_tokens(
        &self,
        tenant: &str,
        limit: TenantLimit,
        now_ms: f64,
        tokens: u64,
    ) -> Result<(), Full> {
        if let Some(tpm) = limit.tpm {
            let mut windows = self.tenant_tokens.lock().expect("unpoisoned");
            let window = windows.at(tenant, now_ms);
            if !window.fits(tokens, tpm) {
                return Err(Full::TenantTokens);
            }
            window.add(now_ms, tokens);
        }
        Ok(())
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

    #[test]
    fn a_tenant_is_held_to_its_own_limit() {
        let admission = Admission::new(Limits {
            total: 100,
            per_route: 100,
        });
        let limit = TenantLimit {
            max_in_flight: Some(1),
            tpm: Some(100),
        };
        let held = admission.tenant_slot("acme", limit).unwrap();
        assert!(held.is_some());
        admission.tenant_tokens("acme", limit, 0.0, 60).unwrap();
        assert_eq!(
            admission.tenant_slot("acme", limit).unwrap_err(),
            Full::Tenant
        );
        // Another tenant has its own.
        assert!(admission.tenant_slot("globex", limit).is_ok());
        assert!(admission.tenant_tokens("globex", limit, 1.0, 10).is_ok());
        drop(held);
        assert!(admission.tenant_slot("acme", limit).is_ok());
        assert_eq!(
            admission.tenant_tokens("acme", limit, 2.0, 50).unwrap_err(),
            Full::TenantTokens
        );
        // A minute on, the tokens are forgotten.
        assert!(admission.tenant_tokens("acme", limit, 60_001.0, 50).is_ok());
        // A tenant the config does not bound takes no slot.
        let unbounded = TenantLimit {
            max_in_flight: None,
            tpm: None,
        };
        assert!(admission.tenant_slot("acme", unbounded).unwrap().is_none());
    }
}

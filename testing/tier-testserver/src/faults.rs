//! Fault injection: rules that make the next matching Tier requests fail, lose their
//! response, stall or hang.
//!
//! A [`Fault`] matches a [`Verb`], optionally an object name and optionally one resource
//! (e.g. only Calico's Tiers), fires for a number of requests (once by default, or forever)
//! and then disappears. The first matching fault with
//! budget left wins; at most one fault applies to a request.

use std::sync::Mutex;
use std::sync::PoisonError;
use std::time::Duration;

use crate::status::ResourceName;
use crate::tier;

/// What a Tier request does, as kube-apiserver's authorizer would name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// GET on the collection.
    List,
    /// GET on the collection with `watch=true`.
    Watch,
    /// GET on one object.
    Get,
    /// POST on the collection.
    Create,
    /// PUT on one object.
    Update,
    /// PATCH on one object.
    Patch,
    /// DELETE on one object.
    Delete,
}

impl Verb {
    /// The verb as RBAC names it (`create`, `list`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::List => "list",
            Self::Watch => "watch",
            Self::Get => "get",
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
        }
    }
}

/// What happens to a request a fault matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultAction {
    /// Answer this Status without handling the request.
    Status {
        /// HTTP and Status code.
        code: u16,
        /// Status reason.
        reason: String,
        /// Status message.
        message: String,
        /// `Retry-After` header in seconds.
        retry_after: Option<u64>,
    },
    /// Handle the request (a write is applied), then answer this Status instead of the result.
    LoseResponse {
        /// HTTP and Status code.
        code: u16,
        /// Status reason.
        reason: String,
        /// Status message.
        message: String,
    },
    /// Handle the request (a write is applied), then close the connection without answering.
    LoseResponseDrop,
    /// Close the connection without handling the request or answering.
    Drop,
    /// Wait this long, then handle the request normally.
    Delay(Duration),
    /// Never answer; the connection stays open until the client gives up or the server stops.
    Hang,
}

/// The kind of a [`FaultAction`], as recorded in the request log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// [`FaultAction::Status`].
    Status,
    /// [`FaultAction::LoseResponse`].
    LoseResponse,
    /// [`FaultAction::LoseResponseDrop`].
    LoseResponseDrop,
    /// [`FaultAction::Drop`].
    Drop,
    /// [`FaultAction::Delay`].
    Delay,
    /// [`FaultAction::Hang`].
    Hang,
}

impl FaultAction {
    /// The kind of this action.
    pub fn kind(&self) -> FaultKind {
        match self {
            Self::Status { .. } => FaultKind::Status,
            Self::LoseResponse { .. } => FaultKind::LoseResponse,
            Self::LoseResponseDrop => FaultKind::LoseResponseDrop,
            Self::Drop => FaultKind::Drop,
            Self::Delay(_) => FaultKind::Delay,
            Self::Hang => FaultKind::Hang,
        }
    }
}

/// A fault rule: which requests it matches, how many times it fires, and what it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The verb it matches.
    pub verb: Verb,
    /// The object name it matches (`None`: any). For a create, the name in the body.
    pub name: Option<String>,
    /// The resource it matches (`None`: any resource faults apply to: both Tier resources,
    /// Secrets and webhook configurations).
    pub resource: Option<ResourceName>,
    /// How many matching requests it fires for (`None`: until removed).
    pub times: Option<u32>,
    /// What it does.
    pub action: FaultAction,
}

impl Fault {
    /// A fault firing once for `verb` with `action`.
    pub fn new(verb: Verb, action: FaultAction) -> Self {
        Self {
            verb,
            name: None,
            resource: None,
            times: Some(1),
            action,
        }
    }

    /// Answer `code`/`reason`/`message` without handling the request.
    pub fn status(verb: Verb, code: u16, reason: &str, message: &str) -> Self {
        Self::new(
            verb,
            FaultAction::Status {
                code,
                reason: reason.to_owned(),
                message: message.to_owned(),
                retry_after: None,
            },
        )
    }

    /// 503 ServiceUnavailable, as an overloaded or restarting kube-apiserver answers.
    pub fn unavailable(verb: Verb) -> Self {
        Self::status(
            verb,
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        )
    }

    /// 429 TooManyRequests with `Retry-After`, as API Priority and Fairness answers.
    pub fn too_many_requests(verb: Verb, retry_after: u64) -> Self {
        Self::status(
            verb,
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        )
        .retry_after(retry_after)
    }

    /// 403 Forbidden from RBAC for `verb` on Tiers, worded as kube-apiserver words it for
    /// `user` (`... cannot create resource "tiers" in API group "crd.antrea.io" at the cluster
    /// scope`), so a client can read the missing permission from it. It matches any resource;
    /// [`forbidden_on`](Self::forbidden_on) names and matches one. RBAC cannot restrict
    /// `create` by object name: leave [`name`](Self::name) unset for a create.
    pub fn forbidden(verb: Verb, user: &str) -> Self {
        let mut fault = Self::forbidden_on(tier::TIERS, verb, user);
        fault.resource = None;
        fault
    }

    /// 403 Forbidden from RBAC for `verb` on `resource` only (e.g. Calico's Tiers,
    /// `CalicoApi::V3.resource()`), worded as kube-apiserver words it for `user`: RBAC grants
    /// per resource and verb, so a create can be forbidden while updates are allowed.
    pub fn forbidden_on(resource: ResourceName, verb: Verb, user: &str) -> Self {
        let (plural, group) = (resource.plural, resource.group);
        Self::status(
            verb,
            403,
            "Forbidden",
            &format!(
                "{} is forbidden: User \"{user}\" cannot {} resource \"{plural}\" in API group \"{group}\" at the cluster scope",
                resource.qualified_resource(),
                verb.as_str()
            ),
        )
        .on(resource)
    }

    /// Apply the request, then answer 504 Timeout (the write happened, the client can't know).
    pub fn lose_response(verb: Verb) -> Self {
        Self::new(
            verb,
            FaultAction::LoseResponse {
                code: 504,
                reason: "Timeout".to_owned(),
                message: "Timeout: request did not complete within requested timeout - context deadline exceeded".to_owned(),
            },
        )
    }

    /// Apply the request, then answer `code`/`reason`/`message` instead of the result.
    pub fn lose_response_with(verb: Verb, code: u16, reason: &str, message: &str) -> Self {
        Self::new(
            verb,
            FaultAction::LoseResponse {
                code,
                reason: reason.to_owned(),
                message: message.to_owned(),
            },
        )
    }

    /// Apply the request, then close the connection without a response.
    pub fn lose_response_drop(verb: Verb) -> Self {
        Self::new(verb, FaultAction::LoseResponseDrop)
    }

    /// Close the connection without handling the request.
    pub fn drop_connection(verb: Verb) -> Self {
        Self::new(verb, FaultAction::Drop)
    }

    /// Wait `delay`, then handle the request.
    pub fn delay(verb: Verb, delay: Duration) -> Self {
        Self::new(verb, FaultAction::Delay(delay))
    }

    /// Never answer.
    pub fn hang(verb: Verb) -> Self {
        Self::new(verb, FaultAction::Hang)
    }

    /// Match only requests for `resource`.
    #[must_use]
    pub fn on(mut self, resource: ResourceName) -> Self {
        self.resource = Some(resource);
        self
    }

    /// Match only requests for object `name`.
    #[must_use]
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// Fire for the next `n` matching requests.
    #[must_use]
    pub fn times(mut self, n: u32) -> Self {
        self.times = Some(n);
        self
    }

    /// Fire for every matching request until removed.
    #[must_use]
    pub fn forever(mut self) -> Self {
        self.times = None;
        self
    }

    /// Add a `Retry-After` header (seconds); only meaningful for [`FaultAction::Status`].
    #[must_use]
    pub fn retry_after(mut self, seconds: u64) -> Self {
        if let FaultAction::Status { retry_after, .. } = &mut self.action {
            *retry_after = Some(seconds);
        }
        self
    }

    fn matches(&self, verb: Verb, name: Option<&str>, resource: ResourceName) -> bool {
        self.verb == verb
            && self.resource.is_none_or(|r| r == resource)
            && self
                .name
                .as_deref()
                .is_none_or(|wanted| name == Some(wanted))
    }
}

/// Identifies an injected fault, for [`TestApiServer::remove_fault`](crate::TestApiServer::remove_fault).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FaultId(u64);

/// The set of active faults.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    inner: Mutex<FaultsInner>,
}

#[derive(Debug, Default)]
struct FaultsInner {
    next_id: u64,
    active: Vec<(FaultId, Fault)>,
}

impl Faults {
    pub(crate) fn inject(&self, fault: Fault) -> FaultId {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.next_id += 1;
        let id = FaultId(inner.next_id);
        if fault.times != Some(0) {
            inner.active.push((id, fault));
        }
        id
    }

    pub(crate) fn remove(&self, id: FaultId) -> bool {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let before = inner.active.len();
        inner.active.retain(|(i, _)| *i != id);
        inner.active.len() != before
    }

    pub(crate) fn clear(&self) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .active
            .clear();
    }

    pub(crate) fn active(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .active
            .len()
    }

    /// Consumes one firing of the first fault matching `verb`/`name`/`resource` and returns
    /// its action.
    pub(crate) fn take(
        &self,
        verb: Verb,
        name: Option<&str>,
        resource: ResourceName,
    ) -> Option<FaultAction> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let index = inner
            .active
            .iter()
            .position(|(_, f)| f.matches(verb, name, resource))?;
        let (_, fault) = inner.active.get_mut(index)?;
        let action = fault.action.clone();
        if let Some(times) = &mut fault.times {
            *times = times.saturating_sub(1);
            if *times == 0 {
                inner.active.remove(index);
            }
        }
        Some(action)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::tier::TIERS;

    const CALICO: ResourceName = ResourceName {
        group: "projectcalico.org",
        plural: "tiers",
        kind: "Tier",
    };

    #[test]
    fn a_fault_on_one_resource_spares_the_others() {
        let faults = Faults::default();
        faults.inject(Fault::forbidden_on(CALICO, Verb::Create, "u").forever());
        assert_eq!(faults.take(Verb::Create, Some("a"), TIERS), None);
        assert_eq!(faults.take(Verb::Update, Some("a"), CALICO), None);
        let Some(FaultAction::Status { code, message, .. }) =
            faults.take(Verb::Create, Some("a"), CALICO)
        else {
            unreachable!("the Calico create is forbidden");
        };
        assert_eq!(code, 403);
        assert_eq!(
            message,
            "tiers.projectcalico.org is forbidden: User \"u\" cannot create resource \"tiers\" \
             in API group \"projectcalico.org\" at the cluster scope"
        );
        faults.inject(Fault::unavailable(Verb::Get));
        assert!(faults.take(Verb::Get, None, CALICO).is_some());
    }

    #[test]
    fn faults_fire_the_given_number_of_times() {
        let faults = Faults::default();
        faults.inject(Fault::unavailable(Verb::Create).named("baseline").times(2));
        assert_eq!(faults.take(Verb::Create, Some("other"), TIERS), None);
        assert_eq!(faults.take(Verb::Get, Some("baseline"), TIERS), None);
        assert!(faults.take(Verb::Create, Some("baseline"), TIERS).is_some());
        assert!(faults.take(Verb::Create, Some("baseline"), TIERS).is_some());
        assert_eq!(faults.take(Verb::Create, Some("baseline"), TIERS), None);
        assert_eq!(faults.active(), 0);
    }

    #[test]
    fn forever_faults_stay_until_removed() {
        let faults = Faults::default();
        let id = faults.inject(Fault::hang(Verb::List).forever());
        for _ in 0..5 {
            assert_eq!(
                faults.take(Verb::List, None, TIERS),
                Some(FaultAction::Hang)
            );
        }
        assert!(faults.remove(id));
        assert!(!faults.remove(id));
        assert_eq!(faults.take(Verb::List, None, TIERS), None);
    }

    #[test]
    #[allow(clippy::panic)]
    fn forbidden_names_the_verb_as_rbac_does() {
        let f = Fault::forbidden(Verb::Create, "system:serviceaccount:kube-system:tierd").forever();
        let FaultAction::Status {
            code,
            reason,
            message,
            ..
        } = &f.action
        else {
            panic!("{f:?}");
        };
        assert_eq!((*code, reason.as_str()), (403, "Forbidden"));
        assert_eq!(
            message,
            "tiers.crd.antrea.io is forbidden: User \"system:serviceaccount:kube-system:tierd\" \
             cannot create resource \"tiers\" in API group \"crd.antrea.io\" at the cluster scope"
        );
        assert_eq!(f.times, None);
    }

    #[test]
    fn retry_after_only_applies_to_status() {
        let f = Fault::too_many_requests(Verb::Get, 3);
        assert!(matches!(
            f.action,
            FaultAction::Status {
                retry_after: Some(3),
                ..
            }
        ));
        assert_eq!(
            Fault::hang(Verb::Get).retry_after(3).action,
            FaultAction::Hang
        );
    }
}
